"""The A/B harness end to end with real small models: every policy, output files and schema, a failing
policy, resumption after a kill, and the metrics it reports.

The module builds its own tiny pipeline once through the real entry points (`make_data` → `export` of the session's
`train` run on the real teacher label sample, composed from the real Hydra configs and shrunk), so `damc` and
`damc_knn` run on a real exported scorer and real teacher labels. Episodes are short synthetic ones (~1k tokens).
"""

import json
import re
from pathlib import Path

import numpy as np
import pytest
from conftest import LABEL_SAMPLE
from hydra import compose, initialize

from damc.episodes import load_episodes
from damc.eval.metrics import exact_match, multiple_choice
from damc.facts import parse_action
from damc.ranking import bootstrap_ci, paired_bootstrap

ALL_POLICIES = ["full", "window", "obs_mask", "recency", "similarity", "bm25", "rrf", "llm_judge", "generative_agents",
                "heuristic", "damc_knn", "damc", "damc_teacher", "oracle"]
TINY_SYNTH = ("+synthetic.min_messages=10", "+synthetic.max_messages=40", "+synthetic.min_threads=1",
              "+synthetic.max_threads=2", "+synthetic.min_fillers=1", "+synthetic.max_fillers=2",
              "+synthetic.min_kb_articles=1", "+synthetic.max_kb_articles=2")


def _compose(name: str, *overrides: str):
    with initialize(config_path="../../configs", version_base="1.3"):
        return compose(name, overrides=list(overrides))


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory, sample_run) -> dict[str, Path]:
    """Tiny test data through the real `make_data`; the session's scorer run (conftest.sample_run: Hydra `train` on
    the real teacher label sample) exported through the real `export` as torch weights, and that label sample for
    damc_knn. The teacher's labelling through `label` runs in test_teacher_label, the demo and the τ² study; the
    teacher itself runs here in `damc_teacher`."""
    from damc.data.make import main as make_data
    from damc.scorer.export import main as export

    root = tmp_path_factory.mktemp("pipeline")
    make_data(_compose("make_data", "source=synthetic", "n_episodes=10", "seed=5", f"out_dir={root / 'data'}",
                       *TINY_SYNTH))
    export(_compose("export", f"run_dir={sample_run}", f"out={root / 'scorer'}", "onnx=false"))  # torch weights
    return {"root": root, "test": root / "data" / "test.jsonl", "labels": LABEL_SAMPLE, "scorer": root / "scorer"}


def _eval_cfg(p: dict[str, Path], out: Path, *overrides: str):
    return _compose("evaluate", f"data.path={p['test']}", f"scorer={p['scorer']}", f"labels_path={p['labels']}",
                    f"out_dir={out}", "progress=false", "n_boot=200", *overrides)


def _records(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines() if x.strip()]


