"""Fidelity of an exported scorer against any label set (per-decision Spearman, NDCG@5, recall 3@5).

    python scripts/fidelity.py SCORER LABELS [--run RUN_DIR] [--max-decisions N] [--json out.json]

`--run` keeps only the dev episodes recorded in that training run's `train_meta.json`, so a scorer can be
checked on held-out decisions against another teacher's labels of them; without it every labelled
decision counts (e.g. labels of a domain the scorer never saw). Baselines: MiniLM cosine and recency.
The work is in `damc.scorer.metrics.scorer_fidelity`.
"""

import argparse
import json
import sys
from pathlib import Path


def cli() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("scorer", help="exported scorer directory (scripts/export.py)")
    p.add_argument("labels", help="label set (directory, parquet or JSONL)")
    p.add_argument("--run", default=None, help="training run whose dev episodes to keep")
    p.add_argument("--max-decisions", type=int, default=None)
    p.add_argument("--json", default=None, help="also write the result here")
    args = p.parse_args()
    from damc.episodes import atomic_write_text
    from damc.scorer.metrics import scorer_fidelity

    episodes = None
    if args.run:
        meta = Path(args.run) / "train_meta.json"
        if not meta.exists():
            sys.exit(f"fidelity: error: {meta} not found (--run takes a scripts/train.py out_dir)")
        episodes = json.loads(meta.read_text()).get("dev_episodes")
        if not episodes:
            sys.exit(f"fidelity: error: {meta} records no dev_episodes (trained with data.dev_fraction=0?)")
    try:
        res = scorer_fidelity(args.scorer, args.labels, episodes=episodes, max_decisions=args.max_decisions)
    except (ValueError, FileNotFoundError) as e:
        sys.exit(f"fidelity: error: {e}")
    if args.json:
        atomic_write_text(Path(args.json), json.dumps(res, indent=2))
    print(f"{res['n_decisions']} decisions, {res['n_pairs']} pairs, teacher {', '.join(res['teacher'])}")
    for name in ("scorer", "cosine", "recency"):
        s = res[name]["spearman"]
        print(f"{name:8s} spearman {_f(s['mean'])} [{_f(s['mean_ci'][0])}, {_f(s['mean_ci'][1])}]  "
              f"ndcg@5 {_f(res[name]['ndcg@5']['mean'])}  recall3@5 {_f(res[name]['recall3@5']['mean'])} "
              f"(n={res[name]['recall3@5']['n']}: decisions with > 5 cards)")


def _f(x) -> str:
    """A metric to 3 decimals, or n/a where no decision qualified (e.g. recall 3@5 needs > 5 cards)."""
    return "n/a" if x is None else f"{x:.3f}"


if __name__ == "__main__":
    cli()
