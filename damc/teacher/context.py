"""The teacher's decision context: a DecisionPoint and a subset of its candidate cards, as prompt segments.

The context is built only with `damc.prompting` (the rendering shared with evaluation and the runtime):
`build_decision_messages(system, tools, cards_to_messages(cards), current_turn)`, rendered by
`prompt_segments`. Segments are grouped as `head` (system prompt with tools), one group per card, and
`tail` (the current user turn and everything after it, then the generation prompt), so any subset of
cards is rendered by concatenating groups — exactly `format_prompt` of the subset's messages for
prefix-stable chat templates (ChatML, Llama, Gemma). For templates that are not prefix-stable the
subset is re-rendered from messages.

Candidate cards of decision k are the cards of `dp.history` (messages before the current user turn).
Limits, all logged as warnings, never silent:

* `max_cards`: only the most recent N candidates are kept (older ones are not labeled).
* `max_card_tokens`: a longer card is truncated (its result, else its text) and marked "…[truncated]".
* `max_context_tokens` (default: the teacher's window): when the full context plus action is longer,
  the oldest cards are dropped until it fits; they get no label (`dropped` lists them).

Example:
    >>> ctx = build_context(teacher, dp, candidate_cards(dp))
    >>> full = ctx.segments()                     # every card
    >>> loo_3 = ctx.segments(exclude={3})         # all but card 3
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from damc.cards import Card, encode_messages, token_counter
from damc.data.episodes import DecisionPoint
from damc.prompting import action_text, build_decision_messages, card_to_messages, prompt_segments

logger = logging.getLogger(__name__)

TRUNCATION_MARK = " …[truncated]"


class ContextTooLongError(ValueError):
    """Even without any card, the decision context does not fit the teacher's window."""


@dataclass
class ContextConfig:
    """Limits applied when building a decision context."""

    max_cards: int | None = None  # keep only the most recent N candidate cards (None: all)
    max_card_tokens: int = 512  # a card longer than this (teacher tokens) is truncated with a warning
    max_context_tokens: int | None = None  # context + action limit in tokens (None: the teacher's window)


def candidate_cards(dp: DecisionPoint, tokenizer: Any = None) -> list[Card]:
    """The candidate cards of a decision: cards of the messages before the current user turn."""
    count = token_counter(tokenizer) if tokenizer is not None else None
    return encode_messages(dp.history, dp.episode.episode_id, count_tokens=count)


@dataclass
class DecisionContext:
    """A decision point with its candidate cards, split into prompt segments.

    Attributes:
        decision: the decision point.
        cards: the kept candidate cards, in order (possibly truncated copies).
        head: segments before the first card (system prompt + tools).
        card_segments: one list of segments per card (a tool card: its call and its result).
        tail: the current turn's segments and the generation-prompt segment.
        action: the gold action text (`damc.prompting.action_text`).
        dropped: ids of candidates left out (max_cards or the window), oldest first.
        truncated: ids of cards that were truncated.
    """

    decision: DecisionPoint
    cards: list[Card]
    head: list[str]
    card_segments: list[list[str]]
    tail: list[str]
    action: str
    tokenizer: Any = None
    splittable: bool = True
    dropped: list[str] = field(default_factory=list)
    truncated: list[str] = field(default_factory=list)

    def messages(self, keep: Iterable[int] | None = None) -> list[dict[str, str]]:
        """The context's chat messages with only the cards at positions `keep` (default: all)."""
        idx = range(len(self.cards)) if keep is None else sorted(set(keep))
        dp = self.decision
        hist = [m for i in idx for m in card_to_messages(self.cards[i])]
        return build_decision_messages(dp.system, dp.episode.tools, hist, dp.current_turn)

    def segments(self, keep: Iterable[int] | None = None, exclude: Iterable[int] = ()) -> list[str]:
        """Prompt segments with the cards at `keep` (default all) minus those in `exclude`."""
        ex = set(exclude)
        idx = [i for i in (range(len(self.cards)) if keep is None else sorted(set(keep))) if i not in ex]
        if not self.splittable:
            return prompt_segments(self.tokenizer, self.messages(idx))
        return self.head + [s for i in idx for s in self.card_segments[i]] + self.tail


