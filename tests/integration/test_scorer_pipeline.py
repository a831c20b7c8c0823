"""End to end on real teacher labels: Hydra train (a few CPU steps) → resume → export (+ONNX) → CardScorer.

The label sample was written by the teacher (leave-one-out with SmolLM2-135M) on synthetic episodes; the
run is tiny (4 steps, 128 tokens) so the whole module stays well under a minute on 2 cores.
"""

import json
import os
from pathlib import Path

import numpy as np
import pytest
from conftest import LABEL_SAMPLE, TINY_TRAIN
from hydra import compose, initialize

from damc.cards import Card
from damc.query import RENDER_VERSION, render_card

ROOT = Path(__file__).resolve().parents[2]
LABELS = LABEL_SAMPLE


def _train_cfg(out_dir: Path, *extra: str):
    with initialize(config_path="../../configs", version_base="1.3"):
        return compose("train", overrides=[f"data.labels={LABELS}", f"out_dir={out_dir}", *TINY_TRAIN, *extra])


@pytest.fixture(scope="module")
def run_dir(sample_run) -> Path:
    """The session's training run on LABELS with `_train_cfg`'s settings and `logger=wandb` (conftest.sample_run)."""
    return sample_run


@pytest.fixture(scope="module")
def scorer_dir(run_dir, tmp_path_factory) -> Path:
    from omegaconf import OmegaConf

    from damc.scorer.export import main

    out = tmp_path_factory.mktemp("scorer") / "scorer"
    with initialize(config_path="../../configs", version_base="1.3"):
        cfg = compose("export", overrides=[f"run_dir={run_dir}", f"out={out}", "fp32=true", "int8=false",
                                           "encoder=null"])  # the default export: test_light_runtime
    res = main(cfg)
    assert res["onnx_max_abs_diff"] < 1e-3
    assert OmegaConf.select(cfg, "int8") is False and "model_int8.onnx" not in res["files"]
    return out


def test_training_writes_model_split_and_fidelity_metrics(run_dir):
    m = json.loads((run_dir / "metrics.json").read_text())
    assert m["train"]["global_step"] == 2                                # trainer=tiny
    meta = json.loads((run_dir / "train_meta.json").read_text())
    # held-out decisions come from held-out episodes only
    assert m["split"]["dev_episodes"] >= 1 and m["split"]["train_episodes"] >= 1
    assert m["n_decisions"] == m["split"]["dev_decisions"] > 0
    for name in ("scorer", "cosine", "recency"):
        s = m[name]["spearman"]
        assert s["n"] > 0 and -1 <= s["median"] <= 1 and s["mean_ci"][0] <= s["mean"] <= s["mean_ci"][1]
        assert m[name]["ndcg@5"]["n"] == m["scorer"]["ndcg@5"]["n"]  # same decisions for every method
    assert meta["normalization"]["std"] > 0 and meta["teacher"] == "smollm2-135m"
    assert meta["render_version"] == RENDER_VERSION
    dev = set(meta["dev_episodes"])
    labels = [json.loads(x) for x in LABELS.read_text().splitlines()]
    assert dev and dev < {r["episode_id"] for r in labels}
    assert (run_dir / "model" / "model.safetensors").exists()
    assert list((run_dir / "wandb").glob("offline-run-*")), "W&B should log offline into the run dir"


def test_resume_continues_from_last_checkpoint(run_dir, tmp_path):
    import shutil

    from damc.scorer.train import main

    work = tmp_path / "resumed"
    shutil.copytree(run_dir / "checkpoints", work / "checkpoints")
    m = main(_train_cfg(work, "logger=none", "resume=true", "trainer.max_steps=3"))
    assert m["train"]["resumed_from"].endswith("checkpoint-2")
    assert m["train"]["global_step"] == 3


