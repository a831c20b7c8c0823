"""Ingestion: OpenAI chat messages → cards, checked, bounded and merged with their tool results.

`ingest_batch(...)` is the function `DecisionAwareMemory.add_messages` runs inside one store transaction
(`CardStore.ingest`): it validates every message (`check_message`, naming the message and field at fault),
turns them into cards (`damc.cards.encode_messages`), merges a `tool` result into the card of its pending call
(from this batch or an earlier one) and bounds every card (`bound_card`): text beyond `max_card_chars` is cut,
lone surrogates (invalid UTF-8 that slipped into a str) are replaced, and the cut is recorded on the card as
`meta["truncated"] = {"field": ..., "chars": original length, "kept": kept length}`. A tool call whose arguments
are not a JSON object (a model's truncated output) does not stop the batch: its card keeps the raw text
(`meta["malformed"] = True`, `meta["raw_arguments"]`) and a warning is logged.

Example:
    >>> memory.add_messages([{"role": "tool", "tool_call_id": "c1", "content": "x" * 10_000_000}])
    >>> memory.expand("default:1:0").meta["truncated"]
    {'field': 'content', 'chars': 10000000, 'kept': 65536}
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any, Callable, Iterable, Sequence

from damc.cards import Card, encode_messages
from damc.cards import card_id as make_card_id
from damc.episodes import EpisodeFormatError, check_message, malformed_arguments, message_text

logger = logging.getLogger(__name__)

_SURROGATES = re.compile("[\ud800-\udfff]")
MAX_CARD_CHARS = 65_536  # per card text field; a 10 MB tool result becomes a 64 KiB card (the rest is counted)


def set_aside_malformed(m: dict[str, Any], i: int) -> tuple[dict[str, Any], dict[int, str]]:
    """The message with every tool call whose arguments are malformed given `{}` instead, and `{call index: raw
    arguments}` of those calls (logged as a warning: the card keeps them as text, see `mark_malformed`)."""
    bad: dict[int, str] = {}
    for j, call in enumerate(m.get("tool_calls") or []):
        args = call["function"].get("arguments", "{}")
        why = malformed_arguments(args)
        if why is not None:
            logger.warning("messages[%d].tool_calls[%d].function.arguments are %s: stored as text on the card "
                           "(meta['malformed'])", i, j, why)
            bad[j] = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
    if not bad:
        return m, bad
    calls = [{**c, "function": {**c["function"], "arguments": "{}"}} if j in bad else c
             for j, c in enumerate(m["tool_calls"])]
    return {**m, "tool_calls": calls}, bad


def mark_malformed(card: Card, raw: str, count: Callable[[str], int] | None = None) -> Card:
    """A tool card whose call's arguments could not be parsed: the raw arguments kept as text."""
    card.arguments = {}
    card.meta = {**(card.meta or {}), "malformed": True, "raw_arguments": raw}
    card.raw_text = _malformed_text(card)
    card.n_tokens = _count(card.raw_text, count)
    return card


