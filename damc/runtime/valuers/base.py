"""The valuer interface and the valuers that compose others: `Valuer`, `HybridValuer`, `CachedValuer`.

A valuer maps `(decision query, cards)` to one value per card, higher = keep. Valuers that need the
memory's own resources (its encoder and cached card embeddings) get them through `bind(memory)`, which
`DecisionAwareMemory` calls before it uses a valuer; every valuer still works standalone on a list of cards.
"""

from __future__ import annotations

import hashlib
import threading
import time
from abc import ABC, abstractmethod
from collections import OrderedDict
from typing import Any, Callable, Sequence

import numpy as np

from damc.cards import Card


class Valuer(ABC):
    """Values candidate cards for a decision. Subclasses implement `value`."""

    name: str = "valuer"

    @abstractmethod
    def value(self, query: str, cards: Sequence[Card], now: float | None = None) -> np.ndarray:
        """One value in [0, 1] per card (float32, shape (len(cards),)).

        Args:
            query: the decision query (`damc.query.render_decision_query`).
            cards: candidate cards.
            now: epoch seconds of the decision (defaults to the current time where it matters).
        """

    def bind(self, memory: Any) -> None:
        """Called by `DecisionAwareMemory` before it uses this valuer (no-op by default)."""

    def value_with_notes(self, query: str, cards: Sequence[Card],
                         now: float | None = None) -> tuple[np.ndarray, list[str | None]]:
        """`value(...)` and one note per card on how it was valued (None: fully; e.g. `NOT_CROSS_ENCODED` for a
        candidate a cascade valued without its expensive stage). `DecisionAwareMemory` records the notes on the
        context, where `explain()` shows them. Default: no notes."""
        return self.value(query, cards, now), [None] * len(cards)

    def __call__(self, query: str, cards: Sequence[Card], now: float | None = None) -> np.ndarray:
        return self.value(query, cards, now)


class _DuckValuer(Valuer):
    """A valuer-shaped object that does not subclass `Valuer` (anything with `value(query, cards, now)`), adapted
    once so the memory calls one method on every valuer."""

    def __init__(self, inner: Any):
        self.inner = inner
        self.name = getattr(inner, "name", type(inner).__name__)

    def value(self, query: str, cards: Sequence[Card], now: float | None = None) -> np.ndarray:
        return np.asarray(self.inner.value(query, cards, now), dtype=np.float32)

    def bind(self, memory: Any) -> None:
        if callable(getattr(self.inner, "bind", None)):
            self.inner.bind(memory)


def as_valuer(obj: Any) -> Valuer:
    """`obj` itself when it is a `Valuer`, else adapted (it needs a `value(query, cards, now)` method).

    Raises:
        TypeError: `obj` has no `value` method.
    """
    if isinstance(obj, Valuer):
        return obj
    if not callable(getattr(obj, "value", None)):
        raise TypeError(f"a valuer needs a value(query, cards, now) method; got {type(obj).__name__}")
    return _DuckValuer(obj)


NOT_CROSS_ENCODED = "not_cross_encoded"   # a cascade's note: valued without the student (below its top-M)


