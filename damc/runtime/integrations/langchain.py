"""LangChain integration: a `Runnable` that rewrites the messages before each chat-model call.

`damc_middleware(memory, tools)` takes what a chat model would take (a list of messages, a
`PromptValue` or a string), records the history into the memory, and returns the assembled context
as LangChain messages: the caller's own leading system messages (the same objects), a `HumanMessage` with the
fenced "Relevant history" records, then the original messages of the current user turn, untouched. Tools are
not written into the messages: bind them to the model as usual. Pipe it into any chat model:

    >>> chain = damc_middleware(memory, tools=tools) | llm.bind_tools(tools)
    >>> ai = chain.invoke(messages)
    >>> ai = await chain.ainvoke(messages)   # async: the memory works in a worker thread (`abuild_context`)

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


def _to_openai(messages: Any) -> tuple[list[Any], list[dict[str, Any]]]:
    """Chat-model input → (LangChain messages, the same as OpenAI chat messages, one for one)."""
    with requires("the LangChain integration"):
        from langchain_core.messages import convert_to_messages, convert_to_openai_messages
        from langchain_core.prompt_values import PromptValue

    if isinstance(messages, PromptValue):
        messages = messages.to_messages()
    lc = convert_to_messages(messages if not isinstance(messages, str) else [("human", messages)])
    return lc, convert_to_openai_messages(lc)


def _from_context(lc: list[Any], oa: list[dict[str, Any]], ctx: Any) -> list[Any]:
    """The context as LangChain messages: the caller's own message objects wherever DAMC kept a message as it
    was (instructions, the current turn), new ones for what it wrote (the memory message)."""
    from langchain_core.messages import HumanMessage, SystemMessage, convert_to_messages

    if len(lc) != len(oa):   # not one OpenAI message per LangChain message: convert the context as a whole
        return convert_to_messages(ctx.messages)
    n_turn = len(ctx.current_turn)
    prefix = []
    for j, m in enumerate(ctx.prefix_messages):
        if j < len(oa) - n_turn and m == oa[j]:
            prefix.append(lc[j])
        else:
            cls = HumanMessage if m["role"] == "user" else SystemMessage
            prefix.append(cls(content=m["content"]))
    return prefix + list(lc[len(lc) - n_turn:] if n_turn else [])


def rewrite_messages(memory: Any, messages: Any, tools: Sequence[Any] | None = None, *,
                     session_id: str | None = None, budget_tokens: int | None = None, user_id: str | None = None,
                     agent_id: str | None = None) -> tuple[list[Any], Any]:
    """LangChain messages → (assembled LangChain messages, `Context`), in the memory's scope or the one given."""
    lc, oa = _to_openai(messages)
    ctx = memory.build_context(oa, tools=_openai_tools(tools), session_id=session_id, budget_tokens=budget_tokens,
                               user_id=user_id, agent_id=agent_id)
    return _from_context(lc, oa, ctx), ctx


async def arewrite_messages(memory: Any, messages: Any, tools: Sequence[Any] | None = None, *,
                            session_id: str | None = None, budget_tokens: int | None = None,
                            user_id: str | None = None, agent_id: str | None = None) -> tuple[list[Any], Any]:
    """`rewrite_messages` for asyncio code: the memory works in a worker thread (`memory.abuild_context`)."""
    lc, oa = _to_openai(messages)
    ctx = await memory.abuild_context(oa, tools=_openai_tools(tools), session_id=session_id,
                                      budget_tokens=budget_tokens, user_id=user_id, agent_id=agent_id)
    return _from_context(lc, oa, ctx), ctx


def damc_middleware(memory: Any, tools: Sequence[Any] | None = None, *, session_id: str | None = None,
                    budget_tokens: int | None = None, user_id: str | None = None, agent_id: str | None = None) -> Any:
    """A `RunnableLambda` that rewrites chat-model input with DAMC; the last `Context` is on `.contexts[-1]`.

    `invoke` / `batch` / `stream` call `rewrite_messages`; `ainvoke` / `abatch` / `astream` call
    `arewrite_messages` (LangChain's `afunc`), so an async chain never blocks its event loop on the memory."""
    with requires("the LangChain integration"):
        from langchain_core.runnables import RunnableLambda

    contexts: list[Any] = []

    kw = {"session_id": session_id, "budget_tokens": budget_tokens, "user_id": user_id, "agent_id": agent_id}

    def _keep(out: list[Any], ctx: Any) -> list[Any]:
        contexts.append(ctx)
        del contexts[:-16]  # keep only the latest few
        return out

    def _rewrite(messages: Any) -> list[Any]:
        return _keep(*rewrite_messages(memory, messages, tools, **kw))

    async def _arewrite(messages: Any) -> list[Any]:
        return _keep(*await arewrite_messages(memory, messages, tools, **kw))

    runnable = RunnableLambda(_rewrite, afunc=_arewrite, name="DAMCMemory")
    runnable.contexts = contexts  # type: ignore[attr-defined]
    return runnable


def with_damc(llm: Any, memory: Any, tools: Sequence[Any] | None = None, **kwargs: Any) -> Any:
    """`damc_middleware(memory, tools, **kwargs) | llm`."""
    return damc_middleware(memory, tools, **kwargs) | llm
