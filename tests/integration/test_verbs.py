"""Mem0's verbs on `DecisionAwareMemory`: get_all, search, get, history, delete, delete_all, reset — each verb's
outcome, scopes on every verb, history across the lifecycle and a schema-2 store, and erasure checked on the bytes
of every file of the store directory (and on the index, caches, statistics and saved contexts).

The backend-neutral tests run on both storage backends (`backend`: SQLite + FAISS, and PostgreSQL + pgvector on a
real server, tests/pg_fixtures.py); erasure on PostgreSQL is checked on every row of every `damc_` table (no row
holds the text) and on the vector column."""

from __future__ import annotations

import functools
import json
import sqlite3
from pathlib import Path

import pytest

from damc.runtime.memory import DecisionAwareMemory
from damc.runtime.schema import SCHEMA_VERSION
from damc.runtime.scope import Scope
from damc.runtime.valuers import CachedValuer

TOOLS = [{"type": "function", "function": {"name": "get_order", "parameters": {"type": "object", "properties": {}}}}]
# unique markers: one in what each user says, one in what the tools returned for them
SAY = {"alice": "ALICESAYS-q7w3", "bob": "BOBSAYS-k2m9"}
TOOL = {"alice": "ALICETOOL-z8x1", "bob": "BOBTOOL-p4n6"}


def turn(user: str, session: str, t: int) -> list[dict]:
    """One turn: the user asks, a tool call fails or answers, the assistant replies."""
    cid = f"{session}-c{t}"
    res = ({"status": "error", "code": 500, "message": f"lookup failed for {TOOL[user]}-{session}-{t}"} if t % 2 == 0
           else {"order_id": "88412", "owner": f"{TOOL[user]}-{session}-{t}", "state": "lost"})
    return [{"role": "user", "content": f"Where is order 88412? Actually I am {SAY[user]}-{session}-{t}."},
            {"role": "assistant", "content": None, "tool_calls": [{"id": cid, "type": "function",
             "function": {"name": "get_order", "arguments": json.dumps({"order_id": "88412"})}}]},
            {"role": "tool", "tool_call_id": cid, "content": json.dumps(res)},
            {"role": "assistant", "content": "I checked order 88412."}]


def converse(mem: DecisionAwareMemory, user: str, session: str, turns: int, agent_id: str | None = None) -> None:
    """Drive a conversation through `build_context` (so values, saved contexts and the value cache are used)."""
    msgs = [{"role": "system", "content": "You are a support agent."}]
    for t in range(turns):
        msgs += turn(user, session, t)
        mem.build_context(msgs + [{"role": "user", "content": f"And now? {SAY[user]}-{session}-now"}], tools=TOOLS,
                          session_id=session, user_id=user, agent_id=agent_id)


@functools.cache
def encoder():
    """The packaged int8 ONNX MiniLM (the light install's encoder), loaded once for the module: real vectors, so
    two different cards never share one (a hashed toy encoder can collide, and the vector checks need them apart)."""
    from damc.runtime.index import load_card_encoder

    return load_card_encoder("minilm-l6", backend="onnx")


def open_memory(path: Path) -> DecisionAwareMemory:
    return DecisionAwareMemory(path, tokenizer=None, encoder=encoder())


