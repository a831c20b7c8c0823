"""A drop-in wrapper around any OpenAI-style client: `client.chat.completions.create(messages=..., tools=...)`.

Each call records the messages before the current user turn into the memory (only those it has not
seen), builds the decision context, and forwards the call with `messages` replaced by the assembled
prefix (system prompt; the fenced "Relevant history" records in a user message of their own; tools) followed
by the current turn verbatim (tool-call structure intact). Every other argument passes through unchanged. The client is only
duck-typed, so the official `openai` package, vLLM/llama.cpp servers' clients and test fakes all work.

Example:
    >>> from openai import OpenAI
    >>> client = DAMCOpenAI(OpenAI(), DecisionAwareMemory("runs/mem"))
    >>> resp = client.chat.completions.create(model="gpt-4o-mini", messages=messages, tools=tools)
    >>> client.last_context.tokens_saved
"""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger(__name__)


class _Completions:
    def __init__(self, owner: "DAMCOpenAI"):
        self._owner = owner

    def create(self, *, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
               **kwargs: Any) -> Any:
        o = self._owner
        ctx = o.memory.build_context(messages, tools=tools, session_id=o.session_id, budget_tokens=o.budget_tokens,
                                     user_id=o.user_id, agent_id=o.agent_id)
        o.last_context = ctx
        if tools is not None:
            kwargs["tools"] = tools
        return o.client.chat.completions.create(messages=ctx.openai_messages(), **kwargs)


class _Chat:
    def __init__(self, owner: "DAMCOpenAI"):
        self.completions = _Completions(owner)


class DAMCOpenAI:
    """Wrap an OpenAI-style client with a `DecisionAwareMemory`.

    Args:
        client: anything with `client.chat.completions.create(messages=..., **kwargs)`.
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
        self.last_context: Any = None

    def __getattr__(self, name: str) -> Any:  # everything else (models, embeddings, ...) passes through
        return getattr(self.client, name)
