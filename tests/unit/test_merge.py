"""Joining the records of several harness runs (`damc.eval.merge`) and splitting a run into shards
(`damc.eval.harness.shard_decisions`): which run each decision's records come from, what is refused, and that shards
are disjoint whole episodes that add up to the run. The end-to-end check (shards of a real run merged back equal
the run) is in tests/e2e/test_evaluate.py."""

import json
from types import SimpleNamespace

import pytest

from damc.eval.harness import shard_decisions
from damc.eval.merge import MergeError, choose_sources, load_run, merge_runs


def _rec(decision: str, policy: str, source: str, **extra) -> dict:
    return {"policy": policy, "setting": "1024", "decision_id": decision, "episode_id": decision.split(":")[0],
            "index": int(decision.split(":")[1]), "source": source, "decision_llm": "qwen2.5-coder-1.5b",
            "failed": False, **extra}


def _run(tmp_path, name: str, records: list[dict], config: dict | None = None):
    d = tmp_path / name
    d.mkdir()
    (d / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    if config is not None:
        (d / "results.json").write_text(json.dumps({"config": config}))
    return d


def test_each_decision_comes_from_one_run_the_first_complete_else_the_fullest():
    gpu = [_rec("e1:3", p, "gpu") for p in ("window", "damc", "oracle")] + [_rec("e2:5", "window", "gpu")]
    cpu = ([_rec("e1:3", p, "cpu") for p in ("window", "damc", "oracle")]
           + [_rec("e2:5", p, "cpu") for p in ("window", "damc")] + [_rec("e3:1", "window", "cpu")])
    chosen, taken, left_out = choose_sources([gpu, cpu])
    by = {(r["decision_id"], r["policy"]): r["source"] for r in chosen}
    # e1: both complete, the first run given wins; e2: only the CPU run holds both of its policies; e3: CPU only
    assert by == {("e1:3", "window"): "gpu", ("e1:3", "damc"): "gpu", ("e1:3", "oracle"): "gpu",
                  ("e2:5", "window"): "cpu", ("e2:5", "damc"): "cpu", ("e3:1", "window"): "cpu"}
    assert taken == [1, 2]
    assert left_out == 3 + 1          # e1's three CPU records and e2's lone GPU record
    # no two runs' numerics in one decision, and no (policy, setting, decision) twice
    assert len({(r["policy"], r["setting"], r["decision_id"]) for r in chosen}) == len(chosen)
    for d in {r["decision_id"] for r in chosen}:
        assert len({r["source"] for r in chosen if r["decision_id"] == d}) == 1
    # a tie in the number of policies held goes to the run given first
    chosen, taken, _ = choose_sources([[_rec("e9:1", "window", "a")], [_rec("e9:1", "damc", "b")]])
    assert [r["source"] for r in chosen] == ["a"] and taken == [1, 0]


def test_runs_of_different_decision_models_or_data_are_refused(tmp_path):
    a = _run(tmp_path, "a", [_rec("e1:3", "window", "a")], {"data_digest": "d1"})
    b = _run(tmp_path, "b", [_rec("e1:3", "window", "b", decision_llm="smollm2-135m")], {"data_digest": "d1"})
    with pytest.raises(MergeError, match=r"decision LLM .*qwen2\.5-coder-1\.5b.*smollm2-135m"):
        merge_runs([a, b], tmp_path / "out")
    c = _run(tmp_path, "c", [_rec("e1:3", "damc", "c")], {"data_digest": "d2"})
    with pytest.raises(MergeError, match=r"data file .*d1.*d2"):
        merge_runs([a, c], tmp_path / "out")
    e = _run(tmp_path, "e", [_rec("e1:3", "damc", "e")], {"data_digest": "d1", "scorer_digest": "s2"})
    f = _run(tmp_path, "f", [_rec("e1:4", "damc", "f")], {"data_digest": "d1", "scorer_digest": "s1"})
    with pytest.raises(MergeError, match=r"scorer files .*s2.*s1"):
        merge_runs([e, f], tmp_path / "out")
    assert not (tmp_path / "out").exists()             # refused before anything is written
    with pytest.raises(MergeError, match="one of the runs"):
        merge_runs([a, c], a)
    with pytest.raises(MergeError, match="no records.jsonl"):
        merge_runs([a, tmp_path], tmp_path / "out")
    # a record that does not name its model, in a run without results.json: cannot tell, so refused
    old = _run(tmp_path, "old", [{k: v for k, v in _rec("e1:3", "window", "o").items() if k != "decision_llm"}])
    with pytest.raises(MergeError, match="does not name its decision LLM"):
        merge_runs([old], tmp_path / "out")
    failed = _run(tmp_path, "failed", [_rec("e1:3", "window", "f", failed=True)])
    with pytest.raises(MergeError, match="no successful record"):
        merge_runs([failed], tmp_path / "out")


def _decisions(episodes: dict[str, int]) -> list:
    return [SimpleNamespace(dp=SimpleNamespace(episode=SimpleNamespace(episode_id=e), index=i), name=f"{e}:{i}")
            for e, n in episodes.items() for i in range(n)]


def test_a_run_stopped_before_its_results_is_checked_and_described_by_its_run_config(tmp_path):
    """A run stopped by its time limit has records but no results.json; the run_config.json the harness writes as
    it starts names its data, scorer and hardware: the merge checks them and the merged results carry them."""
    from damc.eval.records import RUN_CONFIG

    done = _run(tmp_path, "done", [_rec("e1:3", "window", "done")],
                {"data_digest": "d1", "data": {"path": "test.jsonl"}, "decision_llm": "qwen2.5-coder-1.5b"})
    stopped = _run(tmp_path, "stopped", [_rec("e2:5", "window", "stopped")])
    (stopped / RUN_CONFIG).write_text(json.dumps({"config": {"data_digest": "d2"}}))
    with pytest.raises(MergeError, match=r"data file .*d1.*d2"):       # the stopped run's digest: its run_config
        merge_runs([done, stopped], tmp_path / "out")
    alone = _run(tmp_path, "alone", [_rec("e2:5", "window", "alone")])
    (alone / RUN_CONFIG).write_text(json.dumps({"config": {"data_digest": "d1", "hardware": {"cuda": "NVIDIA H100"}}}))
    assert load_run(alone)[0]["hardware"] == {"cuda": "NVIDIA H100"}    # the merged table's header reads it
    (alone / "results.json").write_text(json.dumps({"config": {"data_digest": "d1", "hardware": {"cuda": None}}}))
    assert load_run(alone)[0]["hardware"] == {"cuda": None}             # results.json, once written, comes first
    (alone / "results.json").write_text("{")
    with pytest.raises(MergeError, match="results.json: not valid JSON"):
        load_run(alone)


def test_shards_are_disjoint_whole_episodes_that_add_up_to_the_run():
    ds = _decisions({"e1": 3, "e2": 1, "e3": 4, "e4": 2, "e5": 2})
    parts = [shard_decisions(ds, i, 3) for i in range(3)]
    names = [[d.name for d in p] for p in parts]
    assert sorted(n for p in names for n in p) == sorted(d.name for d in ds)          # together: the run
    assert sum(len(p) for p in names) == len(ds)                                      # disjoint
    episodes = [{d.dp.episode.episode_id for d in p} for p in parts]
    assert episodes == [{"e1", "e4"}, {"e2", "e5"}, {"e3"}]                          # round-robin, whole episodes
    assert shard_decisions(ds, 0, 1) is ds
    for bad in ((3, 3), (-1, 2), (0, 0)):
        with pytest.raises(ValueError, match=r"0 <= index < count"):
            shard_decisions(ds, *bad)
