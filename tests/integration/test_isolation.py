"""Two users, several sessions, one store directory: no card of one user ever reaches the other — through
FAISS, recent, pinned, shared sessions, lifecycle, the value cache, explain or expand; in threads, in separate
processes, and after reopening the store."""

from __future__ import annotations

import hashlib
import json
import multiprocessing as mp
import threading
from pathlib import Path

import numpy as np
import pytest

from damc.bench.explain import explain_store
from damc.runtime.memory import DecisionAwareMemory

TOOLS = [{"type": "function", "function": {"name": "get_order", "parameters": {"type": "object", "properties": {}}}}]
MARK = {"alice": "ALICE-SECRET", "bob": "BOB-PUBLIC"}


class HashEncoder:
    """A tiny deterministic sentence encoder (hashed word features), so the test needs no model."""

    def encode(self, texts, **kw):
        out = np.zeros((len(texts), 64), dtype=np.float32)
        for i, t in enumerate(texts):
            for w in str(t).lower().split():
                out[i, int(hashlib.md5(w.encode()).hexdigest(), 16) % 64] += 1.0
        out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-6)
        return out


def turn_messages(user: str, session: str, t: int) -> list[dict]:
    """One turn about the same order ids for both users (so similarity alone would mix them up)."""
    cid = f"c{t}"
    res = ({"status": "error", "code": 500, "message": f"{MARK[user]}-{session}-{t} failed"} if t % 2 == 0 else
           {"order_id": "88412", "owner": f"{MARK[user]}-{session}-{t}", "state": "lost"})
    return [{"role": "user", "content": f"Where is order 88412? I am {MARK[user]}-{session}-{t}."},
            {"role": "assistant", "content": None, "tool_calls": [{"id": cid, "type": "function",
             "function": {"name": "get_order", "arguments": json.dumps({"order_id": "88412"})}}]},
            {"role": "tool", "tool_call_id": cid, "content": json.dumps(res)},
            {"role": "assistant", "content": f"Order 88412 is lost, {MARK[user]}-{session}-{t}."}]


def drive(mem: DecisionAwareMemory, user: str, session: str, turns: int) -> list[str]:
    """Run a conversation for (user, session); returns everything the user could see, as text."""
    msgs = [{"role": "system", "content": "You are a support agent."}]
    seen = []
    for t in range(turns):
        msgs += turn_messages(user, session, t)
        ctx = mem.build_context(msgs + [{"role": "user", "content": "What about order 88412 and the error?"}],
                                tools=TOOLS, session_id=session, user_id=user)
        seen += [json.dumps(ctx.to_dict(with_cards=True), ensure_ascii=False), str(mem.explain(ctx))]
        seen += [json.dumps(mem.expand(s.card_id, user_id=user).to_dict()) for s in ctx.selected]
    return seen


def assert_apart(texts_by_user: dict[str, list[str]]) -> None:
    for user, texts in texts_by_user.items():
        other = MARK["bob" if user == "alice" else "alice"]
        assert texts, f"{user} saw nothing"
        leaks = [t[:200] for t in texts if other in t]
        assert not leaks, f"{user} saw the other user's cards: {leaks[:2]}"
        assert any(MARK[user] in t for t in texts), f"{user} never saw their own cards"


def probe(mem: DecisionAwareMemory, user: str, sessions: list[str]) -> list[str]:
    """Every read path for `user` over the whole store: contexts with shared sessions, explain of stored contexts,
    expand of every card id any user wrote, lifecycle results."""
    out = []
    mem.config.share_sessions = True
    ctx = mem.build_context([{"role": "user", "content": "order 88412 owner error failed lost s0 s1"}], tools=TOOLS,
                            session_id="probe", user_id=user)
    mem.config.share_sessions = False
    out += [json.dumps(ctx.to_dict(with_cards=True)), str(mem.explain(ctx))]
    for s in sessions:
        out.append(json.dumps(explain_store(str(mem.path) if mem.path else mem.store.url, s, user).data))
    for sc in mem.store.all_cards(None):          # every card id of every scope
        try:
            out.append(json.dumps(mem.expand(sc.card.card_id, user_id=user).to_dict()))
        except PermissionError:
            pass
    out += [json.dumps([c.to_dict() for c in mem.merge_similar(0.5, user_id=user)])]
    return out


@pytest.fixture(params=["sqlite", "postgres"])
def mem_at(request, tmp_path):
    """The memory's location on each storage backend: a directory, or a fresh database on the test server."""
    return tmp_path / "mem" if request.param == "sqlite" else request.getfixturevalue("pg_url")


def test_threads_share_one_memory(mem_at):
    mem = DecisionAwareMemory(mem_at, tokenizer=None, encoder=HashEncoder())
    sessions = ["s0", "s1"]
    seen: dict[str, list[str]] = {"alice": [], "bob": []}
    lock = threading.Lock()

    def run(user: str, session: str) -> None:
        texts = drive(mem, user, session, 3)
        with lock:
            seen[user] += texts

    threads = [threading.Thread(target=run, args=(u, s)) for u in ("alice", "bob") for s in sessions]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert_apart(seen)
    assert_apart({u: probe(mem, u, sessions) for u in ("alice", "bob")})
    mem.close()
    again = DecisionAwareMemory(mem_at, tokenizer=None, encoder=HashEncoder())   # after reopen
    assert_apart({u: probe(again, u, sessions) + drive(again, u, "s2", 2) for u in ("alice", "bob")})
    again.close()


def _process(path: str, user: str, session: str, out: str) -> None:
    mem = DecisionAwareMemory(path, tokenizer=None, encoder=HashEncoder())
    Path(out).write_text(json.dumps(drive(mem, user, session, 3)))
    mem.close()


@pytest.mark.slow
def test_separate_processes_then_reopen(tmp_path):
    path = str(tmp_path / "mem")
    DecisionAwareMemory(path, tokenizer=None, encoder=HashEncoder()).close()
    ctx = mp.get_context("spawn")
    jobs = [(u, s, str(tmp_path / f"{u}-{s}.json")) for u in ("alice", "bob") for s in ("s0", "s1")]
    procs = [ctx.Process(target=_process, args=(path, u, s, o)) for u, s, o in jobs]
    for p in procs:
        p.start()
    for p in procs:
        p.join(300)
        assert p.exitcode == 0
    seen: dict[str, list[str]] = {"alice": [], "bob": []}
    for u, _, o in jobs:
        seen[u] += json.loads(Path(o).read_text())
    assert_apart(seen)
    mem = DecisionAwareMemory(path, tokenizer=None, encoder=HashEncoder())
    assert mem.store.count() == 2 * 2 * 3 * 3     # every card written by every process is there
    assert_apart({u: probe(mem, u, ["s0", "s1"]) for u in ("alice", "bob")})
    mem.close()
