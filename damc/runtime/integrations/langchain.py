"""LangChain integration: a `Runnable` that rewrites the messages before each chat-model call.

`damc_middleware(memory, tools)` takes what a chat model would take (a list of messages, a
`PromptValue` or a string), records the history into the memory, and returns the assembled context
as LangChain messages: the assembled prefix (`SystemMessage` with the system prompt, a `HumanMessage` with the
fenced "Relevant history" records, a `SystemMessage` with the tools) followed by the original messages of the
current user turn, untouched. Pipe it into any chat model:

    >>> chain = damc_middleware(memory, tools=tools) | llm.bind_tools(tools)
    >>> ai = chain.invoke(messages)

`with_damc(llm, memory, tools)` is the same pipe. Only `langchain-core` is needed (`pip install 'damc[langchain]'`).
"""

from __future__ import annotations

import logging
from typing import Any, Sequence

from damc.extras import requires

logger = logging.getLogger(__name__)


def _openai_tools(tools: Sequence[Any] | None) -> list[dict[str, Any]] | None:
    if not tools:
        return None
    with requires("the LangChain integration"):
        from langchain_core.utils.function_calling import convert_to_openai_tool

    return [t if isinstance(t, dict) and "function" in t else convert_to_openai_tool(t) for t in tools]


def rewrite_messages(memory: Any, messages: Any, tools: Sequence[Any] | None = None, *,
                     session_id: str | None = None, budget_tokens: int | None = None, user_id: str | None = None,
                     agent_id: str | None = None) -> tuple[list[Any], Any]:
    """LangChain messages → (assembled LangChain messages, `Context`), in the memory's scope or the one given."""
    with requires("the LangChain integration"):
        from langchain_core.messages import HumanMessage, SystemMessage, convert_to_messages, convert_to_openai_messages
        from langchain_core.prompt_values import PromptValue

    from damc.runtime.assemble import split_conversation

    if isinstance(messages, PromptValue):
        messages = messages.to_messages()
    lc = convert_to_messages(messages if not isinstance(messages, str) else [("human", messages)])
    oa = convert_to_openai_messages(lc)
    ctx = memory.build_context(oa, tools=_openai_tools(tools), session_id=session_id, budget_tokens=budget_tokens,
                               user_id=user_id, agent_id=agent_id)
    _, _, _, u = split_conversation(oa)
    rest = [m for m in lc[u:] if m.type != "system"]
    prefix = [SystemMessage(content=m["content"]) if m["role"] == "system" else HumanMessage(content=m["content"])
              for m in ctx.prefix_messages]
    return prefix + rest, ctx


def damc_middleware(memory: Any, tools: Sequence[Any] | None = None, *, session_id: str | None = None,
                    budget_tokens: int | None = None, user_id: str | None = None, agent_id: str | None = None) -> Any:
    """A `RunnableLambda` that rewrites chat-model input with DAMC; the last `Context` is on `.contexts[-1]`."""
    with requires("the LangChain integration"):
        from langchain_core.runnables import RunnableLambda

    contexts: list[Any] = []

    def _rewrite(messages: Any) -> list[Any]:
        out, ctx = rewrite_messages(memory, messages, tools, session_id=session_id, budget_tokens=budget_tokens,
                                    user_id=user_id, agent_id=agent_id)
        contexts.append(ctx)
        del contexts[:-16]  # keep only the latest few
        return out

    runnable = RunnableLambda(_rewrite, name="DAMCMemory")
    runnable.contexts = contexts  # type: ignore[attr-defined]
    return runnable


def with_damc(llm: Any, memory: Any, tools: Sequence[Any] | None = None, **kwargs: Any) -> Any:
    """`damc_middleware(memory, tools, **kwargs) | llm`."""
    return damc_middleware(memory, tools, **kwargs) | llm
