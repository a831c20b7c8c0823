"""Retrieval valuers: relevance to the decision query without a trained model.

* `SimilarityValuer` — cosine of card and query embeddings (the memory's own encoder and cached card
  embeddings when bound to a `DecisionAwareMemory`), clipped to [0, 1].
* `BM25Valuer` — Okapi BM25 (`damc.runtime.lexical`) of the query over the candidates, divided by the best score.
* `GenerativeAgentsValuer` — Park et al. (2023): recency + importance + relevance, each min-max normalised.

Example:
    >>> memory = DecisionAwareMemory(path, valuer=BM25Valuer())
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from damc.cards import Card
from damc.models import DEFAULT_ENCODER
from damc.query import card_document, query_body
from damc.runtime.lexical import bm25_scores, bm25_tokens
from damc.runtime.scope import scope_of
from damc.runtime.valuers.base import Valuer
from damc.runtime.valuers.heuristic import HeuristicValuer


class SimilarityValuer(Valuer):
    """Cosine similarity of each card's embedding to the query's, clipped to [0, 1].

    Bound to a memory, it reuses the memory's encoder, the query vector of the FAISS search and the card
    embeddings cached in the store (nothing is encoded twice); standalone it loads `encoder` itself.

    Args:
        encoder: registry name / path of a sentence encoder, or an object with `.encode(texts, ...)`.
    """

    name = "similarity"

    def __init__(self, encoder: str | Any = DEFAULT_ENCODER):
        self.encoder_spec = encoder
        self._memory: Any = None
        self._encoder: Any = None if isinstance(encoder, str) else encoder

    def bind(self, memory: Any) -> None:
        self._memory = memory

    def _encode(self, texts: list[str]) -> np.ndarray:
        if self._encoder is None:
            from damc.runtime.index import load_card_encoder

            self._encoder = load_card_encoder(self.encoder_spec)
        return np.asarray(self._encoder.encode(texts, normalize_embeddings=True, convert_to_numpy=True,
                                               show_progress_bar=False), dtype=np.float32)

    def value(self, query: str, cards: Sequence[Card], now: float | None = None) -> np.ndarray:
        if not cards:
            return np.zeros(0, dtype=np.float32)
        if self._memory is not None:
            q = self._memory.index.query_vector(query)                 # (dim,)
            vecs = self._memory.index.card_vectors([c.card_id for c in cards], scope_of(cards))  # (n, dim)
        else:
            q = self._encode([query])[0]
            vecs = self._encode([card_document(c) for c in cards])
        return np.clip(vecs @ q, 0.0, 1.0).astype(np.float32)


class BM25Valuer(Valuer):
    """Okapi BM25 (Lucene variant, `damc.runtime.lexical`; equal to `bm25s`'s scores) of the query body over the
    candidates' renderings, divided by the best candidate's score (values in [0, 1]: a threshold is relative to
    the best match).

    Args:
        k1: term-frequency saturation.
        b: length normalisation.
    """

    name = "bm25"

    def __init__(self, k1: float = 1.5, b: float = 0.75):
        self.k1, self.b = k1, b

    def value(self, query: str, cards: Sequence[Card], now: float | None = None) -> np.ndarray:
        if not cards:
            return np.zeros(0, dtype=np.float32)
        docs = [bm25_tokens(card_document(c)) for c in cards]
        scores = bm25_scores(docs, bm25_tokens(query_body(query)), self.k1, self.b)
        top = scores.max(initial=0.0)
        return (scores / top if top > 0 else np.zeros_like(scores)).astype(np.float32)


def _minmax(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    span = x.max() - x.min() if x.size else 0.0
    return (x - x.min()) / span if span > 0 else np.zeros_like(x)


class GenerativeAgentsValuer(Valuer):
    """Park et al. (2023) retrieval: (α·recency + β·importance + γ·relevance) / (α + β + γ), each min-max normalised.

    recency = `decay ** (messages between the card and the newest candidate)` (message distance stands in for
    game hours); importance = the heuristic prior (errors, user constraints, fresh tool results) instead of an
    LLM's 1–10 poignancy rating, which would cost one LLM call per card; relevance = embedding cosine.

    Args:
        decay: recency factor per message.
        weights: (α, β, γ).
        encoder: the relevance encoder (the memory's own when bound).
    """

    name = "generative_agents"

    def __init__(self, decay: float = 0.99, weights: Sequence[float] = (1.0, 1.0, 1.0), encoder: str | Any = DEFAULT_ENCODER):
        self.decay, self.weights = decay, tuple(float(w) for w in weights)
        if len(self.weights) != 3 or sum(self.weights) <= 0:
            raise ValueError(f"weights must be three non-negative numbers with a positive sum, got {weights!r}")
        self.importance = HeuristicValuer()
        self.relevance = SimilarityValuer(encoder)

    def bind(self, memory: Any) -> None:
        self.relevance.bind(memory)

    def value(self, query: str, cards: Sequence[Card], now: float | None = None) -> np.ndarray:
        if not cards:
            return np.zeros(0, dtype=np.float32)
        last = np.array([c.result_index if c.result_index is not None else c.position for c in cards], dtype=float)
        recency = self.decay ** (last.max() - last)
        a, b, g = self.weights
        total = (a * _minmax(recency) + b * _minmax(self.importance.value(query, cards, now))
                 + g * _minmax(self.relevance.value(query, cards, now)))
        return (total / (a + b + g)).astype(np.float32)
