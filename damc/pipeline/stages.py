"""`make demo`: the whole DAMC pipeline on one dataset, stage by stage (`make reproduce`, the multi-dataset study,
reuses these stages: `damc.pipeline.study`).

    data → labels (the teacher) → train (the student) → export → evaluate (dev sweep → operating points → test)

Each stage calls the real entry point of its module (`main(cfg)`) with that module's own Hydra config composed
(from the configs shipped in the package) and shrunk by the overrides of the profile (`configs/demo.yaml`, or a
study's profiles), so the demo exercises exactly what users run.

A finished stage leaves a marker (`<out_dir>/stages/<stage>.json`) holding the **fingerprint** of its composed
config and of the stages before it; a rerun skips a stage only when its fingerprint still matches, so a changed
setting reruns that stage and everything after it instead of silently reusing old outputs. The evaluation's own
records are fingerprinted per decision (`damc.eval.harness`), so a killed evaluation resumes.

With `evaluate.dev_sweep=true` the harness first runs on the dev split with the sweep (top-k / thresholds),
`damc.eval.results.operating_points` picks each policy's setting there, and the test split is then reported at
those points (`eval/operating_points.json`); nothing is chosen on test.

Output: one line per stage with its time, the progress bars of the long stages, then the results table.

Example:
    $ python scripts/demo.py                       # a few minutes on 2 CPU cores
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any, Callable

STAGES = ("data", "label", "train", "export", "evaluate")


def compose_stage(config_name: str, overrides: list[str]) -> Any:
    """A module's real Hydra config (`damc/configs/<config_name>.yaml`) with overrides, outside `@hydra.main`."""
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_module(config_module="damc.configs", version_base="1.3"):
        return compose(config_name, overrides=overrides)


def override_value(x: Any) -> str:
    """A value as a Hydra override string (lists and paths kept literal)."""
    from omegaconf import OmegaConf

    if isinstance(x, (list, tuple)) or OmegaConf.is_list(x):
        return "[" + ",".join(str(v) for v in x) + "]"
    return str(x)


def stage_paths(out: Path) -> dict[str, Path]:
    return {"data": out / "data", "labels": out / "labels", "run": out / "run", "scorer": out / "scorer",
            "eval": out / "eval", "eval_dev": out / "eval_dev", "label_input": out / "label_input.jsonl",
            "stages": out / "stages"}


def stage_overrides(cfg: Any, stage: str, paths: dict[str, Path], split: str | None = None) -> list[str]:
    """The overrides of one stage: its paths, then the profile's extra overrides (`cfg.<stage>.overrides`)."""
    extra = [str(o) for o in (cfg[stage].get("overrides") or [])]
    if stage == "data":
        base = [f"out_dir={paths['data']}", f"source={cfg.data.source}", f"n_episodes={cfg.data.n_episodes}",
                f"seed={cfg.seed}"]
    elif stage == "label":
        base = [f"data.path={paths['label_input']}", f"out_dir={paths['labels']}"]
    elif stage == "train":
        base = [f"data.labels={paths['labels']}", f"out_dir={paths['run']}", f"seed={cfg.seed}"]
    elif stage == "export":
        base = [f"run_dir={paths['run']}", f"out={paths['scorer']}"]
    else:
        split = split or cfg.evaluate.split
        out = paths["eval_dev"] if split == "dev" and split != cfg.evaluate.split else paths["eval"]
        base = [f"data.path={paths['data'] / (split + '.jsonl')}", f"out_dir={out}", f"scorer={paths['scorer']}",
                f"labels_path={paths['labels']}", f"policies={override_value(cfg.evaluate.policies)}",
                f"budgets={override_value(cfg.evaluate.budgets)}", f"seed={cfg.seed}"]
        if cfg.evaluate.get("render"):
            base.append(f"render={override_value(cfg.evaluate.render)}")
    return base + extra


def label_subset(train: Path, out: Path, n_episodes: int | None, calls_per_episode: int | None) -> int:
    """Write the episodes the teacher labels: the first `n_episodes` train episodes, each cut after its
    first `calls_per_episode` tool-calling decisions (None: whole), so a small labelling budget still
    spans several episodes (training splits by episode). Returns the number of episodes written."""
    from damc.episodes import Episode, load_episodes, write_episodes

    eps = load_episodes(train)[: n_episodes or None]
    cut_eps = []
    for ep in eps:
        cut, seen = len(ep.messages), 0
        for i, m in enumerate(ep.messages):
            if calls_per_episode and m.get("role") == "assistant" and m.get("tool_calls"):
                seen += 1
                if seen == calls_per_episode:
                    cut = i + 1 + len(m["tool_calls"])  # keep the results of the last labelled call
                    break
        cut_eps.append(Episode(ep.episode_id, ep.messages[:cut], ep.domain, ep.tools, ep.distractors,
                               ep.metadata))
    return write_episodes(out, cut_eps)


def stage_main(stage: str) -> tuple[str, Callable[[Any], dict[str, Any]]]:
    """(config name, main function) of a stage; imported lazily so a missing module is a clear error."""
    if stage == "data":
        from damc.data.make import main
        return "make_data", main
    if stage == "label":
        from damc.teacher.label import main
        return "label", main
    if stage == "train":
        from damc.scorer.train import main
        return "train", main
    if stage == "export":
        from damc.scorer.export import main
        return "export", main
    from damc.eval.harness import main
    return "evaluate", main


def fingerprint(name: str, stage_cfg: Any, before: str) -> str:
    """Hash of a composed stage config, the render version (labels, scorers and evaluations made with another
    query/card rendering are not reused) and the fingerprint of the stages before it."""
    from omegaconf import OmegaConf

    from damc.configs import as_spelled_before
    from damc.query import RENDER_VERSION

    text = OmegaConf.to_yaml(as_spelled_before(stage_cfg))  # the text hashed before the structured configs
    return hashlib.sha256(f"{before}|{name}|render {RENDER_VERSION}|{text}".encode()).hexdigest()[:16]


