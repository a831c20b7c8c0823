"""The teacher's decision context: the runtime's own prompt over a decision's candidate cards, as segments.

The teacher labels what the runtime chooses from, as the runtime shows it: the context is the prompt
`DecisionAwareMemory` assembles when it keeps every candidate — system prompt, the fenced "Relevant history"
message with one `[card_id] <template line>` per candidate (oldest first), tools, then the current user turn
verbatim (the runtime's default `placement="message"`) — built
with the same functions (`damc.templates.template_compress`, `damc.prompting.build_decision_messages`).
`ContextConfig.render="fields"` writes the lines as the runtime's `fields` compressor does instead
(`damc.templates.field_compress` with the runtime's decision query), for labels of a memory configured with
`compressor="fields"`.
The rendered prompt is cut into `head` (everything before the first memory line), one segment per line
(`"[card_id] …\\n"`) and `tail` (the rest, then the generation prompt), so any subset of cards is the
concatenation of `head`, its lines and `tail` — exactly what the runtime would send with those cards kept
(the "Relevant history" header stays when no line is left). Label rows store each line as the teacher saw it.

Which cards are candidates is the runtime's business (`damc.teacher.candidates.RuntimeCandidates` feeds an
episode to a fresh memory and asks it at each decision); `candidate_cards(dp)` — every card before the current
user turn — is the fallback for callers without a runtime. When the context does not fit the teacher's window
(`max_context_tokens`), the oldest lines are dropped with a warning (`dropped`).

Example:
    >>> ctx = build_context(teacher, dp, cards)
    >>> full = ctx.segments()                     # every card
    >>> loo_3 = ctx.segments(exclude={3})         # all but card 3
    >>> loi_3 = ctx.segments(keep=[3])            # card 3 alone
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from damc.cards import Card, encode_messages, token_counter
from damc.episodes import DecisionPoint
from damc.prompting import action_text, build_decision_messages, format_prompt, neutralize_line
from damc.query import CARD_RENDERS
from damc.templates import template_compress

logger = logging.getLogger(__name__)


class ContextTooLongError(ValueError):
    """Even without any card, the decision context does not fit the teacher's window."""


@dataclass
class ContextConfig:
    """Limits applied when building a decision context."""

    max_context_tokens: int | None = None  # context + action limit in tokens (None: the teacher's window)
    render: str = "template"                # how each card's line is written: a `TEACHER_RENDERS` name


def candidate_cards(dp: DecisionPoint, tokenizer: Any = None) -> list[Card]:
    """Every card of the messages before the current user turn (the candidates when no runtime chose them)."""
    count = token_counter(tokenizer) if tokenizer is not None else None
    return encode_messages(dp.history, dp.episode.episode_id, count_tokens=count)


TEACHER_RENDERS = CARD_RENDERS   # the runtime compressors a teacher can read cards through (= the student's renderings)


def check_render(render: str) -> str:
    """`render` if it names a teacher rendering, else a ValueError that lists them."""
    if render not in TEACHER_RENDERS:
        raise ValueError(f"teacher render must be one of {list(TEACHER_RENDERS)} (the runtime's `MemoryConfig."
                         f"compressor` the labels stand for), got {render!r}")
    return render


def memory_line(card: Card, render: str = "template", query: str | None = None) -> str:
    """The line a card takes in the runtime's prompt (`Compressed.line` of the runtime compressor `render`,
    neutralised as the assembler fences it). `query`: the decision query, which the `fields` lines are chosen by
    (`damc.query.render_decision_query`, as `DecisionAwareMemory` passes it)."""
    if check_render(render) == "fields":
        from damc.templates import field_compress

        return neutralize_line(f"[{card.card_id}] {field_compress(card, query)}")
    return neutralize_line(f"[{card.card_id}] {template_compress(card)}")


def decision_query(dp: DecisionPoint) -> str:
    """The decision query the runtime renders at `dp` (what its compressor is given)."""
    from damc.query import render_decision_query

    return render_decision_query(dp.context, dp.episode.tools)


