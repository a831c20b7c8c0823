"""OpenAI-style client wrapper and LangChain middleware, with fakes (no network); the memories use the heuristic
prior by choice: the tests pin which cards reach the wrapped call (the pinned error among them)."""

from __future__ import annotations

import asyncio
import json

import pytest

from damc.runtime.integrations.openai import DAMCOpenAI
from damc.runtime.memory import DecisionAwareMemory

TOOLS = [{"type": "function", "function": {"name": "get_order", "description": "Look up an order",
                                           "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}}}}]


def history() -> list[dict]:
    msgs = [{"role": "system", "content": "You are a support agent."},
            {"role": "user", "content": "My order 88412 never arrived"},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function",
             "function": {"name": "get_order", "arguments": json.dumps({"order_id": "88412"})}}]},
            {"role": "tool", "tool_call_id": "c1", "content": json.dumps({"status": "error", "code": 500})}]
    for i in range(8):
        msgs += [{"role": "user", "content": f"Tell me a fun fact number {i}. " + "Please make it long. " * 10},
                 {"role": "assistant", "content": f"Fun fact {i}: " + "octopuses have three hearts. " * 10}]
    msgs += [{"role": "user", "content": "Retry the order lookup please."},
             {"role": "assistant", "content": None, "tool_calls": [{"id": "c2", "type": "function",
              "function": {"name": "get_order", "arguments": json.dumps({"order_id": "88412"})}}]},
             {"role": "tool", "tool_call_id": "c2", "content": json.dumps({"order_id": "88412", "state": "lost"})}]
    return msgs


class FakeClient:
    """Records what it was called with, answers like the OpenAI SDK would (a dict here)."""

    def __init__(self):
        self.calls = []
        self.chat = self
        self.completions = self
        self.models = "models-endpoint"

    def create(self, **kwargs):
        self.calls.append(kwargs)
        return {"choices": [{"message": {"role": "assistant", "content": "ok"}}]}


def test_openai_wrapper_rewrites_messages_and_records_history():
    mem = DecisionAwareMemory(None, session_id="oa", valuer="heuristic")
    fake = FakeClient()
    client = DAMCOpenAI(fake, mem)
    msgs = history()
    resp = client.chat.completions.create(model="m", messages=msgs, tools=TOOLS, temperature=0)
    assert resp["choices"][0]["message"]["content"] == "ok"
    (sent,) = fake.calls
    assert sent["model"] == "m" and sent["tools"] == TOOLS and sent["temperature"] == 0
    out = sent["messages"]
    assert out[0] == {"role": "system", "content": "You are a support agent."}   # the agent's own instructions only
    assert out[1]["role"] == "user" and "## Relevant history" in out[1]["content"]
    assert "[oa:2:0] ✗ get_order(order_id=88412) failed: 500" in out[1]["content"]
    assert out[2:] == msgs[-3:]                 # current turn verbatim, tool_calls structure intact; no tool text
    assert len(mem) == 18                        # every message before the current turn became a card
    assert client.last_context.tokens_after < client.last_context.tokens_before
    assert client.models == "models-endpoint"    # other attributes pass through
    client.chat.completions.create(model="m", messages=msgs + [{"role": "assistant", "content": "It is lost."},
                                                               {"role": "user", "content": "Refund it."}])
    assert len(mem) == 21 and fake.calls[-1]["messages"][-1] == {"role": "user", "content": "Refund it."}


def test_langchain_middleware_with_fake_chat_model():
    from langchain_core.callbacks import BaseCallbackHandler
    from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
    from langchain_core.messages import AIMessage, convert_to_messages
    from langchain_core.tools import tool

    from damc.runtime.integrations.langchain import damc_middleware, with_damc

    @tool
    def get_order(order_id: str) -> str:
        """Look up an order."""
        return "{}"

    seen = []

    class Capture(BaseCallbackHandler):
        def on_chat_model_start(self, serialized, messages, **kwargs):
            seen.append(messages[0])

    mem = DecisionAwareMemory(None, session_id="lc", valuer="heuristic")
    llm = FakeMessagesListChatModel(responses=[AIMessage(content="done")])
    mw = damc_middleware(mem, tools=[get_order])
    chain = mw | llm
    lc_msgs = convert_to_messages(history())
    ai = chain.invoke(lc_msgs, config={"callbacks": [Capture()]})
    assert ai.content == "done"
    (sent,) = seen
    assert sent[0].type == "system" and "Relevant history" not in sent[0].content
    assert sent[1].type == "human" and "## Relevant history" in sent[1].content
    assert "[lc:2:0] ✗ get_order(order_id=88412) failed: 500" in sent[1].content
    assert sent[0] is lc_msgs[0]                 # the caller's own system message object
    assert sent[2:] == lc_msgs[-3:]              # the original LangChain messages of the current turn
    assert sent[-2].tool_calls[0]["args"] == {"order_id": "88412"}
    ctx = mw.contexts[-1]
    assert ctx.tokens_after < ctx.tokens_before and len(mem) == 18
    # a plain string prompt and the with_damc helper
    out = with_damc(FakeMessagesListChatModel(responses=[AIMessage(content="hi")]), DecisionAwareMemory(None)).invoke("hello")
    assert out.content == "hi"


# ----------------------------------------------------------------------------- Responses API, async clients

def responses_input() -> list[dict]:
    """`history()` as Responses API input items (instructions as a developer message, calls as items)."""
    items: list[dict] = [{"type": "message", "role": "developer",
                          "content": [{"type": "input_text", "text": "You are a support agent."}]}]
    for m in history()[1:]:
        if m["role"] == "tool":
            items.append({"type": "function_call_output", "call_id": m["tool_call_id"], "output": m["content"]})
        elif m.get("tool_calls"):
            items += [{"type": "function_call", "id": "fc_" + c["id"], "call_id": c["id"], "name": c["function"]["name"],
                       "arguments": c["function"]["arguments"]} for c in m["tool_calls"]]
        else:
            items.append({"role": m["role"], "content": m["content"]})
    items.insert(-2, {"type": "reasoning", "id": "rs_1", "summary": []})   # reasoning before the call: kept
    return items


