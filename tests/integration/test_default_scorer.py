"""The scorer shipped in the package (damc/assets/scorer/): its files match its checksums, a memory uses it by default
when its dev figures pass the dev gate (`valuer="shipped"` by name; loaded once per process), `valuer="heuristic"` opts out, and what the `default_scorer` profile records about its
data and labels still holds.

The profile test does not retrain: it recomputes what is cheap — the profile's settings, the synthetic data split
(regenerated, byte for byte) and, where a local `runs/default_scorer/` holds them, the label sets' fingerprints.
"""

import hashlib
import time

import pytest
from conftest import ROOT, SAMPLES

from damc.assets import SCORER_DIR, verify_checksums
from damc.runtime.scorer_metadata import ScorerMetadata


@pytest.fixture(scope="module")
def meta() -> ScorerMetadata:
    return ScorerMetadata.load(SCORER_DIR)


def test_the_shipped_files_match_the_checksums_in_the_metadata(meta):
    assert verify_checksums(SCORER_DIR, meta.checksums) == []
    assert {"model_int8.onnx", "tokenizer.json", "combiner.json", "encoder/model_int8.onnx",
            "encoder/damc_encoder.json", "tokens/smollm2-135m/tokenizer.json"} <= set(meta.checksums)
    scorer_mb = sum((SCORER_DIR / f).stat().st_size for f in meta.checksums if "/" not in f) / 1e6
    total_mb = sum((SCORER_DIR / f).stat().st_size for f in meta.checksums) / 1e6
    assert scorer_mb <= 30 and total_mb <= 45, (scorer_mb, total_mb)


def test_the_shipped_scorer_by_name_is_loaded_once_and_heuristic_opts_out():
    from damc.episodes import load_episodes
    from damc.runtime.default_scorer import load_default_scorer
    from damc.runtime.memory import DecisionAwareMemory
    from damc.runtime.select import Threshold, TopK

    ep = load_episodes(SAMPLES / "synthetic_sample.jsonl")[0]
    msgs = ep.messages[:13]
    mem = DecisionAwareMemory(None, tokenizer=None, valuer="shipped")
    assert mem.valuer.inner.scorer is load_default_scorer() and mem.valuer.inner.scorer.path == str(SCORER_DIR)
    assert isinstance(mem.selector, Threshold) or mem.valuer.inner.scorer.metadata.threshold is None
    ctx = mem.build_context(msgs, tools=ep.tools)
    assert ctx.valuer == "cached(scorer+combiner)" and ctx.n_candidates >= 3
    t = time.perf_counter()
    again = DecisionAwareMemory(None, tokenizer=None, valuer="shipped")   # shared: construction stays cheap
    assert again.valuer.inner.scorer is mem.valuer.inner.scorer and time.perf_counter() - t < 2.0
    opted = DecisionAwareMemory(None, tokenizer=None, valuer="heuristic")
    assert isinstance(opted.selector, TopK)
    assert opted.build_context(msgs, tools=ep.tools).valuer == "cached(heuristic)"
    with pytest.raises(ValueError, match="valuer name must be one of"):
        DecisionAwareMemory(None, tokenizer=None, valuer="bm25")


def test_the_dev_gate_decides_whether_the_shipped_student_is_the_default(meta, tmp_path, monkeypatch, caplog):
    """The default valuer is the shipped student only when its recorded dev figures are at or above BM25,
    similarity and RRF in key hit on every dev split; else the heuristic prior, with the reason said once."""
    import json
    import logging
    import shutil

    from damc.assets import ENV_VAR
    from damc.runtime import default_scorer
    from damc.runtime.memory import DecisionAwareMemory

    dev = {"a": {"bm25": {"key_hit": 0.5}, "similarity": {"key_hit": 0.7}, "rrf": {"key_hit": 0.6},
                 "damc": {"key_hit": 0.8}},
           "b": {"bm25": {"key_hit": 0.9}, "similarity": {"key_hit": 0.95}, "rrf": {"key_hit": 0.9},
                 "damc": {"key_hit": 0.84}}}
    assert default_scorer.dev_gate_failure({"dev": dev}) == "on dev split 'b' its key_hit 0.840 is below similarity's 0.950"
    assert default_scorer.dev_gate_failure({"dev": {"a": dev["a"]}}) is None
    assert "no dev evaluation" in default_scorer.dev_gate_failure({})
    # the shipped scorer as it is: the default follows its own recorded figures
    shipped_ok = default_scorer.dev_gate_failure(meta.evaluation) is None
    mem = DecisionAwareMemory(None, tokenizer=None)
    assert (mem.valuer.inner.__class__.__name__ == "ScorerValuer") == shipped_ok
    # a copy whose figures pass the gate becomes the default; one that fails does not, said once
    for name, figures in (("pass", {"a": dev["a"]}), ("fail", dev)):
        d = tmp_path / name
        shutil.copytree(SCORER_DIR, d, ignore=shutil.ignore_patterns("encoder", "tokens"))
        data = json.loads((d / "damc_scorer.json").read_text())
        (d / "damc_scorer.json").write_text(json.dumps({**data, "evaluation": {"dev": figures}}))
        monkeypatch.setenv(ENV_VAR, str(d))
        default_scorer.clear_cache()
        with caplog.at_level(logging.INFO, logger="damc.runtime.default_scorer"):
            caplog.clear()
            kinds = [type(DecisionAwareMemory(None, tokenizer=None).valuer.inner).__name__ for _ in range(2)]
        gated = [r for r in caplog.records if "not the default valuer" in r.getMessage()]
        if name == "pass":
            assert kinds == ["ScorerValuer"] * 2 and not gated
        else:
            assert kinds == ["HeuristicValuer"] * 2 and len(gated) == 1 and "'b'" in gated[0].getMessage()
            assert type(DecisionAwareMemory(None, tokenizer=None, valuer="shipped").valuer.inner).__name__ \
                == "ScorerValuer"
    default_scorer.clear_cache()


