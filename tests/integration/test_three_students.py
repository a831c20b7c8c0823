"""scripts/three_students.sh (issue 32 item 3): the plan labels the same decisions three ways, trains every student
with one recipe and judges each beside the baselines — checked on its dry run, no model loaded."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _plan(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "scripts/three_students.sh"], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "OUT": str(tmp_path / "three"), **env}, timeout=60)


def test_the_plan_labels_the_same_decisions_and_trains_every_student_with_one_recipe(tmp_path):
    out = _plan(tmp_path, DRY_RUN="1", LAMBDAS="auto 0.5")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    labels = [ln for ln in lines if "scripts/label.py" in ln]
    assert len(labels) == 4
    # teacher and grounded runs of a split differ only in the estimator and the output directory
    def strip(ln: str) -> str:
        return re.sub(r" (estimator=grounded|out_dir=\S+)", "", ln)
    syn = [strip(ln) for ln in labels if "synthetic/train" in ln]
    assert len(syn) == 2 and syn[0] == syn[1] and "per_episode=2" in syn[0]
    train = [ln for ln in lines if "scripts/train.py" in ln]
    students = [re.search(r"out_dir=\S+/run_(\S+)", ln).group(1) for ln in train]
    assert students == ["grounded", "teacher", "hybrid", "hybrid_l0.5"]
    recipes = {re.sub(r" (data\.labels|out_dir)=\S+", "", ln) for ln in train}
    assert len(recipes) == 1  # one recipe
    hyb = [ln for ln in lines if "hybrid_labels.py" in ln]
    assert any("--lam auto" in ln for ln in hyb) and any("--lam 0.5" in ln for ln in hyb)
    evals = [ln for ln in lines if "scripts/evaluate.py" in ln]
    assert len(evals) == 6
    for ln in evals:
        for s in students:
            v = s.replace(".", "_")
            assert f"damc_{v}" in ln and f"scorer_{s}" in ln
        assert "rrf" in ln and "score=false" in ln


def test_missing_training_splits_are_refused_with_the_command_that_makes_them(tmp_path):
    out = _plan(tmp_path, SPLITS=str(tmp_path / "nowhere"))
    assert out.returncode == 2
    assert "make reproduce PROFILE=default_scorer" in out.stderr and "nowhere" in out.stderr
