"""Learning curves: nested training sets (`data.train_decisions`) and `scripts/learning_curve.py` end to end."""

import json
from pathlib import Path

import pytest

from damc.scorer.train import _first_n_decisions


def test_train_decisions_are_nested_seeded_subsets():
    decisions = [f"d{i}" for i in range(40)]
    sets = {n: _first_n_decisions(decisions, n, seed=0) for n in (5, 10, 20, 40)}
    assert [len(s) for s in sets.values()] == [5, 10, 20, 40]
    assert set(sets[5]) < set(sets[10]) < set(sets[20]) < set(sets[40])   # the 10 hold the 5, ...
    assert sets[10] == [d for d in decisions if d in set(sets[10])]      # original order kept
    assert _first_n_decisions(decisions, 10, seed=0) == sets[10]          # seeded
    assert _first_n_decisions(decisions, 10, seed=1) != sets[10]
    assert _first_n_decisions(decisions, 99, seed=0) == decisions         # more than exist: all of them
    assert _first_n_decisions(decisions, None, seed=0) == decisions


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "10"])
def test_train_decisions_must_be_a_positive_count(bad):
    with pytest.raises(ValueError, match="data.train_decisions"):
        _first_n_decisions(["a", "b"], bad, seed=0)


def _cfg(tmp_path, *extra):
    from damc.pipeline.stages import compose_stage

    return compose_stage("learning_curve", [
        "labels_path=data/samples/scorer_labels_sample.jsonl", "dev=data/samples/synthetic_sample.jsonl",
        f"out_dir={tmp_path / 'curve'}", "sizes=[50,60]",
        "train.overrides=['trainer=tiny','logger=none','model.max_length=96','data.max_cards=6',"
        "'data.dev_fraction=0.34','model.num_layers=1','combiner.enabled=false']",
        "export.overrides=['onnx=true','int8=true','encoder=null']",
        "evaluate.overrides=['data.tool_calls_only=true','budgets=[256]','sweep.top_k=[2]','progress=false','n_boot=20',"
        "'max_decisions=6']",                                            # a seeded sample of each dev set's decisions
        "setting=256/k2", *extra])


@pytest.mark.slow
def test_learning_curve_trains_each_size_once_and_resumes(tmp_path, capsys):
    from damc.pipeline.curve import main

    res = main(_cfg(tmp_path))
    pts = res["points"]
    assert [p["requested"] for p in pts] == [50]                         # 50 > what the labels hold: all, once;
    assert 2 <= pts[0]["train_decisions"] < 50                           # 60 is skipped (same decisions)
    for p in pts:
        assert set(p["dev"]) == {"samples"}                              # a dev file is named by its folder
        d = p["dev"]["samples"]["damc"]
        assert 0 <= d["key_hit"] <= 1 and 0 <= d["candidate_recall"] <= 1 and 1 <= d["n_key_decisions"] <= 6
        assert set(p["dev"]["samples"]) == {"bm25", "similarity", "damc"}
        assert -1 <= p["spearman"] <= 1 and p["heldout_decisions"] >= 1
    out = tmp_path / "curve"
    saved = json.loads((out / "curve.json").read_text())
    assert [p["train_decisions"] for p in saved["points"]] == [p["train_decisions"] for p in pts]
    table = (out / "curve.md").read_text()
    assert table.count("\n| ") == 1 + len(pts)                          # header + one row per point
    assert "Dev `samples`" in table
    assert (out / "curve.png").stat().st_size > 0
    printed = capsys.readouterr().out
    assert f"[curve] N={pts[0]['train_decisions']}: damc key hit" in printed and "sizes above 50 skipped" in printed
    assert main(_cfg(tmp_path))["timings_s"] == {}                       # a rerun: every stage done
    assert set(main(_cfg(tmp_path, "setting=256"))["timings_s"]) == set()  # reading another setting trains nothing
    # a second dev set evaluates the same students on it: no training, one evaluation per point
    two = main(_cfg(tmp_path, "dev=[data/samples/synthetic_sample.jsonl,data/samples/tau2_retail_sample.jsonl]"))
    assert set(two["timings_s"]) == {"evaluate.n50.tau2_retail_sample"}
    assert set(two["points"][0]["dev"]) == {"samples", "tau2_retail_sample"}
    assert (out / "curve.md").read_text().count("Dev `") == 2


def test_dev_sets_are_named_by_folder_then_stem():
    from damc.pipeline.curve import dev_sets

    assert dev_sets("runs/s/data/tau2_retail/dev.jsonl") == {"tau2_retail": Path("runs/s/data/tau2_retail/dev.jsonl")}
    named = dev_sets(["a/syn/dev.jsonl", "a/syn/other.jsonl", "b/syn/other.jsonl"])
    assert list(named) == ["syn", "other", "dev2"]
    with pytest.raises(ValueError, match="at least one"):
        dev_sets([])


def test_labels_digest_changes_when_label_rows_grow(tmp_path):
    from damc.pipeline.curve import labels_digest

    (tmp_path / "shards").mkdir()
    (tmp_path / "shards" / "a.parquet").write_bytes(b"x" * 10)
    d0 = labels_digest(tmp_path)
    (tmp_path / "summary.json").write_text("{}")                       # not label rows
    assert labels_digest(tmp_path) == d0
    (tmp_path / "shards" / "b.parquet").write_bytes(b"y")
    assert labels_digest(tmp_path) != d0


def test_learning_curve_errors_name_the_setting(tmp_path):
    from damc.pipeline.curve import main

    with pytest.raises(ValueError, match="sizes"):
        main(_cfg(tmp_path, "sizes=[0]"))
    with pytest.raises(ValueError, match="must include damc"):
        main(_cfg(tmp_path, "evaluate.policies=[bm25]"))
    with pytest.raises(FileNotFoundError, match="dev="):
        main(_cfg(tmp_path, "dev=nope.jsonl"))
