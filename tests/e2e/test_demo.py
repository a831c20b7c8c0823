"""`make demo` and `make reproduce` end to end on shrunken profiles, every stage for real.

`make demo` (`damc.pipeline.stages`): data → labels → train → export (ONNX + int8) → evaluate on a few synthetic
episodes; a second call skips every finished stage (same fingerprints), a changed setting reruns from its stage.
`make reproduce` (`damc.pipeline.reproduce`): the test-sized τ²-bench profile (`study_tau2_tiny`, `study_tau2_small` with
fewer teacher and decision-LLM passes): tau2 retail replayed, labelled, one student, dev sweep → operating points →
test, report.md — then a rerun does nothing; a second decision LLM and a learning curve add only their own stages.
"""

import json
import re

import pytest

pytestmark = pytest.mark.slow


def test_demo_pipeline_runs_every_stage_and_resumes(tmp_path, capsys):
    from damc.pipeline.stages import compose_stage, main

    out = tmp_path / "demo"
    overrides = [
        f"out_dir={out}", "data.n_episodes=10", "label.n_episodes=2", "label.calls_per_episode=4",
        "label.overrides=['data.tool_calls_only=true','memory.max_candidates=2']",     # the teacher's passes: the cost
        "train.overrides=['trainer=tiny','logger=none','model.max_length=96','data.max_cards=6','data.dev_fraction=0.5']",
        "evaluate.policies=[window,bm25,damc,oracle]", "evaluate.budgets=[256]",
        "evaluate.overrides=['max_decisions=1','data.tool_calls_only=true','n_boot=50']"]
    res = main(compose_stage("demo", overrides))
    assert set(res["timings_s"]) == {"data", "label", "train", "export", "evaluate"}
    assert (out / "scorer" / "model_int8.onnx").exists()          # the demo exports the runtime's int8 path
    results = json.loads((out / "eval" / "results.json").read_text())
    assert set(results["policies"]) == {"window@256", "bm25@256", "damc@256", "oracle@256"}
    assert all(p["n_decisions"] == 1 for p in results["policies"].values())
    assert (out / "eval" / "pareto.png").stat().st_size > 0
    printed = capsys.readouterr().out
    assert re.search(r"\| damc( ◆)? \| 256 \|", printed) and str(out / "eval" / "pareto.png") in printed  # ◆: on the front
    assert "[1/5] data" in printed and "[5/5] evaluate" in printed   # one line per stage, with its time

    again = main(compose_stage("demo", overrides))                 # finished stages are skipped
    assert again["timings_s"] == {}
    assert "done earlier (same settings" in capsys.readouterr().out
    # another budget, selection only (no decision-LLM pass: the scoring path ran above)
    changed = main(compose_stage("demo", overrides + [
        "evaluate.budgets=[128]", "evaluate.overrides=['max_decisions=2','data.tool_calls_only=true','score=false']"]))
    assert set(changed["timings_s"]) == {"evaluate"}               # only the changed stage reruns
    again = json.loads((out / "eval" / "results.json").read_text())["policies"]
    assert set(again) == {"window@128", "bm25@128", "damc@128", "oracle@128"}
    assert all(p["n_decisions"] == 2 for p in again.values())
    recs = [json.loads(x) for x in (out / "eval" / "records.jsonl").read_text().splitlines() if x.strip()]
    assert len([r for r in recs if r["setting"] == "128"]) == 4 * 2
    assert all(r["history_tokens"] <= 128 and r["gold_logprob"] is None for r in recs if r["setting"] == "128")


TINY = "experiment=study_tau2_tiny"   # study_tau2_small with fewer teacher and decision-LLM passes: the same stages


@pytest.fixture(scope="module")
def tau2_study(tmp_path_factory):
    """The reduced τ² study run once; the tests below add their own stages to its out_dir (each runs only those)."""
    pytest.importorskip("tau2")
    from damc.pipeline.reproduce import run_study
    from damc.pipeline.stages import compose_stage

    out_dir = tmp_path_factory.mktemp("study")
    cfg = compose_stage("study", [TINY, f"out_dir={out_dir}"])
    return out_dir, cfg, run_study(cfg)


def test_the_small_tau2_study_runs_end_to_end_and_resumes(tau2_study):
    from damc.pipeline.reproduce import run_study

    tmp_path, cfg, out = tau2_study
    assert set(out["timings_s"]) == {"data.tau2_retail", "label.tau2_retail", "train", "export",
                                     "evaluate.tau2_retail.dev", "evaluate.tau2_retail.test"}
    res = out["evaluations"]["tau2_retail"]["results"]
    assert {"window@512", "bm25@512", "bm25@512/k2", "damc@512", "damc@512/k2", "oracle@512"} <= set(res["policies"])
    assert {p["n_decisions"] for p in res["policies"].values()} == {2}          # the test split's max_decisions
    ops = json.loads((tmp_path / "eval" / "tau2_retail" / "test" / "operating_points.json").read_text())
    # every profile runs `full` and `rrf` (issue 31): the unlearned baseline each learned policy is judged against
    assert ops["chosen_on"] == "tau2_retail" and set(ops["points"]) == {"window", "full", "bm25", "rrf", "damc", "oracle"}
    dev = json.loads((tmp_path / "eval" / "tau2_retail" / "dev" / "results.json").read_text())
    assert {p["n_decisions"] for p in dev["policies"].values()} == {1}          # the profile's dev_overrides
    labels = json.loads((tmp_path / "labels" / "tau2_retail" / "summary.json").read_text())
    assert labels["planned_decisions"] == 4 and 0 < labels["cards"] <= 2 * labels["decisions"]   # max_candidates=2
    report = (tmp_path / "report.md").read_text()
    assert report.startswith("### tau2_retail") and "rrf" in report and "operating point (chosen on the dev split)" in report
    assert "Pareto front" in report and "Stage times" in report and "| **damc** |" in report
    assert run_study(cfg)["timings_s"] == {}                        # a rerun: every stage done with these settings


