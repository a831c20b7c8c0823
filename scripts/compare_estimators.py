"""Compare teacher estimators (and teachers) on the same decisions: key-card hit@1/@3, agreement, cost.

    python scripts/compare_estimators.py EPISODES.jsonl [--estimators loo loi loi_margin loo_loi grouped_loo ablation]
        [--teacher smollm2-135m] [--render template|fields] [--decisions 40] [--seed 0] [--json OUT.json]
        [--against OTHER.json:loi]
    python scripts/compare_estimators.py --labels LABELS     # hit@1 / hit@3 of an existing label set

Each decision's candidates are the runtime's (the labels' candidate set); prints the Markdown tables of
docs/teacher.md — key-card hit@1/@3, fact@1/@3 (the best card holds one of the gold's key facts, wherever the value
repeats: a key card is only its first holder on τ²-bench) and, where a candidate holds a rival action's value,
confuser@1 (the best card is such a look-alike) and key > confuser. `--against RUN.json:EST` adds each estimator's agreement (Spearman, same top card) with
estimator EST of another run (e.g. the 1.5B reference teacher on the same decisions). The work is in
`damc.teacher.compare`.
"""

import argparse
import json
import sys
from pathlib import Path


def cli() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("episodes", nargs="?", help="episode JSONL (a dev split: never tune on test)")
    p.add_argument("--labels", default=None, help="report the key-card hit rates of this label set instead")
    p.add_argument("--estimators", nargs="+", default=["loo", "loi", "loo_loi", "grouped_loo", "ablation"])
    p.add_argument("--teacher", default="smollm2-135m", help="teacher model (registry name, HF id or path)")
    p.add_argument("--render", default="template", choices=["template", "fields"],
                   help="how the teacher reads each card: the runtime's template lines or its `fields` lines")
    p.add_argument("--dtype", default="auto", help="auto | float32 | bfloat16")
    p.add_argument("--batch-size", type=int, default=8, help="sequences per forward pass")
    p.add_argument("--decisions", type=int, default=40, help="seeded sample of decisions with key cards")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="write per-decision deltas and the summary here (each finished "
                   "decision also goes to JSON.partial.jsonl: a killed run resumes from it)")
    p.add_argument("--against", default=None, help="RUN.json:ESTIMATOR of another run to agree with")
    a = p.parse_args()
    from damc.cli import quiet_third_party, verbose_requested
    from damc.episodes import atomic_write_text, load_episodes
    from damc.teacher.backends import HFTeacher
    from damc.teacher.compare import agreement, compare, label_hit_rates, markdown

    quiet_third_party(verbose_requested())
    if a.labels:
        print(json.dumps(label_hit_rates(a.labels), indent=2))
        return
    if not a.episodes:
        p.error("give an episode file (or --labels LABELS)")
    try:
        episodes = load_episodes(a.episodes)
    except (FileNotFoundError, ValueError) as e:
        sys.exit(f"compare_estimators: error: {e}")
    res = compare(episodes, HFTeacher(a.teacher, dtype=a.dtype, batch_size=a.batch_size), a.estimators,
                  a.decisions, a.seed, checkpoint=f"{a.json}.partial.jsonl" if a.json else None, render=a.render)
    print(markdown(res))
    if a.against:
        path, _, est = a.against.rpartition(":")
        other = json.loads(Path(path).read_text())
        res["agreement_with"] = {"run": path, "estimator": est, "by_estimator": agreement(res, other, est)}
        print(f"agreement with `{other['teacher']}` ({est}):")
        for name, v in res["agreement_with"]["by_estimator"].items():
            m, top = v["spearman"]["mean"], v["same_top"]
            print(f"  {name}: Spearman {'–' if m is None else f'{m:.2f}'}, same top card "
                  f"{'–' if top is None else f'{top:.2f}'} ({round((top or 0) * v['n'])} of {v['n']})")
    if a.json:
        atomic_write_text(Path(a.json), json.dumps(res, indent=2))


if __name__ == "__main__":
    cli()