def files_holding(root: Path, needle: str) -> list[str]:
    """Every file under `root` whose bytes contain `needle` (UTF-8)."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and needle.encode() in
                  p.read_bytes())


def vectors_of(mem: DecisionAwareMemory, rowids: list[int]) -> list[bytes]:
    c = sqlite3.connect(mem.store.path)
    out = [r[0] for r in c.execute(f"SELECT vector FROM embeddings WHERE card_rowid IN ({','.join('?' * len(rowids))})",
                                   rowids)]
    c.close()
    return out


def pg_rows_holding(url: str, needle: str) -> list[str]:
    """`table` for every row of every `damc_` table whose text (all columns, as text) contains `needle`."""
    import psycopg

    with psycopg.connect(url) as c:
        tables = [r[0] for r in c.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = "
                                          "current_schema() AND table_name LIKE 'damc%%'")]
        return sorted(tb for tb in tables for _ in c.execute(
            f'SELECT 1 FROM "{tb}" whole_row WHERE strpos(whole_row::text, %s) > 0', (needle,)).fetchall())


def holding(where: str | Path, needle: str) -> list[str]:
    """Where the store at `where` still holds `needle`: files of a memory directory, or rows of a database."""
    if str(where).startswith("postgresql://"):
        return pg_rows_holding(str(where), needle)
    return files_holding(Path(where), needle)


@pytest.fixture(params=["sqlite", "postgres"])
def where(request, tmp_path) -> str | Path:
    """A fresh memory directory, or a fresh database on the test server."""
    return tmp_path / "mem" if request.param == "sqlite" else request.getfixturevalue("pg_url")


def _two_users(where):
    mem = open_memory(where)
    converse(mem, "alice", "s0", 3)
    converse(mem, "alice", "s1", 2)
    converse(mem, "bob", "s0", 3)
    return mem


@pytest.fixture
def two_users(tmp_path):
    """Two users on an embedded store (the tests of its files)."""
    mem = _two_users(tmp_path / "mem")
    yield mem
    mem.close()


@pytest.fixture
def any_two_users(where):
    """Two users on either backend; `mem.where_` is where the store lives."""
    mem = _two_users(where)
    mem.where_ = where
    yield mem
    mem.close()


# ----------------------------------------------------------------------------- reading verbs

def test_get_all_and_get(any_two_users):
    mem = any_two_users
    alice = mem.get_all(user_id="alice")
    assert {i.session_id for i in alice} == {"s0", "s1"} and len(alice) == mem.store.count("hot", Scope("alice"))
    assert all(i.user_id == "alice" and i.agent_id is None and i.tier == "hot" for i in alice)
    assert not any(SAY["bob"] in i.memory or TOOL["bob"] in i.memory for i in alice)
    s1 = mem.get_all(user_id="alice", session_id="s1")
    assert {i.session_id for i in s1} == {"s1"} and [i.card.position for i in s1] == sorted(i.card.position for i in s1)
    assert len(mem.get_all(user_id="alice", limit=2)) == 2 and mem.get_all(user_id="alice", tier="cold") == []
    assert mem.get_all(user_id="carol") == []
    item = mem.get(s1[0].id, user_id="alice")
    assert item.card == mem.expand(s1[0].id, user_id="alice") and item.memory == item.card.raw_text
    d = item.to_dict()
    assert d["id"] == s1[0].id and d["run_id"] == "s1" and d["user_id"] == "alice" and d["score"] is None
    assert d["metadata"]["kind"] == item.card.kind and d["created_at"].endswith("Z")
    with pytest.raises(ValueError, match="tier"):
        mem.get_all(user_id="alice", tier="warm")


def test_search_scores_and_reasons(any_two_users):
    mem = any_two_users
    hits = mem.search("order 88412 lookup failed", user_id="alice", limit=30)
    assert hits and {h.session_id for h in hits} == {"s0", "s1"}            # every session of the scope
    assert all(h.user_id == "alice" and SAY["bob"] not in h.memory and TOOL["bob"] not in h.memory for h in hits)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert all(h.reasons and set(h.reasons) <= {"similar", "bm25", "recent", "pinned"} for h in hits)
    errors = [h for h in hits if h.card.is_error]
    assert errors and all("pinned" in h.reasons and "bm25" in h.reasons for h in errors)   # "failed" is in them
    assert all(-1.0 <= h.similarity <= 1.0 for h in hits)
    assert all("scope" not in (h.card.meta or {}) for h in hits)               # the stored card, not a candidate
    assert hits[0].to_dict()["score"] == hits[0].score
    top = mem.search("order 88412 lookup failed", user_id="alice", limit=2)
    assert [h.id for h in top] == [h.id for h in hits[:2]]
    one = mem.search("order 88412", user_id="alice", session_id="s1", limit=30)
    assert one and {h.session_id for h in one} == {"s1"}
    assert all(h.score >= 0.5 for h in mem.search("order 88412", user_id="alice", limit=30, threshold=0.5))
    assert mem.search("order 88412", user_id="carol") == []
    with pytest.raises(ValueError, match="query"):
        mem.search("  ", user_id="alice")


def test_search_scores_with_a_valuer_that_only_has_value(two_users):
    """A valuer-shaped object (a `value` method, no `Valuer` base, no `value_with_notes`) scores `search` as it
    scores `build_context`: its values come back as the items' scores, in its order."""
    class ByLength:
        def value(self, query, cards, now=None):
            return [len(c.raw_text) / 10_000 for c in cards]

    mem = two_users
    mem.valuer = ByLength()
    hits = mem.search("order 88412 lookup failed", user_id="alice", limit=30)
    assert hits and [h.score for h in hits] == pytest.approx(sorted((len(h.card.raw_text) / 10_000 for h in hits),
                                                                    reverse=True), abs=1e-6)


