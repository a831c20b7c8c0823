"""Learned valuers: the distilled student (`ScorerValuer`) and the teacher's non-parametric value (`KNNValuer`).

`ScorerValuer` over a scorer exported with its learned combiner (`combiner.json`, `damc.runtime.combiner`) returns
the combiner's **calibrated predicted delta** (nats per action token; negative = expected to hurt), computed from
the student's score and the memory's own signals (BM25, cosine, age, kind, pinned). Without a combiner (an older
export) it squashes the student's score with a sigmoid into [0, 1], as `KNNValuer` does with its value.

`max_scored=M` makes valuing a two-stage cascade (retrieve → fuse → cross-encode), the usual way a reranker is kept
cheap: every candidate is ranked by reciprocal-rank fusion of its BM25 and embedding cosine with the query (signals
the runtime already holds), and only the M best are cross-encoded. The cross-encoder is most of `build_context`, so
the cost falls with M; docs/runtime.md measures latency and key-card recall against M (and why the fusion, not the
combiner's cheap half, is the first stage).

`CrossEncoderScorer` stands in for an untrained scorer (a `CrossEncoder` initialised from MiniLM) in benchmarks.
"""

from __future__ import annotations

import logging
from typing import Any, Sequence

import numpy as np

from damc.cards import Card
from damc.models import DEFAULT_ENCODER
from damc.query import render_card
from damc.runtime.valuers.base import NOT_CROSS_ENCODED, Valuer, sigmoid

logger = logging.getLogger(__name__)


def rrf(*signals: np.ndarray, k: int = 60) -> np.ndarray:
    """Reciprocal-rank fusion (Cormack et al., 2009) of per-candidate signals, higher = better: Σ 1/(k + rank)."""
    out = np.zeros(len(signals[0]))
    for sig in signals:
        out += 1.0 / (k + np.argsort(np.argsort(-np.asarray(sig), kind="stable"), kind="stable"))
    return out


def fused_order(x: np.ndarray) -> np.ndarray:
    """Candidate indices, best first, by reciprocal-rank fusion of BM25 and cosine over a `candidate_features`
    matrix: the cascade's first stage (which candidates `ScorerValuer(max_scored=M)` cross-encodes) and the order
    of `RRFValuer`."""
    from damc.runtime.combiner import FEATURES

    return np.argsort(-rrf(x[:, FEATURES.index("bm25")], x[:, FEATURES.index("cosine")]), kind="stable")


class RRFValuer(Valuer):
    """The cascade's first stage alone, no student: BM25 and embedding cosine fused by reciprocal rank (`rrf`, k=60).

    The values are the fused order mapped to (0, 1] (1 for the first candidate, falling by rank), so the ranking
    is exactly `fused_order` — the order in which `ScorerValuer(max_scored=M)` picks the candidates it cross-encodes
    — and `Threshold(τ)` reads a share of the ranking. Needs the memory (`bind`) for the cosine.
    """

    name = "rrf"

    def __init__(self) -> None:
        self._memory: Any = None

    def bind(self, memory: Any) -> None:
        self._memory = memory

    def value(self, query: str, cards: Sequence[Card], now: float | None = None) -> np.ndarray:
        if not cards:
            return np.zeros(0, dtype=np.float32)
        from damc.runtime.combiner import candidate_features

        order = fused_order(candidate_features(query, cards, memory=self._memory))
        out = np.empty(len(cards), dtype=np.float32)
        out[order] = 1.0 - np.arange(len(cards), dtype=np.float32) / len(cards)
        return out


