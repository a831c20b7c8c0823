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

    def __call__(self, query: str, cards: Sequence[Card], now: float | None = None) -> np.ndarray:
        return self.value(query, cards, now)

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
        if not cards:
            return np.zeros(0, dtype=np.float32)
        learned = self.learned.value(query, cards, now)
        if self.rank_normalize and len(cards) > 1:
            learned = np.argsort(np.argsort(learned)).astype(np.float32) / (len(cards) - 1)
        prior = self.prior.value(query, cards, now) if self.weight < 1.0 else np.zeros_like(learned)
        return (self.weight * learned + (1.0 - self.weight) * prior).astype(np.float32)

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
    """A TTL cache in front of another valuer, keyed by (query, card_id, card content hash).

    Args:
        inner: the valuer to cache.
        ttl_s: seconds an entry stays valid (the seed suggests about a minute).
        max_entries: LRU bound on the cache size.
        clock: time source (injectable for tests).
    """

    def __init__(self, inner: Valuer, ttl_s: float = 60.0, max_entries: int = 100_000,
                 clock: Callable[[], float] = time.monotonic):
        self.inner, self.ttl_s, self.max_entries, self.clock = inner, ttl_s, max_entries, clock
        self.name = f"cached({inner.name})"
        self._cache: OrderedDict[tuple[str, str, str], tuple[float, float]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def bind(self, memory: Any) -> None:
        self.inner.bind(memory)

    def value(self, query: str, cards: Sequence[Card], now: float | None = None) -> np.ndarray:
        t = self.clock()
        keys = [(query, c.card_id, card_hash(c)) for c in cards]
        out = np.zeros(len(cards), dtype=np.float32)
        todo = []
        with self._lock:
            for i, k in enumerate(keys):
                hit = self._cache.get(k)
                if hit is not None and t - hit[1] <= self.ttl_s:
                    out[i] = hit[0]
                    self._cache.move_to_end(k)
                else:
                    todo.append(i)
            self.hits += len(cards) - len(todo)
            self.misses += len(todo)
        if todo:
            vals = self.inner.value(query, [cards[i] for i in todo], now)
            with self._lock:
                for j, i in enumerate(todo):
                    out[i] = vals[j]
                    self._cache[keys[i]] = (float(vals[j]), t)
                while len(self._cache) > self.max_entries:
                    self._cache.popitem(last=False)
        return out

    def clear(self) -> None:
        with self._lock:
            self._cache.clear()