def test_scopes_apply_to_every_verb(any_two_users):
    mem = any_two_users
    converse(mem, "alice", "only-alice", 1)
    converse(mem, "alice", "billing", 1, agent_id="billing")
    (own,) = [i for i in mem.get_all(user_id="alice", session_id="only-alice") if i.card.kind == "user"][:1]
    for verb in (mem.get, mem.history, mem.delete):
        with pytest.raises(PermissionError, match="another scope"):
            verb(own.id, user_id="bob")
        with pytest.raises(KeyError):
            verb("no-such-card", user_id="bob")
    assert mem.get(own.id, user_id="alice").memory == own.memory               # bob's delete erased nothing
    assert mem.get_all(user_id="bob", session_id="only-alice") == []
    assert all(i.agent_id is None for i in mem.get_all(user_id="alice"))       # scopes match exactly
    billing = mem.get_all(user_id="alice", agent_id="billing")
    assert billing and all(i.agent_id == "billing" for i in billing)
    assert all(h.agent_id == "billing" for h in mem.search("order 88412", user_id="alice", agent_id="billing"))
    with pytest.raises(ValueError, match="user_id= or agent_id="):
        mem.delete_all()
    n_alice = mem.store.count(None, Scope("alice"))
    assert mem.delete_all(user_id="alice") == n_alice                          # exactly Alice without an agent
    assert mem.get_all(user_id="alice", tier=None) == [] and mem.get_all(user_id="alice", agent_id="billing")
    n_billing = len(mem.get_all(user_id="alice", agent_id="billing", tier=None))
    assert mem.delete_all(user_id="alice", all_agents=True) == n_billing       # every scope of Alice's
    assert mem.get_all(user_id="alice", agent_id="billing", tier=None) == [] and mem.get_all(user_id="bob")


# ----------------------------------------------------------------------------- history

def _duplicates(session: str, mark: str) -> list[dict]:
    """Three identical tool calls and results (near-duplicates for `merge_similar`), then a reply."""
    out = []
    for k in range(3):
        out += [{"role": "assistant", "content": None, "tool_calls": [{"id": f"d{k}", "type": "function",
                 "function": {"name": "get_order", "arguments": "{\"order_id\": \"55555\"}"}}]},
                {"role": "tool", "tool_call_id": f"d{k}", "content": json.dumps({"order_id": "55555",
                                                                                "note": f"{mark}-dup"})}]
    return out + [{"role": "assistant", "content": "Order 55555 is fine."}]


def test_history_records_archive_merge_and_restore(where):
    mem = open_memory(where)
    mem.add_messages([{"role": "user", "content": f"hello {SAY['alice']}"}] + _duplicates("s", TOOL["alice"]), "s",
                     user_id="alice")
    (merged,) = mem.merge_similar(0.99, user_id="alice")
    sources = merged.meta["merged_from"]
    assert len(sources) == 3
    h = mem.history(merged.card_id, user_id="alice")
    assert [e.event for e in h] == ["add", "merge"] and h[1].detail["sources"] == sources
    assert [e.event for e in mem.history(sources[0], user_id="alice")] == ["add", "merged_into"]
    assert mem.history(sources[0], user_id="alice")[1].detail == {"into": merged.card_id}
    assert mem.archive(min_age_s=0, max_value=1.0, keep_pinned=False, user_id="alice")
    assert [e.event for e in mem.history("s:0", user_id="alice")] == ["add", "archive"]
    # deleting one source of the merged card: the merged card (it repeats the source's text) goes, the others return
    assert set(mem.delete(sources[0], user_id="alice")) == {sources[0], merged.card_id}
    for s in sources[1:]:
        assert mem.get(s, user_id="alice").tier == "hot"
        assert [e.event for e in mem.history(s, user_id="alice")] == ["add", "merged_into", "restore"]
    with pytest.raises(KeyError):
        mem.history(merged.card_id, user_id="alice")
    assert mem.index.ntotal == mem.store.count("hot")
    mem.close()


