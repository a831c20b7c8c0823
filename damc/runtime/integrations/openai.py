"""A drop-in wrapper around any OpenAI-style client: Chat Completions and the Responses API, sync or async.

`client.chat.completions.create(messages=..., tools=...)`: each call records the messages before the current user
turn into the memory (only those it has not seen), builds the decision context, and forwards the call with
`messages` replaced by the context (`Context.messages`): the caller's own system / developer messages, the fenced
"Relevant history" records in a `user` message of their own, then the current turn verbatim (tool-call structure
intact). `tools` and every other argument pass through unchanged: DAMC writes no tool text into the messages.

`client.responses.create(input=..., tools=...)`: the same over the Responses API's input items — messages
(`{"role": ..., "content": ...}`, `{"type": "message", ...}`), `{"type": "function_call", ...}` and
`{"type": "function_call_output", ...}` — converted to chat messages for the memory (`responses_to_chat`); the
forwarded `input` is again items: the caller's leading instruction items, the memory message, then the caller's
items of the current turn verbatim. `instructions` passes through unchanged.

An async client (`openai.AsyncOpenAI` or anything whose `create` is a coroutine function) gets an awaitable
`create`: the memory works in a worker thread (`DecisionAwareMemory.abuild_context`), the event loop never waits
on it. The client is only duck-typed, so the official `openai` package, vLLM/llama.cpp servers' clients and
test fakes all work.

Example:
    >>> from openai import AsyncOpenAI, OpenAI
    >>> client = DAMCOpenAI(OpenAI(), DecisionAwareMemory("runs/mem"))
    >>> resp = client.chat.completions.create(model="gpt-4o-mini", messages=messages, tools=tools)
    >>> client.last_context.tokens_saved
    >>> aclient = DAMCOpenAI(AsyncOpenAI(), memory)
    >>> resp = await aclient.responses.create(model="gpt-4o-mini", input=items, tools=tools)
"""

from __future__ import annotations

import inspect
import json
import logging
from typing import Any, Sequence

logger = logging.getLogger(__name__)


def _is_async(client: Any, fn: Any) -> bool:
    """Whether `fn` (a client's `create`) returns an awaitable. The official SDK wraps its async methods in a
    plain decorator, so look through `functools.wraps` chains; an `Async...` client class says so too."""
    return inspect.iscoroutinefunction(inspect.unwrap(fn)) or type(client).__name__.startswith("Async")


def _item_text(content: Any) -> Any:
    """Responses content (a string or a list of `input_text` / `output_text` parts) as chat content."""
    if isinstance(content, list):
        return [{"type": "text", "text": p.get("text", "")} if isinstance(p, dict) else str(p) for p in content]
    return content


def responses_to_chat(items: str | Sequence[Any]) -> tuple[list[dict[str, Any]], list[int]]:
    """Responses API input items as Chat Completions messages, and for each message the index of its first item.

    A string is one user message. Consecutive `function_call` items become one assistant message with
    `tool_calls` (joined to a preceding assistant text message), a `function_call_output` a `tool` message.
    Items of other types (reasoning, item references, ...) carry nothing the memory can store and are skipped
    here; the ones of the current turn are still forwarded verbatim.

    Raises:
        TypeError: an item is not a dict (names its index).
    """
    if isinstance(items, str):
        return [{"role": "user", "content": items}], [0]
    msgs: list[dict[str, Any]] = []
    origin: list[int] = []
    open_calls = False       # the last message is an assistant message that may take more tool calls
    for i, it in enumerate(items):
        if not isinstance(it, dict):
            raise TypeError(f"input[{i}] is a {type(it).__name__}; expected a Responses API input item "
                            '(a dict such as {"role": "user", "content": "..."} or {"type": "function_call", ...})')
        kind = it.get("type", "message")
        if kind in ("message", None):
            m = {"role": it.get("role"), "content": _item_text(it.get("content"))}
            if it.get("name"):
                m["name"] = it["name"]
            msgs.append(m)
            origin.append(i)
            open_calls = m["role"] == "assistant"
        elif kind == "function_call":
            args = it.get("arguments", "{}")
            call = {"id": it.get("call_id") or it.get("id"), "type": "function", "function": {
                "name": it.get("name"), "arguments": args if isinstance(args, str) else json.dumps(args)}}
            if open_calls:
                msgs[-1].setdefault("tool_calls", []).append(call)
            else:
                msgs.append({"role": "assistant", "content": None, "tool_calls": [call]})
                origin.append(i)
                open_calls = True
        elif kind == "function_call_output":
            out = it.get("output")
            msgs.append({"role": "tool", "tool_call_id": it.get("call_id"),
                         "content": out if isinstance(out, str) else _item_text(out) if isinstance(out, list)
                         else json.dumps(out)})
            origin.append(i)
            open_calls = False
        else:
            logger.debug("input[%d]: a %r item holds nothing the memory stores; skipped", i, kind)
    return msgs, origin


