"""Conversation identity: one memory, many conversations, no session ids — nothing of one reaches another; a
conversation resent by another process finds its session; trimmed and compacted histories re-sync. On both storage
backends (SQLite + FAISS, PostgreSQL + pgvector)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from damc.runtime.config import MemoryConfig
from damc.runtime.identity import TextMemo, align, chain_of, message_digest
from damc.runtime.memory import DecisionAwareMemory

ROOT = Path(__file__).resolve().parents[2]
TOOLS = [{"type": "function", "function": {"name": "get_order", "description": "Look up an order",
          "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}}}}]
SYSTEM = {"role": "system", "content": "You are a support agent."}


def call(cid, name, **args):
    return {"role": "assistant", "content": None, "tool_calls": [{"id": cid, "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)}}]}


def result(cid, obj):
    return {"role": "tool", "tool_call_id": cid, "content": json.dumps(obj)}


def conv_a() -> list[dict]:
    return [SYSTEM, {"role": "user", "content": "My order 88412 never arrived."},
            call("a1", "get_order", order_id="88412"), result("a1", {"order_id": "88412", "state": "lost"}),
            {"role": "assistant", "content": "Order 88412 is lost in transit; I can send a replacement."},
            {"role": "user", "content": "Yes please, send it to my home address."}]


def conv_b() -> list[dict]:
    return [SYSTEM, {"role": "user", "content": "Hi, I'm Bob, order 55555 is broken: the screen is cracked."},
            {"role": "assistant", "content": "Sorry to hear that, Bob. Let me help."},
            {"role": "user", "content": "What's my order number?"}]


def session_text(mem: DecisionAwareMemory, sid: str) -> str:
    return json.dumps([sc.card.to_dict() for sc in mem.store.session_cards(sid, scope=mem.scope)])


def context_text(ctx) -> str:
    return json.dumps(ctx.messages) + json.dumps([d.card_id for d in ctx.dropped])


@pytest.fixture(params=["sqlite", "postgres"])
def where(request, tmp_path):
    """Where a test's memory lives: a fresh directory (SQLite + FAISS), or a fresh database on the test server
    (PostgreSQL + pgvector, tests/pg_fixtures.py): conversation identity holds on both backends."""
    return tmp_path / "mem" if request.param == "sqlite" else request.getfixturevalue("pg_url")


def test_two_conversations_without_session_ids_stay_apart(where):
    """The issue's example: B must not see A's 88412, and B's own messages are stored (in a session of its own)."""
    mem = DecisionAwareMemory(where, tokenizer=None, valuer="heuristic")
    ctx_a = mem.build_context(conv_a(), tools=TOOLS)
    assert ctx_a.session_id == "default" and "88412" in context_text(ctx_a)
    ctx_b = mem.build_context(conv_b(), tools=TOOLS)
    assert ctx_b.session_id.startswith("default~") and ctx_b.session_id != "default"
    assert "88412" not in context_text(ctx_b) and not any("88412" in s.line for s in ctx_b.selected)
    assert all(s.card_id.startswith(ctx_b.session_id + ":") for s in ctx_b.selected)
    stored_b = session_text(mem, ctx_b.session_id)
    assert "55555" in stored_b and "88412" not in stored_b                    # B's messages are stored, apart
    assert "55555" not in session_text(mem, "default")
    assert any("55555" in line for line in ctx_b.memory_lines)           # and B's own history serves B

    # both go on: each finds its own session again, neither sees the other
    a2 = conv_a() + [{"role": "assistant", "content": "Done, the replacement ships today."},
                     {"role": "user", "content": "Thanks. Which order was that again?"}]
    b2 = conv_b() + [{"role": "assistant", "content": "Your order is 55555."},
                     {"role": "user", "content": "And when will the new screen come?"}]
    ctx_a2, ctx_b2 = mem.build_context(a2, tools=TOOLS), mem.build_context(b2, tools=TOOLS)
    assert (ctx_a2.session_id, ctx_b2.session_id) == ("default", ctx_b.session_id)
    assert "55555" not in context_text(ctx_a2) and "55555" not in session_text(mem, "default")
    assert "88412" not in context_text(ctx_b2) and "88412" not in session_text(mem, ctx_b.session_id)
    assert any("55555" in s.line for s in ctx_b2.selected)
    # nothing recorded twice: one card per message of each history
    assert [sc.card.card_id for sc in mem.store.session_cards(ctx_b.session_id, scope=mem.scope)] == [
        f"{ctx_b.session_id}:{i}" for i in (1, 2, 3, 4)]
    assert mem.store.session_state("default")["n_messages"] == 7
    mem.close()