@pytest.mark.slow
def test_every_policy_end_to_end_writes_results_with_the_schema(pipeline, tmp_path):
    from damc.eval.harness import main

    out = tmp_path / "eval"
    pol = "[" + ",".join(ALL_POLICIES) + "]"
    res = main(_eval_cfg(pipeline, out, f"policies={pol}", "budgets=[192]", "max_decisions=1",
                         "data.tool_calls_only=true", "memory.max_candidates=3"))   # llm_judge, damc_teacher: a pass per card
    for f in ("results.json", "results.md", "pareto.png", "records.jsonl"):
        assert (out / f).stat().st_size > 0, f
    on_disk = json.loads((out / "results.json").read_text())
    assert set(on_disk) == {"policies", "paired", "paired_full", "config", "pareto", "sensitivity", "decision_ids"}
    assert len(on_disk["decision_ids"]) == 1 == len({r["decision_id"] for r in _records(out)})
    assert set(on_disk["policies"]) == {f"{p}@192" for p in ALL_POLICIES}
    for key, e in on_disk["policies"].items():
        assert e["n_failed"] == 0, (key, [r.get("error") for r in _records(out) if r.get("failed")])
        assert e["n_decisions"] == 1
        assert 0.0 <= e["accuracy_ci"][0] <= e["accuracy"] <= e["accuracy_ci"][1] <= 1.0
        for k in ("gold_logprob", "prompt_tokens", "overhead_ms_p50", "llm_ms_p50"):
            assert np.isfinite(e[k]), (key, k)
        assert e["gold_logprob"] < 0
    assert set(on_disk["paired"]) == {f"{p}@192" for p in ALL_POLICIES if p != "window"}
    for p in on_disk["paired"].values():
        assert p["vs"] == "window@192" and len(p["ci"]) == 2 and p["ci"][0] <= p["accuracy_delta"] <= p["ci"][1]
    assert on_disk["config"]["decision_llm"] == "smollm2-135m"
    assert on_disk["pareto"] and all(k.split("@")[0] not in ("oracle", "damc_teacher") for k in on_disk["pareto"])
    recs = _records(out)
    # the budget caps the history; `full` ignores it and costs the most tokens
    assert all(r["history_tokens"] <= 192 for r in recs if r["policy"] != "full")
    pt = {k.split("@")[0]: e["prompt_tokens"] for k, e in on_disk["policies"].items()}
    assert pt["full"] >= max(v for k, v in pt.items() if k != "full")
    # every card policy chose from the runtime's candidate set: the same one for all of them
    cands = {r["decision_id"]: set() for r in recs}
    for r in recs:
        if r["kind"] == "card":
            cands[r["decision_id"]].add((r["n_candidates"], tuple(r["key_in_candidates"])))
            assert len(r["kept_card_ids"]) <= r["n_candidates"]
    assert all(len(v) == 1 for v in cands.values())
    assert re.search(r"\| damc( ◆)? \| 192 \|", (out / "results.md").read_text())   # ◆: on the Pareto front
    assert res["policies"]["damc@192"]["accuracy"] == on_disk["policies"]["damc@192"]["accuracy"]
    # the gold log-likelihood gain is the paired per-token difference of the records themselves
    lpt = {(r["policy"], r["decision_id"]): r["gold_logprob_per_token"] for r in recs}
    dids = sorted({r["decision_id"] for r in recs})
    for ref, table in (("window", "paired"), ("full", "paired_full")):
        want = np.mean([lpt[("damc", d)] - lpt[(ref, d)] for d in dids])
        assert on_disk[table]["damc@192"]["ll_gain"]["mean"] == pytest.approx(want), ref
    assert all(isinstance(r["truncated"], bool) for r in recs if r["policy"] in ("full", "window", "obs_mask"))
    assert all(r["truncated"] is None for r in recs if r["kind"] == "card")
    assert np.isfinite(on_disk["sensitivity"]["mde"]) or on_disk["sensitivity"]["n_comparisons"] == 0


@pytest.mark.slow
def test_damc_in_the_harness_builds_the_prompt_a_user_gets_from_the_runtime(pipeline, tmp_path):
    """The record's prompt is exactly `DecisionAwareMemory(path, scorer=...)`'s context for that decision (selection
    only: a scoring run builds the same prompts, test_selection_only_…)."""
    import hashlib

    from damc.episodes import decision_points
    from damc.eval.harness import main
    from damc.eval.policies import decision_messages
    from damc.models import load_tokenizer
    from damc.runtime.memory import DecisionAwareMemory
    from damc.runtime.select import TopK

    out = tmp_path / "eval"
    main(_eval_cfg(pipeline, out, "policies=[window,damc]", "budgets=[256]", "max_decisions=3",
                   "data.tool_calls_only=true", "score=false"))
    recs = [r for r in _records(out) if r["policy"] == "damc"]
    eps = {ep.episode_id: ep for ep in load_episodes(pipeline["test"])}
    for r in recs:
        ep = eps[r["episode_id"]]
        dp = next(d for d in decision_points(ep) if d.index == r["index"])
        user = DecisionAwareMemory(tmp_path / f"user-{r['decision_id'].replace('@', '_')}", scorer=pipeline["scorer"],
                                   tokenizer=load_tokenizer("smollm2-135m"), session_id=ep.episode_id,
                                   selector=TopK(None))
        ctx = user.build_context(dp.context, ep.tools, budget_tokens=256)
        assert [s.card_id for s in ctx.selected] == r["kept_card_ids"]
        prompt = decision_messages(dp.context, ep.tools, ctx)   # the harness's rendering for its local model
        assert hashlib.sha1(json.dumps(prompt, ensure_ascii=False).encode()).hexdigest() == r["prompt_hash"]
        user.close()


