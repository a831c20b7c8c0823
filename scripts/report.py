"""The README's results view of one or more A/B runs: a policy × budget table and the study's targets, checked.

    python scripts/report.py runs/study/synthetic/eval [TITLE=DIR ...] [--out FILE] [--policy P] [--operating FILE]
    python scripts/report.py --summary TITLE=DIR [TITLE=DIR ...]   # one row per set: the README's headline table

Each argument is a `scripts/evaluate.py` out_dir (or its results.json); `TITLE=DIR` names a section.
`make reproduce` writes the same report next to each profile's results (`<out_dir>/report.md`).
The work is in `damc.eval.report`.
"""

import argparse
import sys
from pathlib import Path


def cli() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("results", nargs="+", help="evaluate out_dir or results.json, optionally TITLE=PATH")
    p.add_argument("--policy", default="damc", help="the policy whose targets are checked")
    p.add_argument("--operating", default=None, help="operating_points.json (chosen on dev) to report each policy at")
    p.add_argument("--out", default=None, help="also write the Markdown here")
    p.add_argument("--summary", action="store_true",
                   help="one row per set (accuracy and paired Δ vs window of each headline policy) instead of the report")
    args = p.parse_args()
    from damc.episodes import atomic_write_text
    from damc.eval.report import load_operating, load_results, report, summary_table

    named = {}
    for arg in args.results:
        title, _, path = arg.rpartition("=") if "=" in arg else ("", "", arg)
        try:
            named[title or path] = load_results(path)
        except (ValueError, FileNotFoundError) as e:
            sys.exit(f"report: error: {e}")
    ops = None
    if args.operating:
        try:
            chosen = load_operating(args.operating)
        except (ValueError, FileNotFoundError) as e:
            sys.exit(f"report: error: {e}")
        ops = {title: chosen for title in named}
    text = summary_table(named) if args.summary else report(named, policy=args.policy, operating=ops)
    print(text)
    if args.out:
        atomic_write_text(Path(args.out), text)


if __name__ == "__main__":
    cli()