def test_export_load_score_rank_roundtrip_and_onnx(scorer_dir, tmp_path):
    from damc import CardScorer

    meta = json.loads((scorer_dir / "damc_scorer.json").read_text())
    assert meta["render_version"] == RENDER_VERSION and meta["max_length"] == 96
    assert {"mean", "std"} <= set(meta["normalization"]) and "scorer" in meta["metrics"]
    assert (scorer_dir / "model.safetensors").exists() and (scorer_dir / "model.onnx").exists()

    labels = [json.loads(x) for x in LABELS.read_text().splitlines()]
    query = labels[0]["decision_text"]
    texts = [r["card_text"] for r in labels if r["decision_id"] == labels[0]["decision_id"]]
    card = Card("ep:1", "ep", 1, "user", "user", "My order 88412 never arrived")
    s = CardScorer.from_pretrained(scorer_dir)
    scores = s.score(query, texts + [card])
    assert scores.shape == (len(texts) + 1,) and np.isfinite(scores).all()
    # a Card is scored exactly like its rendering; predict() takes pairs in input order
    assert scores[-1] == pytest.approx(s.predict([(query, render_card(card))])[0], abs=1e-5)
    assert np.allclose(s.predict([(query, t) for t in texts[::-1]]), scores[:-1][::-1], atol=1e-5)
    ranked = s.rank(query, texts + [card], top_k=3)
    assert [r["score"] for r in ranked] == sorted(scores, reverse=True)[:3]
    assert all("card_id" not in r for r in ranked if r["corpus_id"] < len(texts))
    assert s.rank(query, [card])[0]["card_id"] == "ep:1"

    s.save_pretrained(tmp_path / "copy")
    again = CardScorer.from_pretrained(tmp_path / "copy")
    assert np.array_equal(again.score(query, texts + [card]), scores)   # same inputs, bit-identical scores

    onnx = CardScorer.from_pretrained(scorer_dir, backend="onnx")
    assert np.allclose(onnx.score(query, texts), scores[:-1], atol=1e-4)
    bf16 = CardScorer.from_pretrained(scorer_dir, dtype="bfloat16")
    assert np.abs(bf16.score(query, texts) - scores[:-1]).max() < 0.05   # bf16 rounding only


def test_a_users_memory_selects_with_the_dev_chosen_threshold(run_dir, scorer_dir, tmp_path):
    """`DecisionAwareMemory(path, scorer=DIR)`: τ is a number in damc_scorer.json and becomes the default
    `Threshold`; a scorer exported with the older format (the combiner's whole threshold report) still loads."""
    import shutil

    from damc import DecisionAwareMemory
    from damc.runtime.select import Threshold, TopK

    meta = json.loads((scorer_dir / "damc_scorer.json").read_text())
    tau = meta["threshold"]
    assert (scorer_dir / "combiner.json").exists()          # the sample labels carry the combiner's features
    mem = DecisionAwareMemory(None, scorer=scorer_dir)
    if tau is None:   # no τ cleared the dev F1 choice: the fallback
        assert isinstance(mem.selector, TopK)
    else:
        assert isinstance(tau, float) and isinstance(mem.selector, Threshold) and mem.selector.min_value == tau
        # the floor under τ was chosen on the same dev decisions and travels to the runtime's selector
        chosen = json.loads((run_dir / "metrics.json").read_text())["combiner"]["floor"]["k_min"]
        assert meta["format_version"] == 3 and meta["k_min"] == chosen == mem.selector.k_min >= 1
    old = tmp_path / "old"
    shutil.copytree(scorer_dir, old)
    meta["threshold"] = {"tau": 0.125, "f1": 0.5, "min_delta": 0.05, "chosen_on": "dev"}
    (old / "damc_scorer.json").write_text(json.dumps(meta))
    mem_old = DecisionAwareMemory(None, scorer=old)
    assert isinstance(mem_old.selector, Threshold) and mem_old.selector.min_value == 0.125
    mem.close()
    mem_old.close()


def test_scorer_dir_without_metadata_is_refused(scorer_dir, tmp_path):
    import shutil

    from damc.scorer import CardScorer, ScorerFormatError

    bare = tmp_path / "bare"
    shutil.copytree(scorer_dir, bare)
    (bare / "damc_scorer.json").unlink()
    with pytest.raises(ScorerFormatError, match="damc_scorer.json"):
        CardScorer.from_pretrained(bare)