def test_schema_2_store_opens_with_backfilled_history(tmp_path):
    mem = open_memory(tmp_path / "mem")
    mem.add_messages(_duplicates("s", "x"), "s", user_id="alice")
    (merged,) = mem.merge_similar(0.99, user_id="alice")
    mem.close()
    c = sqlite3.connect(tmp_path / "mem" / "cards.db")                         # back to the schema-2 layout
    c.execute("DROP TABLE events")
    c.execute("UPDATE schema_version SET version = 2")
    c.commit()
    c.close()
    mem = open_memory(tmp_path / "mem")
    assert mem.store.schema_version == SCHEMA_VERSION
    h = mem.history(merged.card_id, user_id="alice")
    assert [e.event for e in h] == ["add", "merge"] and h[1].detail["backfilled"] is True
    assert h[1].detail["sources"] == merged.meta["merged_from"]
    assert [e.event for e in mem.history(merged.meta["merged_from"][0], user_id="alice")] == ["add", "merged_into"]
    mem.close()


# ----------------------------------------------------------------------------- erasure

def test_delete_all_leaves_no_byte_of_alice(two_users):
    mem = two_users
    root = Path(mem.path)
    mem.add_messages(_duplicates("dups", TOOL["alice"]), "dups", user_id="alice")
    assert mem.merge_similar(0.99, user_id="alice")                            # a merged card and a cold tier
    mem.archive(min_age_s=0, max_value=0.3, user_id="alice")
    assert mem.store.count("cold", Scope("alice")) and mem.store.last_context("s0", Scope("alice"))
    mem.search("order 88412", user_id="alice")
    mem.flush()
    for marker in (SAY["alice"], TOOL["alice"], SAY["bob"], TOOL["bob"]):
        assert files_holding(root, marker), f"{marker} should be on disk before the erasure"
    alice_rows = [sc.rowid for sc in mem.store.all_cards(None, Scope("alice"))]
    alice_vecs = vectors_of(mem, alice_rows)
    assert len(alice_vecs) >= mem.store.count("hot", Scope("alice"))
    bob_before = [(i.id, i.card.to_dict(), i.tier) for i in mem.get_all(user_id="bob", tier=None)]
    bob_vecs = vectors_of(mem, [sc.rowid for sc in mem.store.all_cards("hot", Scope("bob"))])
    alice_vecs = [v for v in alice_vecs if v not in bob_vecs]                 # both say "I checked order 88412."
    cache = mem.valuer
    assert isinstance(cache, CachedValuer) and any(SAY["alice"] in k[0] for k in cache._cache)

    assert mem.delete_all(user_id="alice") == len(alice_rows)

    for marker in (SAY["alice"], TOOL["alice"]):                               # every file: db, -wal, -shm, faiss
        assert files_holding(root, marker) == []
    assert files_holding(root, SAY["bob"]) and files_holding(root, TOOL["bob"])   # the check does see text
    faiss_bytes = (root / "cards.faiss").read_bytes()
    assert not any(v in faiss_bytes for v in alice_vecs) and all(v in faiss_bytes for v in bob_vecs)
    assert vectors_of(mem, alice_rows) == []                                   # the embedding cache
    assert mem.index.ntotal == mem.store.count("hot") == len(bob_vecs)
    assert not any(SAY["alice"] in repr(k) for k in cache._cache)               # the value cache
    assert mem.index._last_query is None or SAY["alice"] not in mem.index._last_query[0]
    alice = Scope("alice")
    assert mem.store.count(None, alice) == 0 and mem.store.last_context(None, alice) is None
    assert mem.store.session_state("s0", alice)["n_messages"] == 0 and mem.store.lifecycle_rows("cold", alice) == []
    c = sqlite3.connect(mem.store.path)                                        # no table keeps a row of hers
    for (table,) in c.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"):
        cols = {r[1] for r in c.execute(f"PRAGMA table_info({table})")}
        if "user_id" in cols:
            assert c.execute(f"SELECT count(*) FROM {table} WHERE user_id = 'alice'").fetchone()[0] == 0, table
    c.close()
    assert [(i.id, i.card.to_dict(), i.tier) for i in mem.get_all(user_id="bob", tier=None)] == bob_before
    hits = mem.search("order 88412 lookup failed", user_id="bob")
    assert hits and all(TOOL["bob"] in h.memory or SAY["bob"] in h.memory or "88412" in h.memory for h in hits)
    converse(mem, "bob", "s0", 4)                                              # and Bob's conversation goes on
    mem.close()
    again = open_memory(root)
    assert [(i.id, i.card.to_dict()) for i in again.get_all(user_id="bob", tier=None)][:len(bob_before)] == \
        [(i, d) for i, d, _ in bob_before]
    assert again.search("order 88412", user_id="alice") == [] and again.search("order 88412", user_id="bob")
    again.close()
    assert files_holding(root, SAY["alice"]) == [] and files_holding(root, TOOL["alice"]) == []


