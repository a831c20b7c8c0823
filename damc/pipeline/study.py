"""The study behind `make reproduce` (`Study`): one student for every dataset, each test split measured through the runtime.

    data (every dataset) → labels (the train splits a profile labels) → train one student on all of them
    → export → learning curve (optional `curve:`: smaller students on nested subsets of the labels, scored on dev)
    → evaluate each dataset (dev sweep → operating points → test) → report.md

Profiles are `damc/configs/study.yaml` (the full study) and `configs/experiment/study_*.yaml` applied to it
(e.g. `study_tau2_small`, the reduced-size τ²-bench profile CI runs). Each stage composes its module's real
config (`damc.pipeline.stages.compose_stage`) and is skipped when a marker with the same fingerprint exists
(`<out_dir>/stages/`), so a changed setting reruns that stage and everything after it; labelling and evaluation
also resume per decision. A dataset without a `label:` entry is one the student never trains on (an unseen
domain); one without a dev split takes its operating points from the dataset named in `dev_from`.

`damc.pipeline.reproduce.run_study` runs every stage in order (and the learning curve, `damc.pipeline.curve`,
which builds on `Study`).

Example:
    $ python scripts/reproduce.py                                   # configs/study.yaml
    $ python scripts/reproduce.py experiment=study_tau2_small out_dir=runs/small
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

from damc.pipeline.stages import (
    compose_stage,
    fingerprint,
    is_done,
    mark_done,
    override_value,
    relabel_if_stale,
    stage_main,
)


def _results(res: dict[str, Any] | None, out_dir: Path) -> dict[str, Any]:
    """An evaluate stage's results: what it returned, or its `results.json` when the stage was done earlier."""
    return res or json.loads((out_dir / "results.json").read_text())


