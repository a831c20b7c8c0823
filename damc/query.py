"""The texts the scorer reads — the decision query and the card rendering (versioned together) — and the
card document retrieval indexes.

The scorer never sees the gold action. The decision query is a fixed rendering of what is known at
decision time — the latest user message, the last few turns (short) and the names of the available tools;
retrieval embeds it whole. The scorer reads `query_body(query)`, the query without its tool list (since
`RENDER_VERSION` 3), as BM25 and the heuristic always did: the list is the same for every card of a
decision, it is one domain's wording (a scorer trained on retail's tool names meets airline's), and on
τ²-bench it was ~100 of the query's ~125 tokens — half of every (query, card) pair scored at each decision.
Each card is rendered by `render_card` as the **line the prompt will carry** (its template, see
`damc.templates`) headed by its kind and age — `[tool_error · 12 messages ago] ✗ get_order(order_id=88412)
failed: 500 …` — so one model learns content × recency × kind, and scores 3–5× fewer tokens than the raw
card. The age is the number of messages between the card's last message and the current user turn; the
runtime sets it on each candidate (`card.meta["age"]`), and the teacher's labels store the same text.
Training and inference must use the same renderings, so `RENDER_VERSION` is written into every exported
scorer (`damc_scorer.json`) and checked on load. Both renderings are domain-agnostic.

A card can also be rendered as the runtime's `fields` compressor writes it (`render_card(card, render="fields",
query=q)`: every id of a tool result kept, other fields chosen by the decision query), for a scorer distilled from a
teacher that read `fields` lines (`scripts/label.py render=fields`); such a scorer records `card_render: fields` in
`damc_scorer.json` and `CardScorer` renders its cards that way.

`card_document` is the fuller text retrieval embeds and BM25 matches (kind, call, status, raw payload); it
does not depend on the decision, so an index can embed it once at ingest.

Example:
    >>> q = render_decision_query(messages[:k], tools)
    >>> texts = [render_card(c) for c in cards]
"""

from __future__ import annotations

import json
from typing import Any

from damc.cards import Card
from damc.episodes import message_text, render_action
from damc.templates import clip as _clip
from damc.templates import template_compress

RENDER_VERSION = "3"     # 3: the scorer reads the query without its tool list; 2: card = template line with kind and age
CARD_RENDER_SINCE = "2"  # cards are rendered the same way since this version (older labels need relabelling)

QUERY_USER_CHARS = 400     # latest user message, truncated
QUERY_TURN_CHARS = 160     # each recent message after it, truncated
QUERY_RECENT = 3           # how many recent messages after the latest user message
CARD_CHARS = 480           # card rendering, truncated (the cross-encoder sees ≤ 256 tokens anyway)
CARD_RENDERS = ("template", "fields")   # how a card's line is written: the runtime compressor of that name


def tool_names(tools: list[dict[str, Any]] | None) -> list[str]:
    """Function names from OpenAI tool schemas (or bare {"name": ...} dicts)."""
    return [t.get("function", t).get("name", "") for t in tools or [] if isinstance(t, dict)]


def _turn_text(m: dict[str, Any]) -> str:
    role = m.get("role")
    if role == "assistant":
        return "assistant: " + render_action(m)
    if role == "tool":
        return "tool: " + message_text(m)
    return f"{role}: " + message_text(m)


def render_decision_query(context_messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> str:
    """The scorer's query for the decision that follows `context_messages`.

    Args:
        context_messages: every message before the decision (OpenAI format).
        tools: the tools available at the decision.
    """
    last_user = None
    for i in range(len(context_messages) - 1, -1, -1):
        if context_messages[i].get("role") == "user":
            last_user = i
            break
    parts = []
    if last_user is not None:
        parts.append("user: " + _clip(message_text(context_messages[last_user]), QUERY_USER_CHARS))
        recent = context_messages[last_user + 1:][-QUERY_RECENT:]
    else:
        recent = [m for m in context_messages if m.get("role") not in ("system", "developer")][-QUERY_RECENT:]
    parts += [_clip(_turn_text(m), QUERY_TURN_CHARS) for m in recent]
    names = tool_names(tools)
    if names:
        parts.append("tools: " + ", ".join(names))
    return "\n".join(parts)


def query_body(query: str) -> str:
    """The decision query without its tool list: what the scorer (since `RENDER_VERSION` 3), BM25 and the
    heuristic read. Idempotent, so a query already stripped passes unchanged."""
    return "\n".join(line for line in query.splitlines() if not line.startswith("tools: "))


def age_in_messages(card: Card) -> int | None:
    """Messages between the card's last message and the current user turn, as the runtime set it (None: unknown)."""
    age = (card.meta or {}).get("age")
    return int(age) if isinstance(age, (int, float)) else None


def render_card(card: Card, max_chars: int = CARD_CHARS, render: str = "template", query: str | None = None) -> str:
    """The scorer's text for one card: `[kind · N messages ago] <line>` (no age when unknown), the line written as
    the runtime compressor `render` writes it (`CARD_RENDERS`; `fields` chooses a result's fields by `query`, the
    decision query)."""
    age = age_in_messages(card)
    head = f"[{card.kind} · {age} messages ago]" if age is not None else f"[{card.kind}]"
    if render == "fields":
        from damc.templates import field_compress

        return _clip(f"{head} {field_compress(card, query)}", max_chars)
    if render != "template":
        raise ValueError(f"card render must be one of {list(CARD_RENDERS)}, got {render!r}")
    return _clip(f"{head} {template_compress(card)}", max_chars)


def card_document(card: Card, max_chars: int = CARD_CHARS) -> str:
    """The retrieval text of a card (embeddings, BM25): kind tag, call and status first, then the raw payload."""
    if card.tool_name:
        head = f"[{card.kind}] {card.call_text}"
        if card.is_error and card.error:
            code, msg = card.error.get("code"), card.error.get("message")
            head += " failed: " + " ".join(str(x) for x in (code, msg) if x not in (None, ""))
        body = card.result_text
        text = f"{head} -> {body}" if body else head
    else:
        text = f"[{card.kind}] {card.raw_text}"
    return _clip(text, max_chars)


def episode_documents(episode: Any) -> list[str]:
    """The retrieval texts (`card_document`) of every card of an episode, in order: what a batch job embeds ahead of
    the memories it feeds (`damc.runtime.encoder.CachedEncoder.prefetch`)."""
    from damc.cards import encode_episode

    return [card_document(c) for c in encode_episode(episode)]


def render_tools_brief(tools: list[dict[str, Any]] | None) -> str:
    """Compact one-line-per-tool listing: `name(param, param?) - description`."""
    lines = []
    for t in tools or []:
        fn = t.get("function", t)
        params = (fn.get("parameters") or {}).get("properties") or {}
        req = set((fn.get("parameters") or {}).get("required") or [])
        sig = ", ".join(p if p in req else p + "?" for p in params)
        desc = _clip(fn.get("description", ""), 120)
        lines.append(f"{fn.get('name')}({sig})" + (f" - {desc}" if desc else ""))
    return "\n".join(lines)


def dumps(x: Any) -> str:
    return x if isinstance(x, str) else json.dumps(x, ensure_ascii=False)
