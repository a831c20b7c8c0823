"""Assembly: the prompt the decision LLM gets, built by `damc.prompting.build_decision_messages`.

Order: system prompt → "Relevant history" (compressed cards, one `[card_id]` line each, oldest first)
→ tools → the current user turn and everything after it, verbatim. Nothing before the current user
turn is sent as raw dialogue: it is represented by the memory lines alone.

History is data, not instructions: with `placement="message"` (default) the system message holds only the
agent's own prompt and the memory lines go in their own fenced, labelled message, each line neutralised
(`damc.prompting.neutralize_line`); `placement="system"` puts the fenced block inside the system message.

Example:
    >>> system, history, turn, u = split_conversation(messages)
    >>> msgs = assemble(system, tools, [c.line for c in compressed], turn)
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Sequence

from damc.episodes import current_turn_start, message_text
from damc.prompting import build_decision_messages, format_prompt

logger = logging.getLogger(__name__)


def split_conversation(messages: Sequence[dict[str, Any]]) -> tuple[str | None, list[dict], list[dict], int]:
    """Split a live conversation at its current user turn.

    Returns:
        (system, history, current_turn, u): the leading system message's text (None if absent), the
        messages before the last user message (system excluded), the last user message and everything
        after it, and the index `u` of that user message (0 when there is none).
    """
    msgs = list(messages)
    system = message_text(msgs[0]) if msgs and msgs[0].get("role") == "system" else None
    u = current_turn_start(msgs, len(msgs))
    if u == 0 and not (msgs and msgs[0].get("role") == "user"):
        # no user message at all: everything after the system prompt is the current turn
        u = 1 if system is not None else 0
    history = [m for m in msgs[:u] if m.get("role") != "system"]
    return system, history, msgs[u:], u


def assemble(system: str | None, tools: Sequence[dict[str, Any]] | None, memory_lines: Sequence[str],
             current_turn: Sequence[dict[str, Any]], history: Sequence[dict[str, Any]] = (),
             placement: str = "message") -> list[dict[str, str]]:
    """The decision messages (see module docstring); `history` adds verbatim messages before the turn."""
    return build_decision_messages(system, tools, history, current_turn, memory_lines=list(memory_lines) or None,
                                   placement=placement)


def prompt_tokens(messages: Sequence[dict[str, str]], tokenizer: Any = None,
                  count: Callable[[str], int] | None = None) -> int:
    """Prompt tokens of chat messages: the tokenizer's chat template when given, else `count` over the
    plain concatenation (chars/4 when neither is given)."""
    if tokenizer is not None:
        return len(tokenizer.encode(format_prompt(tokenizer, list(messages)), add_special_tokens=False))
    text = "".join(f"{m['role']}\n{m['content']}\n" for m in messages)
    return count(text) if count else max(1, (len(text) + 3) // 4)