def test_delete_one_card_erases_its_text_and_vector(two_users):
    mem = two_users
    root = Path(mem.path)
    target = next(i for i in mem.get_all(user_id="alice", session_id="s0") if f"{TOOL['alice']}-s0-1" in i.memory)
    mem.flush()
    assert files_holding(root, f"{TOOL['alice']}-s0-1")
    (vec,) = vectors_of(mem, [mem.store.get_stored(target.id, Scope("alice")).rowid])
    others = [(i.id, i.memory) for i in mem.get_all(user_id="alice", tier=None) if i.id != target.id]
    assert mem.delete(target.id, user_id="alice") == [target.id]
    assert files_holding(root, f"{TOOL['alice']}-s0-1") == []
    assert vec not in (root / "cards.faiss").read_bytes() and mem.index.ntotal == mem.store.count("hot")
    with pytest.raises(PermissionError):                                       # only Bob's card of that id is left
        mem.get(target.id, user_id="alice")
    assert mem.get(target.id, user_id="bob").memory.count(TOOL["bob"]) == 1
    assert [(i.id, i.memory) for i in mem.get_all(user_id="alice", tier=None)] == others
    assert mem.store.last_context("s0", Scope("alice")) is None                # it showed the card
    assert mem.store.last_context("s1", Scope("alice")) is not None            # this one did not
    assert target.id not in [h.id for h in mem.search("order 88412 lost", user_id="alice", limit=50)]
    converse(mem, "alice", "s0", 4)                                            # the conversation goes on
    assert files_holding(root, f"{TOOL['alice']}-s0-3")


def test_delete_all_of_one_session(any_two_users):
    """`delete_all(session_id=...)` (Mem0's run_id) erases one conversation: its cards, state and saved context."""
    mem = any_two_users
    root = mem.where_
    s0 = [(i.id, i.memory) for i in mem.get_all(user_id="alice", session_id="s0", tier=None)]
    n_s1 = len(mem.get_all(user_id="alice", session_id="s1", tier=None))
    assert n_s1 == 6                                                           # 2 turns: user, tool, assistant
    assert mem.delete_all(user_id="alice", session_id="s1") == n_s1
    assert holding(root, f"{SAY['alice']}-s1") == [] and holding(root, f"{TOOL['alice']}-s1") == []
    assert holding(root, f"{SAY['alice']}-s0")                                 # her other conversation stays
    assert [(i.id, i.memory) for i in mem.get_all(user_id="alice", session_id="s0", tier=None)] == s0
    alice = Scope("alice")
    assert mem.store.session_state("s1", alice)["n_messages"] == 0 and mem.store.last_context("s1", alice) is None
    assert mem.store.session_state("s0", alice)["n_messages"] > 0 and mem.get_all(user_id="bob", session_id="s0")
    assert mem.index.ntotal == mem.store.count("hot")
    with pytest.raises(ValueError, match="all_agents"):
        mem.delete_all(user_id="alice", session_id="s0", all_agents=True)


