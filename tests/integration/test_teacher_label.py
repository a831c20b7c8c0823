"""scripts/label.py end to end: real configs, real smollm2-135m, resumption after SIGKILL, sharding, bad input."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import small_episode
from hydra import compose, initialize

from damc.episodes import Episode, decision_points, write_episodes
from damc.labels import EXTRA_COLUMNS, LABEL_COLUMNS, LabelFormatError, load_labels
from damc.teacher.label import main, plan_decisions, shard_by_episode, shard_decisions

ROOT = Path(__file__).resolve().parents[2]




@pytest.fixture(scope="module")
def episodes_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("eps") / "eps.jsonl"
    write_episodes(path, [small_episode()])
    return path


def cfg_for(episodes, out, *extra):
    with initialize(config_path="../../configs", version_base="1.3"):
        return compose(config_name="label", overrides=[f"data.path={episodes}", f"out_dir={out}",
                                                       "max_decisions=4", "shard_size=2", *extra])


def test_label_main_writes_the_label_dataset(episodes_file, tmp_path):
    summary = main(cfg_for(episodes_file, tmp_path / "labels"))
    ds = load_labels(tmp_path / "labels")
    assert set(LABEL_COLUMNS + EXTRA_COLUMNS) <= set(ds.column_names)
    n_dec = len(plan_decisions(episodes_file, max_decisions=4))
    assert summary["decisions"] + summary["skipped_no_cards"] == n_dec
    assert summary["skipped_no_cards"] >= 1  # the first decisions of an episode have no candidate card
    assert len(ds) == summary["total_rows"] == summary["cards"]
    assert summary["forward_tokens"] < summary["naive_forward_tokens"] and summary["passes_saved"] > 0
    np.testing.assert_allclose(ds["delta"], (np.array(ds["logp_full"]) - np.array(ds["logp_without"]))
                               / np.array(ds["n_action_tokens"]))
    row = ds[0]
    assert row["decision_id"] == f"{row['episode_id']}@{row['decision_index']}"
    assert row["estimator"] == "loi" and row["teacher"] == "smollm2-135m" and row["n_action_tokens"] > 0
    assert len(set(zip(ds["decision_id"], ds["card_id"]))) == len(ds)
    assert json.loads((tmp_path / "labels" / "summary.json").read_text())["total_rows"] == len(ds)
    # a rerun finds everything done and adds nothing
    again = main(cfg_for(episodes_file, tmp_path / "labels"))
    assert again["decisions"] == 0 and again["total_rows"] == len(ds)
    # other settings in the same out_dir are refused
    with pytest.raises(ValueError, match="other settings"):
        main(cfg_for(episodes_file, tmp_path / "labels", "estimator=ablation"))


def test_ablation_estimator_through_config(episodes_file, tmp_path):
    s = main(cfg_for(episodes_file, tmp_path / "abl", "estimator=ablation", "estimator.n_samples=2",
                     "max_decisions=5"))
    ds = load_labels(tmp_path / "abl")
    assert set(ds["estimator"]) == {"ablation"} and s["decisions"] >= 1
    assert s["forward_passes"] == 3 * s["decisions"]          # the full context and 2 sampled ablations each


def test_loi_margin_estimator_through_config(episodes_file, tmp_path):
    """`estimator=loi_margin` labels the same cards as `loi`, with the rivals' shift taken off each delta.

    The two estimators reach `logp_full` by two forward paths (a batched row on a cached prefix vs a reference row
    run block by block), so the teacher is pinned to fp32 (`teacher.dtype`, see `damc.llm.dtype_name`): under
    `dtype=auto` a box with bf16 units runs bf16, where those paths differ by up to 0.35 nats."""
    opts = ["max_decisions=3", "data.tool_calls_only=true", "teacher.dtype=float32"]
    main(cfg_for(episodes_file, tmp_path / "loi", *opts))
    s = main(cfg_for(episodes_file, tmp_path / "margin", "estimator=loi_margin", *opts))
    loi, margin = load_labels(tmp_path / "loi").to_pandas(), load_labels(tmp_path / "margin").to_pandas()
    assert set(margin["estimator"]) == {"loi_margin"} and s["decisions"] >= 1
    assert {json.loads((tmp_path / d / "label_config.json").read_text())["teacher"]["dtype"]
            for d in ("loi", "margin")} == {"float32"}                      # both runs pinned, whatever the box
    assert list(zip(margin["decision_id"], margin["card_id"])) == list(zip(loi["decision_id"], loi["card_id"]))
    np.testing.assert_allclose(margin["delta"], (margin["logp_full"] - margin["logp_without"]) / margin["n_action_tokens"])
    np.testing.assert_allclose(margin["logp_full"], loi["logp_full"], atol=1e-2)    # the gold with each card alone
    assert np.abs(margin["delta"].to_numpy() - loi["delta"].to_numpy()).max() > 1e-3   # the rivals moved the values


@pytest.mark.slow
def test_resume_after_sigkill_gives_the_uninterrupted_rows(tmp_path):
    from damc.data.synthetic import generate_episodes

    # decisions deep in a synthetic episode all have candidates: several shards, so the kill lands mid-run
    episodes_file = tmp_path / "eps.jsonl"
    write_episodes(episodes_file, generate_episodes(1, seed=5, progress=False))
    opts = ["data.tool_calls_only=true", "memory.max_candidates=2", "max_decisions=4", "shard_size=1"]
    ref = tmp_path / "ref"
    main(cfg_for(episodes_file, ref, *opts))
    assert json.loads((ref / "summary.json").read_text())["decisions"] >= 2
    out = tmp_path / "killed"
    cmd = [sys.executable, str(ROOT / "scripts/label.py"), f"data.path={episodes_file}", f"out_dir={out}",
           *opts, f"hydra.run.dir={tmp_path / 'hydra'}"]
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2")}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 240
    while time.time() < deadline and not list((out / "shards").glob("part-*.parquet")):
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    n_before = len(list((out / "shards").glob("part-*.parquet")))
    assert not (out / "summary.json").exists() and n_before >= 1  # killed mid-run, after a shard
    subprocess.run(cmd, cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    a, b = load_labels(ref).to_pandas(), load_labels(out).to_pandas()
    key = ["decision_id", "card_id"]
    a, b = a.sort_values(key).reset_index(drop=True), b.sort_values(key).reset_index(drop=True)
    assert len(a) == len(b) and not b.duplicated(key).any()
    assert (a[key] == b[key]).all().all()
    np.testing.assert_allclose(a["delta"], b["delta"], atol=1e-3)


def test_sharding_splits_every_nth_episode_whole_without_overlap(tmp_path):
    items = list(range(11))
    parts = [shard_decisions(items, r, 3) for r in range(3)]
    assert parts[1] == [(1, 1), (4, 4), (7, 7), (10, 10)]
    assert sorted(i for p in parts for i, _ in p) == items
    with pytest.raises(ValueError):
        shard_decisions(items, 3, 3)
    from damc.data.synthetic import generate_episodes

    path = tmp_path / "eps.jsonl"
    write_episodes(path, generate_episodes(4, seed=5, progress=False))
    dps = plan_decisions(path, tool_calls_only=True, per_episode=3)
    parts = [shard_by_episode(dps, r, 2) for r in range(2)]
    assert sorted(i for p in parts for i, _ in p) == list(range(len(dps)))
    eps = [{dp.episode.episode_id for _, dp in p} for p in parts]
    assert eps[0] and eps[1] and not eps[0] & eps[1]          # an episode's memory is fed in one process


def test_episode_file_without_decisions_is_a_clear_error(tmp_path):
    path = tmp_path / "nodec.jsonl"
    write_episodes(path, [Episode("e1", [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}])])
    with pytest.raises(ValueError, match="no decision points"):
        main(cfg_for(path, tmp_path / "out"))


def test_load_labels_names_missing_columns(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "shards").mkdir()
    pq.write_table(pa.table({"decision_id": ["a@1"], "card_id": ["a:0"], "delta": [1.0]}),
                   tmp_path / "shards" / "part-000000-000000.parquet")
    with pytest.raises(LabelFormatError, match="episode_id.*decision_text.*card_text"):
        load_labels(tmp_path)
    with pytest.raises(FileNotFoundError):
        load_labels(tmp_path / "nothing")


def test_plan_decisions_per_episode_sample(tmp_path):
    from damc.data.synthetic import generate_episodes

    path = tmp_path / "eps.jsonl"
    write_episodes(path, generate_episodes(3, seed=5, progress=False))
    every = plan_decisions(path, tool_calls_only=True)
    some = plan_decisions(path, tool_calls_only=True, per_episode=2, seed=0)
    ids = [dp.decision_id for dp in some]
    assert len(some) == 6 and {dp.episode.episode_id for dp in some} == {dp.episode.episode_id for dp in every}
    assert set(ids) <= {dp.decision_id for dp in every} and all(dp.is_tool_call for dp in some)
    assert ids == [dp.decision_id for dp in plan_decisions(path, True, per_episode=2, seed=0)]  # seeded
    assert ids != [dp.decision_id for dp in plan_decisions(path, True, per_episode=2, seed=1)]


def test_the_per_episode_sample_skips_decisions_with_no_history(samples_dir, tmp_path):
    """τ²-bench's first tool calls come inside the first user turn: nothing before it to label. The sample is drawn
    from the decisions with a history, so per_episode=1 spends its budget on decisions the teacher can label."""
    path = samples_dir / "tau2_retail_sample.jsonl"
    every = plan_decisions(path, tool_calls_only=True)
    bare = {dp.decision_id for dp in every if not [m for m in dp.history if m.get("role") != "system"]}
    assert bare and len(bare) < len(every)                              # the sample holds both kinds
    for seed in range(5):
        one = plan_decisions(path, tool_calls_only=True, per_episode=1, seed=seed)
        assert len(one) == len({dp.episode.episode_id for dp in every if dp.decision_id not in bare})
        assert not {dp.decision_id for dp in one} & bare
    from damc.episodes import load_episodes

    cut: dict[str, int] = {}                   # each episode cut after its first decision: nothing before its turn
    for dp in every:
        if dp.decision_id in bare:
            cut.setdefault(dp.episode.episode_id, dp.index + 1)
    first = tmp_path / "first_turns.jsonl"
    write_episodes(first, [Episode(e.episode_id, e.messages[: cut[e.episode_id]], e.domain, e.tools)
                           for e in load_episodes(path) if e.episode_id in cut])
    assert plan_decisions(first, tool_calls_only=True)                  # without per_episode: planned, then skipped
    with pytest.raises(ValueError, match="none with a history"):
        plan_decisions(first, tool_calls_only=True, per_episode=1)


def test_labels_are_the_runtime_candidates_in_the_runtime_rendering(episodes_file, tmp_path):
    """Candidate-set parity (label time = run time), label text = teacher text, student text = render_card."""
    from damc.episodes import load_episodes
    from damc.eval.policies import DecisionView, Setting, make_policy
    from damc.models import load_tokenizer
    from damc.prompting import format_prompt
    from damc.query import render_card
    from damc.runtime.memory import DecisionAwareMemory
    from damc.runtime.valuers import CachedValuer
    from damc.teacher.context import build_context

    main(cfg_for(episodes_file, tmp_path / "labels", "max_decisions=null", "data.tool_calls_only=true"))
    df = load_labels(tmp_path / "labels").to_pandas()
    ep = load_episodes(episodes_file)[0]
    tok = load_tokenizer("smollm2-135m")
    memory = DecisionAwareMemory(None, tokenizer=tok, session_id=ep.episode_id)   # the runtime as the harness runs it
    pol = make_policy("heuristic")
    checked = 0
    for dp in decision_points(ep, tool_calls_only=True):
        rows = df[df.decision_id == dp.decision_id].sort_values("card_position")
        view = DecisionView.of(dp)
        memory.observe(view.messages, view.session_id)
        out = pol.build(view, Setting(10**6), None, memory=memory, valuer=CachedValuer(pol.make_valuer(None)))
        assert sorted(rows.card_id) == sorted(out.candidate_ids)           # the same candidate set
        if rows.empty:
            continue
        by_id = {c.card_id: c for c in memory.build_context(dp.context, ep.tools, budget_tokens=10**6).selected}
        prompt = "".join(build_context(tok, dp, [by_id[i].card for i in rows.card_id]).segments())
        assert prompt == format_prompt(tok, build_context(tok, dp, [by_id[i].card for i in rows.card_id]).messages())
        for r in rows.itertuples():
            assert r.teacher_text in prompt                              # the line the teacher saw
            assert r.card_text == render_card(by_id[r.card_id].card)     # what the student will read at run time
            assert f"{r.card_age} messages ago" in r.card_text
        checked += 1
    assert checked >= 2


def test_fields_labels_are_the_lines_of_a_fields_memory(episodes_file, tmp_path):
    """`render=fields`: the teacher reads each candidate as a `compressor="fields"` memory writes it (its decision
    query chooses the fields), the rows store those lines, and a template run's out_dir refuses the other render."""
    from damc.episodes import load_episodes
    from damc.models import load_tokenizer
    from damc.runtime.config import MemoryConfig
    from damc.runtime.memory import DecisionAwareMemory
    from damc.teacher.context import ContextConfig, build_context, memory_line

    main(cfg_for(episodes_file, tmp_path / "labels", "max_decisions=null", "data.tool_calls_only=true",
                 "render=fields"))
    df = load_labels(tmp_path / "labels").to_pandas()
    assert json.loads((tmp_path / "labels" / "label_config.json").read_text())["render"] == "fields"
    ep = load_episodes(episodes_file)[0]
    tok = load_tokenizer("smollm2-135m")
    memory = DecisionAwareMemory(None, tokenizer=tok, session_id=ep.episode_id,
                                 config=MemoryConfig(compressor="fields"))
    differs = checked = 0
    for dp in decision_points(ep, tool_calls_only=True):
        rows = df[df.decision_id == dp.decision_id]
        if rows.empty:
            continue
        ctx = memory.build_context(dp.context, ep.tools, budget_tokens=10**6)
        lines = {s.card_id: s.line for s in ctx.selected}
        by_id = {s.card_id: s.card for s in ctx.selected}
        prompt = "".join(build_context(tok, dp, [by_id[i] for i in rows.card_id], ContextConfig(render="fields"))
                         .segments())
        for r in rows.itertuples():
            assert r.teacher_text == lines[r.card_id] and r.teacher_text in prompt   # the runtime's fields line
            differs += r.teacher_text != memory_line(by_id[r.card_id])              # not the template line
        checked += 1
    assert checked >= 2 and differs >= 1
    with pytest.raises(ValueError, match="other settings"):
        main(cfg_for(episodes_file, tmp_path / "labels", "max_decisions=null", "data.tool_calls_only=true"))
    with pytest.raises(ValueError, match="teacher render must be one of"):
        main(cfg_for(episodes_file, tmp_path / "other", "render=raw"))
    assert not (tmp_path / "other").exists()                                      # refused before writing