def _resume(path: str, messages: list[dict]) -> dict:
    """Build one context in a fresh Python process (a restarted agent service) and report what it used."""
    code = ("import json, sys\nfrom damc.runtime.memory import DecisionAwareMemory\n"
            "path, msgs = json.loads(sys.stdin.read())\n"
            "mem = DecisionAwareMemory(path, tokenizer=None, valuer='heuristic')\n"
            "ctx = mem.build_context(msgs, tools=[])\n"
            "print(json.dumps({'session_id': ctx.session_id, 'kept': [s.card_id for s in ctx.selected],"
            " 'lines': ctx.memory_lines, 'n': len(mem)}))\n")
    out = subprocess.run([sys.executable, "-c", code], input=json.dumps([path, messages]), capture_output=True,
                         text=True, cwd=ROOT, timeout=600, env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_conversation_resumed_by_another_process_recovers_its_cards(where):
    path = where
    mem = DecisionAwareMemory(path, tokenizer=None, valuer="heuristic")
    mem.build_context(conv_a(), tools=TOOLS)
    sid_b = mem.build_context(conv_b(), tools=TOOLS).session_id
    n = len(mem)
    mem.close()
    later = conv_b() + [{"role": "assistant", "content": "Your order is 55555."},
                        {"role": "user", "content": "Please ship the new screen to Berlin."}]
    got = _resume(str(path), later)
    assert got["session_id"] == sid_b                                  # found by its first messages
    assert f"{sid_b}:1" in got["kept"] and any("55555" in line for line in got["lines"])
    assert not any("88412" in line for line in got["lines"])
    assert got["n"] == n + 2                                           # only the two new messages were recorded


def _turns(k: int) -> list[dict]:
    msgs = [SYSTEM]
    for i in range(k):
        msgs += [{"role": "user", "content": f"Check order {70000 + i}, please."},
                 call(f"c{i}", "get_order", order_id=str(70000 + i)),
                 result(f"c{i}", {"order_id": str(70000 + i), "state": "shipped" if i % 2 else "delayed"}),
                 {"role": "assistant", "content": f"Order {70000 + i} is {'shipped' if i % 2 else 'delayed'}."}]
    return msgs


def _texts(mem: DecisionAwareMemory, sid: str) -> list[str]:
    return [sc.card.raw_text for sc in mem.store.session_cards(sid, scope=mem.scope)]


@pytest.mark.parametrize("session_id", [None, "chat-7"])
def test_a_trimmed_history_resyncs(where, session_id):
    """The caller drops its oldest turns: nothing is ingested twice, nothing stored is lost, new messages are
    numbered by the store's own counter."""
    mem = DecisionAwareMemory(where, tokenizer=None, session_id=session_id, valuer="heuristic")
    sid = session_id or "default"
    full = _turns(6) + [{"role": "user", "content": "Which orders were delayed?"}]
    mem.build_context(full, tools=TOOLS)
    before = _texts(mem, sid)
    n = mem.store.session_state(sid, mem.scope)["n_messages"]
    assert n == 25 and len(before) == 18
    trimmed = [SYSTEM] + full[13:] + [{"role": "assistant", "content": "Orders 70000, 70002 and 70004."},
                                      {"role": "user", "content": "Refund order 70004."}]
    ctx = mem.build_context(trimmed, tools=TOOLS)
    assert ctx.session_id == sid
    after = _texts(mem, sid)
    assert after[:len(before)] == before and len(after) == len(before) + 2       # lost nothing, doubled nothing
    assert len(set(after)) == len(after)
    assert mem.expand(f"{sid}:{n}").raw_text == "Which orders were delayed?"    # the store's counter numbers them
    assert mem.expand(f"{sid}:{n + 1}").raw_text == "Orders 70000, 70002 and 70004."
    assert any(s.card_id == f"{sid}:{n + 1}" for s in ctx.selected)
    # the next turn of the trimmed list extends it like any other list
    ctx2 = mem.build_context(trimmed + [call("r1", "refund", order_id="70004"), result("r1", {"ok": True}),
                                        {"role": "assistant", "content": "Refunded."},
                                        {"role": "user", "content": "Thanks!"}], tools=TOOLS)
    assert ctx2.session_id == sid and len(_texts(mem, sid)) == len(after) + 3
    assert mem.expand(f"{sid}:{n + 3}:0").result == {"ok": True}
    mem.close()


@pytest.mark.parametrize("role", ["user", "system"])
def test_a_compacted_history_resyncs_and_its_summary_becomes_a_card(where, role):
    mem = DecisionAwareMemory(where, tokenizer=None, valuer="heuristic")
    full = _turns(5) + [{"role": "user", "content": "Anything else delayed?"}]
    mem.build_context(full, tools=TOOLS)
    before = _texts(mem, "default")
    n = mem.store.session_state("default", mem.scope)["n_messages"]
    summary = {"role": role, "content": "Summary of the conversation so far: orders 70000 and 70002 are delayed, "
                                        "70001 and 70003 shipped; the customer wants a refund for 70000."}
    compacted = [SYSTEM, summary] + full[17:] + [{"role": "assistant", "content": "Only those two."},
                                                {"role": "user", "content": "Then refund 70000."}]
    ctx = mem.build_context(compacted, tools=TOOLS)
    assert ctx.session_id == "default"
    after = _texts(mem, "default")
    assert after[:len(before)] == before and len(set(after)) == len(after)
    card = mem.expand(f"default:{n}")                                  # the summary: a card of its own
    assert card.raw_text == summary["content"] and card.meta.get("summary") is True
    assert mem.expand(f"default:{n + 2}").raw_text == "Only those two."
    assert len(after) == len(before) + 3                               # summary, the old turn, the reply
    assert any(s.card_id == f"default:{n}" for s in ctx.selected + ctx.dropped)
    again = mem.build_context(compacted, tools=TOOLS)                  # the same list again: nothing new
    assert again.session_id == "default" and _texts(mem, "default") == after
    mem.close()


def test_on_mismatch_error_names_the_first_differing_message(where):
    import damc
    import damc.runtime

    mem = DecisionAwareMemory(where, tokenizer=None, config=MemoryConfig(on_mismatch="error"))
    mem.build_context(conv_a(), tools=TOOLS)
    n = len(mem)
    with pytest.raises(damc.ConversationMismatchError, match=r"messages\[1\] does not continue session 'default'") \
            as ei:
        mem.build_context(conv_b(), tools=TOOLS)
    assert ei.value.index == 1 and ei.value.session_id == "default" and "Hi, I'm Bob" in str(ei.value)
    assert damc.runtime.ConversationMismatchError is damc.ConversationMismatchError
    assert isinstance(ei.value, ValueError) and len(mem) == n                       # nothing of B was written
    with pytest.raises(damc.ConversationMismatchError, match=r"messages\[1\]"):     # per-call ids too
        mem.build_context(conv_b(), tools=TOOLS, session_id="default")
    assert mem.build_context(conv_b(), tools=TOOLS, session_id="bob").session_id == "bob"
    with pytest.raises(ValueError, match="on_mismatch must be one of"):
        DecisionAwareMemory(None, tokenizer=None, config=MemoryConfig(on_mismatch="ignore"))
    mem.close()


def test_explicit_session_id_that_does_not_match_gets_a_derived_session(where):
    mem = DecisionAwareMemory(where, tokenizer=None, valuer="heuristic")
    assert mem.build_context(conv_a(), tools=TOOLS, session_id="chat-42").session_id == "chat-42"
    ctx = mem.build_context(conv_b(), tools=TOOLS, session_id="chat-42")
    assert ctx.session_id.startswith("chat-42~") and "88412" not in context_text(ctx)
    # an edited conversation that opened like B but went another way: a session of its own too
    edited = conv_b()[:2] + [{"role": "assistant", "content": "Which screen size is it?"},
                             {"role": "user", "content": "The 13 inch one."}]
    ctx_e = mem.build_context(edited, tools=TOOLS, session_id="chat-42")
    assert ctx_e.session_id not in ("chat-42", ctx.session_id) and ctx_e.session_id.startswith("chat-42~")
    assert "Let me help" not in context_text(ctx_e)
    assert mem.build_context(edited, tools=TOOLS, session_id="chat-42").session_id == ctx_e.session_id
    mem.close()


def test_stores_from_before_chains_adopt_the_conversation(where):
    """A session written before hash chains existed (schema 2) is continued by its conversation, as before."""
    path = where
    mem = DecisionAwareMemory(path, tokenizer=None, valuer="heuristic")
    mem.build_context(conv_a(), tools=TOOLS)
    with mem.store.transaction() as c:
        c.execute("DELETE FROM damc_session_messages" if str(path).startswith("postgresql://") else
                  "DELETE FROM session_messages")
    mem.close()
    mem = DecisionAwareMemory(path, tokenizer=None, valuer="heuristic")
    n = len(mem)
    ctx = mem.build_context(conv_a() + [{"role": "assistant", "content": "Shipped."},
                                        {"role": "user", "content": "Thanks."}], tools=TOOLS)
    assert ctx.session_id == "default" and len(mem) == n + 2
    assert sorted(mem.store.chain_rows("default", scope=mem.scope)) == list(range(7))   # the chain was filled in
    assert mem.build_context(conv_b(), tools=TOOLS).session_id != "default"
    mem.close()


def test_align_unit_cases():
    memo = TextMemo()
    msgs = [SYSTEM] + [{"role": "user", "content": f"m{i}"} for i in range(6)]
    d = [message_digest(m, memo) for m in msgs]
    stored = {i: (h, c) for i, (h, c) in enumerate(zip(d[:5], chain_of(d[:5])))}

    def rows(idx):
        return {i: stored[i] for i in (idx if idx is not None else stored) if i in stored}

    ext = align(d, 6, 5, None, rows)
    assert ext.ok and ext.new == [5] and ext.view is None and ext.turn_position == 6
    assert align(d[:3], 2, 5, None, rows).new == [] and align(d[:3], 2, 5, None, rows).turn_position == 2
    other = [message_digest({"role": "user", "content": "x"}, memo)]
    bad = align(d[:1] + other, 1, 5, None, rows, need_diff=True)
    assert not bad.ok and bad.first_diff == 1
    trimmed = align([d[0], d[3], d[4], d[5], d[6]], 4, 5, None, rows)
    assert trimmed.ok and trimmed.resynced and trimmed.new == [3] and trimmed.view == [0, 3, 4, 5]
    assert trimmed.turn_position == 6
    # a lone shared message (the last stored one) is not enough to re-sync: another conversation
    assert not align([d[0], other[0], d[4]], 2, 5, None, rows).ok
    # key order, spacing and provider extras do not change a message's digest; content does
    m1 = {"role": "assistant", "content": None, "refusal": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1, "b": 2}'}}]}
    m2 = {"tool_calls": [{"function": {"arguments": '{"b":2,"a":1}', "name": "f"}, "id": "c1"}], "role": "assistant"}
    assert message_digest(m1, memo) == message_digest(m2, memo)
    assert message_digest(m1, memo) != message_digest({**m2, "tool_calls": [{"id": "c2", "function": {
        "name": "f", "arguments": "{}"}}]}, memo)
