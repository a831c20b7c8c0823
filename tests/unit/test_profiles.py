"""Every study profile (`configs/experiment/study_*.yaml`) composes every stage it would run: a typo in a profile's
overrides fails here, not an hour into `python scripts/reproduce.py experiment=...`."""

from pathlib import Path

import pytest

from damc.pipeline.stages import compose_stage
from damc.pipeline.study import Study

PROFILES = sorted(p.stem for p in (Path(__file__).resolve().parents[2] / "damc" / "configs" / "experiment")
                  .glob("study_*.yaml"))


class _DryStudy(Study):
    """Composes each stage's Hydra config as the study would, and runs nothing."""

    def __init__(self, cfg):
        super().__init__(cfg)
        self.composed = {}

    def run_stage(self, key, config_name, overrides, fn=None):
        self.composed[key] = compose_stage(config_name, overrides)


def test_the_study_profiles_are_found():
    assert {"study_cpu", "study_cpu_full", "study_cpu_fields", "study_tau2_small"} <= set(PROFILES)


@pytest.mark.parametrize("profile", PROFILES)
def test_every_study_profile_composes_every_stage(profile, tmp_path):
    cfg = compose_stage("study", [f"experiment={profile}", f"out_dir={tmp_path}"])
    study = _DryStudy(cfg)
    study.data()
    labels = study.labels()
    scorer = study.train_export(labels)
    common = study._eval_overrides(scorer, labels, cfg.evaluate.policies)
    for name, ds in study.datasets.items():
        study.composed[f"evaluate.{name}"] = compose_stage("evaluate", [
            f"data.path={study.data_dir(name) / 'test.jsonl'}", f"out_dir={tmp_path / name}", *common,
            *[str(o) for o in ds.get("evaluate") or []]])
    keys = set(study.composed)
    assert {f"data.{n}" for n in cfg.use} | {f"evaluate.{n}" for n in cfg.use} | {"train", "export"} <= keys
    assert {f"label.{n}" for n, ds in study.datasets.items() if ds.get("label") is not None} <= keys
    sets = [labels / n for n, ds in study.datasets.items() if ds.get("label") is not None]
    want = [str(p) for p in sets] if len(sets) > 1 else str(labels)   # one label set per training domain
    got = study.composed["train"].data.labels
    assert (list(got) if len(sets) > 1 else got) == want
    for name in cfg.use:
        assert study.composed[f"evaluate.{name}"].scorer == str(scorer)
        assert list(study.composed[f"evaluate.{name}"].policies) == list(cfg.evaluate.policies)
    if profile == "study_cpu_fields":   # the teacher, the student and every prompt read field lines
        assert [study.composed[k].render for k in sorted(keys) if k.startswith("label.")] == ["fields", "fields"]
        assert all(list(study.composed[f"evaluate.{n}"].render) == ["fields"] for n in cfg.use)
