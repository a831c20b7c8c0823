"""OpenAI-style client wrapper and LangChain middleware, with fakes (no network)."""

from __future__ import annotations

import json

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
    mem = DecisionAwareMemory(None, session_id="oa")
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
    assert out[2]["role"] == "system" and out[2]["content"].startswith("## Tools")
    assert out[3:] == msgs[-3:]                 # current turn verbatim, tool_calls structure intact
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

    mem = DecisionAwareMemory(None, session_id="lc")
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
    assert sent[2].type == "system" and "get_order" in sent[2].content
    assert sent[3:] == lc_msgs[-3:]              # the original LangChain messages of the current turn
    assert sent[-2].tool_calls[0]["args"] == {"order_id": "88412"}
    ctx = mw.contexts[-1]
    assert ctx.tokens_after < ctx.tokens_before and len(mem) == 18
    # a plain string prompt and the with_damc helper
    out = with_damc(FakeMessagesListChatModel(responses=[AIMessage(content="hi")]), DecisionAwareMemory(None)).invoke("hello")
    assert out.content == "hi"