def test_delete_merged_card_takes_its_sources(where):
    mem = open_memory(where)
    mem.add_messages(_duplicates("s", TOOL["alice"]), "s", user_id="alice")
    (merged,) = mem.merge_similar(0.99, user_id="alice")
    assert set(mem.delete(merged.card_id, user_id="alice")) == {merged.card_id, *merged.meta["merged_from"]}
    assert holding(where, TOOL["alice"]) == []
    assert [i.card.kind for i in mem.get_all(user_id="alice", tier=None)] == ["assistant"]
    mem.close()


def test_erasure_by_one_memory_reaches_another_on_the_same_store(two_users):
    """A second memory (another process's view) that still holds Alice's vectors never writes them back."""
    mem = two_users
    root = Path(mem.path)
    other = open_memory(root)
    assert other.search("order 88412", user_id="alice")                       # its index holds her vectors
    bob_vecs = vectors_of(mem, [sc.rowid for sc in mem.store.all_cards(None, Scope("bob"))])
    alice_vecs = [v for v in vectors_of(mem, [sc.rowid for sc in mem.store.all_cards(None, Scope("alice"))])
                  if v not in bob_vecs]
    assert alice_vecs
    mem.delete_all(user_id="alice")
    other.index._dirty = True
    other.close()                                                              # flushes its index
    assert not any(v in (root / "cards.faiss").read_bytes() for v in alice_vecs)
    again = open_memory(root)
    assert again.search("order 88412", user_id="alice") == [] and again.index.ntotal == again.store.count("hot")
    again.close()


def test_reset_erases_everything_and_memory_stays_usable(any_two_users):
    mem = any_two_users
    root = mem.where_
    n = mem.store.count()
    assert mem.reset() == n
    for marker in (*SAY.values(), *TOOL.values()):
        assert holding(root, marker) == []
    assert mem.store.count() == 0 and mem.index.ntotal == 0 and len(mem) == 0
    assert mem.get_all(user_id="alice") == [] and mem.search("order 88412", user_id="bob") == []
    converse(mem, "bob", "s9", 2)                                              # usable again
    assert {i.session_id for i in mem.get_all(user_id="bob")} == {"s9"}
    assert mem.search("order 88412", user_id="bob")
    mem.close()
    again = open_memory(root)
    again.index.sync()
    assert {i.session_id for i in again.get_all(user_id="bob")} == {"s9"} and again.index.ntotal == again.store.count()
    again.close()


def test_verbs_on_an_in_memory_store():
    mem = DecisionAwareMemory(None, tokenizer=None, encoder=encoder())
    converse(mem, "alice", "s0", 2)
    converse(mem, "bob", "s0", 2)
    assert mem.get_all(user_id="alice") and mem.delete_all(user_id="alice") > 0
    assert mem.get_all(user_id="alice", tier=None) == [] and mem.search("order 88412", user_id="alice") == []
    assert mem.search("order 88412", user_id="bob") and mem.index.ntotal == mem.store.count("hot")
    assert mem.reset() > 0 and mem.get_all(user_id="bob") == []
    mem.close()