def _truncate_card(card: Card, limit: int, count: Any, tokenizer: Any) -> Card | None:
    """A copy of `card` cut to about `limit` tokens, or None when it already fits."""
    text = "\n".join(m["content"] for m in card_to_messages(card))
    n = count(text)
    if n <= limit:
        return None

    def cut(s: str, budget: int) -> str:
        budget = max(budget, 8)
        if tokenizer is None:
            return s[: budget * 4] + TRUNCATION_MARK
        ids = tokenizer.encode(s, add_special_tokens=False)
        return tokenizer.decode(ids[:budget]) + TRUNCATION_MARK

    logger.warning("card %s has %d tokens > max_card_tokens=%d: truncated", card.card_id, n, limit)
    if card.tool_name and card.result is not None:
        budget = limit - count(card.call_text)
        return dataclasses.replace(card, result=cut(card.result_text, budget), meta={**card.meta, "truncated": n})
    return dataclasses.replace(card, raw_text=cut(card.raw_text, limit), meta={**card.meta, "truncated": n})


def build_context(teacher: Any, dp: DecisionPoint, cards: Sequence[Card] | None = None,
                  cfg: ContextConfig | None = None) -> DecisionContext:
    """The decision context of `dp` over `cards` (default: its candidate cards), within the limits of `cfg`.

    Raises:
        ContextTooLongError: the context does not fit the window even without any card.
    """
    cfg = cfg or ContextConfig()
    tok = getattr(teacher, "tokenizer", teacher)  # a Teacher or a bare tokenizer
    count = (lambda s: teacher.count_tokens(s)) if hasattr(teacher, "count_tokens") else token_counter(tok)
    cards = list(candidate_cards(dp, tok) if cards is None else cards)
    dropped: list[str] = []
    if cfg.max_cards is not None and len(cards) > cfg.max_cards:
        keep_from = len(cards) - max(int(cfg.max_cards), 0)
        dropped += [c.card_id for c in cards[:keep_from]]
        cards = cards[keep_from:]
    truncated: list[str] = []
    for i, c in enumerate(cards):
        short = _truncate_card(c, cfg.max_card_tokens, count, tok)
        if short is not None:
            cards[i] = short
            truncated.append(c.card_id)
    ctx = _split(dp, cards, tok)
    ctx.dropped, ctx.truncated = dropped, truncated
    window = cfg.max_context_tokens or getattr(teacher, "max_context_tokens", None)
    if window:
        seg_tokens = [count(s) for s in ctx.head + ctx.tail]
        fixed = sum(seg_tokens) + count(ctx.action)
        if fixed > window:
            raise ContextTooLongError(f"{dp.decision_id}: system prompt, current turn and action take {fixed} "
                                      f"tokens > window {window}, even without cards")
        per_card = [sum(count(s) for s in segs) for segs in ctx.card_segments]
        n_drop = 0
        while fixed + sum(per_card[n_drop:]) > window:
            n_drop += 1
        if n_drop:
            logger.warning("%s: context of %d tokens > window %d: dropped the %d oldest cards",
                           dp.decision_id, fixed + sum(per_card), window, n_drop)
            ctx.dropped += [c.card_id for c in ctx.cards[:n_drop]]
            ctx.cards = ctx.cards[n_drop:]
            ctx.card_segments = ctx.card_segments[n_drop:]
            if not ctx.splittable:
                ctx = dataclasses.replace(_split(dp, ctx.cards, tok), dropped=ctx.dropped, truncated=truncated)
    return ctx


def _split(dp: DecisionPoint, cards: list[Card], tok: Any) -> DecisionContext:
    per_card = [card_to_messages(c) for c in cards]
    hist = [m for ms in per_card for m in ms]
    msgs = build_decision_messages(dp.system, dp.episode.tools, hist, dp.current_turn)
    segs = prompt_segments(tok, msgs)
    action = action_text(dp.gold)
    if len(segs) != len(msgs) + 1:  # the template is not prefix-stable: re-render every subset
        logger.warning("%s: chat template is not prefix-stable; subsets are re-rendered (no exact reuse)",
                       dp.decision_id)
        return DecisionContext(dp, cards, [], [[] for _ in cards], [], action, tok, splittable=False)
    card_segments, pos = [], 1  # segment 0 is the system message
    for ms in per_card:
        card_segments.append(segs[pos: pos + len(ms)])
        pos += len(ms)
    return DecisionContext(dp, cards, segs[:1], card_segments, segs[pos:], action, tok)
