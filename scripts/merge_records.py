"""Join the records of several `scripts/evaluate.py` runs over the same decisions (shards on several machines, a GPU
run and a CPU run) into one results directory; each decision's records come from one run (`damc.eval.merge`).

    python scripts/merge_records.py RUN_DIR [RUN_DIR ...] --out MERGED_DIR [--n-boot 1000] [--seed 0]

Earlier runs win: list the runs in the order you trust them. Then `python scripts/report.py MERGED_DIR`.
"""

import argparse
import sys


def cli() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", help="scripts/evaluate.py out_dirs (each with records.jsonl), first trusted most")
    p.add_argument("--out", required=True, help="the merged results directory (records.jsonl, results.*, merge.json)")
    p.add_argument("--n-boot", type=int, default=1000, help="bootstrap resamples for the intervals")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    args = p.parse_args()
    from damc.eval.merge import MergeError, merge_runs
    from damc.eval.results import results_table

    try:
        results = merge_runs(args.runs, args.out, n_boot=args.n_boot, seed=args.seed)
    except MergeError as e:
        sys.exit(f"merge_records: error: {e}")
    for s in results["config"]["merged_from"]:
        print(f"{s['run']}: {s['decisions_taken']} decisions taken ({s['records']} records; "
              f"{', '.join(s['decision_llm'])} on {', '.join(s['llm_setup'])})")
    print(f"{results['config']['records_left_out']} records left out (the same decisions from another run)")
    print(results_table(results))
    print(f"merged: {args.out}/records.jsonl  results: {args.out}/results.json  table: {args.out}/results.md")


if __name__ == "__main__":
    cli()