def test_incompatible_render_version_is_refused(scorer_dir, tmp_path):
    import shutil

    from damc.scorer import CardScorer, IncompatibleScorerError

    old = tmp_path / "old"
    shutil.copytree(scorer_dir, old)
    meta = json.loads((old / "damc_scorer.json").read_text())
    meta["render_version"] = "0-legacy"
    (old / "damc_scorer.json").write_text(json.dumps(meta))
    with pytest.raises(IncompatibleScorerError, match="0-legacy"):
        CardScorer.from_pretrained(old)
    assert CardScorer.from_pretrained(old, check_render_version=False).score("q", ["c"]).shape == (1,)


def test_labels_with_missing_columns_name_them(tmp_path):
    from damc.labels import LabelFormatError
    from damc.scorer.train import main

    rows = [json.loads(x) for x in LABELS.read_text().splitlines()]
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(json.dumps({k: v for k, v in r.items() if k not in ("delta", "card_text")})
                             for r in rows))
    cfg = _train_cfg(tmp_path / "run", "logger=none")
    cfg.data.labels = str(bad)
    with pytest.raises(LabelFormatError, match=r"missing required label column\(s\) card_text, delta"):
        main(cfg)


def test_real_configs_compose_with_experiment_and_logger_groups(tmp_path):
    with initialize(config_path="../../configs", version_base="1.3"):
        cfg = compose("train", overrides=["data.labels=x", f"out_dir={tmp_path}", "experiment=synthetic",
                                          "logger=none"])
    assert cfg.logger.name == "none" and cfg.model.name == "minilm-l6"
    assert cfg.trainer.epochs == 4 and cfg.data.dev_fraction == 0.25    # the experiment's overrides won
    assert cfg.trainer.loss.temperature > 0 and cfg.trainer.bf16 == "auto"


def test_runtime_valuer_loads_scorer_in_native_precision(scorer_dir):
    import torch

    from damc.llm import pick_dtype
    from damc.runtime.valuers import ScorerValuer

    auto = ScorerValuer.from_pretrained(str(scorer_dir))
    fp32 = ScorerValuer.from_pretrained(str(scorer_dir), dtype="float32")
    expected = torch.bfloat16 if pick_dtype("auto", "cpu") == torch.bfloat16 else torch.float32
    assert next(auto.scorer.model.parameters()).dtype == expected
    assert next(fp32.scorer.model.parameters()).dtype == torch.float32
    from damc.cards import Card

    cards = [Card("e:1", "e", 1, "user", "user", "my order 88412 never arrived", meta={"age": 4}),
             Card("e:2", "e", 2, "assistant", "assistant", "hello!", meta={"age": 3}),
             Card("e:3:0", "e", 3, "tool", "tool_error", "get_order(order_id=88412) -> 500", tool_name="get_order",
                  arguments={"order_id": "88412"}, status="error", error={"code": 500}, meta={"age": 1})]
    a, b = auto.value("user: refund order 88412", cards), fp32.value("user: refund order 88412", cards)
    # the exported combiner turns student scores and the runtime's signals into predicted deltas (nats/token)
    assert auto.combiner is not None and auto.name == "scorer+combiner"
    assert a.shape == (3,) and np.all(np.isfinite(a)) and np.allclose(a, b, atol=0.05)
    plain = ScorerValuer(fp32.scorer, combiner=None)
    plain.combiner = None
    assert np.all((plain.value("user: refund order 88412", cards) > 0) & (plain.value("q", cards) < 1))


