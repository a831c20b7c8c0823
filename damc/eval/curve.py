"""`scripts/learning_curve.py`: what more labels buy — the student's dev key-card recall and held-out
fidelity against the number of labelled training decisions.

    for N in sizes:  train on N labelled decisions → export (as the runtime loads it) → selection-only harness on dev

Each point trains the student of `train.overrides` on the first N training decisions of one seeded shuffle
(`data.train_decisions=N`: the sets are nested, the 250 hold the 125, and every point is scored on the same
held-out episodes), exports it with `export.overrides`, and runs the A/B harness in selection-only mode
(`score=false`: every prompt is built through the runtime and measured, no decision LLM) on a **dev** episode file
with `damc` next to the lexical baselines. A size above what the labels hold trains on all of them, once.

Every step is a fingerprinted stage (`damc.eval.study.Study.run_stage`): a rerun skips what finished with the same
settings, so a killed curve resumes and a changed setting reruns what it touches.

Writes `<out_dir>/curve.json`, `curve.md` (the table) and `curve.png` (key-card recall and fidelity against N).

Example:
    $ python scripts/learning_curve.py labels_path=runs/study/labels dev=runs/study/data/tau2_retail/dev.jsonl \\
          out_dir=runs/curve 'sizes=[35,70,140]'
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from damc.eval.pipelines import override_value
from damc.eval.study import Study

METRICS = ("key_hit", "key_recall", "confuser_rate", "candidate_recall", "prompt_tokens")


def _read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def _policy_metrics(results: dict[str, Any], policy: str, setting: str) -> dict[str, float]:
    """`METRICS` of `policy@setting` in a harness results file; KeyError naming what exists when absent."""
    key = f"{policy}@{setting}"
    row = results["policies"].get(key)
    if row is None:
        raise KeyError(f"no results for {key!r}; the harness wrote {sorted(results['policies'])}")
    return {m: float(row[m]) for m in METRICS} | {"n_key_decisions": int(row["n_key_decisions"])}


def _fidelity(metrics: dict[str, Any]) -> dict[str, Any]:
    sp = metrics["scorer"]["spearman"]
    return {"spearman": sp["mean"], "spearman_ci": sp["mean_ci"], "ndcg@5": metrics["scorer"]["ndcg@5"]["mean"],
            "heldout_decisions": metrics["split"]["dev_decisions"],
            "train_decisions": metrics["split"]["train_decisions"]}


def point(study: Study, cfg: Any, n: int) -> dict[str, Any]:
    """Train, export and evaluate the student on N labelled decisions; returns the point's figures."""
    root = study.out / f"n{n}"
    run, scorer, ev = root / "run", root / "scorer", root / "eval"
    study.run_stage(f"train.n{n}", "train", [f"data.labels={cfg.labels_path}", f"out_dir={run}", f"seed={cfg.seed}",
                                             f"data.train_decisions={n}", *[str(o) for o in cfg.train.overrides]])
    study.run_stage(f"export.n{n}", "export", [f"run_dir={run}", f"out={scorer}",
                                               *[str(o) for o in cfg.export.overrides]])
    study.run_stage(f"evaluate.n{n}", "evaluate", [
        f"data.path={cfg.dev}", f"out_dir={ev}", f"scorer={scorer}", "score=false", f"seed={cfg.seed}",
        f"policies={override_value(cfg.evaluate.policies)}", *[str(o) for o in cfg.evaluate.overrides]])
    results = _read_json(ev / "results.json")
    fid = _fidelity(_read_json(run / "metrics.json"))
    return {"requested": n, **fid,
            "policies": {p: _policy_metrics(results, p, str(cfg.setting)) for p in cfg.evaluate.policies}}