def marker(stages_dir: Path, stage: str) -> Path:
    return stages_dir / f"{stage}.json"


def is_done(stages_dir: Path, stage: str, fp: str) -> bool:
    """A marker of `stage` with this fingerprint exists (the stage ran to the end with the same settings)."""
    try:
        return json.loads(marker(stages_dir, stage).read_text()).get("fingerprint") == fp
    except (OSError, json.JSONDecodeError):
        return False


def mark_done(stages_dir: Path, stage: str, fp: str, seconds: float) -> None:
    from damc.episodes import atomic_write_text

    stages_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(marker(stages_dir, stage), json.dumps({"fingerprint": fp, "seconds": round(seconds, 1),
                                                              "finished": time.strftime("%Y-%m-%dT%H:%M:%S")}))


def _say(i: int, stage: str, text: str) -> None:
    print(f"[{i}/{len(STAGES)}] {stage:<9} {text}", flush=True)


def _evaluate(cfg: Any, paths: dict[str, Path], fn: Callable[[Any], dict[str, Any]]) -> dict[str, Any]:
    """The evaluate stage: optionally a dev sweep and its operating points, then the test split."""
    from damc.episodes import atomic_write_text
    from damc.eval.results import operating_points

    ops = None
    if cfg.evaluate.get("dev_sweep"):
        dev = fn(compose_stage("evaluate", stage_overrides(cfg, "evaluate", paths, "dev")))
        ops = operating_points(dev)
        paths["eval"].mkdir(parents=True, exist_ok=True)
        atomic_write_text(paths["eval"] / "operating_points.json", json.dumps(ops, indent=2))
    res = fn(compose_stage("evaluate", stage_overrides(cfg, "evaluate", paths)))
    return {"results": res, "operating": ops}


def relabel_if_stale(stage_cfg: Any) -> None:
    """A label stage that must rerun (its fingerprint changed) into a directory holding labels of other settings
    labels afresh (`overwrite=true`, said on the console) instead of stopping: the pipeline owns that directory,
    and an interrupted run with the same settings still resumes."""
    from damc.teacher.label import labels_made_with_other_settings

    if labels_made_with_other_settings(stage_cfg):
        print(f"[label] {stage_cfg.out_dir} holds labels made with other settings: labelling afresh", flush=True)
        stage_cfg.overwrite = True


def run_pipeline(cfg: Any) -> dict[str, Any]:
    """Run the stages of `cfg` in order into `cfg.out_dir`; returns the evaluation results and stage times."""
    out = Path(cfg.out_dir)
    paths = stage_paths(out)
    timings: dict[str, float] = {}
    results: dict[str, Any] = {}
    before = ""
    for i, stage in enumerate(STAGES, 1):
        name, fn = stage_main(stage)
        stage_cfg = compose_stage(name, stage_overrides(cfg, stage, paths))
        fp = fingerprint(stage, stage_cfg, before + json.dumps([cfg[stage].get(k) for k in ("n_episodes",
                                                                 "calls_per_episode", "dev_sweep")], default=str))
        before = fp
        if stage in (cfg.get("skip") or []):
            _say(i, stage, f"skipped (skip={list(cfg.skip)})")
            continue
        if is_done(paths["stages"], stage, fp):
            _say(i, stage, f"done earlier (same settings; {marker(paths['stages'], stage)})")
            continue
        if stage == "label":
            label_subset(paths["data"] / "train.jsonl", paths["label_input"], cfg.label.get("n_episodes"),
                         cfg.label.get("calls_per_episode"))
            relabel_if_stale(stage_cfg)
        t0 = time.perf_counter()
        res = _evaluate(cfg, paths, fn) if stage == "evaluate" else fn(stage_cfg)
        timings[stage] = round(time.perf_counter() - t0, 1)
        mark_done(paths["stages"], stage, fp, timings[stage])
        _say(i, stage, f"{timings[stage]:7.1f} s  → {_stage_output(stage, paths)}")
        if stage == "evaluate":
            results = res
    if not results and (paths["eval"] / "results.json").exists():
        ops_file = paths["eval"] / "operating_points.json"
        results = {"results": json.loads((paths["eval"] / "results.json").read_text()),
                   "operating": json.loads(ops_file.read_text()) if ops_file.exists() else None}
    return {"results": results.get("results", {}), "operating": results.get("operating"), "timings_s": timings,
            "paths": {k: str(v) for k, v in paths.items()}}


def _stage_output(stage: str, paths: dict[str, Path]) -> Path:
    return {"data": paths["data"], "label": paths["labels"], "train": paths["run"], "export": paths["scorer"],
            "evaluate": paths["eval"]}[stage]


def main(cfg: Any) -> dict[str, Any]:
    """`make demo`: run the pipeline, print the results table and where the files are."""
    from damc.eval.results import results_table

    t0 = time.perf_counter()
    out = run_pipeline(cfg)
    eval_dir = Path(out["paths"]["eval"])
    if out["results"]:
        print("\n" + results_table(out["results"]))
    print(f"total {time.perf_counter() - t0:.0f} s; stage times (s): {out['timings_s']}")
    print(f"results: {eval_dir / 'results.json'}\ntable:   {eval_dir / 'results.md'}\nplot:    {eval_dir / 'pareto.png'}")
    return out


if __name__ == "__main__":  # python -m damc.pipeline.stages KEY=VALUE ...  (configs: damc/configs/demo.yaml)
    from damc.cli import run

    run("demo", main)