def test_token_budget_batching_cuts_batches_and_keeps_scores(scorer_dir):
    from damc.scorer import CardScorer

    s = CardScorer.from_pretrained(scorer_dir, batch_size=4, max_batch_tokens=256)
    # sorted longest first: a batch is padded to its first pair, so 183 tokens → 1 pair, 100 → 2, 50 → 4 (cap)
    assert s._batches([183, 100, 90, 50, 50, 50, 50, 50, 40], 4) == [slice(0, 1), slice(1, 3), slice(3, 7),
                                                                   slice(7, 9)]
    assert s._batches([300], 4) == [slice(0, 1)]               # a pair longer than the budget still runs alone
    labels = [json.loads(x) for x in LABELS.read_text().splitlines()]
    query = labels[0]["decision_text"]
    texts = [r["card_text"] for r in labels][:24]
    whole = CardScorer.from_pretrained(scorer_dir, batch_size=64, max_batch_tokens=None).score(query, texts)
    for budget in (64, 300):
        cut = CardScorer.from_pretrained(scorer_dir, max_batch_tokens=budget).score(query, texts)
        assert np.allclose(cut, whole, atol=1e-4)              # padding never changes a score
    with pytest.raises(ValueError, match="max_batch_tokens"):
        CardScorer.from_pretrained(scorer_dir, max_batch_tokens=0)


def test_auto_backend_takes_int8_onnx_when_exported(scorer_dir, tmp_path):
    import shutil

    from scipy.stats import spearmanr

    from damc.runtime.valuers import ScorerValuer
    from damc.scorer import CardScorer
    from damc.scorer.export import quantize_int8

    labels = [json.loads(x) for x in LABELS.read_text().splitlines()]
    by_decision: dict[str, tuple[str, list[str]]] = {}
    for r in labels:
        by_decision.setdefault(r["decision_id"], (r["decision_text"], []))[1].append(r["card_text"])
    # pooled over several decisions: one decision's handful of near-tied scores makes a noisy Spearman
    pairs = list(by_decision.values())[:6]
    plain = ScorerValuer.from_pretrained(str(scorer_dir))
    assert plain.scorer.session is None and plain.scorer.model is not None      # no int8 file: torch
    d = tmp_path / "with_int8"
    shutil.copytree(scorer_dir, d)
    quantize_int8(d / "model.onnx", d / "model_int8.onnx")
    auto = ScorerValuer.from_pretrained(str(d))
    assert auto.scorer.session is not None and auto.scorer.dtype == "int8"
    fp32 = CardScorer.from_pretrained(d, dtype="float32")
    ref = np.concatenate([fp32.score(q, texts) for q, texts in pairs])
    got = np.concatenate([auto.scorer.score(q, texts) for q, texts in pairs])
    assert len(ref) >= 20
    rho, gap = spearmanr(ref, got)[0], np.abs(ref - got).max()
    assert rho > 0.9 and gap < 0.25, (rho, gap, len(ref))     # int8 keeps the ranking


def test_symlog_normalisation_round_trips_and_tames_the_tail():
    from damc.labels import LabeledDecision as Decision
    from damc.scorer.train import Normalization, fit_normalization

    deltas = [0.0, 0.1, -0.3, 0.5, 2.0, 40.0]
    dec = [Decision("d", "e", "q", ["c"] * 6, [str(i) for i in range(6)], deltas, list(range(6)))]
    z_lin = fit_normalization(dec, clip=5.0).apply(deltas)
    norm = fit_normalization(dec, clip=5.0, kind="symlog")
    z_log = norm.apply(deltas)
    assert norm.kind == "symlog" and np.allclose(norm.invert(z_log), deltas)
    # the small deltas that decide most of a ranking are spread further apart than under a plain z-score
    assert (z_log[3] - z_log[1]) > 3 * (z_lin[3] - z_lin[1])
    assert np.argsort(z_log).tolist() == np.argsort(deltas).tolist()
    with pytest.raises(ValueError, match="unknown normalisation 'rank'"):
        Normalization("rank").apply(deltas)