class _Flaky:
    """A message policy that raises on its first real decision (call 2; call 1 is the warm-up)."""

    name, kind, budgeted, needs_gold = "flaky", "message", True, False

    def __init__(self):
        from damc.eval.policies import WindowPolicy

        self.inner, self.calls = WindowPolicy(), 0

    def build(self, view, setting, env, **kw):
        self.calls += 1
        if self.calls == 2:
            raise RuntimeError("boom on purpose")
        return self.inner.build(view, setting, env, **kw)


def test_a_policy_raising_on_one_decision_is_recorded_as_failed_there_only(pipeline, tmp_path, monkeypatch):
    import damc.eval.policies
    from damc.eval.harness import main

    monkeypatch.setitem(damc.eval.policies.POLICIES, "flaky", _Flaky)
    out = tmp_path / "eval"
    res = main(_eval_cfg(pipeline, out, "policies=[window,flaky]", "budgets=[128]", "max_decisions=2"))
    recs = _records(out)
    failed = [r for r in recs if r.get("failed")]
    assert len(failed) == 1 and failed[0]["policy"] == "flaky" and "boom on purpose" in failed[0]["error"]
    e = res["policies"]["flaky@128"]
    assert e["n_failed"] == 1 and e["n_decisions"] == 1
    assert res["policies"]["window@128"]["n_decisions"] == 2 and res["policies"]["window@128"]["n_failed"] == 0
    assert res["paired"]["flaky@128"]["n"] == 1  # paired only on decisions both policies succeeded on