def test_delete_all_leaves_no_row_of_alice_in_postgres(pg_url):
    """PostgreSQL erasure: after `delete_all`, no row of any `damc_` table holds Alice's text, her vectors are gone
    with their rows, Bob's rows and vectors are untouched, and a second worker's memory on the same database finds
    nothing of hers."""
    import psycopg

    mem = _two_users(pg_url)
    other = open_memory(pg_url)                                                # another worker on the database
    assert other.search("order 88412", user_id="alice")
    mem.add_messages(_duplicates("dups", TOOL["alice"]), "dups", user_id="alice")
    assert mem.merge_similar(0.99, user_id="alice")                            # a merged card, events, a cold tier
    mem.archive(min_age_s=0, max_value=0.3, user_id="alice")
    assert mem.store.count("cold", Scope("alice")) and mem.store.last_context("s0", Scope("alice"))
    for marker in (SAY["alice"], TOOL["alice"], SAY["bob"], TOOL["bob"]):
        assert pg_rows_holding(pg_url, marker), f"{marker} should be in the database before the erasure"
    assert "damc_events" in pg_rows_holding(pg_url, "merged_into")                # her history is in a table too
    alice_rows = [sc.rowid for sc in mem.store.all_cards(None, Scope("alice"))]
    with psycopg.connect(pg_url) as c:
        bob_vecs = c.execute("SELECT rowid, embedding::text FROM damc_cards WHERE user_id = 'bob' ORDER BY rowid"
                             ).fetchall()
        assert c.execute("SELECT count(*) FROM damc_cards WHERE rowid = ANY(%s) AND embedding IS NOT NULL",
                         (alice_rows,)).fetchone()[0] > 0
    before = mem.store.erasures()

    assert mem.delete_all(user_id="alice") == len(alice_rows)

    for marker in (SAY["alice"], TOOL["alice"]):
        assert pg_rows_holding(pg_url, marker) == []
    assert pg_rows_holding(pg_url, SAY["bob"]) and pg_rows_holding(pg_url, TOOL["bob"])   # the check sees text
    with psycopg.connect(pg_url) as c:
        assert c.execute("SELECT count(*) FROM damc_cards WHERE rowid = ANY(%s)", (alice_rows,)).fetchone()[0] == 0
        for (table,) in c.execute("SELECT table_name FROM information_schema.columns WHERE table_schema = "
                                  "current_schema() AND column_name = 'user_id'").fetchall():
            assert c.execute(f'SELECT count(*) FROM "{table}" WHERE user_id = %s', ("alice",)).fetchone()[0] == 0, table
        assert c.execute("SELECT rowid, embedding::text FROM damc_cards WHERE user_id = 'bob' ORDER BY rowid"
                         ).fetchall() == bob_vecs
    assert mem.store.erasures() == before + 1
    assert mem.index._last_query is None
    assert mem.search("order 88412", user_id="alice") == [] and other.search("order 88412", user_id="alice") == []
    assert mem.search("order 88412", user_id="bob") and mem.index.ntotal == mem.store.count("hot")
    assert mem.get_all(user_id="alice", tier=None) == [] and mem.store.session_state("s0", Scope("alice")) == \
        {"n_messages": 0, "pending": {}}
    converse(mem, "bob", "s0", 4)                                              # Bob's conversation goes on
    other.close()
    mem.close()


def test_postgres_scrub_vacuums_and_v1_store_gets_backfilled_history(pg_url):
    """`scrub` VACUUMs the damc tables (plain, or FULL); a schema-1 database (no events table) opens at the current
    schema with the merge history back-filled, as the SQLite store's schema-2 files do."""
    import psycopg

    from damc.runtime.pgschema import PG_SCHEMA_VERSION

    mem = open_memory(pg_url)
    mem.add_messages(_duplicates("s", "x"), "s", user_id="alice")
    (merged,) = mem.merge_similar(0.99, user_id="alice")
    out = mem.store.scrub()
    assert out["vacuumed"] and not out["full"] and {"damc_cards", "damc_events"} <= set(out["tables"])
    assert mem.store.scrub(full=True)["full"] and mem.store.scrub(vacuum=False)["vacuumed"] is False
    mem.close()
    with psycopg.connect(pg_url) as c:                                         # back to the schema-1 layout
        c.execute("DROP TABLE damc_events")
        c.execute("UPDATE damc_meta SET value = '1' WHERE key = 'schema_version'")
    mem = open_memory(pg_url)
    assert mem.store.schema_version == PG_SCHEMA_VERSION
    h = mem.history(merged.card_id, user_id="alice")
    assert [e.event for e in h] == ["add", "merge"] and h[1].detail["backfilled"] is True
    assert h[1].detail["sources"] == merged.meta["merged_from"]
    assert [e.event for e in mem.history(merged.meta["merged_from"][0], user_id="alice")] == ["add", "merged_into"]
    mem.close()