def test_shallow_student_trains_exports_and_scores(tmp_path):
    from damc.scorer import CardScorer
    from damc.scorer.export import main as export
    from damc.scorer.train import main

    run = tmp_path / "l2"
    main(_train_cfg(run, "logger=none", "model.num_layers=2", "data.normalization=symlog"))
    meta = json.loads((run / "train_meta.json").read_text())
    assert meta["kept_layers"] == [0, 5] and meta["normalization"]["kind"] == "symlog"
    assert json.loads((run / "model" / "config.json").read_text())["num_hidden_layers"] == 2
    with initialize(config_path="../../configs", version_base="1.3"):
        cfg = compose("export", overrides=[f"run_dir={run}", f"out={tmp_path / 's'}", "fp32=true", "encoder=null"])
    export(cfg)
    s = CardScorer.from_pretrained(tmp_path / "s", backend="torch")
    assert s.model.config.num_hidden_layers == 2 and s.metadata.kept_layers == [0, 5]
    scores = s.score("user: refund order 88412", ["[user] order 88412 never arrived", "[assistant] hi"])
    assert scores.shape == (2,) and np.isfinite(scores).all()
    # to_delta inverts the symlog normalisation: monotone in the score
    d = s.to_delta(np.array([-1.0, 0.0, 1.0]))
    assert d[0] < d[1] < d[2]
    with pytest.raises(ValueError, match="encoder has 6 layers"):
        main(_train_cfg(tmp_path / "bad", "logger=none", "model.num_layers=7"))


@pytest.mark.slow
def test_two_process_ddp_training_on_cpu(tmp_path):
    """The same script under a 2-process launch (torchrun; gloo on CPU): rank 0 alone writes the run."""
    import subprocess
    import sys

    out = tmp_path / "ddp"
    torchrun = Path(sys.executable).with_name("torchrun")
    cmd = [str(torchrun), "--nproc_per_node", "2", str(ROOT / "scripts" / "train.py"), f"data.labels={LABELS}",
           f"out_dir={out}", "trainer=tiny", "trainer.max_steps=2", "trainer.batch_size=1", "model.max_length=96", "data.max_cards=8",
           "device=cpu", "data.dev_fraction=0.34", "logger=none"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    m = json.loads((out / "metrics.json").read_text())
    assert m["train"]["world_size"] == 2 and m["train"]["global_step"] == 2
    assert (out / "model" / "model.safetensors").exists() and (out / "train_meta.json").exists()
    log = proc.stdout + proc.stderr
    assert log.count("labels: 5 decisions") == 2                  # both ranks loaded the data ...
    assert log.count("dev fidelity") == 1                         # ... only rank 0 evaluated and wrote


def test_train_fraction_keeps_the_dev_split(tmp_path, run_dir):
    from damc.scorer.train import main

    a = json.loads((run_dir / "metrics.json").read_text())   # the module's run: the same labels and split settings
    b = main(_train_cfg(tmp_path / "half", "logger=none", "trainer.max_steps=1", "data.train_fraction=0.5"))
    assert b["split"]["dev_decisions"] == a["split"]["dev_decisions"]
    assert b["split"]["train_decisions"] == max(1, round(0.5 * a["split"]["train_decisions"]))
    with pytest.raises(ValueError, match="train_fraction"):
        main(_train_cfg(tmp_path / "bad", "logger=none", "data.train_fraction=0"))


def _fidelity_cli(monkeypatch, capsys, *argv: str):
    """Run scripts/fidelity.py's command line in this process: (exit code or message, stdout)."""
    import runpy
    import sys
    from types import SimpleNamespace

    monkeypatch.setattr(sys, "argv", ["fidelity.py", *argv])
    code = 0
    try:
        runpy.run_path(str(ROOT / "scripts" / "fidelity.py"), run_name="__main__")
    except SystemExit as e:
        code = e.code
    return SimpleNamespace(code=code, out=capsys.readouterr().out)


def test_scorer_fidelity_on_a_runs_dev_episodes_matches_the_training_metrics(run_dir, scorer_dir, tmp_path,
                                                                               monkeypatch, capsys):
    import subprocess
    import sys

    from damc.scorer.metrics import scorer_fidelity

    meta = json.loads((run_dir / "train_meta.json").read_text())
    m = json.loads((run_dir / "metrics.json").read_text())
    res = scorer_fidelity(scorer_dir, LABELS, episodes=meta["dev_episodes"])
    assert res["n_decisions"] == m["n_decisions"] and res["teacher"] == ["smollm2-135m"]
    for name in ("scorer", "cosine", "recency"):
        assert res[name]["spearman"]["mean"] == pytest.approx(m[name]["spearman"]["mean"], abs=0.02), name
    with pytest.raises(ValueError, match="no labelled decision"):
        scorer_fidelity(scorer_dir, LABELS, episodes=["no-such-episode"])
    out = tmp_path / "fid.json"
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "fidelity.py"), str(scorer_dir), str(LABELS),
                           "--run", str(run_dir), "--json", str(out)], capture_output=True, text=True, cwd=ROOT,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"{m['n_decisions']} decisions" in proc.stdout
    assert json.loads(out.read_text())["scorer"]["spearman"]["mean"] == pytest.approx(res["scorer"]["spearman"]["mean"])
    # the script's other paths in this process (the subprocess above shows it runs as a script)
    bad = _fidelity_cli(monkeypatch, capsys, str(scorer_dir), str(LABELS), "--run", str(tmp_path))
    assert bad.code != 0 and "train_meta.json not found" in str(bad.code)
    # decisions of ≤ 5 cards have no recall 3@5: reported as n/a, not a crash
    rows = [json.loads(x) for x in LABELS.read_text().splitlines()]
    per: dict = {}
    short = [r for r in rows if per.setdefault(r["decision_id"], []).append(r) or len(per[r["decision_id"]]) <= 4]
    (tmp_path / "short.jsonl").write_text("\n".join(json.dumps(r) for r in short) + "\n")
    few = _fidelity_cli(monkeypatch, capsys, str(scorer_dir), str(tmp_path / "short.jsonl"))
    assert few.code == 0, few.out
    assert "recall3@5 n/a (n=0" in few.out


