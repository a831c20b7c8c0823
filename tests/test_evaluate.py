"""The A/B harness end to end with real small models: every policy, output files and schema, a failing
policy, resumption after a kill, and the metrics it reports.

The module builds its own tiny pipeline once through the real entry points (`make_data` → `label` →
`train` → `export`, composed from the real Hydra configs and shrunk), so `damc_student` and `damc_knn`
run on a real exported scorer and real teacher labels. Episodes are short synthetic ones (~1k tokens).
"""

import json
from pathlib import Path

import numpy as np
import pytest
from hydra import compose, initialize

from damc.data.episodes import load_episodes, write_episodes
from damc.eval.metrics import exact_match, multiple_choice, parse_action
from damc.eval.stats import bootstrap_ci, paired_bootstrap

ALL_POLICIES = ["full", "window", "recency", "similarity", "bm25", "llm_judge", "generative_agents", "obs_mask",
                "damc_knn", "damc_student", "damc_teacher", "oracle"]
TINY_SYNTH = ("+synthetic.min_messages=10", "+synthetic.max_messages=40", "+synthetic.min_threads=1",
              "+synthetic.max_threads=2", "+synthetic.min_fillers=1", "+synthetic.max_fillers=2",
              "+synthetic.min_kb_articles=1", "+synthetic.max_kb_articles=2")


def _compose(name: str, *overrides: str):
    with initialize(config_path="../configs", version_base="1.3"):
        return compose(name, overrides=list(overrides))


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory) -> dict[str, Path]:
    """Tiny data, labels, scorer through the real mains."""
    from damc.data.make import main as make_data
    from damc.scorer.export import main as export
    from damc.scorer.train import main as train
    from damc.teacher.label import main as label

    root = tmp_path_factory.mktemp("pipeline")
    make_data(_compose("make_data", "source=synthetic", "n_episodes=10", "seed=5", f"out_dir={root / 'data'}",
                       *TINY_SYNTH))
    # the teacher labels the first few decisions of two training episodes (keeps the module fast on 2 cores)
    train_eps = [_prefix(ep, n_calls=3) for ep in load_episodes(root / "data" / "train.jsonl")[:2]]
    write_episodes(root / "label_input.jsonl", train_eps)
    label(_compose("label", f"data.path={root / 'label_input.jsonl'}", f"out_dir={root / 'labels'}",
                   "max_cards=4", "max_card_tokens=96", "data.tool_calls_only=true"))
    train(_compose("train", f"data.labels={root / 'labels'}", f"out_dir={root / 'run'}", "trainer=tiny",
                   "model.max_length=96", "data.max_cards=8", "device=cpu", "logger=none", "data.dev_fraction=0.34"))
    export(_compose("export", f"run_dir={root / 'run'}", f"out={root / 'scorer'}"))
    return {"root": root, "test": root / "data" / "test.jsonl", "labels": root / "labels", "scorer": root / "scorer"}


def _prefix(ep, n_calls: int):
    """The episode cut after the results of its first `n_calls` tool-calling assistant messages."""
    from damc.data.episodes import Episode

    seen, cut = 0, len(ep.messages)
    for i, m in enumerate(ep.messages):
        if m.get("role") == "assistant" and m.get("tool_calls"):
            seen += 1
            if seen == n_calls:
                cut = i + 1 + len(m["tool_calls"])
                break
    return Episode(ep.episode_id, ep.messages[:cut], ep.domain, ep.tools)


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
    res = main(_eval_cfg(pipeline, out, f"policies={pol}", "budgets=[192]", "max_decisions=2",
                         "data.tool_calls_only=true", "policy_options.llm_judge.max_cards=6",
                         "policy_options.damc_teacher.max_cards=6"))
    for f in ("results.json", "results.md", "pareto.png", "records.jsonl"):
        assert (out / f).stat().st_size > 0, f
    on_disk = json.loads((out / "results.json").read_text())
    assert set(on_disk) == {"policies", "paired", "config"}
    assert set(on_disk["policies"]) == {f"{p}@192" for p in ALL_POLICIES}
    for key, e in on_disk["policies"].items():
        assert e["n_failed"] == 0, (key, [r.get("error") for r in _records(out) if r.get("failed")])
        assert e["n_decisions"] == 2
        assert 0.0 <= e["accuracy_ci"][0] <= e["accuracy"] <= e["accuracy_ci"][1] <= 1.0
        for k in ("gold_logprob", "prompt_tokens", "overhead_ms_p50", "llm_ms_p50"):
            assert np.isfinite(e[k]), (key, k)
        assert e["gold_logprob"] < 0
    assert set(on_disk["paired"]) == {f"{p}@192" for p in ALL_POLICIES if p != "window"}
    for p in on_disk["paired"].values():
        assert p["vs"] == "window@192" and len(p["ci"]) == 2 and p["ci"][0] <= p["accuracy_delta"] <= p["ci"][1]
    assert on_disk["config"]["decision_llm"] == "smollm2-135m"
    # the budget caps the history; `full` ignores it and costs the most tokens
    recs = _records(out)
    assert all(r["history_tokens"] <= 192 for r in recs if r["policy"] not in ("full",))
    pt = {k.split("@")[0]: e["prompt_tokens"] for k, e in on_disk["policies"].items()}
    assert pt["full"] >= max(v for k, v in pt.items() if k != "full")
    # damc_* policies put compressed lines into the "Relevant history" section
    assert "| damc_student | 192 |" in (out / "results.md").read_text()
    assert res["policies"]["damc_student@192"]["accuracy"] == on_disk["policies"]["damc_student@192"]["accuracy"]


