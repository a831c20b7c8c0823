"""Agreement between two label sets on their common decisions (the distillation noise ceiling).

    python scripts/label_agreement.py LABELS_A LABELS_B [--json out.json]

E.g. the same decisions labelled in bf16 and fp32, or by two teachers (docs/teacher.md). The work is
in `damc.teacher.agreement`.
"""

import argparse
import json


def cli() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("a", help="reference label set")
    p.add_argument("b", help="label set compared with it")
    p.add_argument("--json", default=None, help="also write the result here")
    args = p.parse_args()
    from damc.teacher.agreement import label_agreement

    res = label_agreement(args.a, args.b)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(res, fh, indent=2)
    print(f"{res['n_decisions']} common decisions")
    for k in ("spearman", "ndcg@5", "top1"):
        s = res[k]
        print(f"{k:9s} mean {s['mean']:.3f} [{s['mean_ci'][0]:.3f}, {s['mean_ci'][1]:.3f}]  median {s['median']:.3f}")


if __name__ == "__main__":
    cli()