def sigmoid(x: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    return (1.0 / (1.0 + np.exp(-np.asarray(x, dtype=np.float64) / temperature))).astype(np.float32)


class HybridValuer(Valuer):
    """`weight · learned + (1 − weight) · prior` — the prior carries cold start, the learned value the rest.

    Args:
        prior: usually `HeuristicValuer()`.
        learned: a `ScorerValuer`, `KNNValuer` or `LLMJudgeValuer`.
        weight: share of the learned value in [0, 1].
        rank_normalize: rescale the learned values to their rank within the candidates (robust when
            its scale drifts, e.g. a sigmoid of small deltas all near 0.5).
    """

    name = "hybrid"

    def __init__(self, prior: Valuer, learned: Valuer, weight: float = 0.7, rank_normalize: bool = False):
        if not 0.0 <= weight <= 1.0:
            raise ValueError(f"weight must be in [0, 1], got {weight}")
        self.prior, self.learned, self.weight, self.rank_normalize = prior, learned, weight, rank_normalize

    def bind(self, memory: Any) -> None:
        self.prior.bind(memory)
        self.learned.bind(memory)

    def value(self, query: str, cards: Sequence[Card], now: float | None = None) -> np.ndarray:
        return self.value_with_notes(query, cards, now)[0]

    def value_with_notes(self, query: str, cards: Sequence[Card],
                         now: float | None = None) -> tuple[np.ndarray, list[str | None]]:
        """The mixed values, with the learned valuer's notes."""
        if not cards:
            return np.zeros(0, dtype=np.float32), []
        learned, notes = self.learned.value_with_notes(query, cards, now)
        learned = np.asarray(learned, dtype=np.float32)
        if self.rank_normalize and len(cards) > 1:
            learned = np.argsort(np.argsort(learned)).astype(np.float32) / (len(cards) - 1)
        prior = self.prior.value(query, cards, now) if self.weight < 1.0 else np.zeros_like(learned)
        return (self.weight * learned + (1.0 - self.weight) * prior).astype(np.float32), notes

def card_hash(card: Card) -> str:
    """Hash of what a valuer can see of a card: content, age (changes when a result arrives, a card is edited,
    or the conversation moves on) and scope (one scope's cache entry is never another's)."""
    h = hashlib.blake2b(digest_size=12)
    meta = card.meta or {}
    for part in (card.kind, card.status or "", card.raw_text, str(meta.get("age")), str(meta.get("scope"))):
        h.update(part.encode("utf-8", "surrogatepass"))
        h.update(b"\x00")
    return h.hexdigest()


class CachedValuer(Valuer):
    """A TTL cache in front of another valuer, keyed by the query and the whole candidate list (each card's id and
    content hash, in order).

    Whole calls, not single cards: a card's value depends on the other candidates under almost every valuer —
    recency is a rank among them, BM25 and the combiner's features are normalised over them, a cascade
    cross-encodes only the best of them — so a value computed beside other candidates is not reused.

    Args:
        inner: the valuer to cache.
        ttl_s: seconds an entry stays valid (the seed suggests about a minute).
        max_entries: LRU bound on the number of cached calls.
        clock: time source (injectable for tests).

    Attributes:
        hits / misses: cards served from the cache / valued by `inner`.
    """

    def __init__(self, inner: Valuer, ttl_s: float = 60.0, max_entries: int = 10_000,
                 clock: Callable[[], float] = time.monotonic):
        self.inner, self.ttl_s, self.max_entries, self.clock = inner, ttl_s, max_entries, clock
        self.name = f"cached({inner.name})"
        self._cache: OrderedDict[tuple, tuple[np.ndarray, list[str | None], float]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def bind(self, memory: Any) -> None:
        self.inner.bind(memory)

    def value(self, query: str, cards: Sequence[Card], now: float | None = None) -> np.ndarray:
        return self.value_with_notes(query, cards, now)[0]

    def value_with_notes(self, query: str, cards: Sequence[Card],
                         now: float | None = None) -> tuple[np.ndarray, list[str | None]]:
        t = self.clock()
        key = (query, tuple((c.card_id, card_hash(c)) for c in cards))
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None and t - hit[2] <= self.ttl_s:
                self._cache.move_to_end(key)
                self.hits += len(cards)
                return hit[0].copy(), list(hit[1])
            self.misses += len(cards)
        vals, notes = self.inner.value_with_notes(query, cards, now)
        vals = np.asarray(vals, dtype=np.float32)
        with self._lock:
            self._cache[key] = (vals.copy(), list(notes), t)
            self._cache.move_to_end(key)
            while len(self._cache) > self.max_entries:
                self._cache.popitem(last=False)
        return vals, list(notes)

    def clear(self) -> None:
        with self._lock:
            self._cache.clear()
