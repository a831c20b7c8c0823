"""Hydra configs shipped inside the package (`pkg://damc.configs`); the checkout's `configs/` links here.

The dataclass configs are the one source of their defaults: importing this package registers them in Hydra's
ConfigStore (Structured Configs), and the YAML files hold only overrides. `configs/memory/default.yaml` is
`defaults: [base_memory, _self_]` over `MemorySettings` (`MemoryConfig`'s fields plus the retrieval `encoder`), so
`cfg.memory` carries every `MemoryConfig` field and a command-line override is type-checked
(`memory.top_n=abc` stops with Hydra's `ValidationError` naming the key; an unknown key is refused too).
`make_data.yaml`'s `tau2:` is `damc.data.tau2.Tau2Config` the same way (`base_tau2@tau2`).

Hydra imports this package whenever it reads `pkg://damc.configs` (`damc.cli.run`, `damc.pipeline.stages`,
`initialize_config_module("damc.configs")`); a file-based `initialize(config_path=".../configs")` needs
`import damc.configs` first. Without Hydra (the light runtime install) the import registers nothing and
`MemorySettings` / `memory_fingerprint` still work.

The runtime (`damc.runtime`) never imports this package nor Hydra: the schemas sit here, above it.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Mapping

from damc.models import DEFAULT_ENCODER
from damc.runtime.config import MemoryConfig


@dataclass
class MemorySettings(MemoryConfig):
    """The `memory:` node of label, evaluate (and the study's runs of them): a `MemoryConfig` plus the retrieval
    encoder the `DecisionAwareMemory` is built with (its `encoder=` argument, not a `MemoryConfig` field)."""

    encoder: str = DEFAULT_ENCODER   # retrieval encoder (registry name or path)


# The memory keys the label and record fingerprints held before the schema (what configs/memory/default.yaml
# and evaluate.yaml spelled out): they stay in every fingerprint, so label dirs and records made before keep
# matching; any other field enters a fingerprint only when it differs from its default.
LABEL_MEMORY_KEYS = ("encoder", "top_n", "recent", "pinned", "max_candidates", "placement")
EVALUATE_MEMORY_KEYS = (*LABEL_MEMORY_KEYS, "max_scored")
_DEFAULTS = {f.name: f.default for f in fields(MemorySettings)}


def memory_fingerprint(memory: Mapping[str, Any] | None, always: tuple[str, ...] = LABEL_MEMORY_KEYS
                       ) -> dict[str, Any] | None:
    """The memory settings a fingerprint hashes: the `always` keys, plus every other key whose value differs from
    `MemorySettings`' default (a key that is no field always counts). A plain mapping (`OmegaConf.to_container`
    of `cfg.memory`); None stays None (a config without `memory:`).

    Example:
        >>> memory_fingerprint({**MemorySettings().__dict__, "compressor": "fields"})["compressor"]
        'fields'
        >>> sorted(memory_fingerprint(MemorySettings().__dict__))
        ['encoder', 'max_candidates', 'pinned', 'placement', 'recent', 'top_n']
    """
    if memory is None:
        return None
    return {k: v for k, v in memory.items() if k in always or k not in _DEFAULTS or _DEFAULTS[k] != v}


def as_spelled_before(cfg: Any) -> dict[str, Any]:
    """A composed config (`DictConfig`, resolved) as a plain dict laid out as the YAML files spelled it before the
    schemas: `memory` holds `memory_fingerprint`'s keys in the old order (evaluate: first, `max_scored` leading),
    make_data's `tau2` comes last (without `tools` at its default, `all`), label's `prefetch` is left out (when texts
    are embedded changes no label), and so are evaluate's `shard` at its default (every decision) and train's
    `data.sampling`, `data.domain_repeat` and `combiner.max_fit_decisions` at their defaults. The pipeline's
    stage fingerprints hash this view, so the stages of a study or demo run made before still count as done
    (`damc.pipeline.stages.fingerprint`)."""
    from omegaconf import OmegaConf

    plain = OmegaConf.to_container(cfg, resolve=True)
    if isinstance(plain.get("memory"), dict):
        evaluate = "policies" in plain   # evaluate.yaml's `memory: {max_scored}` came first, before the group's keys
        keys = ("max_scored", *LABEL_MEMORY_KEYS) if evaluate else LABEL_MEMORY_KEYS
        mem = memory_fingerprint(plain["memory"], keys)
        plain["memory"] = {**{k: mem[k] for k in keys if k in mem}, **{k: v for k, v in mem.items() if k not in keys}}
        if evaluate:
            plain = {"memory": plain.pop("memory"), **plain}
    if isinstance(plain.get("tau2"), dict) and "source" in plain:   # make_data.yaml's last section
        plain["tau2"] = plain.pop("tau2")
        if plain["tau2"].get("tools") == "all":     # added later: its default leaves the hash as it was
            del plain["tau2"]["tools"]
    if "estimator" in plain and "shard_size" in plain:   # label.yaml: `prefetch` (added later) changes no label
        plain.pop("prefetch", None)
    if "trainer" in plain and isinstance(plain.get("data"), dict):   # train: keys added later, at their defaults
        later = {"sampling": "uniform", "domain_repeat": None}
        plain["data"] = {k: v for k, v in plain["data"].items() if not (k in later and v == later[k])}
        if isinstance(plain.get("combiner"), dict) and plain["combiner"].get("max_fit_decisions") is None:
            plain["combiner"] = {k: v for k, v in plain["combiner"].items() if k != "max_fit_decisions"}
    if "policies" in plain and plain.get("shard") == {"index": 0, "count": 1}:   # evaluate.yaml: `shard` (added
        plain.pop("shard")                                                       # later) at its default: every decision
    return plain


def register() -> bool:
    """Store the schemas in Hydra's ConfigStore (idempotent); False when Hydra is not installed."""
    try:
        from hydra.core.config_store import ConfigStore
    except ImportError:
        return False
    from damc.data.tau2 import Tau2Config

    store = ConfigStore.instance()
    store.store(group="memory", name="base_memory", node=MemorySettings)
    store.store(name="base_tau2", node=Tau2Config)   # make_data.yaml's `tau2:` (defaults: base_tau2@tau2)
    return True


register()
