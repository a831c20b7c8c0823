"""Average several teachers' label sets into one ensemble label set (docs/teacher.md).

    python scripts/merge_labels.py LABELS_A LABELS_B [...] --out LABELS_ENSEMBLE [--weights 1 1] [--overwrite]

The ensemble's delta for a card is the (weighted) mean of the members' deltas — the leave-one-out delta
of the product-of-experts teacher. Train on it like any label set. The work is in `damc.teacher.ensemble`.
"""

import argparse
import sys


def cli() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("inputs", nargs="+", help="two or more label sets (directories, parquet or JSONL)")
    p.add_argument("--out", required=True, help="output label directory")
    p.add_argument("--weights", nargs="+", type=float, default=None, help="one weight per input (default equal)")
    p.add_argument("--overwrite", action="store_true", help="replace labels already at --out")
    args = p.parse_args()
    from damc.teacher.ensemble import merge_labels

    try:
        s = merge_labels(args.inputs, args.out, weights=args.weights, overwrite=args.overwrite)
    except (ValueError, FileExistsError, FileNotFoundError) as e:
        sys.exit(f"merge_labels: error: {e}")
    print(f"{s['teacher']}: {s['decisions']} decisions, {s['rows']} rows -> {s['out_dir']} "
          f"(left out: {s['left_out_rows']})")


if __name__ == "__main__":
    cli()
