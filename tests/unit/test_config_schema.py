"""The dataclass configs are Hydra Structured Configs (`damc.configs`): the YAML files hold only overrides, a
command-line override is type-checked, the runtime never needs Hydra, and the label / record fingerprints stay
byte-identical to those made when the YAML files still spelled the memory defaults out."""

import ast
import dataclasses
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module
from hydra.errors import ConfigCompositionException

from damc.configs import EVALUATE_MEMORY_KEYS, LABEL_MEMORY_KEYS, MemorySettings, memory_fingerprint
from damc.models import DEFAULT_ENCODER
from damc.runtime.config import MemoryConfig

PKG = Path(__file__).resolve().parents[2] / "damc"
DEFAULT_MEMORY = {"encoder": "minilm-l6", "max_candidates": 48, "pinned": 10, "placement": "message", "recent": 10,
                  "top_n": 32}


def _compose(name: str, *overrides: str):
    with initialize_config_module("damc.configs", version_base="1.3"):
        return compose(name, overrides=list(overrides))


@pytest.mark.parametrize("name", ["label", "evaluate"])
def test_cfg_memory_is_the_dataclass_defaults(name):
    from omegaconf import OmegaConf

    mem = OmegaConf.to_container(_compose(name, "data.path=x", "out_dir=y").memory)
    assert mem == dataclasses.asdict(MemorySettings())
    assert mem["encoder"] == DEFAULT_ENCODER and set(mem) - {"encoder"} == {f.name for f in dataclasses.fields(MemoryConfig)}


def test_command_line_overrides_are_typed_and_reach_memory_config():
    from damc.eval.harness import memory_config

    cfg = _compose("evaluate", "data.path=x", "out_dir=y", "memory.top_n=8", "memory.agent_id=bob",
                   "memory.placement=system")
    assert cfg.memory.top_n == 8 and isinstance(cfg.memory.top_n, int)
    mc = memory_config(cfg)   # MemoryConfig(**cfg.memory) without the encoder
    assert (mc.top_n, mc.agent_id, mc.placement, mc.max_scored) == (8, "bob", "system", 8)
    with pytest.raises(ConfigCompositionException) as bad:
        _compose("label", "data.path=x", "out_dir=y", "memory.top_n=abc")
    assert "memory.top_n" in str(bad.value.__cause__) and "Integer" in str(bad.value.__cause__)
    with pytest.raises(ConfigCompositionException, match="memory.no_such_field"):
        _compose("label", "data.path=x", "out_dir=y", "memory.no_such_field=1")


def test_make_data_tau2_is_the_dataclass():
    from damc.data.tau2 import Tau2Config

    cfg = _compose("make_data", "out_dir=y", "tau2.limit=12")
    assert Tau2Config(**cfg.tau2) == Tau2Config(limit=12)
    with pytest.raises(ConfigCompositionException) as bad:
        _compose("make_data", "out_dir=y", "tau2.n_distractors=many")
    assert "tau2.n_distractors" in str(bad.value.__cause__)


def test_label_fingerprint_is_the_one_made_before_the_schema():
    """Captured from `_fingerprint` when configs/memory/default.yaml still listed the memory defaults: a label
    directory made then is resumed, not refused."""
    from damc.teacher.label import _fingerprint

    fp = _fingerprint(_compose("label", "data.path=/x/ep.jsonl", "out_dir=y"))
    assert fp == {"data": "/x/ep.jsonl", "delta_units": "nats per action token",
                  "estimator": {"_target_": "damc.teacher.estimators.LeaveOneIn"}, "max_context_tokens": None,
                  "memory": DEFAULT_MEMORY, "per_episode": None, "render_version": "3", "sample_seed": 0,
                  "teacher": {"_target_": "damc.teacher.backends.HFTeacher", "dtype": "auto",
                              "max_context_tokens": None, "model": "smollm2-135m"},
                  "tool_calls_only": False}
    fp = _fingerprint(_compose("label", "data.path=/x/ep.jsonl", "out_dir=y", "memory.max_candidates=4",
                               "memory.compressor=fields"))
    assert fp["memory"] == {**DEFAULT_MEMORY, "max_candidates": 4, "compressor": "fields"}


