"""`abuild_context` / `aadd_messages`: the memory works in worker threads, the event loop keeps running, and many
concurrent conversations on one store lose or mix nothing."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time

import numpy as np

from damc.cards import encode_messages
from damc.runtime.memory import DecisionAwareMemory
from damc.runtime.select import TopK

TOOLS = [{"type": "function", "function": {"name": "get_order", "description": "Look up an order",
                                           "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}}}}]


def conversation(k: int) -> list[dict]:
    """Conversation `k`: its own order number, a tool call with its result, chit-chat, then a question."""
    oid = str(70000 + 37 * k)
    msgs = [{"role": "system", "content": "You are a support agent."},
            {"role": "user", "content": f"Customer {k} here: my order {oid} never arrived."},
            {"role": "assistant", "content": None, "tool_calls": [{"id": f"c{k}", "type": "function", "function": {
                "name": "get_order", "arguments": json.dumps({"order_id": oid})}}]},
            {"role": "tool", "tool_call_id": f"c{k}", "content": json.dumps({"order_id": oid, "state": "lost"})},
            {"role": "assistant", "content": f"Order {oid} was lost in transit."}]
    for i in range(3):
        msgs += [{"role": "user", "content": f"Customer {k}, question {i}: can you tell me a fact about city {i}?"},
                 {"role": "assistant", "content": f"City {i} of customer {k} has {i + k} bridges."}]
    msgs.append({"role": "user", "content": f"So what about order {oid}?"})
    return msgs


def _digest(texts: list[str]) -> str:
    return hashlib.sha256("\n".join(texts).encode()).hexdigest()


class SlowValuer:
    """A duck-typed valuer that holds its thread for `delay` seconds (a stand-in for a scorer's forward pass)."""

    name = "slow"

    def __init__(self, delay: float):
        self.delay = delay

    def bind(self, memory):
        pass

    def value(self, query, cards, now=None):
        time.sleep(self.delay)
        return np.linspace(1.0, 0.5, len(cards), dtype=np.float32)


def test_the_event_loop_keeps_running_while_the_memory_works():
    mem = DecisionAwareMemory(None, tokenizer=None, valuer=SlowValuer(0.5), selector=TopK(None))
    msgs = conversation(1)
    ticks = []

    async def ticker(stop: asyncio.Event):
        while not stop.is_set():
            ticks.append(time.perf_counter())
            await asyncio.sleep(0.01)

    async def main():
        stop = asyncio.Event()
        t = asyncio.create_task(ticker(stop))
        await asyncio.sleep(0)                       # the ticker starts
        n0 = len(ticks)
        ids = await mem.aadd_messages(msgs[:4], session_id="s")
        ctx = await mem.abuild_context(msgs, tools=TOOLS, session_id="s")
        n1 = len(ticks)
        stop.set()
        await t
        return ids, ctx, n1 - n0

    ids, ctx, n_ticks = asyncio.run(main())
    assert n_ticks >= 20       # ≥ 0.5 s of valuing: a blocked loop would have ticked at most once
    assert ids == ["s:1", "s:2:0"] and ctx.selected
    sync = DecisionAwareMemory(None, tokenizer=None, valuer=SlowValuer(0.0), selector=TopK(None))
    assert sync.build_context(msgs, tools=TOOLS, session_id="s").messages == ctx.messages


def test_sixteen_concurrent_conversations_on_one_store(tmp_path):
    """16 conversations ingest and build contexts concurrently on one on-disk store; every card comes back (count
    and content hash per session, read by a fresh memory on the same path) and no context holds another's card."""
    path = tmp_path / "mem"
    mem = DecisionAwareMemory(path, tokenizer=None, selector=TopK(None))
    convs = {f"conv-{k:02d}": conversation(k) for k in range(16)}

    async def run(sid: str, msgs: list[dict]):
        await mem.aadd_messages(msgs[:3], session_id=sid)          # the first messages as they arrive
        await asyncio.sleep(0)
        return await mem.abuild_context(msgs, tools=TOOLS, session_id=sid)   # the rest through build_context

    async def main():
        return await asyncio.gather(*(run(sid, msgs) for sid, msgs in convs.items()))

    contexts = dict(zip(convs, asyncio.run(main())))
    mem.close()
    expected = {sid: encode_messages(msgs[:-1], sid) for sid, msgs in convs.items()}
    with DecisionAwareMemory(path, tokenizer=None) as back:
        assert back.store.count("hot") == sum(len(c) for c in expected.values()) == 16 * 9
        for sid, cards in expected.items():
            stored = [sc.card for sc in back.store.session_cards(sid)]
            assert [c.card_id for c in stored] == [c.card_id for c in cards]
            assert _digest([c.raw_text for c in stored]) == _digest([c.raw_text for c in cards])
            ctx = contexts[sid]
            assert ctx.session_id == sid and ctx.selected
            assert all(s.card_id.startswith(sid + ":") for s in ctx.selected)
            assert ctx.messages[-1] == convs[sid][-1]