def test_a_second_decision_llm_runs_only_its_own_stage(tau2_study):
    """A second decision LLM on a seeded subset: only its stage runs; the report gets its own section."""
    from damc.pipeline.reproduce import run_study
    from damc.pipeline.stages import compose_stage

    tmp_path, _, _ = tau2_study
    cfg2 = compose_stage("study", [TINY, f"out_dir={tmp_path}", "second_llm.model=smollm2-135m",
                                   "second_llm.max_decisions=1", "second_llm.policies=[window,damc]"])
    out2 = run_study(cfg2)
    assert set(out2["timings_s"]) == {"evaluate.tau2_retail.test.smollm2-135m"}
    sec = out2["evaluations"]["tau2_retail · smollm2-135m"]
    assert {p["n_decisions"] for p in sec["results"]["policies"].values()} == {1}   # not the test split's 2
    assert {k.split("@")[0] for k in sec["results"]["policies"]} == {"window", "damc"}
    assert set(sec["operating"]) == {"window", "damc"}
    assert "### tau2_retail · smollm2-135m" in (tmp_path / "report.md").read_text()
    with pytest.raises(KeyError, match="second_llm.datasets"):
        run_study(compose_stage("study", [TINY, f"out_dir={tmp_path}",
                                          "second_llm.model=smollm2-135m", "second_llm.datasets=[synthetic]"]))


def test_the_learning_curve_on_the_study_labels(tau2_study):
    """A smaller student is trained on the study's labels; the study's own is the last point."""
    from damc.pipeline.reproduce import run_study
    from damc.pipeline.stages import compose_stage

    tmp_path, _, _ = tau2_study
    curve = [TINY, f"out_dir={tmp_path}", "curve.sizes=[2,999]", "curve.dev=[tau2_retail]",
             "curve.overrides=['data.tool_calls_only=true','budgets=[512]','sweep.top_k=[2]','progress=false','n_boot=20']",
             "curve.setting=512/k2"]    # every dev decision: a small seeded sample may hold no key decision to score
    out3 = run_study(compose_stage("study", curve))
    assert set(out3["timings_s"]) == {"evaluate.all.tau2_retail", "train.n2", "export.n2", "evaluate.n2.tau2_retail"}
    saved = json.loads((tmp_path / "curve" / "curve.json").read_text())
    sizes = [p["train_decisions"] for p in saved["points"]]
    study_n = json.loads((tmp_path / "run" / "metrics.json").read_text())["split"]["train_decisions"]
    assert sizes == [2, study_n] and study_n > 2                    # 999 > what the labels hold: the study's point
    assert set(saved["points"][0]["dev"]["tau2_retail"]) == {"bm25", "similarity", "damc"}
    text = (tmp_path / "report.md").read_text()
    assert "## Learning curve" in text and "Dev `tau2_retail`" in text and (tmp_path / "curve" / "curve.png").exists()
    assert run_study(compose_stage("study", curve))["timings_s"] == {}
    with pytest.raises(ValueError, match="curve.dev"):
        run_study(compose_stage("study", curve[:2] + ["curve.sizes=[2]", "curve.dev=[synthetic]"]))


def test_a_stage_made_with_another_render_version_is_not_reused(monkeypatch):
    """Labels, scorers and evaluations depend on the query/card rendering: a new RENDER_VERSION reruns them."""
    from omegaconf import OmegaConf

    import damc.query
    from damc.pipeline.stages import fingerprint

    cfg = OmegaConf.create({"out_dir": "x", "estimator": {"name": "loi"}})
    now = fingerprint("label", cfg, "before")
    assert fingerprint("label", cfg, "before") == now
    monkeypatch.setattr(damc.query, "RENDER_VERSION", "0-older")
    assert fingerprint("label", cfg, "before") != now


def test_a_label_stage_rerun_over_labels_of_other_settings_labels_afresh(tmp_path, capsys):
    """After an upgrade (e.g. a new render version) `make demo` reruns its label stage into the same directory:
    labels of other settings there are replaced (said on the console); labels of the same settings resume."""
    from damc.pipeline.stages import compose_stage, relabel_if_stale
    from damc.teacher.label import _fingerprint, labels_made_with_other_settings

    out = tmp_path / "labels"
    cfg = compose_stage("label", [f"data.path={tmp_path / 'train.jsonl'}", f"out_dir={out}"])
    assert not labels_made_with_other_settings(cfg)                         # nothing there yet
    out.mkdir()
    (out / "label_config.json").write_text(json.dumps(_fingerprint(cfg)))
    relabel_if_stale(cfg)
    assert cfg.overwrite is False and "afresh" not in capsys.readouterr().out   # same settings: resume
    (out / "label_config.json").write_text(json.dumps({**_fingerprint(cfg), "render_version": "0-older"}))
    relabel_if_stale(cfg)
    assert cfg.overwrite is True and "labelling afresh" in capsys.readouterr().out