@dataclass
class DecisionContext:
    """A decision point with its candidate cards, split into prompt segments.

    Attributes:
        decision: the decision point.
        cards: the candidate cards, in prompt order (oldest first).
        lines: each card's memory line, as the teacher sees it.
        head: segments before the first memory line.
        card_segments: one list of segments per card (its line and a newline).
        tail: everything after the last memory line, then the generation prompt.
        action: the gold action text (`damc.prompting.action_text`).
        dropped: ids of candidates left out for the window, oldest first.
    """

    decision: DecisionPoint
    cards: list[Card]
    lines: list[str]
    head: list[str]
    card_segments: list[list[str]]
    tail: list[str]
    action: str
    dropped: list[str] = field(default_factory=list)

    def messages(self, keep: Iterable[int] | None = None) -> list[dict[str, str]]:
        """The context's chat messages with only the cards at positions `keep` (default: all)."""
        idx = range(len(self.cards)) if keep is None else sorted(set(keep))
        dp = self.decision
        return build_decision_messages(dp.system, dp.episode.tools, [], dp.current_turn,
                                       memory_lines=[self.lines[i] for i in idx] or None)

    def segments(self, keep: Iterable[int] | None = None, exclude: Iterable[int] = ()) -> list[str]:
        """Prompt segments with the cards at `keep` (default all) minus those in `exclude`."""
        ex = set(exclude)
        idx = [i for i in (range(len(self.cards)) if keep is None else sorted(set(keep))) if i not in ex]
        return self.head + [s for i in idx for s in self.card_segments[i]] + self.tail


def _split(dp: DecisionPoint, cards: list[Card], tokenizer: Any, render: str = "template") -> DecisionContext:
    """Render the runtime prompt over `cards` (lines written by `render`) and cut it at the memory lines."""
    query = decision_query(dp) if render != "template" else None
    lines = [memory_line(c, render, query) for c in cards]
    action = action_text(dp.gold)
    if not cards:
        prompt = format_prompt(tokenizer, build_decision_messages(dp.system, dp.episode.tools, [], dp.current_turn))
        return DecisionContext(dp, [], [], [prompt], [], [], action)
    prompt = format_prompt(tokenizer, build_decision_messages(dp.system, dp.episode.tools, [], dp.current_turn,
                                                              memory_lines=lines))
    block = "\n".join(lines)
    start = prompt.find(block)
    if start < 0 or prompt.find(block, start + 1) >= 0:
        raise ValueError(f"{dp.decision_id}: the memory lines are not one contiguous block of the rendered prompt")
    rest = prompt[start + len(block):]
    tail = rest[1:] if rest.startswith("\n") else rest  # each line segment carries its own newline
    return DecisionContext(dp, cards, lines, [prompt[:start]], [[ln + "\n"] for ln in lines], [tail], action)


def build_context(teacher: Any, dp: DecisionPoint, cards: Sequence[Card] | None = None,
                  cfg: ContextConfig | None = None) -> DecisionContext:
    """The runtime-rendered context of `dp` over `cards` (default: `candidate_cards(dp)`), within the window.

    Cards are put in prompt order (oldest first, as the runtime orders kept cards).

    Raises:
        ContextTooLongError: the context does not fit the window even without any card.
    """
    cfg = cfg or ContextConfig()
    tok = getattr(teacher, "tokenizer", teacher)  # a Teacher or a bare tokenizer
    count = teacher.count_tokens if hasattr(teacher, "count_tokens") else token_counter(tok)
    cards = sorted(candidate_cards(dp, tok) if cards is None else cards, key=lambda c: (c.position, c.card_id))
    ctx = _split(dp, list(cards), tok, cfg.render)
    window = cfg.max_context_tokens or getattr(teacher, "max_context_tokens", None)
    if not window:
        return ctx
    fixed = sum(count(s) for s in ctx.head + ctx.tail) + count(ctx.action)
    if fixed > window:
        raise ContextTooLongError(f"{dp.decision_id}: system prompt, tools, current turn and action take {fixed} "
                                  f"tokens > window {window}, even without cards")
    per_card = [count(s[0]) for s in ctx.card_segments]
    n_drop = 0
    while fixed + sum(per_card[n_drop:]) > window:
        n_drop += 1
    if n_drop:
        logger.warning("%s: context of %d tokens > window %d: dropped the %d oldest cards", dp.decision_id,
                       fixed + sum(per_card), window, n_drop)
        ctx = _split(dp, list(cards)[n_drop:], tok, cfg.render)
        ctx.dropped = [c.card_id for c in list(cards)[:n_drop]]
    return ctx