RESPONSES_TOOLS = [{"type": "function", "name": "get_order", "description": "Look up an order",
                    "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}}},
                   {"type": "web_search"}]


class FakeResponsesClient:
    """`client.responses.create(input=...)` as the OpenAI SDK takes it (a dict answer here)."""

    def __init__(self):
        self.calls = []
        self.responses = self

    def create(self, **kwargs):
        self.calls.append(kwargs)
        return {"output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]}]}


def test_openai_wrapper_takes_responses_api_items_and_returns_items():
    from damc.runtime.integrations.openai import responses_to_chat

    mem = DecisionAwareMemory(None, session_id="rs", valuer="heuristic")
    fake = FakeResponsesClient()
    client = DAMCOpenAI(fake, mem)
    items = responses_input()
    resp = client.responses.create(model="m", input=items, tools=RESPONSES_TOOLS, instructions="Be kind.")
    assert resp["output"][0]["content"][0]["text"] == "ok"
    (sent,) = fake.calls
    assert sent["tools"] == RESPONSES_TOOLS and sent["instructions"] == "Be kind." and sent["model"] == "m"
    out = sent["input"]
    assert out[0] is items[0]                                    # the developer item, the caller's own object
    assert out[1]["role"] == "user" and "[rs:2:0] ✗ get_order(order_id=88412) failed: 500" in out[1]["content"]
    assert out[2:] == items[-4:]     # current turn: user message, reasoning, function_call, function_call_output
    chat, _ = responses_to_chat(items)
    assert chat[2]["tool_calls"][0]["id"] == "c1" and chat[3] == {"role": "tool", "tool_call_id": "c1",
                                                                   "content": json.dumps({"status": "error", "code": 500})}
    assert len(mem) == 18 and client.last_context.tokens_after < client.last_context.tokens_before
    assert "get_order" in client.last_context.decision_query          # the function tool reached the query
    client.responses.create(model="m", input="Just a string.")         # a plain string input is one user message
    assert fake.calls[-1]["input"][-1] == {"role": "user", "content": "Just a string."}
    with pytest.raises(TypeError, match=r"input\[1\] is a str"):
        client.responses.create(model="m", input=[items[0], "oops"])
    # placement=system: the block joins the developer item, still in the Responses API's own part type
    from damc.runtime.config import MemoryConfig

    sysmem = DecisionAwareMemory(None, session_id="rs2", valuer="heuristic", config=MemoryConfig(placement="system"))
    DAMCOpenAI(fake, sysmem).responses.create(model="m", input=items)
    first = fake.calls[-1]["input"][0]
    assert first["role"] == "developer" and [p["type"] for p in first["content"]] == ["input_text", "input_text"]
    assert "## Relevant history" in first["content"][1]["text"] and fake.calls[-1]["input"][1:] == items[-4:]


def _sdk_style(fn):
    """What the openai SDK does to its async methods: a plain `functools.wraps` wrapper around the coroutine."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)
    return wrapper


class FakeAsyncClient:
    """`AsyncOpenAI`-shaped: `await client.chat.completions.create(...)` / `await client.responses.create(...)`."""

    def __init__(self):
        self.calls = []
        self.chat = self
        self.completions = self
        self.responses = self
        self.create = _sdk_style(self._create)

    async def _create(self, **kwargs):
        await asyncio.sleep(0)
        self.calls.append(kwargs)
        return {"choices": [{"message": {"role": "assistant", "content": "ok"}}]}


def test_openai_wrapper_with_an_async_client():
    mem = DecisionAwareMemory(None, session_id="aoa", valuer="heuristic")
    fake = FakeAsyncClient()
    client = DAMCOpenAI(fake, mem)
    msgs = history()

    async def main():
        resp = await client.chat.completions.create(model="m", messages=msgs, tools=TOOLS)
        await client.responses.create(model="m", input=responses_input(), tools=RESPONSES_TOOLS)
        return resp

    resp = asyncio.run(main())
    assert resp["choices"][0]["message"]["content"] == "ok"
    chat_call, resp_call = fake.calls
    assert chat_call["messages"][2:] == msgs[-3:] and "## Relevant history" in chat_call["messages"][1]["content"]
    assert chat_call["tools"] == TOOLS and resp_call["input"][2:] == responses_input()[-4:]
    assert len(mem) == 18


def test_langchain_middleware_ainvoke_runs_the_memory_off_the_event_loop():
    from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
    from langchain_core.messages import AIMessage, convert_to_messages

    from damc.runtime.integrations.langchain import damc_middleware

    mem = DecisionAwareMemory(None, session_id="alc", valuer="heuristic")
    calls = []
    original = mem.abuild_context

    async def spy(*args, **kwargs):
        calls.append(kwargs.get("session_id"))
        return await original(*args, **kwargs)

    mem.abuild_context = spy
    mw = damc_middleware(mem)
    chain = mw | FakeMessagesListChatModel(responses=[AIMessage(content="done")])
    lc_msgs = convert_to_messages(history())
    ai = asyncio.run(chain.ainvoke(lc_msgs))
    assert ai.content == "done" and calls == [None] and len(mem) == 18
    out = asyncio.run(mw.ainvoke(lc_msgs))
    assert out[0] is lc_msgs[0] and out[2:] == lc_msgs[-3:] and "## Relevant history" in out[1].content
