"""`CardScorer`: the distilled cross-encoder that values memory cards for a decision, cheaply.

A scorer directory (written by `scripts/export.py` or `CardScorer.save_pretrained`) is self-contained. By
default it holds only what the runtime reads: `model_int8.onnx` (the scorer as dynamic int8 ONNX), the tokenizer,
`encoder/` (the retrieval encoder as int8 ONNX, `damc.runtime.encoder`), `combiner.json` when the run fitted one,
and `damc_scorer.json` — a `ScorerMetadata`: the query rendering version it was trained with (checked on load), the
label normalisation (scores are in normalised-delta units; `to_delta` maps them back to nats), `max_length`, the
dev-chosen threshold, teacher, base model and the fidelity metrics of the run. `export.py fp32=true` adds the fp32
copies — `model.safetensors` + `config.json` (a Hugging Face sequence-classification encoder with one output: the
torch backend, bf16, GPUs) and `model.onnx`.

Inference is built to run at every decision: pairs are tokenised once, sorted by length and cut into
batches under a token budget (`max_batch_tokens`, padded tokens counted) where padding is least
(`damc.runtime.encoder.token_batches`), so that one long card never pads a whole decision's batch to its
length — on 2 CPU cores the token budget alone halved a 50-card decision —
then run under `torch.inference_mode` in fp32 or bf16, or through onnxruntime (fp32 or dynamic int8),
with the thread count set explicitly. `backend="auto"` (the default) takes the int8 ONNX file on the CPU when the
directory has one (the default export), else torch when it is installed and the weights are there, else the fp32
ONNX file. The ONNX backend needs only onnxruntime and tokenizers (`damc.tokens.PairTokenizer`
reads the directory's `tokenizer.json`): a light install (`pip install damc`) scores without torch or
transformers, and the render-version check runs the same on both backends.

Example:
    >>> from damc import CardScorer
    >>> from damc.query import render_decision_query
    >>> scorer = CardScorer.from_pretrained("artifacts/scorer")   # int8 ONNX: no torch needed
    >>> query = render_decision_query(messages[:k], tools)
    >>> scores = scorer.score(query, cards)            # np.ndarray, one score per card
    >>> scorer.rank(query, cards, top_k=5)[0]
    {'corpus_id': 3, 'score': 2.1, 'card_id': 'sup-0007:3:0'}
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from damc.query import query_body
from damc.runtime.encoder import available_cpus, pad_batch, token_batches
from damc.runtime.scorer_metadata import (  # noqa: F401
    FORMAT_VERSION,
    META_FILE,
    Normalization,
    ScorerFormatError,
    ScorerMetadata,
)

logger = logging.getLogger(__name__)

ONNX_FILE = "model.onnx"
ONNX_INT8_FILE = "model_int8.onnx"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt")
# Padded tokens per forward pass. Measured on 2 AMX cores (50 cards of 20-183 tokens): 512-1024 is the
# sweet spot for torch bf16 and onnx int8; one batch of all 50 pairs is 1.6-2.5x slower.
DEFAULT_BATCH_TOKENS = 1024


class IncompatibleScorerError(ValueError):
    """A scorer trained with a different query/card rendering than this version of DAMC uses."""


class CardScorer:
    """Scores `(decision query, card)` pairs with a distilled cross-encoder.

    Higher scores mean the card matters more for the decision; scores are in the normalised-delta units
    of training (`to_delta` converts to the teacher's nats).

    Args:
        model: a `transformers` sequence-classification model (torch backend) or None (onnx backend).
        tokenizer: its tokenizer (a HF tokenizer, or a `damc.tokens.PairTokenizer` for the torch-free onnx backend).
        metadata: a `ScorerMetadata` (`damc_scorer.json`), or a dict of its fields (read by
            `ScorerMetadata.from_dict`: `render_version`, `normalization`, `max_length` at least).
        session: an `onnxruntime.InferenceSession` (onnx backend).
        batch_size: pairs per forward pass.
        dtype: "float32" | "bfloat16" (torch backend).
        path: the directory it was loaded from, if any.

    Example:
        >>> s = CardScorer.from_pretrained("artifacts/scorer")
        >>> s.predict([("user: refund order 88412", "[tool_result] get_order(order_id=88412) -> ...")])
        array([1.73], dtype=float32)
    """

    def __init__(self, model: Any, tokenizer: Any, metadata: ScorerMetadata | dict[str, Any], *, session: Any = None,
                 batch_size: int = 64, max_batch_tokens: int | None = DEFAULT_BATCH_TOKENS,
                 dtype: str = "float32", path: str | None = None) -> None:
        if max_batch_tokens is not None and max_batch_tokens < 1:
            raise ValueError(f"max_batch_tokens must be a positive token count or None, got {max_batch_tokens}")
        self.model = model
        self.tokenizer = tokenizer
        self.metadata = metadata if isinstance(metadata, ScorerMetadata) else ScorerMetadata.from_dict(metadata)
        self.session = session
        self.batch_size = batch_size
        self.max_batch_tokens = max_batch_tokens
        self.dtype = dtype
        self.path = path
        self.max_length = self.metadata.max_length
        self.combiner = _load_combiner(path)  # the learned combiner exported beside the weights, if any
        self._onnx_inputs = [i.name for i in session.get_inputs()] if session is not None else []

    # ------------------------------------------------------------------ loading / saving

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike, *, dtype: str = "float32", backend: str = "auto",
                        device: str = "cpu", batch_size: int = 64, num_threads: int | None = None,
                        onnx_file: str | None = None, check_render_version: bool = True,
                        max_batch_tokens: int | None = DEFAULT_BATCH_TOKENS) -> "CardScorer":
        """Load a scorer directory.

        Args:
            path: directory written by `scripts/export.py` or `save_pretrained`.
            dtype: "float32" | "bfloat16" | "auto" weights (torch backend; bf16 is fastest on AMX/AVX512-BF16
                CPUs and bf16 GPUs, which "auto" picks).
            backend: "auto" (default: `model_int8.onnx` when present and the device is the CPU — what
                `scripts/export.py` writes by default —; else torch when it is installed and the directory has
                the fp32 weights; else `model.onnx`) | "torch" (needs the `[train]` extra and the weights:
                `export.py fp32=true`) | "onnx" (onnxruntime on CPU; `model.onnx`, or `onnx_file`).
            device: torch device ("cpu", "cuda", ...).
            batch_size: most pairs per forward pass.
            num_threads: intra-op threads (default: the cores this process may use).
            onnx_file: which ONNX file to load (backend "onnx": default "model.onnx"; "model_int8.onnx" for int8).
            max_batch_tokens: most padded tokens per forward pass (None: no token cap; the cut still keeps
                padding least, `damc.runtime.encoder.token_batches`).
            check_render_version: refuse a scorer trained with another query/card rendering.

        Raises:
            ScorerFormatError: missing `damc_scorer.json`, weights or ONNX file.
            IncompatibleScorerError: `render_version` differs from `damc.query.RENDER_VERSION`.

        Example:
            >>> scorer = CardScorer.from_pretrained("artifacts/scorer")        # int8 ONNX on the CPU
            >>> gpu = CardScorer.from_pretrained("artifacts/scorer", backend="torch", device="cuda", dtype="auto")
        """
        from damc.query import RENDER_VERSION

        path = Path(path)
        meta = ScorerMetadata.load(path)
        backend, onnx_file = _pick_backend(path, backend, device, onnx_file)
        if check_render_version and meta.render_version != str(RENDER_VERSION):
            raise IncompatibleScorerError(
                f"{path} was trained on query/card rendering version {meta.render_version!r} but this DAMC "
                f"renders version {RENDER_VERSION!r}; retrain (or re-export) the scorer on labels rendered by "
                f"this version (labels of version ≥ 2 are carried over without the teacher by "
                f"scripts/rerender_labels.py), or pass check_render_version=False to score anyway")
        from damc.query import CARD_RENDERS

        if meta.card_render not in CARD_RENDERS:
            raise IncompatibleScorerError(f"{path}: damc_scorer.json card_render {meta.card_render!r} is not one "
                                          f"of {list(CARD_RENDERS)} that this DAMC renders")
        kwargs = dict(batch_size=batch_size, max_batch_tokens=max_batch_tokens, path=str(path))
        if backend == "torch":
            model, tokenizer, dtype = _load_torch(path, dtype, device, num_threads)
            return cls(model, tokenizer, meta, dtype=dtype, **kwargs)
        if backend == "onnx":  # onnxruntime + tokenizers only: no torch, no transformers
            from damc.runtime.encoder import onnx_session
            from damc.tokens import PairTokenizer

            onnx_path = path / onnx_file
            if not onnx_path.exists():
                raise ScorerFormatError(f"{onnx_path} is missing; export with "
                                        f"`python scripts/export.py run_dir=RUN out={path} onnx=true`")
            tokenizer = PairTokenizer.from_dir(path, meta.max_length)
            return cls(None, tokenizer, meta, session=onnx_session(onnx_path, num_threads),
                       dtype="int8" if "int8" in onnx_file else "float32", **kwargs)
        raise ValueError(f"unknown backend {backend!r}; expected 'torch', 'onnx' or 'auto'")

    def save_pretrained(self, path: str | os.PathLike) -> None:
        """Write a self-contained scorer directory (weights, tokenizer, `damc_scorer.json`; ONNX files too
        when this scorer was loaded from a directory that has them).

        Example:
            >>> scorer.save_pretrained("artifacts/scorer-copy")
        """
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        if self.model is not None:
            import torch

            # Always save fp32 weights: a bf16-loaded scorer must not degrade the saved copy silently.
            model = self.model
            if next(model.parameters()).dtype != torch.float32 and self.path and Path(self.path).resolve() != path.resolve():
                logger.warning("saving a %s scorer: copying the original fp32 weights from %s", self.dtype, self.path)
                for name in ("model.safetensors", "config.json"):
                    shutil.copy2(Path(self.path) / name, path / name)
            else:
                model.save_pretrained(str(path), safe_serialization=True)
        elif self.path:
            for name in ("model.safetensors", "config.json"):
                if (Path(self.path) / name).exists():
                    shutil.copy2(Path(self.path) / name, path / name)
        elsewhere = bool(self.path) and Path(self.path).resolve() != path.resolve()
        if hasattr(self.tokenizer, "save_pretrained"):
            self.tokenizer.save_pretrained(str(path))
        if elsewhere:  # files a torch-free scorer cannot rewrite: copy them (tokenizer, ONNX, exported encoder)
            names = (ONNX_FILE, ONNX_INT8_FILE) if hasattr(self.tokenizer, "save_pretrained") else \
                (ONNX_FILE, ONNX_INT8_FILE) + TOKENIZER_FILES
            for name in names:
                if (Path(self.path) / name).exists():
                    shutil.copy2(Path(self.path) / name, path / name)
            if (Path(self.path) / "encoder").is_dir():
                shutil.copytree(Path(self.path) / "encoder", path / "encoder", dirs_exist_ok=True)
        if self.combiner is not None:
            from damc.runtime.combiner import COMBINER_FILE

            self.combiner.save(path / COMBINER_FILE)
        self.metadata.save(path)

    # ------------------------------------------------------------------ scoring

    def _encode(self, pairs: Sequence[tuple[str, str]]) -> list[dict[str, list[int]]]:
        if hasattr(self.tokenizer, "encode_pairs"):  # damc.tokens.PairTokenizer (onnx backend, torch-free)
            return self.tokenizer.encode_pairs(pairs)
        enc = self.tokenizer([p[0] for p in pairs], [p[1] for p in pairs], truncation="longest_first",
                             max_length=self.max_length, padding=False)
        keys = [k for k in ("input_ids", "attention_mask", "token_type_ids") if k in enc]
        return [{k: enc[k][i] for k in keys} for i in range(len(pairs))]

    def _forward(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        if self.session is not None:
            feeds = {k: batch[k] for k in self._onnx_inputs}
            return np.asarray(self.session.run(None, feeds)[0], dtype=np.float32).reshape(-1)
        import torch

        device = next(self.model.parameters()).device
        tensors = {k: torch.from_numpy(v).to(device) for k, v in batch.items()}
        logits = self.model(**tensors).logits  # (batch, 1)
        return logits.float().view(-1).cpu().numpy()

    def predict(self, pairs: Sequence[tuple[str, str]], batch_size: int | None = None) -> np.ndarray:
        """Scores of `(query, card_text)` pairs, in input order.

        Args:
            pairs: `(rendered decision query, rendered card)` tuples.
            batch_size: most pairs per forward pass (default: the scorer's); batches are also cut at
                `max_batch_tokens` padded tokens.

        Returns:
            float32 array of shape (len(pairs),).

        Example:
            >>> scorer.predict([(query, "[user] my order 88412 never arrived")]).shape
            (1,)
        """
        if len(pairs) == 0:
            return np.zeros(0, dtype=np.float32)
        bs = batch_size or self.batch_size
        feats = self._encode(pairs)
        order = np.argsort([-len(f["input_ids"]) for f in feats], kind="stable")  # longest first: little padding
        out = np.empty(len(pairs), dtype=np.float32)
        pad_id = self.tokenizer.pad_token_id or 0
        ctx = _inference_mode() if self.session is None else contextlib.nullcontext()
        with ctx:
            for idx in self._batches([len(feats[j]["input_ids"]) for j in order], bs):
                idx = order[idx]
                out[idx] = self._forward(pad_batch([feats[j] for j in idx], pad_id))
        return out

    def _batches(self, lengths_desc: list[int], batch_size: int) -> list[slice]:
        """Cut pairs sorted longest first into batches of ≤ `batch_size` pairs and ≤ `max_batch_tokens`
        padded tokens (a batch is padded to its first, longest pair; a single pair is always allowed)."""
        return token_batches(lengths_desc, batch_size, self.max_batch_tokens)

    def score(self, decision: str, cards: Sequence[Any], batch_size: int | None = None) -> np.ndarray:
        """Score each card for one decision.

        Args:
            decision: the rendered decision query (`damc.query.render_decision_query`); the scorer reads its
                `query_body` (no tool list), as it was trained.
            cards: `Card` objects (rendered with `damc.query.render_card`) or already-rendered strings.

        Returns:
            float32 array, one score per card (higher = more useful for this decision).

        Example:
            >>> scorer.score(query, cards).argmax()   # the most useful card
        """
        q = query_body(decision)
        render = self.metadata.card_render
        return self.predict([(q, card_text(c, render, decision)) for c in cards], batch_size=batch_size)

    def rank(self, decision: str, cards: Sequence[Any], top_k: int | None = None) -> list[dict[str, Any]]:
        """Cards sorted by score, best first: `[{"corpus_id", "score", "card_id"?}, ...]`.

        `card_id` is present for `Card` inputs. `top_k=None` returns every card.

        Example:
            >>> [r["card_id"] for r in scorer.rank(query, cards, top_k=3)]
            ['sup-0007:3:0', 'sup-0007:1', 'sup-0007:5:0']
        """
        scores = self.score(decision, cards)
        order = np.argsort(-scores, kind="stable")[: top_k if top_k is not None else len(scores)]
        out = []
        for i in order:
            row: dict[str, Any] = {"corpus_id": int(i), "score": float(scores[i])}
            cid = getattr(cards[i], "card_id", None)
            if cid is not None:
                row["card_id"] = cid
            out.append(row)
        return out

    def to_delta(self, scores: np.ndarray) -> np.ndarray:
        """Map scores (normalised units) back to the teacher's delta scale in nats."""
        return self.metadata.to_delta(scores)

    def __repr__(self) -> str:
        backend = "onnx" if self.session is not None else "torch"
        return (f"CardScorer(path={self.path!r}, backend={backend}, dtype={self.dtype}, "
                f"max_length={self.max_length}, render_version={self.metadata.render_version!r})")


def _load_combiner(path: str | os.PathLike | None) -> Any:
    """`combiner.json` of a scorer directory as a `damc.runtime.combiner.Combiner`, None when absent."""
    if not path:
        return None
    from damc.runtime.combiner import COMBINER_FILE, Combiner

    f = Path(path) / COMBINER_FILE
    return Combiner.load(f) if f.exists() else None


def card_text(card: Any, render: str = "template", query: str | None = None) -> str:
    """The scorer's text of a card: `render_card` (as `render` writes it, by the decision `query`) for `Card`
    objects, the string itself otherwise."""
    if isinstance(card, str):
        return card
    from damc.query import render_card

    return render_card(card, render=render, query=query)


def _inference_mode() -> Any:
    import torch  # only reached with a torch model loaded

    return torch.inference_mode()


def _pick_backend(path: Path, backend: str, device: str, onnx_file: str | None) -> tuple[str, str]:
    """`(backend, onnx_file)` for `backend="auto"`: the int8 ONNX file on the CPU when exported (the default export),
    else torch when it is installed and the fp32 weights are there, else the fp32 ONNX file (a light install), else
    the int8 file off the CPU (onnxruntime runs it on the CPU); torch when nothing fits (its error names the fix)."""
    import importlib.util

    if backend == "auto":
        on_cpu = str(device).startswith("cpu")
        weights = (path / "config.json").exists() and importlib.util.find_spec("torch") is not None
        if on_cpu and onnx_file in (None, ONNX_INT8_FILE) and (path / ONNX_INT8_FILE).exists():
            backend, onnx_file = "onnx", ONNX_INT8_FILE
        elif weights:
            backend = "torch"
        elif (path / (onnx_file or ONNX_FILE)).exists():
            backend = "onnx"
        elif onnx_file is None and (path / ONNX_INT8_FILE).exists():
            backend, onnx_file = "onnx", ONNX_INT8_FILE
        else:
            backend = "torch"
    return backend, onnx_file or ONNX_FILE


def _load_torch(path: Path, dtype: str, device: str, num_threads: int | None) -> tuple[Any, Any, str]:
    """`(model, HF tokenizer, dtype name)` of the torch backend."""
    from damc.extras import requires

    with requires("the torch scorer backend (backend='auto' scores with the exported ONNX file without torch)"):
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from damc.llm import pick_dtype

    if not (path / "config.json").exists():
        raise ScorerFormatError(f"{path} has no config.json / model.safetensors: the torch backend needs the fp32 "
                                f"weights (`python scripts/export.py run_dir=RUN out={path} fp32=true`, or load the "
                                f"run's model/ directory); backend='auto' scores with the exported ONNX file")
    threads = num_threads or available_cpus()
    if num_threads or torch.get_num_threads() > threads:
        torch.set_num_threads(threads)
    torch_dtype = pick_dtype(dtype, device)
    model = AutoModelForSequenceClassification.from_pretrained(str(path), dtype=torch_dtype).to(device).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    return model, tokenizer, "bfloat16" if torch_dtype == torch.bfloat16 else "float32"
