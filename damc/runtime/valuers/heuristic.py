"""Model-free valuers: the cold-start prior (`HeuristicValuer`) and pure recency (`RecencyValuer`).

The heuristic prior values errors, recent tool results, user constraints / changed requirements and
identifiers shared with the query; `is_pinned` marks the cards the runtime always considers (tool errors
and user constraints). Both return values in [0, 1].
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from damc.cards import Card, critical_atoms
from damc.query import query_body
from damc.runtime.valuers.base import Valuer

# Domain-agnostic cues that a user message sets or changes a requirement ("actually, make it 3",
# "don't ...", "only ...", "must ..."). Word-boundary regexes, case-insensitive.
CONSTRAINT_PATTERNS: tuple[str, ...] = (
    r"\bactually\b", r"\binstead\b", r"\bdon'?t\b", r"\bdo not\b", r"\bnever\b", r"\bmust(?:n'?t)?\b",
    r"\bonly\b", r"\bchang(?:e|ed|ing)\b", r"\bnot\b", r"\bno longer\b", r"\bwithout\b", r"\bavoid\b",
    r"\bmake sure\b", r"\bplease ensure\b", r"\brather\b", r"\bcancel\b", r"\bupdate\b", r"\bswitch\b",
    r"\bprefer\b", r"\bat least\b", r"\bat most\b", r"\bno more than\b", r"\bexcept\b", r"\bwrong\b",
    r"\bmistake\b", r"\bcorrect(?:ion)?\b", r"\bremember\b", r"\balways\b", r"\bshould(?:n'?t)?\b",
)
_CONSTRAINT_RE = re.compile("|".join(CONSTRAINT_PATTERNS), re.I)


def is_constraint(text: str) -> bool:
    """True when a (user) message looks like it sets or changes a requirement."""
    return bool(_CONSTRAINT_RE.search(text or ""))


@functools.lru_cache(maxsize=256)
def _long_text_atoms(text: str) -> frozenset[str]:
    return frozenset(a.lower() for a in critical_atoms(text))


def card_atoms(text: str) -> frozenset[str] | set[str]:
    """A card's lower-cased `critical_atoms`; a long text's are remembered (≤ 256 texts), so a 64 KiB tool result
    is not scanned again on every later turn."""
    if len(text or "") < 4096:
        return {a.lower() for a in critical_atoms(text)}
    return _long_text_atoms(text)


def is_pinned(card: Card) -> bool:
    """Pinned candidates: tool errors and user constraints / changed requirements."""
    return card.is_error or (card.kind == "user" and is_constraint(card.raw_text))


@dataclass
class HeuristicWeights:
    """Weights of the cold-start prior (the sum is clipped to [0, 1]).

    Attributes:
        error: a failed tool call (the agent must not repeat it blindly).
        constraint: a user message that sets or changes a requirement.
        tool_result: any tool card (facts the agent fetched).
        user: any other user message.
        assistant: an assistant text message.
        recency: times exp(-rank / recency_scale), rank 0 = the newest candidate.
        recency_scale: candidates over which recency decays by 1/e.
        overlap: identifiers (numbers, ids, names) shared with the query, saturating at `overlap_sat`.
        overlap_sat: shared atoms that give the full overlap weight.
    """

    error: float = 0.45
    constraint: float = 0.35
    tool_result: float = 0.15
    user: float = 0.10
    assistant: float = 0.05
    recency: float = 0.20
    recency_scale: float = 8.0
    overlap: float = 0.30
    overlap_sat: int = 2


class HeuristicValuer(Valuer):
    """Cold-start prior: errors, recent tool results, user constraints, ids shared with the query."""

    name = "heuristic"

    def __init__(self, weights: HeuristicWeights | None = None):
        self.w = weights or HeuristicWeights()

    def value(self, query: str, cards: Sequence[Card], now: float | None = None) -> np.ndarray:
        w = self.w
        q_atoms = {a.lower() for a in critical_atoms(query_body(query))}
        # newest first by (timestamp, position); cards without timestamps fall back to position
        order = sorted(range(len(cards)), key=lambda i: (cards[i].timestamp or "", cards[i].position), reverse=True)
        rank = np.empty(len(cards))
        rank[order] = np.arange(len(cards))
        out = np.zeros(len(cards), dtype=np.float32)
        for i, c in enumerate(cards):
            v = {"tool_result": w.tool_result, "tool_error": w.tool_result, "user": w.user,
                 "assistant": w.assistant}.get(c.kind, 0.0)
            if c.is_error:
                v += w.error
            if c.kind == "user" and is_constraint(c.raw_text):
                v += w.constraint
            v += w.recency * math.exp(-rank[i] / w.recency_scale)
            if q_atoms:
                shared = len(q_atoms & card_atoms(c.raw_text))
                v += w.overlap * min(1.0, shared / w.overlap_sat)
            out[i] = min(1.0, v)
        return out


# ----------------------------------------------------------------------------- learned valuers


def recency_order(cards: Sequence[Card]) -> np.ndarray:
    """Rank of each card from the newest (0) by (timestamp, last message index); cards without timestamps
    fall back to message indices."""
    last = [c.result_index if c.result_index is not None else c.position for c in cards]
    order = sorted(range(len(cards)), key=lambda i: (cards[i].timestamp or "", last[i], cards[i].card_id), reverse=True)
    rank = np.empty(len(cards), dtype=np.float64)
    rank[order] = np.arange(len(cards))
    return rank


class RecencyValuer(Valuer):
    """Newest first: `exp(−rank / scale)`, rank 0 = the newest candidate (the sliding window, as a valuer).

    Args:
        scale: candidates over which the value decays by 1/e (sets how fast a threshold cuts old cards).
    """

    name = "recency"

    def __init__(self, scale: float = 8.0):
        self.scale = scale

    def value(self, query: str, cards: Sequence[Card], now: float | None = None) -> np.ndarray:
        return np.exp(-recency_order(cards) / self.scale).astype(np.float32)