def _count(text: str, count: Callable[[str], int] | None) -> int:
    return count(text) if count is not None else max(1, (len(text) + 3) // 4)


def _malformed_text(card: Card) -> str:
    text = f"{card.tool_name}({card.meta['raw_arguments']})"
    return f"{text} -> {card.result_text}" if card.result is not None else text


def clean_text(s: Any) -> Any:
    """`s` with lone surrogates (undecodable bytes smuggled into a str, or JSON `\\ud800` escapes) replaced by
    U+FFFD, recursively through dicts and lists; anything else unchanged."""
    if isinstance(s, str):
        try:
            s.encode("utf-8")
            return s
        except UnicodeEncodeError:
            return _SURROGATES.sub("\ufffd", s)
    if isinstance(s, dict):
        return {clean_text(k): clean_text(v) for k, v in s.items()}
    if isinstance(s, list):
        return [clean_text(v) for v in s]
    return s


def bound_card(card: Card, max_chars: int = MAX_CARD_CHARS) -> Card:
    """Clean a card's text (lone surrogates) and cut its raw text and string result to `max_chars`, recording the
    cut on the card (`meta["truncated"]`). A parsed (JSON) result too large to keep is stored as its cut text."""
    card.raw_text, card.result, card.arguments = (clean_text(card.raw_text), clean_text(card.result),
                                                  clean_text(card.arguments))
    if isinstance(card.result, (dict, list)):
        text = json.dumps(card.result, ensure_ascii=False)
        if len(text) > max_chars:
            card.result = text
    cuts: dict[str, Any] = {}
    for field in ("raw_text", "result"):
        value = getattr(card, field)
        if isinstance(value, str) and len(value) > max_chars:
            cuts.setdefault("field", field)
            cuts[f"{field}_chars"] = len(value)
            setattr(card, field, value[:max_chars])
    if cuts and not (card.meta or {}).get("truncated"):  # a cut at the message level is already recorded
        field = cuts["field"]
        card.meta = {**(card.meta or {}), "truncated": {"field": field, "chars": cuts[f"{field}_chars"],
                                                        "kept": max_chars, **cuts}}
    return card


def bound_message(m: dict[str, Any], max_chars: int = MAX_CARD_CHARS) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The message with its text content cleaned and cut to `max_chars` *before* it is parsed and tokenized (a
    10 MB tool result is never tokenized whole), and a record of the cut (None when nothing was cut)."""
    c = m.get("content")
    if isinstance(c, list):
        c = message_text(m)
    if not isinstance(c, str):
        return m, None
    text, info = clean_text(c), None
    if len(text) > max_chars:
        info = {"field": "content", "chars": len(text), "kept": max_chars}
        text = text[:max_chars]
    return ({**m, "content": text} if text != m.get("content") else m), info


def _record_cut(card: Card, info: dict[str, Any] | None) -> None:
    if info:
        card.meta = {**(card.meta or {}), "truncated": dict(info)}


def merge_result(card: Card, tool_msg: dict[str, Any], index: int, count: Any) -> Card:
    """Attach a tool result to its pending call card, with `encode_messages`'s own merge logic."""
    call = {"id": card.call_id, "type": "function",
            "function": {"name": card.tool_name, "arguments": json.dumps(card.arguments or {})}}
    merged = encode_messages([{"role": "assistant", "content": None, "tool_calls": [call]}, tool_msg],
                             card.episode_id, count_tokens=count, start_index=index - 1)[0]
    card.result, card.status, card.error, card.kind = merged.result, merged.status, merged.error, merged.kind
    card.raw_text, card.n_tokens, card.result_index = merged.raw_text, merged.n_tokens, index
    if (card.meta or {}).get("malformed"):
        card.raw_text = _malformed_text(card)
        card.n_tokens = _count(card.raw_text, count)
    return card


def _tool_result(m: dict[str, Any], i: int, pending: dict[str, str], touched: dict[str, Card],
                 get_card: Callable[[str], Card | None], count: Any) -> Card:
    cid = m["tool_call_id"]   # present and a string: check_message saw to that
    if cid not in pending:
        raise EpisodeFormatError(f"tool result for unknown call {cid[:80]!r}", field=f"messages[{i}].tool_call_id",
                                 expected="the id of an earlier assistant tool call still awaiting its result ("
                                          + (", ".join(map(repr, list(pending)[:10])) or "none") + ")")
    card_key = pending.pop(cid)
    card = touched.get(card_key) or get_card(card_key)
    if card is None:  # the store lost it (should not happen): say so rather than guess
        raise EpisodeFormatError(f"the card of call {cid!r} is missing from the store",
                                 field=f"messages[{i}].tool_call_id")
    touched[card_key] = merge_result(card, m, i, count)
    return touched[card_key]


def ingest_batch(msgs: Sequence[Any], session_id: str, state: dict[str, Any], get_card: Callable[[str], Card | None],
                 *, count: Any = None, stamp: str | None = None, is_pinned: Callable[[Card], bool],
                 max_chars: int = MAX_CARD_CHARS, meta: Sequence[dict[str, Any] | None] | None = None
                 ) -> tuple[list[Card], list[bool], dict[str, Any], list[str]]:
    """The body of one `CardStore.ingest` transaction: `(cards, pinned, new_state, card_ids)`.

    `meta` (one entry per message, or None) is merged into the `meta` of the cards each message writes (e.g.
    `{"summary": True}` for the summary of a compacted history).

    Raises:
        EpisodeFormatError: a malformed message (nothing of the batch is written). Tool-call arguments that are
            not a JSON object are not an error: see `set_aside_malformed`.
    """
    i0 = state["n_messages"]
    if count is not None:  # tokenizers choke on lone surrogates: count the cleaned text
        count = (lambda c: lambda t: c(clean_text(t)))(count)
    pending: dict[str, str] = dict(state["pending"])
    touched: dict[str, Card] = {}
    for off, m in enumerate(msgs):
        i = i0 + off
        check_message(m, i)
        if stamp and not m.get("timestamp"):
            m = {**m, "timestamp": stamp}
        m, cut = bound_message(m, max_chars)
        m, malformed = set_aside_malformed(m, i)
        extra = meta[off] if meta is not None else None
        if m.get("role") == "tool":
            _record_cut(_tool_result(m, i, pending, touched, get_card, count), cut)
            continue
        for card in encode_messages([m], session_id, count_tokens=count, start_index=i):
            _record_cut(card, cut)
            for j, raw in malformed.items():
                if card.card_id == make_card_id(session_id, i, j):
                    mark_malformed(card, raw[:max_chars], count)
            if extra:
                card.meta = {**(card.meta or {}), **extra}
            touched[card.card_id] = card
            if card.call_id and card.result_index is None:
                pending[card.call_id] = card.card_id
    cards = [bound_card(c, max_chars) for c in touched.values()]
    new_state = {"n_messages": i0 + len(msgs), "pending": pending}
    return cards, [is_pinned(c) for c in cards], new_state, [c.card_id for c in cards]


def check_call(messages: Any, tools: Any) -> tuple[list[Any], list[Any] | None]:
    """The message list and tool list of a `build_context` call, after the shape checks every call gets.

    Raises:
        TypeError: `messages` is not a list of messages, or `tools` is not a list of tool schemas.
        ValueError: `messages` is empty.
    """
    if isinstance(messages, (str, bytes, dict)) or not isinstance(messages, Iterable):
        raise TypeError(f"messages must be a list of OpenAI chat messages ({{'role': ..., 'content': ...}}), got "
                        f"a {type(messages).__name__}")
    msgs = list(messages)
    if not msgs:
        raise ValueError("build_context needs the conversation so far and got an empty message list: pass at least "
                         "the current user message, e.g. [{'role': 'user', 'content': '...'}]")
    if tools is None:
        return msgs, None
    if isinstance(tools, (str, bytes, dict)) or not isinstance(tools, Iterable):
        hint = " (one schema? wrap it: tools=[schema])" if isinstance(tools, dict) else ""
        raise TypeError(f"tools must be a list of OpenAI tool schemas, [{{'type': 'function', 'function': "
                        f"{{'name': ..., 'parameters': {{...}}}}}}, ...], got a {type(tools).__name__}{hint}")
    tools = list(tools)
    for j, t in enumerate(tools):
        if not isinstance(t, dict):
            raise TypeError(f"tools[{j}] is a {type(t).__name__}: expected an OpenAI tool schema (a dict "
                            "{'type': 'function', 'function': {'name': ..., 'parameters': {...}}})")
    return msgs, tools
