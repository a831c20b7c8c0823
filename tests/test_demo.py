"""`make demo` end to end on a shrunken profile: data → labels → train → export (ONNX + int8) → evaluate.

The same runner (`damc.eval.pipelines.run_pipeline`) drives `make demo` and `make reproduce`; here every stage runs
for real on a few synthetic episodes, then a second call must skip every finished stage.
"""

import json

import pytest

pytestmark = pytest.mark.slow


def test_demo_pipeline_runs_every_stage_and_resumes(tmp_path, capsys):
    from damc.eval.pipelines import compose_stage, main

    out = tmp_path / "demo"
    cfg = compose_stage("demo", [
        f"out_dir={out}", "data.n_episodes=10", "label.n_episodes=3", "label.calls_per_episode=4",
        "label.overrides=['max_cards=6','max_card_tokens=96','data.tool_calls_only=true']",
        "train.overrides=['trainer=tiny','logger=none','model.max_length=96','data.max_cards=6','data.dev_fraction=0.5']",
        "evaluate.policies=[window,bm25,damc_student,oracle]", "evaluate.budgets=[256]",
        "evaluate.overrides=['max_decisions=2','data.tool_calls_only=true','n_boot=50']"])
    res = main(cfg)
    assert set(res["timings_s"]) == {"data", "label", "train", "export", "evaluate"}
    assert (out / "scorer" / "model_int8.onnx").exists()          # the demo exports the runtime's int8 path
    results = json.loads((out / "eval" / "results.json").read_text())
    assert set(results["policies"]) == {"window@256", "bm25@256", "damc_student@256", "oracle@256"}
    assert all(p["n_decisions"] == 2 for p in results["policies"].values())
    assert (out / "eval" / "pareto.png").stat().st_size > 0
    printed = capsys.readouterr().out
    assert "| damc_student | 256 |" in printed and str(out / "eval" / "pareto.png") in printed

    again = main(cfg)                                              # finished stages are skipped
    assert again["timings_s"] == {"evaluate": again["timings_s"]["evaluate"]}
    assert "[label] already done" in capsys.readouterr().out

    # `make reproduce` = the same runner per study profile, plus the README's report: the profile's stages
    # are already done here (same out_dir), so only the evaluation resumes and the report is written.
    from damc.eval.pipelines import reproduce

    rep = reproduce(["study_synthetic"], [
        f"out_dir={out}", "evaluate.policies=[window,bm25,damc_student,oracle]", "evaluate.budgets=[256]",
        "evaluate.overrides=['max_decisions=2','data.tool_calls_only=true','n_boot=50']"])
    assert rep["study_synthetic"]["results"]["policies"].keys() == results["policies"].keys()
    report = (out / "report.md").read_text()
    assert report.startswith("### study_synthetic") and "| **damc_student** |" in report
    assert "| 256 |" in report and "≥ +15 pts vs window" in report
    assert f"report: {out / 'report.md'}" in capsys.readouterr().out
