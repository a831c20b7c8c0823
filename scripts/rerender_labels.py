"""Re-render the student's decision queries of a label set at the current RENDER_VERSION (the teacher is not re-run).

    python scripts/rerender_labels.py LABELS EPISODES OUT

Only the query rendering may differ between the label set's version and today's (cards have been rendered the
same way since `damc.query.CARD_RENDER_SINCE`); older label sets are refused with a clear error. The work is
in `damc.teacher.rerender`.
"""

import argparse
import json


def cli() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("labels", help="label set (directory, parquet or JSONL)")
    p.add_argument("episodes", help="the episodes JSONL the labels were made from")
    p.add_argument("out", help="new label directory, or a .jsonl file (must not exist)")
    args = p.parse_args()
    from damc.teacher.rerender import rerender_labels

    print(json.dumps(rerender_labels(args.labels, args.episodes, args.out), indent=2))


if __name__ == "__main__":
    cli()