class ScorerValuer(Valuer):
    """The distilled student scorer (`CardScorer.score(query, cards)`), through its learned combiner when it has one
    (calibrated predicted delta), else squashed to [0, 1].

    Args:
        scorer: a `damc.scorer.CardScorer` (or any object with `.score(query, cards) -> array`).
        temperature: sigmoid temperature applied to the raw scores (no combiner).
        combiner: a `damc.runtime.combiner.Combiner` (default: the scorer's own, `scorer.combiner`, if any).
        max_scored: cross-encode at most this many candidates per call (0: all): the best by reciprocal-rank
            fusion of BM25 and cosine. The others get the combiner's value for an average student score, capped
            just below the lowest cross-encoded value, so they never outrank a card the student read. Needs a
            combiner (without one every candidate is scored).
    """

    name = "scorer"

    def __init__(self, scorer: Any, temperature: float = 1.0, combiner: Any = None, max_scored: int = 0):
        if int(max_scored) < 0:
            raise ValueError(f"max_scored must be ≥ 0 (0: score every candidate), got {max_scored}")
        self.scorer, self.temperature, self.max_scored = scorer, temperature, int(max_scored)
        self.combiner = combiner if combiner is not None else getattr(scorer, "combiner", None)
        self.name = "scorer+combiner" if self.combiner is not None else "scorer"
        self._memory: Any = None

    def bind(self, memory: Any) -> None:
        self._memory = memory

    @classmethod
    def from_pretrained(cls, path: str, dtype: str = "auto", backend: str = "auto", temperature: float = 1.0,
                        max_scored: int = 0, **scorer_kwargs: Any) -> "ScorerValuer":
        """Load an exported scorer for the runtime: the int8 ONNX file when the directory has one (fastest on
        CPU, `export.py int8=true`), else torch in bf16 where the CPU/GPU runs it natively (2-3x fp32).

        Args:
            path: scorer directory.
            dtype / backend: see `CardScorer.from_pretrained` ("auto" by default).
            temperature: sigmoid temperature.
            max_scored: cross-encode at most this many candidates per call (0: all; see the class).
            scorer_kwargs: other `CardScorer.from_pretrained` arguments (device, max_batch_tokens, ...).
        """
        from damc.runtime.scorer import CardScorer

        if "device" not in scorer_kwargs:
            try:  # a GPU when torch sees one; a runtime-only install has no torch and scores on the CPU
                from damc.llm import pick_device

                scorer_kwargs["device"] = pick_device()
            except ImportError:
                scorer_kwargs["device"] = "cpu"
        return cls(CardScorer.from_pretrained(path, dtype=dtype, backend=backend, **scorer_kwargs), temperature,
                   max_scored=max_scored)

    def value(self, query: str, cards: Sequence[Card], now: float | None = None) -> np.ndarray:
        return self.value_with_notes(query, cards, now)[0]

    def value_with_notes(self, query: str, cards: Sequence[Card],
                         now: float | None = None) -> tuple[np.ndarray, list[str | None]]:
        """The values, and `NOT_CROSS_ENCODED` for each candidate the cascade left below its `max_scored`."""
        notes: list[str | None] = [None] * len(cards)
        if not cards:
            return np.zeros(0, dtype=np.float32), notes
        if self.combiner is None:
            return sigmoid(np.asarray(self.scorer.score(query, list(cards))), self.temperature), notes
        from damc.runtime.combiner import FEATURES, candidate_features

        x = candidate_features(query, cards, memory=self._memory)          # the student's column still empty
        col = FEATURES.index("student")
        if not self.max_scored or len(cards) <= self.max_scored:
            x[:, col] = np.asarray(self.scorer.score(query, list(cards)), dtype=np.float64)
            return self.combiner.predict(x), notes
        top = fused_order(x)
        top, rest = top[: self.max_scored], top[self.max_scored:]               # rest: in fused order
        x[top, col] = np.asarray(self.scorer.score(query, [cards[i] for i in top]), dtype=np.float64)
        out = np.empty(len(cards), dtype=np.float64)
        out[top] = self.combiner.predict(x[top])
        x[rest, col] = self.combiner.mean[col]                            # an average student score
        floor = float(out[top].min()) - 1e-4
        out[rest] = np.minimum(self.combiner.predict(x[rest]), floor) - 1e-6 * np.arange(len(rest))
        for i in rest:
            notes[int(i)] = NOT_CROSS_ENCODED
        return out.astype(np.float32), notes


class CrossEncoderScorer:
    """A `CardScorer` stand-in over a sentence-transformers `CrossEncoder` (e.g. one initialised from
    `minilm-l6` before a student is trained). Scores `(query, render_card(card))` pairs."""

    def __init__(self, model: str = DEFAULT_ENCODER, max_length: int = 256, device: str = "cpu"):
        from damc.extras import requires

        with requires("CrossEncoderScorer"):
            from sentence_transformers import CrossEncoder

        from damc.models import resolve_model

        self.model = CrossEncoder(resolve_model(model), num_labels=1, max_length=max_length, device=device)

    def score(self, decision_query: str, cards: Sequence[Card | str]) -> np.ndarray:
        texts = [c if isinstance(c, str) else render_card(c) for c in cards]
        return np.asarray(self.model.predict([(decision_query, t) for t in texts], batch_size=64,
                                             show_progress_bar=False), dtype=np.float32).reshape(-1)


class KNNValuer(Valuer):
    """The teacher's non-parametric value (`KNNValue.value(decision_text, cards)`), squashed to [0, 1].

    Args:
        knn: a fitted `damc.runtime.knn.KNNValue` (or anything with that `value` method).
        temperature: sigmoid temperature (the aggregated deltas are in nats).
    """

    name = "knn"

    def __init__(self, knn: Any, temperature: float = 1.0):
        self.knn, self.temperature = knn, temperature

    def value(self, query: str, cards: Sequence[Card], now: float | None = None) -> np.ndarray:
        if not cards:
            return np.zeros(0, dtype=np.float32)
        return sigmoid(np.asarray(self.knn.value(query, list(cards)), dtype=np.float64), self.temperature)


# ----------------------------------------------------------------------------- LLM judge