class _Flaky:
    """A policy that raises on one decision (index 2 of its calls) and defers to `recency` otherwise."""

    name, budgeted = "flaky", True

    def __init__(self):
        from damc.eval.policies import RecencyPolicy

        self.inner, self.calls = RecencyPolicy(), 0

    def build(self, dp, cards, budget, ctx):
        self.calls += 1
        if self.calls == 2:  # the warm-up is call 1; the first real decision is call 2
            raise RuntimeError("boom on purpose")
        return self.inner.build(dp, cards, budget, ctx)


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


def test_a_killed_run_resumes_without_redoing_or_losing_decisions(pipeline, tmp_path, monkeypatch):
    import damc.eval.harness as ev

    out = tmp_path / "eval"
    cfg = _eval_cfg(pipeline, out, "policies=[window,recency]", "budgets=[96,128]", "max_decisions=2")
    first = ev.main(cfg)
    lines = (out / "records.jsonl").read_text().splitlines(keepends=True)
    assert len(lines) == 2 * 2 * 2
    # a kill after 5 records, in the middle of writing the 6th
    (out / "records.jsonl").write_text("".join(lines[:5]) + lines[5][: len(lines[5]) // 2])
    calls = []
    real = ev.evaluate_one
    monkeypatch.setattr(ev, "evaluate_one", lambda *a, **k: calls.append(a[1:3]) or real(*a, **k))
    second = ev.main(cfg)
    assert len(calls) == len(lines) - 5
    keys = [(r["policy"], r["budget"], r["decision_id"]) for r in _records(out)]
    assert len(set(keys)) == len(lines)
    for k, e in first["policies"].items():
        assert second["policies"][k]["accuracy"] == e["accuracy"]
        assert second["policies"][k]["gold_logprob"] == pytest.approx(e["gold_logprob"], abs=1e-6)
    calls.clear()
    ev.main(cfg)  # a finished run reruns nothing
    assert calls == []


def test_a_named_variant_runs_a_registry_policy_with_caps_under_its_own_name(pipeline, tmp_path):
    from damc.eval.harness import main

    out = tmp_path / "eval"
    res = main(_eval_cfg(pipeline, out, "policies=[window,damc_student,damc_student_k2]", "budgets=[1024]",
                         "max_decisions=2", "+policy_options.damc_student_k2={policy: damc_student, top_k: 2}"))
    assert {"damc_student@1024", "damc_student_k2@1024"} <= set(res["policies"])
    recs = {(r["policy"], r["decision_id"]): r for r in _records(out)}
    for (pol, did), r in recs.items():
        if pol == "damc_student_k2":
            full = recs[("damc_student", did)]
            assert len(r["kept_card_ids"]) == min(2, len(full["kept_card_ids"]))
            assert set(r["kept_card_ids"]) <= set(full["kept_card_ids"])  # the same scorer's two best
            assert r["history_tokens"] <= full["history_tokens"]
    with pytest.raises(KeyError, match="policy_options.nope.policy"):
        main(_eval_cfg(pipeline, tmp_path / "bad", "policies=[nope]", "budgets=[128]"))


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


def test_exact_match_parses_canonical_calls():
    gold = {"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {
        "name": "get_order", "arguments": json.dumps({"order_id": "88412", "n": [1, 2]})}}]}
    assert exact_match('get_order(order_id="88412", n=[1, 2])', gold) == {"name": True, "full": True}
    assert exact_match('get_order(order_id="88413", n=[1, 2])', gold) == {"name": True, "full": False}
    assert exact_match("Sure, let me check.", gold) == {"name": False, "full": False}
    assert parse_action('a(x="p;q"); b()') == [("a", {"x": "p;q"}), ("b", {})]
