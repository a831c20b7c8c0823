"""What `DecisionAwareMemory.build_context` returns: the assembled prompt and every card decision behind it.

`Context` holds the messages to send, the kept cards (`SelectedCard`, prompt order, with value, score,
tokens and compressed line), the dropped candidates (`DroppedCard`, with the reason), the decision query,
token counts before/after and per-stage timings. `candidate_ids` is every card the valuer saw.

Example:
    >>> ctx = memory.build_context(messages, tools=tools)
    >>> ctx.memory_lines[:2], ctx.tokens_saved, ctx.timings_ms["total"]
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from damc.cards import Card


@dataclass
class SelectedCard:
    """A kept card.

    Attributes:
        card_id: the card (expand with `memory.expand(card_id)`).
        value: the valuer's value.
        score: the value the selector ranked by (after decay).
        tokens: tokens of its compressed line.
        raw_tokens: tokens of the raw card.
        text: compressed text.
        line: `[card_id] text` as it appears in the prompt (neutralised: `damc.prompting.neutralize_line`).
        source: "template" or "llm".
        retrieved_by: why it was a candidate ("similar", "recent", "pinned").
        card: the raw card.
        note: how the valuer valued it, when not fully (`damc.runtime.valuers.NOT_CROSS_ENCODED`: a cascade left it
            below its `max_scored`, so the student never read it); None otherwise.
        kept_by: what kept it: "selector" (its rule: top-k or at/above the threshold) or "floor" (below the
            threshold τ, kept as one of the best `k_min`: `damc.runtime.select.Threshold`).
    """

    card_id: str
    value: float
    score: float
    tokens: int
    raw_tokens: int
    text: str
    line: str
    source: str
    retrieved_by: list[str]
    card: Card | None = None
    note: str | None = None
    kept_by: str = "selector"


@dataclass
class DroppedCard:
    """A candidate that did not make it, and why ("budget", "below_threshold", "rank"); `note` as `SelectedCard`'s."""

    card_id: str
    value: float
    score: float
    tokens: int
    raw_tokens: int
    reason: str
    retrieved_by: list[str]
    note: str | None = None


@dataclass
class Context:
    """The result of `build_context`.

    Attributes:
        messages: the assembled chat messages to send to the model, in the caller's own format: its leading
            system / developer messages, the fenced memory message, then the current turn exactly as given
            (`damc.runtime.assemble`).
        selected: kept cards (prompt order, oldest first) with scores and compressed text.
        dropped: candidates that were not kept, with the reason.
        decision_query: the query the valuer saw.
        budget_tokens: the memory budget.
        tokens_before: prompt tokens of the whole conversation sent verbatim (no DAMC).
        tokens_after: prompt tokens of `messages`.
        memory_tokens: tokens of the kept memory lines.
        timings_ms: wall time per stage (retrieve, value, select, compress, assemble) and total.
        n_candidates: candidates scored.
        n_hot: hot cards in the scope (the rest were "not retrieved").
        session_id: the session.
        valuer / selector: their names.
        threshold: the selector's threshold τ (None: it has none).
        k_min: the selector's floor under τ (the best `k_min` cards are kept whatever τ says; 0: none).
        user_id / agent_id: the scope the context was built for.
    """

    messages: list[dict[str, Any]]
    selected: list[SelectedCard]
    dropped: list[DroppedCard]
    decision_query: str
    budget_tokens: int
    tokens_before: int
    tokens_after: int
    memory_tokens: int
    timings_ms: dict[str, float]
    n_candidates: int
    n_hot: int
    session_id: str
    valuer: str = ""
    selector: str = ""
    threshold: float | None = None
    k_min: int = 0
    current_turn: list[dict[str, Any]] = field(default_factory=list)
    user_id: str = "default"
    agent_id: str | None = None

    @property
    def prefix_messages(self) -> list[dict[str, Any]]:
        """The assembled messages before the current turn: the caller's instructions and the memory message."""
        return self.messages[: len(self.messages) - len(self.current_turn)]

    def openai_messages(self) -> list[dict[str, Any]]:
        """`messages` (a copy): already the OpenAI chat format the caller sent, tool-call structure intact."""
        return list(self.messages)

    @property
    def candidate_ids(self) -> list[str]:
        """Every card the valuer saw (kept, then dropped)."""
        return [s.card_id for s in self.selected] + [d.card_id for d in self.dropped]

    @property
    def floor_ids(self) -> list[str]:
        """Kept cards below the threshold, kept only by the selector's floor of `k_min` (prompt order)."""
        return [s.card_id for s in self.selected if s.kept_by == "floor"]

    @property
    def memory_lines(self) -> list[str]:
        return [s.line for s in self.selected]

    @property
    def tokens_saved(self) -> int:
        return self.tokens_before - self.tokens_after

    @property
    def ratio(self) -> float:
        """tokens_after / tokens_before."""
        return self.tokens_after / self.tokens_before if self.tokens_before else 1.0

    def to_dict(self, with_cards: bool = False) -> dict[str, Any]:
        d = asdict(self)
        d.pop("current_turn", None)
        if not with_cards:
            for s in d["selected"]:
                s.pop("card", None)
        d["tokens_saved"] = self.tokens_saved
        return d
