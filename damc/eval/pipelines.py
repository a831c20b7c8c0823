"""`make demo`: the whole DAMC pipeline on small embedded defaults (configs/demo.yaml).

synthetic data → teacher labels (a small train subset) → scorer training (a few hundred steps at
most) → export → A/B evaluation on held-out test episodes → the table and where the plot is.

Each stage calls the real entry point of its module (`main(cfg)`) with that module's own Hydra config
composed and shrunk by the overrides listed in `configs/demo.yaml`, so the demo exercises exactly
what users run. Stages whose output already exists are skipped (delete `out_dir` to start over), and
`reproduce.py` reuses the same runner with full-size profiles.

Example:
    $ python scripts/demo.py                       # ~15 minutes on 2 CPU cores
    $ python scripts/demo.py out_dir=runs/demo2 eval.max_decisions=20
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any, Callable

logger = logging.getLogger(__name__)

STAGES = ("data", "label", "train", "export", "evaluate")


def compose_stage(config_name: str, overrides: list[str]) -> Any:
    """A module's real Hydra config (configs/`config_name`.yaml) with overrides, outside `@hydra.main`."""
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_module(config_module="damc.configs", version_base="1.3"):
        return compose(config_name, overrides=overrides)


def _q(x: Any) -> str:
    """A value as a Hydra override string (lists and paths kept literal)."""
    from omegaconf import OmegaConf

    if isinstance(x, (list, tuple)) or OmegaConf.is_list(x):
        return "[" + ",".join(str(v) for v in x) + "]"
    return str(x)


def stage_overrides(cfg: Any, stage: str, paths: dict[str, Path]) -> list[str]:
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
        base = [f"data.path={paths['data'] / (cfg.evaluate.split + '.jsonl')}", f"out_dir={paths['eval']}",
                f"scorer={paths['scorer']}", f"labels_path={paths['labels']}",
                f"policies={_q(cfg.evaluate.policies)}", f"budgets={_q(cfg.evaluate.budgets)}", f"seed={cfg.seed}"]
    return base + extra


def label_subset(train: Path, out: Path, n_episodes: int | None, calls_per_episode: int | None) -> int:
    """Write the episodes the teacher labels: the first `n_episodes` train episodes, each cut after its
    first `calls_per_episode` tool-calling decisions (None: whole), so a small labelling budget still
    spans several episodes (training splits by episode). Returns the number of episodes written."""
    from damc.data.episodes import Episode, load_episodes, write_episodes

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


def _done(stage: str, paths: dict[str, Path]) -> bool:
    marker = {"data": paths["data"] / "test.jsonl", "label": paths["labels"] / "summary.json",
              "train": paths["run"] / "metrics.json", "export": paths["scorer"] / "damc_scorer.json",
              "evaluate": None}[stage]
    return marker is not None and marker.exists()


def _stage_main(stage: str) -> tuple[str, Callable[[Any], dict[str, Any]]]:
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


def run_pipeline(cfg: Any) -> dict[str, Any]:
    """Run the stages of `cfg` in order into `cfg.out_dir`; returns the evaluation results and timings."""
    out = Path(cfg.out_dir)
    paths = {"data": out / "data", "labels": out / "labels", "run": out / "run", "scorer": out / "scorer",
             "eval": out / "eval", "label_input": out / "label_input.jsonl"}
    timings: dict[str, float] = {}
    results: dict[str, Any] = {}
    for stage in STAGES:
        if stage in (cfg.get("skip") or []):
            logger.info("[%s] skipped (skip=%s)", stage, list(cfg.skip))
            continue
        if _done(stage, paths):
            print(f"[{stage}] already done in {out} (delete it to redo)", flush=True)
            continue
        if stage == "label":
            label_subset(paths["data"] / "train.jsonl", paths["label_input"], cfg.label.get("n_episodes"),
                         cfg.label.get("calls_per_episode"))
        name, fn = _stage_main(stage)
        overrides = stage_overrides(cfg, stage, paths)
        print(f"[{stage}] {name} " + " ".join(overrides), flush=True)
        t0 = time.perf_counter()
        res = fn(compose_stage(name, overrides))
        timings[stage] = round(time.perf_counter() - t0, 1)
        print(f"[{stage}] done in {timings[stage]:.0f} s", flush=True)
        if stage == "evaluate":
            results = res
    if not results and (paths["eval"] / "results.json").exists():
        results = json.loads((paths["eval"] / "results.json").read_text())
    return {"results": results, "timings_s": timings, "paths": {k: str(v) for k, v in paths.items()}}


def main(cfg: Any) -> dict[str, Any]:
    """`make demo`: run the pipeline, print the results table and where the files are."""
    from damc.eval.harness import results_table

    t0 = time.perf_counter()
    out = run_pipeline(cfg)
    eval_dir = Path(out["paths"]["eval"])
    if out["results"]:
        print("\n" + results_table(out["results"]))
    print(f"stage times (s): {out['timings_s']}  total: {time.perf_counter() - t0:.0f} s")
    print(f"results: {eval_dir / 'results.json'}\ntable:   {eval_dir / 'results.md'}\nplot:    {eval_dir / 'pareto.png'}")
    return out


def reproduce(profiles: list[str], overrides: list[str] | None = None) -> dict[str, Any]:
    """`make reproduce`: the demo pipeline once per study profile (`configs/experiment/<profile>.yaml`).

    Returns `{profile: {"results", "timings_s", "paths"}}`, prints each results table and writes
    `<out_dir>/report.md`: the README's policy × budget table and the study's targets, checked (`damc.eval.report`).
    """
    from damc.data.episodes import atomic_write_text
    from damc.eval.harness import results_table
    from damc.eval.report import report

    out: dict[str, Any] = {}
    for prof in profiles:
        cfg = compose_stage("demo", [f"+experiment={prof}", *(overrides or [])])
        print(f"=== {prof}: {cfg.out_dir}", flush=True)
        res = run_pipeline(cfg)
        out[prof] = res
        if res["results"]:
            print(results_table(res["results"]), flush=True)
            text = report({prof: res["results"]})
            atomic_write_text(Path(cfg.out_dir) / "report.md", text)
            print(text + f"\nreport: {Path(cfg.out_dir) / 'report.md'}", flush=True)
    return out


if __name__ == "__main__":  # python -m damc.eval.pipelines KEY=VALUE ...  (configs: damc/configs/demo.yaml)
    from damc.cli import run

    run("demo", main)