class Study:
    """The stages of one study profile, with their paths and fingerprint chain."""

    def __init__(self, cfg: Any, dry_run: bool = False):
        self.cfg = cfg
        self.dry_run = dry_run   # compose and fingerprint every stage, run none (`damc.pipeline.ship`'s check)
        self.planned: list[tuple[str, list[str]]] = []   # (stage key, overrides) of every stage composed
        self.out = Path(cfg.out_dir)
        self.stages_dir = self.out / "stages"
        self.before = ""
        self.exported = ""
        self.timings: dict[str, float] = {}

    @property
    def datasets(self) -> dict[str, Any]:
        """The datasets of `use`, in order (each must be defined under `datasets`)."""
        missing = [n for n in self.cfg.use if n not in self.cfg.datasets]
        if missing:
            raise KeyError(f"study: use={list(self.cfg.use)} names undefined dataset(s) {missing}; "
                           f"defined: {list(self.cfg.datasets)}")
        return {n: self.cfg.datasets[n] for n in self.cfg.use}

    def data_dir(self, name: str) -> Path:
        return self.out / "data" / name

    def run_stage(self, key: str, config_name: str, overrides: list[str], fn: Any = None) -> Any:
        """Compose, skip when done with the same fingerprint, else run and mark; returns the stage's result."""
        name, main = stage_main(key.split(".")[0])
        stage_cfg = compose_stage(config_name, overrides)
        fp = fingerprint(key, stage_cfg, self.before)
        self.before = fp
        self.planned.append((key, list(overrides)))
        if self.dry_run:
            return None
        if is_done(self.stages_dir, key, fp):
            print(f"[{key}] done earlier (same settings)", flush=True)
            return None
        if config_name == "label":
            relabel_if_stale(stage_cfg)
        t0 = time.perf_counter()
        res = (fn or main)(stage_cfg)
        self.timings[key] = round(time.perf_counter() - t0, 1)
        mark_done(self.stages_dir, key, fp, self.timings[key])
        print(f"[{key}] {self.timings[key]:8.1f} s", flush=True)
        return res

    def data(self) -> None:
        for name, ds in self.datasets.items():
            self.run_stage(f"data.{name}", "make_data", [f"out_dir={self.data_dir(name)}", f"seed={self.cfg.seed}",
                                                         *[str(o) for o in ds.make]])

    def labels(self) -> Path:
        """Label every dataset with a `label:` entry into `labels/<name>`; returns the parent the trainer reads."""
        root = self.out / "labels"
        for name, ds in self.datasets.items():
            if ds.get("label") is None:
                continue
            self.run_stage(f"label.{name}", "label", [f"data.path={self.data_dir(name) / 'train.jsonl'}",
                                                      f"out_dir={root / name}", *self.cfg.label.overrides,
                                                      *[str(o) for o in ds.label]])
        return root

    def label_sets(self, labels: Path) -> list[Path]:
        """The label set of each labelled dataset (`labels/<name>`)."""
        return [labels / name for name, ds in self.datasets.items() if ds.get("label") is not None]

    def train_labels(self, labels: Path) -> str:
        """`data.labels` of the train stage: one label set per training domain when several datasets are labelled
        (the trainer holds out dev episodes in each and chooses the combiner's variant, τ and floor on every
        domain's dev, `damc.scorer.train`), else the labels directory."""
        sets = self.label_sets(labels)
        return override_value([str(p) for p in sets]) if len(sets) > 1 else str(labels)

    def train_export(self, labels: Path) -> Path:
        run, scorer = self.out / "run", self.out / "scorer"
        self.run_stage("train", "train", [f"data.labels={self.train_labels(labels)}", f"out_dir={run}",
                                          f"seed={self.cfg.seed}",
                                          *self.cfg.train.overrides])
        self.run_stage("export", "export", [f"run_dir={run}", f"out={scorer}", *self.cfg.export.overrides])
        self.exported = self.before      # the fingerprint the study's student was exported under
        return scorer

    def given_student(self) -> Path | None:
        """The scorer `student:` names instead of training one (`shipped`: the package's default scorer); None
        when the study trains its own.

        Raises:
            FileNotFoundError: the named directory holds no exported scorer (`damc_scorer.json`).
        """
        name = self.cfg.get("student")
        if not name:
            return None
        path = self._student_path(str(name))
        # the scorer's files join the fingerprint chain: a changed scorer (a new release's default) reruns the
        # evaluation stages instead of finding them done
        from damc.eval.records import file_digest

        self.before = hashlib.sha256(f"{self.before}|student|{file_digest(path)}".encode()).hexdigest()[:16]
        return path

    @staticmethod
    def _student_path(name: str) -> Path:
        if name == "shipped":
            from damc.runtime.default_scorer import default_scorer_dir

            path = default_scorer_dir()
            if path is None:
                raise FileNotFoundError("study: student=shipped, but this install has no default scorer "
                                        "(damc/assets/scorer): reinstall damc, or name an exported scorer directory")
            return path
        path = Path(name)
        if not (path / "damc_scorer.json").exists():
            raise FileNotFoundError(f"study: student={name}: no damc_scorer.json there; expected a directory "
                                    f"written by scripts/export.py (or `shipped`)")
        return path

    def evaluate(self, scorer: Path, labels: Path | None) -> dict[str, Any]:
        """Each dataset: the dev sweep (when it has a dev split) → operating points → the test split."""
        from damc.episodes import atomic_write_text, load_episodes
        from damc.eval.results import operating_points

        ev, out = self.cfg.evaluate, {}
        common = self._eval_overrides(scorer, labels, ev.policies)
        ops: dict[str, dict[str, str]] = {}
        for name, ds in self.datasets.items():
            extra = [str(o) for o in ds.get("evaluate") or []]
            dev = self.data_dir(name) / "dev.jsonl"
            if ev.dev_sweep and dev.exists() and load_episodes(dev):
                res = self.run_stage(f"evaluate.{name}.dev", "evaluate", [
                    f"data.path={dev}", f"out_dir={self.out / 'eval' / name / 'dev'}", *common, *extra,
                    *[str(o) for o in ev.dev_overrides]])
                ops[name] = {} if self.dry_run else operating_points(_results(res, self.out / "eval" / name / "dev"))
        if self.dry_run and not ev.get("test", True):
            return {}
        if not ev.get("test", True):   # dev splits only (the profile chooses and reports on dev)
            return {f"{name} · dev": {"results": _results(None, self.out / "eval" / name / "dev"), "operating": o}
                    for name, o in ops.items()}
        for name, ds in self.datasets.items():
            extra = [str(o) for o in ds.get("evaluate") or []]
            test_dir = self.out / "eval" / name / "test"
            res = self.run_stage(f"evaluate.{name}.test", "evaluate", [
                f"data.path={self.data_dir(name) / 'test.jsonl'}", f"out_dir={test_dir}", *common, *extra])
            chosen = ops.get(name) or ops.get(ds.get("dev_from") or "") or {}
            if chosen:
                atomic_write_text(test_dir / "operating_points.json", json.dumps(
                    {"chosen_on": name if name in ops else ds.get("dev_from"), "points": chosen}, indent=2))
            out[name] = {"results": {} if self.dry_run else _results(res, test_dir), "operating": chosen}
        out.update(self.second_llm(scorer, labels, out))
        return out

    def _eval_overrides(self, scorer: Path, labels: Path | None, policies: Any) -> list[str]:
        """The evaluate overrides every split of the study shares: scorer, labels, `policies`, budgets, seed."""
        ev = self.cfg.evaluate
        return [f"scorer={scorer}", f"labels_path={labels or 'null'}", f"policies={override_value(policies)}",
                f"budgets={override_value(ev.budgets)}", f"seed={self.cfg.seed}", *[str(o) for o in ev.overrides]]

    def second_llm(self, scorer: Path, labels: Path | None, done: dict[str, Any]) -> dict[str, Any]:
        """`second_llm.model` on a seeded subset of each listed test split (so no conclusion rests on one 135M
        decision LLM): the same runtime path and scorer, fewer policies; reported at the first LLM's operating
        points under the title `<dataset> · <model>`."""
        sec = self.cfg.get("second_llm") or {}
        if not sec.get("model"):
            return {}
        out = {}
        for name in sec.datasets:
            if name not in done:
                raise KeyError(f"study: second_llm.datasets names {name!r}, not one of this run's datasets "
                               f"{list(done)}")
            ds = self.datasets[name]
            slug = str(sec.model).replace("/", "_")
            test_dir = self.out / "eval" / name / f"test_{slug}"
            res = self.run_stage(f"evaluate.{name}.test.{slug}", "evaluate", [
                f"data.path={self.data_dir(name) / 'test.jsonl'}", f"out_dir={test_dir}",
                *self._eval_overrides(scorer, labels, sec.policies), *[str(o) for o in ds.get("evaluate") or []],
                f"llm.model={sec.model}", f"max_decisions={sec.max_decisions}"])
            ops = {p: s for p, s in (done[name]["operating"] or {}).items() if p in sec.policies}
            out[f"{name} · {sec.model}"] = {"results": {} if self.dry_run else _results(res, test_dir),
                                            "operating": ops}
        return out