def test_the_runtime_cross_encodes_only_max_scored_candidates_with_a_real_scorer(scorer_dir, tmp_path):
    """`DecisionAwareMemory(path, scorer=DIR)` as a user opens it: the cascade hands the exported scorer
    only `max_scored` of the candidates, and a card it did not read never outranks one it did."""
    from damc.runtime.memory import DecisionAwareMemory, MemoryConfig

    msgs = [{"role": "system", "content": "You are a support agent."}]
    for i in range(14):
        msgs += [{"role": "user", "content": f"Please check order {88400 + i} for me."},
                 {"role": "assistant", "content": None, "tool_calls": [{"id": f"c{i}", "type": "function",
                  "function": {"name": "get_order", "arguments": json.dumps({"order_id": str(88400 + i)})}}]},
                 {"role": "tool", "tool_call_id": f"c{i}", "content": json.dumps({"order_id": str(88400 + i),
                                                                                  "status": "shipped"})}]
    msgs.append({"role": "user", "content": "Refund order 88407 please."})
    mem = DecisionAwareMemory(tmp_path / "m", scorer=str(scorer_dir), config=MemoryConfig(max_scored=5))
    assert mem.valuer.inner.max_scored == 5
    seen: list[list[str]] = []
    inner = mem.valuer.inner.scorer
    score = inner.score
    inner.score = lambda q, cards, **kw: (seen.append([c.card_id for c in cards]), score(q, cards, **kw))[1]
    ctx = mem.build_context(msgs, budget_tokens=10**6)
    assert ctx.n_candidates > 5 and len(seen) == 1 and len(seen[0]) == 5   # the scorer read 5 of the candidates
    value = {s.card_id: s.value for s in ctx.selected} | {d.card_id: d.value for d in ctx.dropped}
    assert len(value) == ctx.n_candidates and all(np.isfinite(v) for v in value.values())
    read, unread = [value[c] for c in seen[0]], [v for c, v in value.items() if c not in seen[0]]
    assert max(unread) < min(read)                                  # never outranking a card the student read
    # the context and explain() say which candidates the student never read
    notes = {s.card_id: s.note for s in ctx.selected} | {d.card_id: d.note for d in ctx.dropped}
    assert {c for c, n in notes.items() if n == "not_cross_encoded"} == set(value) - set(seen[0])
    assert all(notes[c] is None for c in seen[0])
    exp = mem.explain(ctx)
    assert sorted(exp.not_cross_encoded) == sorted(set(value) - set(seen[0]))
    text = str(exp)
    assert f"{ctx.n_candidates - 5} of {ctx.n_candidates} candidates marked [nce]" in text
    assert text.count("[nce]") == ctx.n_candidates - 5 + 1          # one per unread card, plus the legend
    mem.close()