def test_a_killed_run_resumes_and_a_changed_setting_is_never_reused(pipeline, tmp_path, monkeypatch):
    import damc.eval.harness as ev

    out = tmp_path / "eval"
    grid = ("policies=[window,recency]", "budgets=[96,128]")      # a message and a card policy, two settings each
    cfg = _eval_cfg(pipeline, out, *grid, "max_decisions=1")
    first = ev.main(cfg)
    lines = (out / "records.jsonl").read_text().splitlines(keepends=True)
    assert len(lines) == 2 * 2 * 1
    # a kill after 2 records, in the middle of writing the 3rd
    (out / "records.jsonl").write_text("".join(lines[:2]) + lines[2][: len(lines[2]) // 2])
    calls = []
    real = ev.evaluate_unit
    monkeypatch.setattr(ev, "evaluate_unit", lambda u, d, *a, **k: calls.append((u.name, u.key)) or real(u, d, *a, **k))
    second = ev.main(cfg)
    assert len(calls) == len(lines) - 2
    keys = [(r["policy"], r["setting"], r["decision_id"]) for r in _records(out)]
    assert len(set(keys)) == len(lines) == len(keys)
    for k, e in first["policies"].items():
        assert second["policies"][k]["accuracy"] == e["accuracy"]
        assert second["policies"][k]["gold_logprob"] == pytest.approx(e["gold_logprob"], abs=1e-6)
    calls.clear()
    ev.main(cfg)  # a finished run reruns nothing
    assert calls == []
    # a larger sample (of one of the settings) reuses the decisions already recorded and runs only the new ones
    before = {r["decision_id"] for r in _records(out)}
    one = ("policies=[window,recency]", "budgets=[96]")
    bigger = ev.main(_eval_cfg(pipeline, out, *one, "max_decisions=2"))
    assert {e["n_decisions"] for e in bigger["policies"].values()} == {2}
    new_ids = {r["decision_id"] for r in _records(out)} - before
    assert len(new_ids) == 1 and len(calls) == 2 * 1 * len(new_ids)
    calls.clear()
    # another memory setting changes recency's (and window's) fingerprint: nothing old is reused
    ev.main(_eval_cfg(pipeline, out, *one, "max_decisions=1", "memory.recent=3"))
    assert sorted(name for name, _ in calls) == ["recency", "window"]   # the recorded decision, both run again


def test_a_prompt_an_earlier_run_scored_is_not_scored_again(pipeline, tmp_path, monkeypatch):
    """A policy added to a finished run reuses the score of any identical prompt a current record of the same
    decision holds (no forward pass), and scores only the prompts that are new."""
    import damc.eval.harness as ev

    out = tmp_path / "eval"
    variant = f"+policy_options.damc_k={{policy: damc, scorer: {pipeline['scorer']}}}"   # same options: same prompts
    ev.main(_eval_cfg(pipeline, out, "policies=[damc]", "budgets=[1024]", "max_decisions=2", variant))
    first = {(r["decision_id"], r["prompt_hash"]) for r in _records(out)}
    calls = []
    real = ev.multiple_choice
    monkeypatch.setattr(ev, "multiple_choice", lambda *a, **k: calls.append(1) or real(*a, **k))
    res = ev.main(_eval_cfg(pipeline, out, "policies=[damc,damc_k,window]", "budgets=[1024]", "max_decisions=2",
                            variant))
    recs = {(r["policy"], r["decision_id"]): r for r in _records(out)}
    ids = {did for _, did in recs}
    assert len(ids) == 2
    for did in ids:
        a, b = recs[("damc", did)], recs[("damc_k", did)]
        assert b["prompt_hash"] == a["prompt_hash"]
        for k in ("correct", "rank", "gold_logprob", "gold_logprob_per_token", "normalised", "prompt_tokens"):
            assert b[k] == a[k], k
    new = {(r["decision_id"], r["prompt_hash"]) for r in recs.values()} - first
    assert new and len(calls) == len(new)          # window's prompts only: damc_k's were already scored
    assert res["policies"]["damc_k@1024"]["accuracy"] == res["policies"]["damc@1024"]["accuracy"]


def test_sweeps_render_modes_and_variants_run_through_one_memory(pipeline, tmp_path):
    """Every sweep setting is its own prompt from one memory (selection only: `score=false` builds the same prompts
    as a scoring run — test_selection_only_… —, and the settings' operating points are tested in test_report)."""
    from damc.eval.harness import main

    out = tmp_path / "eval"
    res = main(_eval_cfg(pipeline, out, "policies=[window,full,bm25,rrf,damc,damc_k]", "budgets=[1024]", "max_decisions=2",
                         "score=false",
                         "render=[template,raw]", "sweep.top_k=[2]", "sweep.threshold=[0.5]",
                         "sweep.threshold_for.damc=[0.05]",
                         f"+policy_options.damc_k={{policy: damc, scorer: {pipeline['scorer']}}}"))
    base = {"1024", "1024/raw", "1024/k2", "1024/k2/raw"}
    # bm25's values lie in [0, 1]: the shared grid; damc (combiner, nats/token) and its variant: their own grid
    for name, t in (("bm25", "t0.5"), ("rrf", "t0.5"), ("damc", "t0.05"), ("damc_k", "t0.05")):
        want = base | {f"1024/{t}", f"1024/{t}/raw"}
        assert {k.split("@")[1] for k in res["policies"] if k.startswith(name + "@")} == want, name
    assert {k for k in res["policies"] if k.startswith("window@")} == {"window@1024"}
    recs = {(r["policy"], r["setting"], r["decision_id"]): r for r in _records(out)}
    for (pol, setting, did), r in recs.items():
        if setting == "1024/k2":
            free = recs[(pol, "1024", did)]
            assert len(r["kept_card_ids"]) == min(2, len(free["kept_card_ids"]))
            assert set(r["kept_card_ids"]) <= set(free["kept_card_ids"])  # the same valuer's two best
        if pol == "damc_k":  # a variant with the same options is the same policy
            assert r["prompt_hash"] == recs[("damc", setting, did)]["prompt_hash"]
    fulls = [r for r in recs.values() if r["policy"] == "full"]
    assert fulls and all(r["truncated"] is False for r in fulls)   # SmolLM2's 8k window holds these episodes
    assert res["policies"]["full@1024"]["n_truncated"] == 0
    with pytest.raises(KeyError, match="policy_options.nope.policy"):
        main(_eval_cfg(pipeline, tmp_path / "bad", "policies=[nope]", "budgets=[128]"))


def test_selection_only_builds_the_same_prompts_without_the_decision_llm(pipeline, tmp_path, monkeypatch):
    """score=false: the prompts (hashes), kept cards and memory metrics of a scoring run, no LLM weights loaded."""
    import damc.llm
    from damc.eval.harness import main

    common = ("policies=[window,bm25,damc,oracle]", "budgets=[256]", "max_decisions=1", "data.tool_calls_only=true")
    scored = main(_eval_cfg(pipeline, tmp_path / "scored", *common))

    def no_weights(*a, **k):
        raise AssertionError("score=false must not load the decision LLM")

    monkeypatch.setattr(damc.llm.LocalLLM, "__init__", no_weights)
    out = tmp_path / "selection"
    sel = main(_eval_cfg(pipeline, out, *common, "score=false"))
    a = {(r["policy"], r["decision_id"]): r for r in _records(tmp_path / "scored")}
    b = {(r["policy"], r["decision_id"]): r for r in _records(out)}
    assert set(a) == set(b) and len(b) == 4 * 1
    for k, r in b.items():
        assert not r["failed"] and r["correct"] is None and r["gold_logprob"] is None
        for f in ("prompt_hash", "prompt_tokens", "kept_card_ids", "key_in_candidates", "confuser"):
            assert r[f] == a[k][f], (k, f)
    for key, e in sel["policies"].items():
        assert np.isnan(e["accuracy"]) and e["n_decisions"] == 1
        for f in ("key_hit", "candidate_recall", "prompt_tokens"):
            if f in scored["policies"][key]:
                assert e[f] == scored["policies"][key][f], (key, f)
    assert "tokenizer only" in sel["config"]["decision_llm"]
    # selection-only records are never taken for scored ones (and the other way round)
    monkeypatch.undo()
    calls = []
    import damc.eval.harness as ev
    real = ev.evaluate_unit
    monkeypatch.setattr(ev, "evaluate_unit", lambda u, d, *x, **k: calls.append(u.name) or real(u, d, *x, **k))
    ev.main(_eval_cfg(pipeline, out, *common, "policies=[window]"))
    assert calls == ["window"] * 1
    with pytest.raises(ValueError, match="damc_teacher"):
        main(_eval_cfg(pipeline, tmp_path / "bad", "policies=[window,damc_teacher]", "score=false"))


@pytest.mark.slow
def test_shards_of_a_run_merge_back_into_that_run(pipeline, tmp_path):
    """`shard.index`/`shard.count` split a run between machines; `merge_runs` joins them: the same records and the
    same figures as the run made whole (selection only: the memory path, no decision LLM), and a decision recorded
    by two runs is taken from one of them only."""
    from damc.eval.harness import main
    from damc.eval.merge import merge_runs

    common = (f"data.path={pipeline['root'] / 'data' / 'train.jsonl'}", f"scorer={pipeline['scorer']}",
              "policies=[window,bm25,damc,oracle]", "budgets=[256]", "data.tool_calls_only=true", "score=false",
              "max_decisions=8", "progress=false", "n_boot=200")
    whole = main(_compose("evaluate", f"out_dir={tmp_path / 'whole'}", *common))
    for i in range(3):
        main(_compose("evaluate", f"out_dir={tmp_path / f's{i}'}", *common, f"shard.index={i}", "shard.count=3"))
    key = lambda r: (r["policy"], r["setting"], r["decision_id"])  # noqa: E731
    shards = [{key(r): r for r in _records(tmp_path / f"s{i}")} for i in range(3)]
    everything = {key(r): r for r in _records(tmp_path / "whole")}
    assert all(shards) and sum(map(len, shards)) == len(everything) == 4 * 8
    assert set().union(*shards) == set(everything)
    episodes = [{r["episode_id"] for r in s.values()} for s in shards]
    assert not (episodes[0] & episodes[1] or episodes[0] & episodes[2] or episodes[1] & episodes[2])

    merged = merge_runs([tmp_path / f"s{i}" for i in range(3)], tmp_path / "merged", n_boot=200)
    got = {key(r): r for r in _records(tmp_path / "merged")}
    assert set(got) == set(everything)
    for k, r in got.items():
        for f in ("prompt_hash", "kept_card_ids", "key_in_candidates", "prompt_tokens", "llm_setup"):
            assert r[f] == everything[k][f], (k, f)
    assert set(merged["policies"]) == set(whole["policies"])
    for name, e in whole["policies"].items():
        for f in ("key_hit", "candidate_recall", "prompt_tokens", "n_decisions"):
            assert merged["policies"][name][f] == e[f], (name, f)
    info = json.loads((tmp_path / "merged" / "merge.json").read_text())
    assert info["records"] == 32 and info["records_left_out"] == 0
    assert [s["decisions_taken"] for s in info["sources"]] == [len(s) // 4 for s in shards]
    assert "shard" not in merged["config"] and merged["config"]["data_digest"] == whole["config"]["data_digest"]

    # a run stopped before its results (a time limit) is still described by the run_config.json it wrote first
    (tmp_path / "s2" / "results.json").unlink()
    merge_runs([tmp_path / "s2"], tmp_path / "partial", n_boot=200)
    head = (tmp_path / "partial" / "results.md").read_text().splitlines()[2]
    assert head.startswith(f"data: `{pipeline['root'] / 'data' / 'train.jsonl'}` · decision LLM: `") and "None" not in head

    # the whole run again with one shard: the shard's decisions come from the whole run (given first), once each
    merge_runs([tmp_path / "whole", tmp_path / "s1"], tmp_path / "again", n_boot=200)
    again = _records(tmp_path / "again")
    assert len(again) == len({key(r) for r in again}) == 32
    info = json.loads((tmp_path / "again" / "merge.json").read_text())
    assert info["records_left_out"] == len(shards[1]) and info["sources"][1]["decisions_taken"] == 0


def test_field_lines_carry_the_values_the_template_drops_into_the_prompt(tmp_path):
    """render=fields through the runtime on real τ²-bench retail episodes (selection only): the oracle's prompt
    holds every history-only value of the gold, the template's loses some; the prompt-level metrics are recorded
    per decision and aggregated, and the results table shows them."""
    from damc.eval.renders import compare

    out = tmp_path / "fields"
    printed = compare(out, ["data.path=data/samples/tau2_retail_sample.jsonl", "progress=false", "n_boot=50",
                            "score=false", "policies=[window,oracle]", "budgets=[2048]", "data.tool_calls_only=true"])
    assert (out / "renders.md").read_text() == printed + "\n"
    res = json.loads((out / "results.json").read_text())
    recs = _records(out)
    vr = [r for r in recs if r["value_recall"] is not None]
    assert vr and all(0.0 <= r["value_recall"] <= 1.0 for r in vr)
    assert any(r["prompt_confuser"] is not None for r in recs)
    fields, tpl = res["policies"]["oracle@2048/fields"], res["policies"]["oracle@2048"]
    assert fields["value_recall"] == 1.0 and fields["all_values"] == 1.0
    assert tpl["value_recall"] < fields["value_recall"] and tpl["n_value_decisions"] == fields["n_value_decisions"]
    assert set(res["policies"]) == {"window@2048", "oracle@2048", "oracle@2048/fields"}
    table = (out / "results.md").read_text()
    assert "| value recall | all values | prompt confuser |" in table
    # the render A/B table (scripts/compare_renders.py) pairs each template row with its fields row
    from damc.eval.renders import table as renders_table

    rows = {ln.split(" | ")[0].lstrip("| "): ln for ln in renders_table(out).splitlines() if ln.startswith("| oracle")}
    (row,) = rows.values()
    assert row.startswith("| oracle@2048 | ") and f"| {tpl['value_recall']:.2f} → 1.00 ({tpl['n_value_decisions']}) |" in row


# ----------------------------------------------------------------------------- metrics

def test_mc_accuracy_uses_length_normalised_logprobs():
    # gold: total -0.6 over 2 tokens (-0.3 each); distractor: total -0.5 in 1 token. Totals would pick the
    # distractor; per-token means pick the gold.
    mc = multiple_choice([np.array([-0.3, -0.3]), np.array([-0.5])])
    assert mc.correct and mc.rank == 1
    assert not multiple_choice([np.array([-0.5, -0.5]), np.array([-0.4])]).correct
    mc = multiple_choice([np.array([-0.5, -0.5]), np.array([-0.6, -0.9])])
    assert mc.correct and mc.gold_logprob == pytest.approx(-1.0) and mc.gold_logprob_per_token == pytest.approx(-0.5)
    assert not multiple_choice([np.array([-1.0]), np.array([-1.0])]).correct  # a tie is not a win


def test_bootstrap_intervals_cover_the_estimate_and_paired_delta_is_exact():
    rng = np.random.default_rng(0)
    x = rng.integers(0, 2, 200)
    lo, hi = bootstrap_ci(x, np.mean, n_boot=500)
    assert lo < x.mean() < hi and hi - lo < 0.2
    pb = paired_bootstrap([1, 1, 1, 0], [0, 1, 0, 0], n_boot=500)
    assert pb["delta"] == pytest.approx(0.5) and pb["n"] == 4 and pb["ci"][0] <= 0.5 <= pb["ci"][1]
    with pytest.raises(ValueError):
        paired_bootstrap([1, 0], [1])
    # clustered decisions: 10 episodes of 20 identical decisions each carry the information of 10, not 200
    y = np.repeat(rng.integers(0, 2, 10), 20)
    eps = np.repeat(np.arange(10), 20)
    naive = bootstrap_ci(y, np.mean, n_boot=1000)
    clustered = bootstrap_ci(y, np.mean, clusters=eps, n_boot=1000)
    assert clustered[1] - clustered[0] > 2 * (naive[1] - naive[0])
    pc = paired_bootstrap(y, np.zeros_like(y), clusters=eps, n_boot=1000)
    assert pc["n_clusters"] == 10 and pc["ci"][1] - pc["ci"][0] > 2 * (naive[1] - naive[0])


def test_exact_match_parses_canonical_calls():
    gold = {"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {
        "name": "get_order", "arguments": json.dumps({"order_id": "88412", "n": [1, 2]})}}]}
    assert exact_match('get_order(order_id="88412", n=[1, 2])', gold) == {"name": True, "full": True}
    assert exact_match('get_order(order_id="88413", n=[1, 2])', gold) == {"name": True, "full": False}
    assert exact_match("Sure, let me check.", gold) == {"name": False, "full": False}
    assert parse_action('a(x="p;q"); b()') == [("a", {"x": "p;q"}), ("b", {})]
