"""The prepared GPU study (`scripts/device_study.sh`, `configs/experiment/device_study.yaml`): its plan composes
every stage with the current configs (so it cannot rot unseen between GPU sessions), it judges the shipped scorer
with no training, and on a machine without CUDA it refuses to start unless told to run on the CPU."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from damc.pipeline.reproduce import run_study
from damc.pipeline.stages import compose_stage
from damc.runtime.default_scorer import default_scorer_dir

ROOT = Path(__file__).resolve().parents[2]
SETS = ["synthetic", "bfcl_long_context", "tau2_airline", "tau2_telecom", "tau2_retail"]


def _script(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "scripts/device_study.sh", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PY": sys.executable, "OUT": str(tmp_path / "ds"), **env})


def test_the_device_study_plan_composes_and_judges_the_shipped_scorer(tmp_path):
    out = _script(tmp_path, "shard.index=1", "shard.count=2", DRY_RUN="1", MERGE_WITH=str(tmp_path / "cpu0"))
    assert out.returncode == 0, out.stderr[-3000:]
    plan = {line[1:].split("] ")[0]: line.split("] ", 1)[1] for line in out.stdout.splitlines()
            if line.startswith("[")}
    assert list(plan) == ([f"data.{d}" for d in SETS] + ["label.tau2_retail"]
                          + [f"evaluate.{d}.test" for d in SETS])        # no training, no export, no dev sweep
    assert "teacher.model=qwen2.5-coder-1.5b" in plan["label.tau2_retail"]
    for d in SETS:
        ev = plan[f"evaluate.{d}.test"].split()
        for o in ("filters.memory_only=true", "sweep.top_k=[4]", "llm.model=qwen2.5-coder-1.5b", "shard.index=1", "shard.count=2",
                  f"scorer={default_scorer_dir()}", "labels_path=null",
                  f"out_dir={tmp_path / 'ds' / 'eval' / d / 'test'}"):
            assert o in ev, (d, o)
        assert (f"would merge: {sys.executable} scripts/merge_records.py {tmp_path}/ds/eval/{d}/test "
                f"{tmp_path}/cpu0/eval/{d}/test --out {tmp_path}/ds/merged/{d}") in out.stdout
    assert [p.name for p in (tmp_path / "ds").iterdir()] == ["hydra"]  # a dry run writes only Hydra's own log

    # another decision model by override, as the script's usage says
    out = _script(tmp_path, "decision_model=qwen2.5-coder-0.5b", DRY_RUN="1")
    assert out.returncode == 0 and "llm.model=qwen2.5-coder-0.5b" in out.stdout and "1.5b" not in out.stdout


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="this machine has CUDA: the script would run")
def test_the_device_study_refuses_a_machine_without_cuda(tmp_path):
    out = _script(tmp_path)
    assert out.returncode == 2 and "no CUDA device" in out.stderr and "ALLOW_CPU=1" in out.stderr
    assert not (tmp_path / "ds").exists()


def test_a_named_student_must_be_an_exported_scorer(tmp_path):
    cfg = compose_stage("study", ["experiment=device_study", f"out_dir={tmp_path}", f"student={tmp_path}",
                                  "dry_run=true"])
    with pytest.raises(FileNotFoundError, match=r"no damc_scorer\.json there.*scripts/export\.py"):
        run_study(cfg)


def test_a_changed_student_reruns_the_evaluations(tmp_path):
    """The named scorer's files join the stage fingerprint chain: a new default scorer is evaluated again rather
    than found done."""
    import shutil

    from damc.pipeline.study import Study

    student = tmp_path / "student"
    shutil.copytree(default_scorer_dir(), student)

    def chain() -> str:
        study = Study(compose_stage("study", ["experiment=device_study", f"out_dir={tmp_path / 'out'}",
                                              f"student={student}"]), dry_run=True)
        study.data()
        study.labels()
        study.evaluate(study.given_student(), None)
        return study.before

    first = chain()
    assert chain() == first                                   # same files: the same chain (stages found done)
    meta = student / "damc_scorer.json"
    meta.write_text(meta.read_text().replace('"threshold"', '"threshold" ', 1))
    assert chain() != first
