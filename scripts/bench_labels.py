"""Benchmark a label run's embedding work, side by side on the same episodes in one process:

    python scripts/bench_labels.py --episodes data/samples/synthetic_sample.jsonl
    python scripts/bench_labels.py --episodes SPLIT.jsonl --max-decisions 500 --estimator grounded

Each variant is the product's own `scripts/label.py` run (`damc.teacher.label.main`, composed from its Hydra
configs) into a temporary directory:

* `runtime`  — each episode's memory embeds cards and decision queries as it asks for them, with the encoder as the
               runtime loads it (no run-wide memo; only the index's own, `IndexConfig.encode_memo`, as in a live
               agent): `prefetch=false`, and `damc.teacher.candidates.shared_encoder` answering the bare encoder;
* `memo`     — the same, behind the run's `CachedEncoder`: a text already embedded (a card the memory re-writes
               unchanged, a tool result repeated across episodes) is not embedded again (`prefetch=false`);
* `prefetch` — the default: each episode's card documents and decision queries embedded in one batched call first.

It prints wall time, decisions per second and each variant's speed-up over `runtime`, and checks that every variant
wrote the same rows (ids, targets and runtime features, exactly). The grounded estimator (the default here) loads
no model, so the encoder and the runtime are all that is timed; `--estimator loi` times a teacher run too (slow on
CPU). Prints a table and one JSON object; exits non-zero if the rows differ.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def label_run(episodes: Path, out: Path, estimator: str, max_decisions: int | None, variant: str) -> dict[str, Any]:
    """One `label.py` run of a variant (module docstring); returns its summary with the wall time measured here."""
    from hydra import compose, initialize_config_module

    import damc.teacher.candidates as candidates
    from damc.teacher.label import main

    overrides = [f"data.path={episodes}", f"out_dir={out}", f"estimator={estimator}",
                 f"prefetch={str(variant == 'prefetch').lower()}", "log_level=WARNING"]
    if max_decisions is not None:
        overrides.append(f"max_decisions={max_decisions}")
    with initialize_config_module("damc.configs", version_base="1.3"):
        cfg = compose("label", overrides=overrides)
    shared = candidates.shared_encoder
    if variant == "runtime":   # the bare encoder, as each memory would load it: no memo in front
        candidates.shared_encoder = lambda memory=None: shared(memory).inner
    try:
        t0 = time.perf_counter()
        summary = main(cfg)
        wall = time.perf_counter() - t0
    finally:
        candidates.shared_encoder = shared
    return {**summary, "wall_s": wall}


def same_rows(a: Path, b: Path) -> tuple[bool, int]:
    """Whether two label sets hold the same rows (ids, targets, runtime features), and how many."""
    from damc.labels import load_labels

    x, y = load_labels(a).to_pandas(), load_labels(b).to_pandas()
    cols = ["decision_id", "card_id", "delta", "is_key", "card_age"] + sorted(c for c in x.columns
                                                                            if c.startswith("feat_"))
    x = x[cols].sort_values(["decision_id", "card_id"]).reset_index(drop=True)
    y = y[cols].sort_values(["decision_id", "card_id"]).reset_index(drop=True)
    return len(x) == len(y) and x.equals(y), len(x)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--episodes", type=Path, default=ROOT / "data" / "samples" / "synthetic_sample.jsonl")
    ap.add_argument("--estimator", default="grounded", help="grounded (no model) | loi | ... (configs/estimator/)")
    ap.add_argument("--max-decisions", type=int, default=None)
    ap.add_argument("--variants", nargs="+", default=["runtime", "memo", "prefetch"],
                    choices=["runtime", "memo", "prefetch"], help="which to run (the first is the baseline)")
    args = ap.parse_args(argv)
    if not args.episodes.exists():
        ap.error(f"--episodes {args.episodes}: no such file (make one with scripts/make_data.py)")
    runs: dict[str, dict[str, Any]] = {}
    variants = tuple(dict.fromkeys(args.variants))
    with tempfile.TemporaryDirectory(prefix="damc-bench-labels-") as tmp:
        for v in variants:
            runs[v] = label_run(args.episodes.resolve(), Path(tmp) / v, args.estimator, args.max_decisions, v)
        same = {v: same_rows(Path(tmp) / variants[0], Path(tmp) / v) for v in variants[1:]}
    identical = all(ok for ok, _ in same.values())
    base = runs[variants[0]]["wall_s"]
    print(f"{'variant':<9} {'decisions':>9} {'rows':>7} {'wall s':>8} {'decisions/s':>12} {'speed-up':>9}")
    for v, r in runs.items():
        n = r.get("planned_decisions", 0)
        print(f"{v:<9} {n:>9} {r.get('total_rows', 0):>7} {r['wall_s']:>8.1f} {n / r['wall_s']:>12.2f} "
              f"{base / r['wall_s']:>8.2f}x")
    result = {"episodes": str(args.episodes), "estimator": args.estimator,
              "planned_decisions": runs[variants[0]].get("planned_decisions"), "rows": runs[variants[0]].get("total_rows"),
              "identical_rows": identical, **{f"wall_s_{v}": round(r["wall_s"], 2) for v, r in runs.items()},
              **{f"speedup_{v}": round(base / runs[v]["wall_s"], 2) for v in variants[1:]}}
    print(f"identical rows in every variant: {identical}")
    print(json.dumps(result))
    if not identical:
        raise SystemExit("the variants wrote different rows: the memo or the prefetch changed the candidates")
    return result


if __name__ == "__main__":
    main()