def markdown(points: list[dict[str, Any]], cfg: Any) -> str:
    """The curve as a markdown table: one row per point, `damc` against the lexical baselines."""
    others = [p for p in cfg.evaluate.policies if p != "damc"]
    head = ["train decisions", "held-out Spearman [95 % CI]", "NDCG@5", "damc key hit", "key recall", "confuser",
            "candidate recall", *[f"{p} key hit" for p in others]]
    n_key = points[0]["policies"]["damc"]["n_key_decisions"] if points else 0
    lines = [f"Dev: `{cfg.dev}` (setting `{cfg.setting}`, {n_key} decisions with key cards); "
             f"labels: `{cfg.labels_path}`.", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for pt in points:
        d = pt["policies"]["damc"]
        lo, hi = pt["spearman_ci"]
        lines.append("| " + " | ".join([
            str(pt["train_decisions"]), f"{pt['spearman']:.2f} [{lo:.2f}, {hi:.2f}]", f"{pt['ndcg@5']:.2f}",
            f"{d['key_hit']:.2f}", f"{d['key_recall']:.2f}", f"{d['confuser_rate']:.2f}", f"{d['candidate_recall']:.2f}",
            *[f"{pt['policies'][p]['key_hit']:.2f}" for p in others]]) + " |")
    return "\n".join(lines) + "\n"


def plot(points: list[dict[str, Any]], cfg: Any, path: Path) -> None:
    """`curve.png`: key-card hit and recall of each policy, and the student's held-out Spearman, against N."""
    from damc.extras import requires

    with requires("plotting the learning curve"):
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

    xs = [pt["train_decisions"] for pt in points]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    for p in cfg.evaluate.policies:
        a.plot(xs, [pt["policies"][p]["key_hit"] for pt in points], marker="o", label=f"{p} key hit")
    a.plot(xs, [pt["policies"]["damc"]["key_recall"] for pt in points], marker="s", ls="--", label="damc key recall")
    a.set(xlabel="labelled training decisions", ylabel=f"dev share ({cfg.setting})", ylim=(0, 1.05), xscale="log")
    a.legend(fontsize=8)
    b.errorbar(xs, [pt["spearman"] for pt in points], marker="o",
               yerr=[[pt["spearman"] - pt["spearman_ci"][0] for pt in points],
                     [pt["spearman_ci"][1] - pt["spearman"] for pt in points]], capsize=3)
    b.set(xlabel="labelled training decisions", ylabel="held-out Spearman vs teacher", ylim=(-0.2, 1), xscale="log")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(cfg: Any) -> dict[str, Any]:
    """Every point of the curve (resuming finished ones); writes curve.json / curve.md / curve.png.

    Raises:
        ValueError: `sizes` empty or not positive whole numbers; `damc` not among `evaluate.policies`.
        FileNotFoundError: the labels or the dev episode file do not exist.
    """
    from damc.data.episodes import atomic_write_text

    sizes = list(cfg.sizes or [])
    if not sizes or any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in sizes):
        raise ValueError(f"learning_curve: sizes must be positive numbers of decisions, got {sizes}")
    if "damc" not in cfg.evaluate.policies:
        raise ValueError(f"learning_curve: evaluate.policies={list(cfg.evaluate.policies)} must include damc")
    for what, p in (("labels_path", cfg.labels_path), ("dev", cfg.dev)):
        if not Path(str(p)).exists():
            raise FileNotFoundError(f"learning_curve: {what}={p} does not exist")
    study = Study(cfg)
    points: list[dict[str, Any]] = []
    for n in sorted(set(sizes)):
        pt = point(study, cfg, n)
        points.append(pt)
        print(f"[curve] N={pt['train_decisions']}: damc key hit {pt['policies']['damc']['key_hit']:.2f}, "
              f"held-out Spearman {pt['spearman']:.2f}", flush=True)
        if pt["train_decisions"] < n:  # the labels hold fewer: larger sizes would train on the same decisions
            print(f"[curve] the labels hold {pt['train_decisions']} training decisions: sizes above {n} skipped",
                  flush=True)
            break
    out = Path(cfg.out_dir)
    summary = {"points": points, "setting": str(cfg.setting), "labels": str(cfg.labels_path), "dev": str(cfg.dev)}
    atomic_write_text(out / "curve.json", json.dumps(summary, indent=2))
    text = markdown(points, cfg)
    atomic_write_text(out / "curve.md", text)
    plot(points, cfg, out / "curve.png")
    print(text + f"\ncurve: {out / 'curve.md'}, {out / 'curve.png'}", flush=True)
    return {"points": points, "timings_s": study.timings}
