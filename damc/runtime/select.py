"""Selectors: which valued cards go into the prompt, under a token budget.

A selector sees the candidates, their values and their (compressed) token costs, and returns a
`Selection`: the kept indices (best first), the adjusted values it ranked by, and for every dropped
card the reason ("budget", "below_threshold", "rank" — beyond top-k). Strategies:

* `TopK(k)` — the k best that fit.
* `Threshold(min_value, k_min=...)` — everything at or above a value that fits, and never fewer than the best
  `k_min` cards that fit (the floor).
* `DecayHybrid(lam, ...)` — the seed's `value · exp(−λ·Δt)` (Δt in hours from timestamps, or in
  turns when cards carry none), then top-k and/or threshold (with its floor).

The floor: a threshold is a value on the valuer's scale, and that scale moves out of the domain it was chosen
on — a scorer whose every value falls below τ would leave the prompt with no history at all. With `k_min > 0`
the best `k_min` cards that fit the budget are kept whatever the threshold says; `Selection.floor` names the
ones kept only by the floor (below the threshold), so `explain()` can say so.

`default_budget(context_window, used_tokens)` is the seed's rule of thumb: 60–70 % of what is left
after the system prompt, tools and the current dialogue.

Example:
    >>> sel = DecayHybrid(lam=0.05, k=8).select(cards, values, tokens, budget=default_budget(8192, 1500))
    >>> [cards[i].card_id for i in sel.kept]
"""

from __future__ import annotations

import logging
import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from damc.cards import Card
from damc.runtime.store import parse_time

logger = logging.getLogger(__name__)


def default_budget(context_window: int, used_tokens: int, fraction: float = 0.65) -> int:
    """Tokens for the memory section: `fraction` of what the window has left after `used_tokens`."""
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    return max(0, int((context_window - used_tokens) * fraction))


def best_first(cards: Sequence[Card], scores: Sequence[float]) -> list[int]:
    """Indices by descending score; ties go to the newer card (later message), then the card id."""
    def key(i: int) -> tuple[float, int, str]:
        c = cards[i]
        return (-float(scores[i]), -(c.result_index if c.result_index is not None else c.position), c.card_id)

    return sorted(range(len(scores)), key=key)


@dataclass
class Selection:
    """What a selector decided.

    Attributes:
        kept: indices of kept cards, best first.
        scores: the values the selector ranked by (after any decay), one per candidate.
        dropped: index -> reason ("budget" | "below_threshold" | "rank").
        budget: the token budget it worked under.
        used_tokens: tokens of the kept cards.
        floor: kept indices below the threshold, kept only as one of the best `k_min` (best first).
    """

    kept: list[int]
    scores: np.ndarray
    dropped: dict[int, str] = field(default_factory=dict)
    budget: int = 0
    used_tokens: int = 0
    floor: list[int] = field(default_factory=list)


class Selector(ABC):
    """Chooses cards under a token budget. Subclasses implement `adjust` and/or `select`."""

    name: str = "selector"

    def adjust(self, cards: Sequence[Card], values: np.ndarray, now: float | None = None) -> np.ndarray:
        """The values to rank by (identity by default)."""
        return np.asarray(values, dtype=np.float32)

    @abstractmethod
    def select(self, cards: Sequence[Card], values: np.ndarray, tokens: Sequence[int], budget: int,
               now: float | None = None) -> Selection:
        """Pick cards.

        Args:
            cards: candidates.
            values: one value per candidate (from a `Valuer`).
            tokens: one token cost per candidate (of the text that would go into the prompt).
            budget: total tokens the kept cards may use.
            now: epoch seconds of the decision (for time decay).
        """

    def _greedy(self, cards: Sequence[Card], scores: np.ndarray, tokens: Sequence[int], budget: int, k: int | None,
                min_value: float | None, k_min: int = 0) -> Selection:
        """The one packing rule: best value first (ties: the newer card), skip a card that does not fit. A card
        below `min_value` is still kept while fewer than `k_min` cards are (the floor; `k` and the budget still
        cap it)."""
        order = best_first(cards, scores)
        kept: list[int] = []
        floor: list[int] = []
        dropped: dict[int, str] = {}
        used = 0
        for i in order:
            below = min_value is not None and scores[i] < min_value
            if below and len(kept) >= k_min:
                dropped[i] = "below_threshold"
            elif k is not None and len(kept) >= k:
                dropped[i] = "rank"
            elif used + int(tokens[i]) > budget:
                dropped[i] = "budget"  # a smaller card further down may still fit
            else:
                kept.append(i)
                used += int(tokens[i])
                if below:
                    floor.append(i)
        return Selection(kept, np.asarray(scores, dtype=np.float32), dropped, budget, used, floor)