def responses_tools(tools: Sequence[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    """Responses API function tools (`{"type": "function", "name": ..., "parameters": ...}`) in the Chat
    Completions shape the decision query reads; built-in tools (web search, ...) are left out."""
    out = []
    for t in tools or []:
        if isinstance(t, dict) and t.get("type") == "function":
            out.append(t if "function" in t else {"type": "function", "function": {
                k: t[k] for k in ("name", "description", "parameters") if k in t}})
    return out or None


def _forwarded_items(items: str | Sequence[Any], msgs: list[dict[str, Any]], origin: list[int], ctx: Any) -> list[Any]:
    """The context as Responses input items: the caller's instruction items verbatim (unless DAMC appended the
    memory block to one), the memory message, then the caller's items from the current turn on, verbatim."""
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    turn_at = len(msgs) - len(ctx.current_turn)
    start = origin[turn_at] if turn_at < len(origin) else len(items)
    prefix = []
    for j, m in enumerate(ctx.prefix_messages):
        same = j < len(msgs) and j < turn_at and m == msgs[j]
        content = m["content"]
        if isinstance(content, list):   # chat text parts back to the Responses API's input parts
            content = [{"type": "input_text", "text": p.get("text", "")} if isinstance(p, dict) else p for p in content]
        prefix.append(items[origin[j]] if same else {"role": m["role"], "content": content})
    return prefix + list(items[start:])


class _Completions:
    def __init__(self, owner: "DAMCOpenAI"):
        self._owner = owner

    def create(self, *, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
               **kwargs: Any) -> Any:
        o = self._owner
        target = o.client.chat.completions.create
        if tools is not None:
            kwargs["tools"] = tools
        if _is_async(o.client, target):
            async def run() -> Any:
                o.last_context = ctx = await o.memory.abuild_context(messages, tools=tools, **o._kw())
                return await target(messages=ctx.messages, **kwargs)
            return run()
        o.last_context = ctx = o.memory.build_context(messages, tools=tools, **o._kw())
        return target(messages=ctx.messages, **kwargs)


class _Chat:
    def __init__(self, owner: "DAMCOpenAI"):
        self.completions = _Completions(owner)


class _Responses:
    def __init__(self, owner: "DAMCOpenAI"):
        self._owner = owner

    def create(self, *, input: str | list[Any], tools: list[dict[str, Any]] | None = None,
               **kwargs: Any) -> Any:
        o = self._owner
        target = o.client.responses.create
        msgs, origin = responses_to_chat(input)
        chat_tools = responses_tools(tools)
        if tools is not None:
            kwargs["tools"] = tools
        if _is_async(o.client, target):
            async def run() -> Any:
                o.last_context = ctx = await o.memory.abuild_context(msgs, tools=chat_tools, **o._kw())
                return await target(input=_forwarded_items(input, msgs, origin, ctx), **kwargs)
            return run()
        o.last_context = ctx = o.memory.build_context(msgs, tools=chat_tools, **o._kw())
        return target(input=_forwarded_items(input, msgs, origin, ctx), **kwargs)

    def __getattr__(self, name: str) -> Any:  # retrieve, delete, ... pass through
        return getattr(self._owner.client.responses, name)


class DAMCOpenAI:
    """Wrap an OpenAI-style client (sync or async) with a `DecisionAwareMemory`.

    Args:
        client: anything with `client.chat.completions.create(messages=..., **kwargs)` and/or
            `client.responses.create(input=..., **kwargs)`; an async client (`AsyncOpenAI`) makes both awaitable.
        memory: the memory that records the conversation and assembles the context.
        session_id: session of this client's conversation (default: the memory's).
        budget_tokens: fixed memory budget (default: the memory's rule).
        user_id / agent_id: scope of this client's conversations (default: the memory's).

    Attributes:
        last_context: the `Context` of the latest call (for `memory.explain`).
    """

    def __init__(self, client: Any, memory: Any, session_id: str | None = None, budget_tokens: int | None = None,
                 user_id: str | None = None, agent_id: str | None = None):
        self.client, self.memory, self.session_id, self.budget_tokens = client, memory, session_id, budget_tokens
        self.user_id, self.agent_id = user_id, agent_id
        self.chat = _Chat(self)
        self.responses = _Responses(self)
        self.last_context: Any = None

    def _kw(self) -> dict[str, Any]:
        return {"session_id": self.session_id, "budget_tokens": self.budget_tokens, "user_id": self.user_id,
                "agent_id": self.agent_id}

    def __getattr__(self, name: str) -> Any:  # everything else (models, embeddings, ...) passes through
        return getattr(self.client, name)
