"""Benchmark a label run with and without the batched embedding prefetch, side by side on the same episodes:

    python scripts/bench_labels.py --episodes data/samples/synthetic_sample.jsonl
    python scripts/bench_labels.py --episodes SPLIT.jsonl --max-decisions 400 --estimator grounded

Each variant is the product's own `scripts/label.py` run (`damc.teacher.label.main`, composed from its Hydra
configs) into a temporary directory: `prefetch=false` (the runtime memory embeds each card and decision query as it
asks for them, a few at a time) and `prefetch=true` (the default: each episode's card documents and decision queries
embedded in one batched call, texts repeated across episodes once). It prints wall time, decisions per second and
the ratio, and checks that both runs wrote the same rows (ids, targets and runtime features, exactly). The grounded
estimator (the default here) loads no model, so the encoder and the runtime are all that is timed; `loi` times a
teacher run too (`--estimator loi`, slow on CPU). Prints a table and one JSON object.
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


def label_run(episodes: Path, out: Path, estimator: str, max_decisions: int | None, prefetch: bool) -> dict[str, Any]:
    """One `label.py` run; returns its summary with the wall time measured here."""
    from hydra import compose, initialize_config_module

    from damc.teacher.label import main

    overrides = [f"data.path={episodes}", f"out_dir={out}", f"estimator={estimator}", f"prefetch={str(prefetch).lower()}",
                 "log_level=WARNING"]
    if max_decisions is not None:
        overrides.append(f"max_decisions={max_decisions}")
    with initialize_config_module("damc.configs", version_base="1.3"):
        cfg = compose("label", overrides=overrides)
    t0 = time.perf_counter()
    summary = main(cfg)
    return {**summary, "wall_s": time.perf_counter() - t0}


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
    args = ap.parse_args(argv)
    if not args.episodes.exists():
        ap.error(f"--episodes {args.episodes}: no such file (make one with scripts/make_data.py)")
    runs: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="damc-bench-labels-") as tmp:
        for name, prefetch in (("as asked", False), ("prefetch", True)):
            runs[name] = label_run(args.episodes.resolve(), Path(tmp) / name.replace(" ", "_"), args.estimator,
                                   args.max_decisions, prefetch)
        identical, n_rows = same_rows(Path(tmp) / "as_asked", Path(tmp) / "prefetch")
    base, fast = runs["as asked"], runs["prefetch"]
    print(f"{'variant':<10} {'decisions':>9} {'rows':>7} {'wall s':>8} {'decisions/s':>12}")
    for name, r in runs.items():
        n = r.get("planned_decisions", 0)
        print(f"{name:<10} {n:>9} {r.get('total_rows', 0):>7} {r['wall_s']:>8.1f} {n / r['wall_s']:>12.2f}")
    result = {"episodes": str(args.episodes), "estimator": args.estimator,
              "planned_decisions": base.get("planned_decisions"), "rows": n_rows, "identical_rows": identical,
              "wall_s_as_asked": round(base["wall_s"], 2), "wall_s_prefetch": round(fast["wall_s"], 2),
              "speedup": round(base["wall_s"] / fast["wall_s"], 2)}
    print(f"speedup {result['speedup']}x, identical rows: {identical}")
    print(json.dumps(result))
    if not identical:
        raise SystemExit("the two runs wrote different rows: the prefetch changed the candidates")
    return result


if __name__ == "__main__":
    main()
