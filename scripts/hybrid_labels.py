"""Hybrid labels: the teacher's delta plus λ × the grounded target, row by row (docs/teacher.md).

    python scripts/hybrid_labels.py --teacher LABELS_TEACHER --grounded LABELS_GROUNDED --out LABELS_HYBRID \
        [--lam auto|0.1] [--grid 0 0.01 0.1 1] [--teacher-decisions-only] [--overwrite]

`--lam auto` (default) chooses λ on the dev episodes of the scorer's split by the documented proxy
(`damc.teacher.hybrid.choose_lambda`); the table of every λ tried is in OUT/summary.json. Train on the result like any
label set: `python scripts/train.py data.labels=LABELS_HYBRID out_dir=RUN`.
"""

import argparse
import json
import sys


def cli() -> None:
    from damc.teacher.hybrid import DEFAULT_GRID

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--teacher", required=True, help="teacher label set (scripts/label.py estimator=loi ...)")
    p.add_argument("--grounded", required=True, help="grounded label set (scripts/label.py estimator=grounded)")
    p.add_argument("--out", required=True, help="output label directory")
    p.add_argument("--lam", default="auto", help="weight of the grounded target, or 'auto' (chosen on dev)")
    p.add_argument("--grid", nargs="+", type=float, default=list(DEFAULT_GRID), help="λ values tried by --lam auto")
    p.add_argument("--teacher-decisions-only", action="store_true",
                   help="drop the rows only the grounded labels hold (default: keep them with delta = λ·target)")
    p.add_argument("--dev-fraction", type=float, default=0.2, help="dev share of episodes (the scorer's default)")
    p.add_argument("--split-seed", type=int, default=0, help="seed of the episode split (the scorer's default)")
    p.add_argument("--overwrite", action="store_true", help="replace labels already at --out")
    args = p.parse_args()
    from damc.teacher.hybrid import write_hybrid

    try:
        lam = args.lam if args.lam == "auto" else float(args.lam)
    except ValueError:
        sys.exit(f"hybrid_labels: error: --lam must be a number or 'auto', got {args.lam!r}")
    try:
        s = write_hybrid(args.teacher, args.grounded, args.out, lam, args.grid, not args.teacher_decisions_only,
                         args.overwrite, args.dev_fraction, args.split_seed)
    except (ValueError, FileExistsError, FileNotFoundError) as e:
        sys.exit(f"hybrid_labels: error: {e}")
    if s["lam_table"]:
        for r in s["lam_table"]:
            print(json.dumps(r))
    print(f"lam={s['lam']}: {s['decisions']} decisions, {s['rows']} rows -> {s['out_dir']} (summed {s['summed_rows']}, "
          f"teacher only {s['teacher_only_rows']}, grounded only {s['grounded_only_rows']})")


if __name__ == "__main__":
    cli()