def check_k_min(k_min: int) -> int:
    """`k_min` as a count of cards (≥ 0).

    Raises:
        ValueError: not a whole number ≥ 0.
    """
    if isinstance(k_min, bool) or not isinstance(k_min, (int, np.integer)) or k_min < 0:
        raise ValueError(f"k_min must be a whole number of cards ≥ 0 (0: no floor), got {k_min!r}")
    return int(k_min)


class TopK(Selector):
    """The `k` highest-valued cards that fit the budget (`k=None`: as many as fit)."""

    name = "topk"

    def __init__(self, k: int | None = 8):
        self.k = k

    def select(self, cards, values, tokens, budget, now=None) -> Selection:
        return self._greedy(cards, self.adjust(cards, values, now), tokens, budget, self.k, None)


class Threshold(Selector):
    """Every card valued at least `min_value` that fits the budget, best first — and never fewer than the best
    `k_min` cards that fit, whatever their value (the floor; 0: none, a threshold alone).

    Args:
        min_value: the threshold τ, on the valuer's scale.
        k: keep at most this many (None: no cap; caps the floor too).
        k_min: the floor (cards); a scorer's export chooses it on dev with τ (`ScorerMetadata.k_min`).
    """

    name = "threshold"

    def __init__(self, min_value: float = 0.5, k: int | None = None, k_min: int = 0):
        self.min_value, self.k, self.k_min = min_value, k, check_k_min(k_min)

    def select(self, cards, values, tokens, budget, now=None) -> Selection:
        return self._greedy(cards, self.adjust(cards, values, now), tokens, budget, self.k, self.min_value,
                            self.k_min)


def decay_ages(cards: Sequence[Card], now: float | None) -> tuple[np.ndarray, str]:
    """Age of each card: hours since its timestamp when every card has one (and `now` is known), else
    turns (message positions) behind the newest candidate. Returns (ages, unit)."""
    times = [parse_time(c.timestamp) for c in cards]
    if cards and all(t is not None for t in times) and now is not None:
        return np.maximum(0.0, (now - np.asarray(times, dtype=np.float64)) / 3600.0), "hours"
    pos = np.asarray([c.position for c in cards], dtype=np.float64)
    # positions compare only within a session; across sessions this is still a monotone proxy
    return (pos.max() - pos) if len(pos) else pos, "turns"


class DecayHybrid(Selector):
    """`value · exp(−λ·Δt)` then top-k and/or threshold under the budget.

    Args:
        lam: decay rate per hour (or per turn when cards carry no timestamps); small for support
            chats that revisit the same issue, larger where data goes stale fast.
        k: keep at most this many (None: no cap).
        min_value: drop decayed values below this (None: no threshold).
        lam_turns: decay per turn used when ages fall back to turns (default: `lam`).
        k_min: with `min_value`, keep at least the best `k_min` cards that fit whatever their decayed value
            (the floor, as `Threshold`'s; 0: none).
    """

    name = "decay"

    def __init__(self, lam: float = 0.05, k: int | None = 8, min_value: float | None = None,
                 lam_turns: float | None = None, k_min: int = 0):
        self.lam, self.k, self.min_value, self.k_min = lam, k, min_value, check_k_min(k_min)
        self.lam_turns = lam if lam_turns is None else lam_turns

    def adjust(self, cards, values, now=None) -> np.ndarray:
        ages, unit = decay_ages(cards, now)
        lam = self.lam if unit == "hours" else self.lam_turns
        return (np.asarray(values, dtype=np.float64) * np.exp(-lam * ages)).astype(np.float32)

    def select(self, cards, values, tokens, budget, now=None) -> Selection:
        return self._greedy(cards, self.adjust(cards, values, now), tokens, budget, self.k, self.min_value,
                            self.k_min)


def exp_decay(value: float, hours: float, lam: float) -> float:
    """`value · exp(−λ·Δt)` for one card."""
    return value * math.exp(-lam * hours)
