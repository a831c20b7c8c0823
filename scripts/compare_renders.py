"""A/B of template lines vs field-level lines (`render=fields`) through the harness: see `damc.eval.renders`.
`--table` pairs every rendering a finished run holds (fields, raw) with the template: accuracy and gold LL gain.

    python scripts/compare_renders.py OUT_DIR data.path=TEST.jsonl scorer=SCORER \
        'policies=[window,similarity,damc,oracle]' budgets=[1024] 'sweep.top_k=[4]' data.tool_calls_only=true
    python scripts/compare_renders.py --table OUT_DIR1 OUT_DIR2 ...
    python scripts/compare_renders.py --key-cards EPISODES.jsonl ...   # the key cards' lines alone, no selection
"""

from __future__ import annotations

import sys
from pathlib import Path

if __name__ == "__main__":
    if any(a in ("-h", "--help") for a in sys.argv[1:]):
        print(__doc__)
        sys.exit(0)
    if len(sys.argv) > 2 and sys.argv[1] == "--table":
        from damc.eval.renders import table

        print("\n\n".join(table(Path(x)) for x in sys.argv[2:]))
        sys.exit(0)
    if len(sys.argv) > 2 and sys.argv[1] == "--key-cards":
        from damc.eval.renders import key_card_lines

        print("\n\n".join(key_card_lines(x) for x in sys.argv[2:]))
        sys.exit(0)
    if len(sys.argv) < 2 or sys.argv[1].startswith("-") or "=" in sys.argv[1]:
        sys.exit(__doc__)
    from damc.eval.renders import compare

    print(compare(Path(sys.argv[1]), sys.argv[2:]))
