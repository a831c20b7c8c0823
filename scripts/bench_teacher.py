"""Benchmark: naive LOO vs prefix-reuse LOO vs ablation on the same synthetic decisions (one run).

Prints forward tokens and wall time as ratios, the max |delta difference| between naive and reuse LOO,
and the Spearman agreement of ablation with LOO.

    python scripts/bench_teacher.py [--decisions 2] [--cards 20] [--samples 32] [--dtype auto]
"""

import argparse
import logging
import time

import numpy as np


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


def main() -> None:
    from damc.data.synthetic import generate_episodes
    from damc.episodes import decision_points
    from damc.teacher.backends import HFTeacher
    from damc.teacher.context import candidate_cards
    from damc.teacher.estimators import AblationLasso, LeaveOneOut

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--decisions", type=int, default=2, help="decisions to benchmark")
    ap.add_argument("--cards", type=int, default=20, help="candidate cards per decision (most recent N)")
    ap.add_argument("--samples", type=int, default=32, help="ablation masks per decision")
    ap.add_argument("--model", default="smollm2-135m", help="teacher model")
    ap.add_argument("--dtype", default="auto", help="auto | float32 | bfloat16")
    ap.add_argument("--batch-size", type=int, default=4, help="sequences per forward pass")
    ap.add_argument("--seed", type=int, default=1, help="synthetic episode seed")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)

    teacher = HFTeacher(args.model, dtype=args.dtype, batch_size=args.batch_size)
    picked = []
    for ep in generate_episodes(max(2, args.decisions), seed=args.seed):
        for dp in decision_points(ep, tool_calls_only=True):
            cards = candidate_cards(dp, teacher.tokenizer)
            if len(cards) >= args.cards and len(picked) < args.decisions and dp.index > 40:
                picked.append((dp, cards[-args.cards:]))
                break
    ests = {"naive LOO": LeaveOneOut(reuse_prefix=False), "reuse LOO": LeaveOneOut(reuse_prefix=True),
            "ablation": AblationLasso(n_samples=args.samples)}
    tot = {k: {"s": 0.0, "tok": 0, "fwd": 0} for k in ests}
    max_diff, rhos = 0.0, []
    for dp, cards in picked:
        res = {}
        for name, est in ests.items():
            t0 = time.perf_counter()
            res[name] = est.estimate(teacher, dp, cards)
            tot[name]["s"] += time.perf_counter() - t0
            tot[name]["tok"] += res[name].n_forward_tokens
            tot[name]["fwd"] += res[name].n_forward
        max_diff = max(max_diff, float(np.nanmax(np.abs(res["naive LOO"].deltas - res["reuse LOO"].deltas))))
        rhos.append(spearman(res["ablation"].deltas, res["reuse LOO"].deltas))
    print(f"teacher {args.model} ({teacher.dtype}, {teacher.device}), {len(picked)} decisions x {args.cards} cards, "
          f"ablation {args.samples} masks, batch {args.batch_size}")
    base = tot["naive LOO"]
    for name, t in tot.items():
        print(f"  {name:10s} forwards {t['fwd']:4d}  tokens {t['tok']:7d} ({t['tok'] / base['tok']:.2f}x naive)  "
              f"wall {t['s']:7.1f}s ({base['s'] / t['s']:.2f}x faster than naive)")
    print(f"  max |delta naive - delta reuse| = {max_diff:.2e} nats")
    print(f"  Spearman(ablation, LOO) per decision: {', '.join(f'{r:.2f}' for r in rhos)} "
          f"(mean {np.mean(rhos):.2f})")


if __name__ == "__main__":
    main()
