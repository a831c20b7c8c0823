"""`scripts/learning_curve.py`: what more labels buy — the student's dev key-card recall and held-out
fidelity against the number of labelled training decisions.

    for N in sizes:  train on N labelled decisions → export (as the runtime loads it) → selection-only harness on dev

Each point trains the student of `train.overrides` on the first N training decisions of one seeded shuffle
(`data.train_decisions=N`: the sets are nested, the 250 hold the 125, and every point is scored on the same
held-out episodes), exports it with `export.overrides`, and runs the A/B harness in selection-only mode
(`score=false`: every prompt is built through the runtime and measured, no decision LLM) on one or more **dev**
episode files (`dev=[a/dev.jsonl,b/dev.jsonl]`; each named by its folder) with `damc` next to the lexical
baselines. A size above what the labels hold trains on all of them, once.

Every step is a fingerprinted stage (`damc.pipeline.study.Study.run_stage`): a rerun skips what finished with the same
settings, so a killed curve resumes and a changed setting reruns what it touches (a point chains from a digest of
the label files, so labels that grew retrain it; a new dev set only evaluates).

Writes `<out_dir>/curve.json`, `curve.md` (a table per dev set) and `curve.png` (key-card hit/recall per dev set
and held-out fidelity against N).

Example:
    $ python scripts/learning_curve.py labels_path=runs/study/labels dev=runs/study/data/tau2_retail/dev.jsonl \\
          out_dir=runs/curve 'sizes=[35,70,140]'
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from damc.pipeline.stages import override_value
from damc.pipeline.study import Study

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


def dev_sets(dev: Any) -> dict[str, Path]:
    """`dev` (one episode file or a list of them) as {name: path}; a file is named by its folder
    (`runs/study/data/tau2_retail/dev.jsonl` → `tau2_retail`), falling back to its stem and then a number."""
    paths = [Path(str(p)) for p in ([dev] if isinstance(dev, (str, Path)) else list(dev))]
    if not paths:
        raise ValueError("learning_curve: dev must name at least one dev episode file")
    out: dict[str, Path] = {}
    for i, p in enumerate(paths):
        for name in (p.parent.name, p.stem, f"dev{i}"):
            if name and name not in out:
                out[name] = p
                break
    return out


def labels_digest(path: Any) -> str:
    """A digest of the label rows' files (relative names and sizes of the .parquet / .jsonl files): labels that grew
    or changed retrain every point; progress manifests and summaries do not count."""
    root = Path(str(path))
    files = [root] if root.is_file() else sorted(f for f in root.rglob("*") if f.suffix in (".parquet", ".jsonl"))
    listing = "\n".join(f"{f.relative_to(root) if f != root else f.name}:{f.stat().st_size}" for f in files)
    return hashlib.sha256(listing.encode()).hexdigest()[:16]


def train_point(study: Study, cfg: Any, n: int, root: Path) -> tuple[Path, Path, str]:
    """Train and export the student on the first N labelled decisions under `root`; returns (run, scorer, the
    export's fingerprint). The stages chain from the labels' digest, not from the point before."""
    run, scorer = root / "run", root / "scorer"
    study.before = labels_digest(cfg.labels_path)
    study.run_stage(f"train.n{n}", "train", [f"data.labels={cfg.labels_path}", f"out_dir={run}", f"seed={cfg.seed}",
                                             f"data.train_decisions={n}", *[str(o) for o in cfg.train.overrides]])
    study.run_stage(f"export.n{n}", "export", [f"run_dir={run}", f"out={scorer}",
                                               *[str(o) for o in cfg.export.overrides]])
    return run, scorer, study.before


def score_point(study: Study, cfg: Any, tag: str, trained: tuple[Path, Path, str], root: Path,
                requested: int | None = None) -> dict[str, Any]:
    """Evaluate a trained student `(run, scorer, export fingerprint)` on every dev set (each evaluation chains from
    the export: a new dev set only evaluates); returns the point's figures (`requested` defaults to the number of
    decisions it trained on)."""
    run, scorer, exported = trained
    by_dev = {}
    for name, dev in dev_sets(cfg.dev).items():
        ev = root / "eval" / name
        study.before = exported
        study.run_stage(f"evaluate.{tag}.{name}", "evaluate", [
            f"data.path={dev}", f"out_dir={ev}", f"scorer={scorer}", "score=false", f"seed={cfg.seed}",
            f"policies={override_value(cfg.evaluate.policies)}", *[str(o) for o in cfg.evaluate.overrides]])
        results = _read_json(ev / "results.json")
        by_dev[name] = {p: _policy_metrics(results, p, str(cfg.setting)) for p in cfg.evaluate.policies}
    fid = _fidelity(_read_json(run / "metrics.json"))
    return {"requested": fid["train_decisions"] if requested is None else requested, **fid, "dev": by_dev}


def point(study: Study, cfg: Any, n: int, root: Path | None = None) -> dict[str, Any]:
    """Train, export and evaluate the student on N labelled decisions (on every dev set); returns its figures."""
    root = root or study.out / f"n{n}"
    return score_point(study, cfg, f"n{n}", train_point(study, cfg, n, root), root, requested=n)


def write(points: list[dict[str, Any]], cfg: Any, out: Path) -> str:
    """`curve.json`, `curve.md` and `curve.png` under `out`; returns the markdown."""
    from damc.episodes import atomic_write_text

    summary = {"points": points, "setting": str(cfg.setting), "labels": str(cfg.labels_path),
               "dev": {name: str(p) for name, p in dev_sets(cfg.dev).items()}}
    atomic_write_text(out / "curve.json", json.dumps(summary, indent=2))
    text = markdown(points, cfg)
    atomic_write_text(out / "curve.md", text)
    plot(points, cfg, out / "curve.png")
    return text


def _announce(pt: dict[str, Any]) -> None:
    hits = ", ".join(f"{name} {d['damc']['key_hit']:.2f}" for name, d in pt["dev"].items())
    print(f"[curve] N={pt['train_decisions']}: damc key hit {hits}; held-out Spearman {pt['spearman']:.2f}",
          flush=True)


def study_curve(study: Study, labels: Path, trained: tuple[Path, Path, str]) -> str:
    """The study's `curve:` section: students on the first N of the study's labelled training decisions for each
    smaller size, plus the study's own student (all of them) as the last point, each scored on the dev splits of
    `curve.dev` (selection only). Writes `<out_dir>/curve/curve.{json,md,png}`; returns the markdown ('' when off)."""
    from omegaconf import OmegaConf

    cur, cfg = study.cfg.get("curve") or {}, study.cfg
    if not cur or not cur.get("sizes"):
        return ""
    missing = [d for d in cur.dev if d not in study.datasets or not (study.data_dir(d) / "dev.jsonl").exists()]
    if missing or not cur.dev:
        raise ValueError(f"study: curve.dev={list(cur.dev)} must name datasets of this run with a dev split "
                         f"(missing: {missing})")
    ccfg = OmegaConf.create({
        "labels_path": str(labels), "dev": [str(study.data_dir(d) / "dev.jsonl") for d in cur.dev],
        "seed": int(cfg.seed), "setting": str(cur.setting),
        "train": {"overrides": [str(o) for o in cfg.train.overrides]},
        "export": {"overrides": [str(o) for o in cfg.export.overrides]},
        "evaluate": {"policies": list(cur.policies), "overrides": [str(o) for o in cur.overrides]}})
    out = study.out / "curve"
    try:
        final = score_point(study, ccfg, "all", trained, out / "all")
        points = []
        for n in sorted(set(int(x) for x in cur.sizes)):
            if n >= final["train_decisions"]:
                print(f"[curve] size {n} ≥ the study's {final['train_decisions']} training decisions: the study's "
                      "own student is that point", flush=True)
                break
            points.append(point(study, ccfg, n, root=out / f"n{n}"))
            _announce(points[-1])
    finally:
        study.before = trained[2]    # what runs next chains from the study's student, not from the curve
    points.append(final)
    _announce(final)
    return write(points, ccfg, out)


def markdown(points: list[dict[str, Any]], cfg: Any) -> str:
    """The curve as markdown: one table per dev set, one row per point, `damc` against the lexical baselines."""
    others = [p for p in cfg.evaluate.policies if p != "damc"]
    head = ["train decisions", "held-out Spearman [95 % CI]", "NDCG@5", "damc key hit", "key recall", "confuser",
            "candidate recall", *[f"{p} key hit" for p in others]]
    lines = [f"Labels: `{cfg.labels_path}`; setting `{cfg.setting}`; held-out fidelity on the labels' own "
             "held-out episodes (the same for every point)."]
    for name, path in dev_sets(cfg.dev).items():
        n_key = points[0]["dev"][name]["damc"]["n_key_decisions"] if points else 0
        lines += ["", f"Dev `{name}` (`{path}`, {n_key} decisions with key cards):", "",
                  "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for pt in points:
            d, lo, hi = pt["dev"][name]["damc"], *pt["spearman_ci"]
            lines.append("| " + " | ".join([
                str(pt["train_decisions"]), f"{pt['spearman']:.2f} [{lo:.2f}, {hi:.2f}]", f"{pt['ndcg@5']:.2f}",
                f"{d['key_hit']:.2f}", f"{d['key_recall']:.2f}", f"{d['confuser_rate']:.2f}",
                f"{d['candidate_recall']:.2f}", *[f"{pt['dev'][name][p]['key_hit']:.2f}" for p in others]]) + " |")
    return "\n".join(lines) + "\n"


def plot(points: list[dict[str, Any]], cfg: Any, path: Path) -> None:
    """`curve.png`: key-card hit and recall of each policy, and the student's held-out Spearman, against N."""
    from damc.extras import requires

    with requires("plotting the learning curve"):
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

    xs = [pt["train_decisions"] for pt in points]
    devs = list(dev_sets(cfg.dev))
    fig, axes = plt.subplots(1, len(devs) + 1, figsize=(5 * (len(devs) + 1), 4))
    for a, name in zip(axes, devs):
        for p in cfg.evaluate.policies:
            a.plot(xs, [pt["dev"][name][p]["key_hit"] for pt in points], marker="o", label=f"{p} key hit")
        a.plot(xs, [pt["dev"][name]["damc"]["key_recall"] for pt in points], marker="s", ls="--",
               label="damc key recall")
        a.set(title=f"dev: {name}", xlabel="labelled training decisions", ylabel=f"share ({cfg.setting})",
              ylim=(0, 1.05), xscale="log")
        a.legend(fontsize=8)
    b = axes[-1]
    b.errorbar(xs, [pt["spearman"] for pt in points], marker="o",
               yerr=[[pt["spearman"] - pt["spearman_ci"][0] for pt in points],
                     [pt["spearman_ci"][1] - pt["spearman"] for pt in points]], capsize=3)
    b.set(title="fidelity", xlabel="labelled training decisions", ylabel="held-out Spearman vs teacher",
          ylim=(-0.2, 1), xscale="log")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(cfg: Any) -> dict[str, Any]:
    """Every point of the curve (resuming finished ones); writes curve.json / curve.md / curve.png.

    Raises:
        ValueError: `sizes` empty or not positive whole numbers; `damc` not among `evaluate.policies`.
        FileNotFoundError: the labels or the dev episode file do not exist.
    """
    sizes = list(cfg.sizes or [])
    if not sizes or any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in sizes):
        raise ValueError(f"learning_curve: sizes must be positive numbers of decisions, got {sizes}")
    if "damc" not in cfg.evaluate.policies:
        raise ValueError(f"learning_curve: evaluate.policies={list(cfg.evaluate.policies)} must include damc")
    for what, p in (("labels_path", cfg.labels_path), *(("dev", d) for d in dev_sets(cfg.dev).values())):
        if not Path(str(p)).exists():
            raise FileNotFoundError(f"learning_curve: {what}={p} does not exist")
    study = Study(cfg)
    points: list[dict[str, Any]] = []
    for n in sorted(set(sizes)):
        pt = point(study, cfg, n)
        points.append(pt)
        _announce(pt)
        if pt["train_decisions"] < n:  # the labels hold fewer: larger sizes would train on the same decisions
            print(f"[curve] the labels hold {pt['train_decisions']} training decisions: sizes above {n} skipped",
                  flush=True)
            break
    out = Path(cfg.out_dir)
    text = write(points, cfg, out)
    print(text + f"\ncurve: {out / 'curve.md'}, {out / 'curve.png'}", flush=True)
    return {"points": points, "timings_s": study.timings}