def test_record_fingerprints_are_the_ones_made_before_the_schema(tmp_path):
    """Captured from `damc.eval.records.fingerprints` before the schema (evaluate.yaml then held
    `memory: {max_scored: 8}` over configs/memory/default.yaml): stored records stay reusable."""
    from damc.eval.harness import policy_options
    from damc.eval.records import fingerprints

    data = tmp_path / "fp_data.jsonl"   # the digest hashes the file name and its bytes
    data.write_text('{"episode_id": "x"}\n')
    old_cap = ("memory.top_n=16", "memory.max_candidates=24")   # the defaults then (32 / 48 since 2026-12-05)
    cfg = _compose("evaluate", f"data.path={data}", "out_dir=y", "policies=[bm25,damc]", *old_cap)
    assert fingerprints(cfg, policy_options(cfg)) == {"bm25": "f2b8c0520d24f6ae", "damc": "4147972754c0cc64"}
    cfg = _compose("evaluate", f"data.path={data}", "out_dir=y", "policies=[bm25,damc]", "memory.max_candidates=4",
                   "memory.max_scored=0", "memory.top_n=16")
    assert fingerprints(cfg, policy_options(cfg)) == {"bm25": "6ea9d29cd53569f6", "damc": "e4486ca430603955"}


def test_memory_fingerprint_keeps_the_old_keys_and_the_non_defaults():
    full = dataclasses.asdict(MemorySettings())
    assert memory_fingerprint(full) == DEFAULT_MEMORY
    assert memory_fingerprint(full, EVALUATE_MEMORY_KEYS) == {**DEFAULT_MEMORY, "max_scored": 8}
    assert memory_fingerprint({**full, "share_sessions": True, "extra": 1}) == {**DEFAULT_MEMORY,
                                                                                 "share_sessions": True, "extra": 1}
    assert memory_fingerprint(None) is None and set(LABEL_MEMORY_KEYS) < set(EVALUATE_MEMORY_KEYS)


def test_the_runtime_imports_neither_hydra_nor_omegaconf():
    """The light install (`pip install damc`) has no Hydra: no runtime module imports it, even in a function."""
    offenders = []
    for p in sorted((PKG / "runtime").rglob("*.py")):
        for node in ast.walk(ast.parse(p.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            offenders += [f"{p.name}: {n}" for n in names if n.split(".")[0] in ("hydra", "omegaconf")]
    assert not offenders, offenders


@pytest.mark.parametrize("key,name,overrides,expected", [
    ("data", "make_data", ["out_dir=/r/data", "source=tau2", "tau2.domain=retail", "split.train=0.5",
                             "seed=0"], "f918b9014ea6c6ab"),
    ("label", "label", ["data.path=/r/li.jsonl", "out_dir=/r/labels", "data.tool_calls_only=true",
                        "memory.max_candidates=4", "memory.top_n=16"], "4d75657093630b46"),
    ("evaluate", "evaluate", ["data.path=/r/test.jsonl", "out_dir=/r/eval", "memory.max_candidates=4", "memory.top_n=16",
                              "sweep.top_k=[2]", "n_boot=200"], "d8622fce03257706"),
])
def test_stage_fingerprints_are_the_ones_made_before_the_schema(key, name, overrides, expected):
    """Captured from `damc.pipeline.stages.fingerprint` before the schemas: a study or demo run made then finds
    its stages done (the hash reads `damc.configs.as_spelled_before`, not the schema's full `memory`). `top_n=16`:
    the default then (32 since 2026-12-05)."""
    from damc.pipeline.stages import compose_stage, fingerprint

    assert fingerprint(key, compose_stage(name, overrides), "x") == expected