def test_the_shipped_scorer_ranks_the_card_holding_the_asked_for_id_first():
    """Through the product path (the shipped student, its combiner and the memory's BM25 and cosine): the tool
    result holding the asked-for order id is valued first, above the greeting and a generic assistant line. (The
    raw student alone ranks "Is there anything else?" first on this probe — docs/scorer.md, known limits — which
    is why the combiner fuses its order with retrieval's.)"""
    import json

    from damc.runtime.memory import DecisionAwareMemory

    mem = DecisionAwareMemory(None, valuer="shipped", tokenizer=None)
    call = {"id": "c1", "type": "function", "function": {"name": "get_order",
                                                           "arguments": json.dumps({"order_id": "88412"})}}
    ctx = mem.build_context([
        {"role": "system", "content": "You are a support agent."},
        {"role": "user", "content": "hi, I need help with my account"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": json.dumps({"status": "delayed", "carrier": "DHL"})},
        {"role": "assistant", "content": "Is there anything else?"},
        {"role": "user", "content": "where is my order 88412?"}])
    assert ctx.valuer == "cached(scorer+combiner)"
    ranked = sorted(ctx.selected, key=lambda sc: -sc.value)
    assert ranked[0].card.kind == "tool_result" and ranked[0].value > ranked[1].value + 0.05, \
        [(sc.card.kind, sc.value) for sc in ranked]


def test_the_profile_still_describes_the_shipped_scorer(meta, tmp_path):
    """`make reproduce PROFILE=default_scorer` would make the same data: the profile's datasets and overrides are
    the recorded ones, the synthetic splits regenerate byte for byte, and local labels (if any) fingerprint the
    same. Not checked (too long for a test): the τ²-bench retail data, labelling from scratch, training, export."""
    from damc.data.make import main as make_data
    from damc.pipeline.stages import compose_stage

    cfg = compose_stage("study", ["experiment=default_scorer"])
    prov = meta.provenance
    assert prov["profile"] == "default_scorer" and str(cfg.ship.out) == "damc/assets/scorer"
    assert (ROOT / str(cfg.ship.out)).resolve() == SCORER_DIR
    assert list(prov["datasets"]) == list(cfg.use)
    for name in cfg.use:
        ds = cfg.datasets[name]
        assert prov["datasets"][name]["make"] == [str(o) for o in ds.make]
        assert prov["datasets"][name]["label"] == (None if ds.get("label") is None else [str(o) for o in ds.label])
    assert prov["label_overrides"] == [str(o) for o in cfg.label.overrides]
    assert prov["train_overrides"] == [str(o) for o in cfg.train.overrides]
    assert set(prov["labels"]) == {n for n in cfg.use if cfg.datasets[n].get("label") is not None}
    assert all(v["rows"] > 0 and len(v["sha256"]) == 64 for v in prov["labels"].values())
    overrides = {o.split("=", 1)[0]: o.split("=", 1)[1] for o in cfg.datasets.synthetic.make}
    make_data(compose_stage("make_data", [f"out_dir={tmp_path}", f"seed={cfg.seed}",
                                          *[f"{k}={v}" for k, v in overrides.items()]]))
    regenerated = {p.stem: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(tmp_path.glob("*.jsonl"))}
    assert regenerated == prov["data"]["synthetic"]
    local = ROOT / str(cfg.out_dir) / "labels"
    if local.is_dir():   # a local rebuild: its labels must be the ones the shipped scorer was trained on
        from damc.pipeline.ship import label_fingerprint

        for name, want in prov["labels"].items():
            if (local / name).is_dir():
                assert label_fingerprint(local / name)["sha256"] == want["sha256"], name
