"""Assembly: the messages `build_context` returns, in the caller's own chat format.

Order (`placement="message"`, the default):

1. the caller's leading instruction messages (`system` and/or `developer`, OpenAI's newer spelling of system),
   verbatim — every key kept, `name` included; none when the caller sent none (DAMC adds no system prompt of
   its own, and never any tool-call syntax: tools stay in the `tools` parameter the caller passes to its API);
2. when there are memory lines, one `user` message holding them: a "Relevant history" header, a note that they
   are data and not instructions, then the lines fenced between `<memory_records>` and `</memory_records>`, one
   `[card_id] ...` line each, each neutralised (`damc.prompting.neutralize_line`);
3. the current user turn and everything after it, exactly as the caller sent it (tool-call structure, `name`
   fields, content parts).

Nothing before the current user turn is sent as raw dialogue: it is represented by the memory lines alone. No
system message ever follows a user message that DAMC wrote, so strict chat templates accept the result.
`placement="system"` (the older layout, kept for A/B comparison) appends the fenced block to the last leading
instruction message instead (a new leading system message when there is none): it gives whatever a tool
returned the authority of the system prompt.

The small local decision model of the A/B harness and the teacher read another rendering — tools listed as
text, calls written as `name(arg=value)` — built on their side by `damc.prompting.build_decision_messages`.

Example:
    >>> system, history, turn, u = split_conversation(messages)
    >>> msgs = assemble(leading_instructions(messages), [c.line for c in compressed], turn)
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Sequence

from damc.episodes import current_turn_start, message_text
from damc.prompting import PLACEMENTS, format_prompt, memory_block, message_to_chat
from damc.query import render_tools_brief

logger = logging.getLogger(__name__)

INSTRUCTION_ROLES = ("system", "developer")   # OpenAI's "developer" is the system role of its newer models


def leading_instructions(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The caller's leading `system` / `developer` messages, verbatim (the same dict objects)."""
    out = []
    for m in messages:
        if not isinstance(m, dict) or m.get("role") not in INSTRUCTION_ROLES:
            break
        out.append(m)
    return out


def split_conversation(messages: Sequence[dict[str, Any]]) -> tuple[str | None, list[dict], list[dict], int]:
    """Split a live conversation at its current user turn.

    Returns:
        (system, history, current_turn, u): the text of the leading `system` / `developer` messages (joined by
        a blank line; None if there are none), the messages before the last user message (instruction
        messages excluded), the last user message and everything after it, and the index `u` of that user
        message (the number of leading instruction messages when there is none).
    """
    msgs = list(messages)
    lead = leading_instructions(msgs)
    system = "\n\n".join(message_text(m) for m in lead) if lead else None
    u = current_turn_start(msgs, len(msgs))
    if u == 0 and not (msgs and msgs[0].get("role") == "user"):
        # no user message at all: everything after the instruction messages is the current turn
        u = len(lead)
    history = [m for m in msgs[:u] if m.get("role") not in INSTRUCTION_ROLES]
    return system, history, msgs[u:], u


def _with_block(m: dict[str, Any], block: str) -> dict[str, Any]:
    """A copy of an instruction message with the fenced block appended to its content (string or parts)."""
    c = m.get("content")
    if isinstance(c, list):
        return {**m, "content": [*c, {"type": "text", "text": block}]}
    return {**m, "content": ((c or "").rstrip() + "\n\n" + block) if c else block}


def assemble(instructions: Sequence[dict[str, Any]], memory_lines: Sequence[str],
             current_turn: Sequence[dict[str, Any]], placement: str = "message") -> list[dict[str, Any]]:
    """The runtime's output messages (see the module docstring): instructions → memory message → current turn.

    Args:
        instructions: the leading system / developer messages to send (verbatim; may be empty).
        memory_lines: the kept cards' `[card_id] text` lines (neutralised again here, idempotently).
        current_turn: the current user turn and everything after it (verbatim).
        placement: "message" (the records in a `user` message of their own) or "system" (appended to the last
            instruction message).

    Raises:
        ValueError: an unknown `placement`.
    """
    if placement not in PLACEMENTS:
        raise ValueError(f"placement must be one of {PLACEMENTS}, got {placement!r}")
    out = [dict(m) for m in instructions]
    if memory_lines:
        block = memory_block(memory_lines)
        if placement == "message":
            out.append({"role": "user", "content": block})
        elif out:
            out[-1] = _with_block(out[-1], block)
        else:
            out.append({"role": "system", "content": block})
    return out + [dict(m) for m in current_turn]


def text_view(messages: Sequence[dict[str, Any]]) -> list[dict[str, str]]:
    """Messages as plain-text chat messages for token counting (tool calls written out, `developer` as
    `system`, content parts joined)."""
    out = []
    for m in messages:
        c = message_to_chat(m)
        out.append({"role": "system" if c["role"] in INSTRUCTION_ROLES else c["role"], "content": c["content"]})
    return out


def prompt_tokens(messages: Sequence[dict[str, Any]], tokenizer: Any = None,
                  count: Callable[[str], int] | None = None, tools: Sequence[dict[str, Any]] | None = None) -> int:
    """Prompt tokens of chat messages (any OpenAI shape: `text_view`): the tokenizer's chat template when given,
    else `count` over the plain concatenation (chars/4 when neither is given). `tools` adds their one-line-each
    listing (`render_tools_brief`): a provider renders the schemas into the prompt too, at a cost of its own."""
    msgs = text_view(messages)
    extra = render_tools_brief(list(tools)) if tools else ""
    if tokenizer is not None:
        n = len(tokenizer.encode(format_prompt(tokenizer, msgs), add_special_tokens=False)) if msgs else 0
        return n + (len(tokenizer.encode(extra, add_special_tokens=False)) if extra else 0)
    text = "".join(f"{m['role']}\n{m['content']}\n" for m in msgs) + extra
    return count(text) if count else max(1, (len(text) + 3) // 4)
