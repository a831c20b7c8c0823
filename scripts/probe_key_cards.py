"""Probe: does the teacher give a key card (one holding the decision's needed fact) the largest delta?

On synthetic test episodes, for decisions with `metadata["key_card_ids"]` whose key card is among the
kept candidates, prints the fraction where a key card has the largest delta (target ≥ 80 %), per
estimator, split by decisions with a repeated key fact (`metadata["repeated_key"]`) and the others.

    python scripts/probe_key_cards.py [--episodes 3] [--decisions 12] [--cards 20] [--estimators loo,grouped_loo]
    python scripts/probe_key_cards.py --labels LABELS   # the same figure from an existing label dataset
"""

import argparse
import logging
import time

import numpy as np


def from_labels(path: str) -> None:
    """The key-card figure from a label dataset (its `is_key` column), without running the teacher."""
    from damc.labels import load_labels

    df = load_labels(path).to_pandas()
    tops, ranks, n_cards = [], [], []
    for _, x in df.groupby("decision_id"):
        if not x["is_key"].any():
            continue
        order = x.sort_values("delta", ascending=False)["is_key"].to_numpy()
        tops.append(bool(order[0]))
        ranks.append(int(np.argmax(order)) + 1)
        n_cards.append(len(x))
    n_dec = df["decision_id"].nunique()
    print(f"{path}: {n_dec} decisions, {len(tops)} with a labeled key card; key card has the largest delta in "
          f"{np.mean(tops):.0%} ({sum(tops)}/{len(tops)}); median rank of the best key card {np.median(ranks):.0f} "
          f"of {np.mean(n_cards):.1f} cards on average; estimator {df['estimator'].iloc[0]}, teacher {df['teacher'].iloc[0]}")


def main() -> None:
    from damc.data.episodes import decision_points
    from damc.data.synthetic import generate_episodes
    from damc.teacher.backends import HFTeacher
    from damc.teacher.context import candidate_cards
    from damc.teacher.estimators import ESTIMATORS

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=3, help="synthetic test episodes")
    ap.add_argument("--seed", type=int, default=1234, help="episode seed (a test seed, not used for training)")
    ap.add_argument("--decisions", type=int, default=12, help="at most this many decisions with key cards")
    ap.add_argument("--cards", type=int, default=20, help="most recent candidate cards kept")
    ap.add_argument("--estimators", default="loo,grouped_loo", help="comma list of loo|grouped_loo|ablation")
    ap.add_argument("--model", default="smollm2-135m", help="teacher model")
    ap.add_argument("--dtype", default="auto", help="auto | float32 | bfloat16")
    ap.add_argument("--labels", default=None, help="read an existing label dataset instead of running the teacher")
    args = ap.parse_args()
    if args.labels:
        return from_labels(args.labels)
    logging.basicConfig(level=logging.WARNING)

    teacher = HFTeacher(args.model, dtype=args.dtype, batch_size=4)
    todo = []
    for ep in generate_episodes(args.episodes, seed=args.seed):
        repeated = set(ep.metadata.get("repeated_key", []))
        for dp in decision_points(ep):
            keys = set(dp.key_card_ids)
            cards = candidate_cards(dp, teacher.tokenizer)[-args.cards:]
            if keys and keys & {c.card_id for c in cards}:
                todo.append((dp, cards, keys, dp.index in repeated))
    # spread over episodes: round-robin would be nicer; a stride keeps it simple and deterministic
    step = max(1, len(todo) // args.decisions)
    todo = todo[::step][: args.decisions]
    t0 = time.perf_counter()
    for name in args.estimators.split(","):
        est = ESTIMATORS[name]()
        hits = {True: [], False: []}
        for dp, cards, keys, rep in todo:
            res = est.estimate(teacher, dp, cards)
            top = cards[int(np.nanargmax(res.deltas))].card_id
            hits[rep].append(top in keys)
        allh = hits[True] + hits[False]
        print(f"{name:12s} key card has the largest delta: {np.mean(allh):.0%} of {len(allh)} decisions "
              f"(repeated key fact: {np.mean(hits[True]) if hits[True] else float('nan'):.0%} of {len(hits[True])}; "
              f"single copy: {np.mean(hits[False]) if hits[False] else float('nan'):.0%} of {len(hits[False])})")
    print(f"teacher {args.model} ({teacher.dtype}), {args.cards} most recent cards, "
          f"wall {time.perf_counter() - t0:.0f}s")


if __name__ == "__main__":
    main()