def test_a_fields_scorer_reads_its_cards_as_fields_lines(scorer_dir, tmp_path):
    """`card_render: fields` in damc_scorer.json (a student of `render=fields` labels): `CardScorer` renders each
    Card as the `fields` line under the decision query; an unknown rendering is refused; labels mixing renderings
    are refused at training."""
    import shutil

    from damc.query import query_body
    from damc.scorer import CardScorer, IncompatibleScorerError
    from damc.scorer.train import main as train_main

    assert json.loads((scorer_dir / "damc_scorer.json").read_text())["card_render"] == "template"
    result = json.dumps({"order_id": "88412", "status": "delivered", "items": [
        {"item_id": "1001", "name": "kettle", "price": 30.0}, {"item_id": "1002", "name": "lamp", "price": 12.5}]})
    card = Card("ep:3:0", "ep", 3, "tool", "tool_result", f"get_order(order_id=88412) -> {result}",
                tool_name="get_order", arguments={"order_id": "88412"}, result=json.loads(result), status="ok")
    query = "user: return the lamp from order 88412"
    fields = tmp_path / "fields"
    shutil.copytree(scorer_dir, fields)
    meta = json.loads((fields / "damc_scorer.json").read_text())
    (fields / "damc_scorer.json").write_text(json.dumps({**meta, "card_render": "fields"}))
    s = CardScorer.from_pretrained(fields)
    want = render_card(card, render="fields", query=query)
    assert want != render_card(card) and "1002" in want
    assert s.score(query, [card])[0] == pytest.approx(s.predict([(query_body(query), want)])[0], abs=1e-5)
    (fields / "damc_scorer.json").write_text(json.dumps({**meta, "card_render": "raw"}))
    with pytest.raises(IncompatibleScorerError, match="card_render 'raw'"):
        CardScorer.from_pretrained(fields)
    with pytest.raises(ValueError, match="card render must be one of"):
        render_card(card, render="raw")
    rows = [json.loads(x) for x in LABELS.read_text().splitlines()]
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text("".join(json.dumps({**r, "card_render": "fields" if i % 2 else "template"}) + "\n"
                             for i, r in enumerate(rows)))
    from damc.labels import LabelFormatError

    with pytest.raises(LabelFormatError, match="mix card renderings"):
        train_main(_train_cfg(tmp_path / "run", f"data.labels={mixed}"))


def test_two_trainings_on_the_same_labels_write_the_same_weights(tmp_path):
    """Same labels, same config, different global RNG state before each run (as when earlier pipeline stages ran in
    the process): the student's new classifier head is seeded from `seed`, so the weights match bit for bit; another
    `seed` gives other weights."""
    import torch
    from safetensors.torch import load_file

    from damc.scorer.train import main

    weights = {}
    for name, rng, seed in (("a", 1, 0), ("b", 2, 0), ("c", 1, 7)):
        torch.manual_seed(rng)
        torch.rand(1000)      # consume the global generator differently before each run
        main(_train_cfg(tmp_path / name, "logger=none", "trainer.max_steps=1", "combiner.enabled=false", f"seed={seed}"))
        weights[name] = load_file(str(tmp_path / name / "model" / "model.safetensors"))
    assert weights["a"].keys() == weights["b"].keys()
    assert all(torch.equal(weights["a"][k], weights["b"][k]) for k in weights["a"])
    assert not all(torch.equal(weights["a"][k], weights["c"][k]) for k in weights["a"])
