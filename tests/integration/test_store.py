"""Card store and FAISS index: exact round-trips, WAL, concurrency, crash safety, index rebuilds."""

from __future__ import annotations

import json
import multiprocessing as mp
import time

import numpy as np
import pytest

from damc.cards import Card, encode_messages
from damc.runtime.index import CardIndex, IndexConfig, read_index_file
from damc.runtime.store import SCHEMA_VERSION, CardStore


def _cards(n: int, prefix: str = "s", start: int = 0) -> list[Card]:
    out = []
    for i in range(start, start + n):
        msgs = [{"role": "assistant", "content": None, "tool_calls": [{"id": f"c{i}", "type": "function",
                 "function": {"name": "get_order", "arguments": json.dumps({"order_id": str(80000 + i)})}}]},
                {"role": "tool", "tool_call_id": f"c{i}",
                 "content": json.dumps({"order_id": str(80000 + i), "state": "shipped" if i % 3 else "lost",
                                        "note": "ünïcödé ✓ " * (i % 4), "items": [i, i + 1]})}]
        (c,) = encode_messages(msgs, prefix, start_index=2 * i)
        c.timestamp = f"2026-01-01T00:{i % 60:02d}:00Z"
        out.append(c)
    return out


# ----------------------------------------------------------------------------- FAISS index

@pytest.fixture()
def filled(tmp_path):
    store = CardStore(tmp_path / "cards.db")
    store.add_cards(_cards(40), "s")
    yield store, tmp_path / "cards.faiss"
    store.close()


def test_index_persisted_and_reloaded(filled):
    store, path = filled
    idx = CardIndex(store, "minilm-l6", path, IndexConfig(save_interval_s=0))
    idx.sync()
    assert idx.last_rebuild_reason == "missing" and path.exists()
    _, header = read_index_file(path)
    assert header["stamp"]["count"] == 40 and header["model"] == "minilm-l6-int8" and header["dim"] == 384
    again = CardIndex(store, "minilm-l6", path)
    assert again.sync() == 0 and again.last_rebuild_reason is None and again.ntotal == 40
    rowids, sims = again.search_text("get_order order_id 80007 shipped", 5)
    assert len(rowids) == 5 and sims[0] >= sims[-1]


def test_index_missing_is_rebuilt(filled):
    store, path = filled
    CardIndex(store, "minilm-l6", path).sync()
    path.unlink()
    idx = CardIndex(store, "minilm-l6", path)
    idx.sync()
    assert idx.last_rebuild_reason == "missing" and idx.ntotal == 40 and path.exists()


def test_index_corrupt_is_rebuilt(filled):
    store, path = filled
    CardIndex(store, "minilm-l6", path).sync()
    blob = bytearray(path.read_bytes())
    blob[len(blob) // 2] ^= 0xFF
    path.write_bytes(bytes(blob))
    idx = CardIndex(store, "minilm-l6", path)
    idx.sync()
    assert idx.last_rebuild_reason == "corrupt" and idx.ntotal == 40
    path.write_bytes(b"garbage")
    idx = CardIndex(store, "minilm-l6", path)
    idx.sync()
    assert idx.last_rebuild_reason == "corrupt" and idx.ntotal == 40
    read_index_file(path)  # the rewritten file is valid


def test_index_stale_catches_up_and_foreign_stamp_rebuilds(filled, tmp_path):
    store, path = filled
    CardIndex(store, "minilm-l6", path).sync()
    new = _cards(5, "t", start=500)
    store.add_cards(new, "t")          # written while no index was listening
    store.set_tier([_cards(1)[0].card_id], "cold")
    idx = CardIndex(store, "minilm-l6", path, IndexConfig(save_interval_s=0))
    assert idx.load() and idx.seq < store.stamp()["seq"]   # stale: loaded, then caught up
    idx.sync()
    assert idx.ntotal == 44 == store.count("hot")
    hot = {sc.rowid for sc in store.all_cards("hot")}
    rowids, _ = idx.search_text(new[2].raw_text, 44)
    assert set(int(r) for r in rowids) == hot
    # an index whose stamp this store cannot have produced (another store's file) is rebuilt
    other = CardStore(tmp_path / "other.db")
    other.add_cards(_cards(2, "o"), "o")
    idx2 = CardIndex(other, "minilm-l6", path)
    idx2.sync()
    assert idx2.last_rebuild_reason == "stamp does not match this store" and idx2.ntotal == 2
    other.close()


def test_index_encoder_change_rebuilds_and_embeddings_are_cached(filled):
    store, path = filled
    CardIndex(store, "minilm-l6", path, encoder_backend="torch").sync()  # vectors cached under "minilm-l6"

    class Counting:
        def __init__(self):
            from damc.models import load_sentence_encoder
            self.inner, self.n = load_sentence_encoder("minilm-l6"), 0

        def encode(self, texts, **kw):
            self.n += len(texts)
            return self.inner.encode(texts, **kw)

    enc = Counting()
    idx = CardIndex(store, enc, path, encoder_name="minilm-l6")
    path.unlink()
    idx.sync()
    assert idx.ntotal == 40 and enc.n == 1  # only the dimension probe: vectors came from SQLite
    enc2 = Counting()
    idx = CardIndex(store, enc2, path, encoder_name="another-encoder")
    idx.sync()
    assert idx.last_rebuild_reason.startswith("encoder changed") and enc2.n == 41


def test_schema_4_embedding_cache_opens_at_5_and_keeps_its_vectors(filled):
    """A v4 store (embeddings without a text digest) migrates in place: the vectors stay and still match by seq,
    so rebuilding the index embeds nothing."""
    import sqlite3

    store, path = filled
    CardIndex(store, "minilm-l6", path).sync()
    store.close()
    c = sqlite3.connect(store.path)
    c.execute("DROP INDEX embeddings_digest")
    c.execute("ALTER TABLE embeddings DROP COLUMN digest")
    c.execute("UPDATE schema_version SET version = 4")
    c.commit()
    c.close()
    store = CardStore(store.path)
    assert store.schema_version == SCHEMA_VERSION == 5
    assert "embeddings_digest" in {r[0] for r in store._query("SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert store._query("SELECT count(*), count(digest) FROM embeddings") == [(40, 0)]
    path.unlink()
    idx = CardIndex(store, "minilm-l6", path)
    idx.sync()
    assert idx.ntotal == 40 and idx.last_rebuild_reason == "missing"
    assert store._query("SELECT count(*), count(digest) FROM embeddings") == [(40, 0)]   # from the cache, by seq
    store.close()


def test_ivf_index_type(tmp_path):
    store = CardStore(tmp_path / "c.db")
    store.add_cards(_cards(300), "s")
    idx = CardIndex(store, "minilm-l6", tmp_path / "c.faiss", IndexConfig(index_type="ivf", nlist=8, nprobe=8))
    idx.sync()
    assert type(idx._index).__name__ == "IndexIVFFlat" and idx.ntotal == 300
    store.set_tier([_cards(1)[0].card_id], "cold")
    idx.sync()
    assert idx.ntotal == 299
    reloaded = CardIndex(store, "minilm-l6", tmp_path / "c.faiss", IndexConfig(index_type="ivf"))
    idx.save(force=True)
    assert reloaded.load() and reloaded.ntotal == 299
    store.close()


# ----------------------------------------------------------------------------- scopes and migration

V1_SCHEMA = """
CREATE TABLE schema_version (version INTEGER NOT NULL);
CREATE TABLE counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE cards (rowid INTEGER PRIMARY KEY AUTOINCREMENT, card_id TEXT NOT NULL UNIQUE, session_id TEXT NOT NULL,
    position INTEGER NOT NULL, kind TEXT NOT NULL, tier TEXT NOT NULL DEFAULT 'hot', pinned INTEGER NOT NULL DEFAULT 0,
    n_tokens INTEGER NOT NULL DEFAULT 0, t REAL NOT NULL, seq INTEGER NOT NULL, value_max REAL, value_last REAL,
    value_n INTEGER NOT NULL DEFAULT 0, archived_at REAL, data TEXT NOT NULL);
CREATE INDEX cards_tier ON cards (tier, rowid);
CREATE INDEX cards_pinned ON cards (pinned, tier, rowid);
CREATE INDEX cards_seq ON cards (seq);
CREATE INDEX cards_session ON cards (session_id, position);
CREATE TABLE embeddings (card_rowid INTEGER PRIMARY KEY, seq INTEGER NOT NULL, model TEXT NOT NULL, vector BLOB NOT NULL);
CREATE TABLE sessions (session_id TEXT PRIMARY KEY, n_messages INTEGER NOT NULL DEFAULT 0, pending TEXT NOT NULL DEFAULT '{}');
CREATE TABLE contexts (session_id TEXT PRIMARY KEY, created REAL NOT NULL, data TEXT NOT NULL);
"""


def test_v1_store_migrates_on_open(tmp_path):
    """A store written by schema 1 (no scopes) opens at the current schema (2 added scopes): rows land in the
    default scope, rowids, seq, session counters, saved contexts and cached embeddings survive."""
    import sqlite3

    from damc.runtime.scope import Scope

    db = tmp_path / "old.db"
    cards = _cards(4, "old")
    c = sqlite3.connect(db)
    c.executescript(V1_SCHEMA)
    c.execute("INSERT INTO schema_version VALUES (1)")
    c.execute("INSERT INTO counters VALUES ('seq', 4)")
    for i, card in enumerate(cards):
        c.execute("INSERT INTO cards (rowid, card_id, session_id, position, kind, pinned, n_tokens, t, seq, data) "
                  "VALUES (?, ?, 'old', ?, ?, ?, ?, 1.0, ?, ?)", (10 + i, card.card_id, card.position, card.kind,
                                                                 int(i == 0), card.n_tokens, i + 1,
                                                                 json.dumps(card.to_dict())))
    c.execute("INSERT INTO embeddings VALUES (10, 1, 'minilm-l6', ?)", (np.ones(4, np.float32).tobytes(),))
    c.execute("INSERT INTO sessions VALUES ('old', 8, '{}')")
    c.execute("INSERT INTO contexts VALUES ('old', 1.0, '{\"session_id\": \"old\"}')")
    c.commit()
    c.close()
    with CardStore(db) as store:
        assert store.schema_version == SCHEMA_VERSION >= 2
        assert [sc.rowid for sc in store.all_cards()] == [10, 11, 12, 13]
        assert all(sc.scope == Scope() for sc in store.all_cards())
        assert [store.get(x.card_id) for x in cards] == cards
        assert store.get(cards[0].card_id, Scope("someone-else")) is None
        assert store.session_state("old") == {"n_messages": 8, "pending": {}}
        assert store.last_context("old") == {"session_id": "old"}
        assert store.pinned(5)[0].card == cards[0] and store.stamp()["seq"] == 4
        assert set(store.get_embeddings([(10, 1)], "minilm-l6", 4)) == {10}
        assert store.integrity_check() == "ok"
        assert store.add_cards(_cards(1, "new"), "new")[0] == 14       # autoincrement continues after the old rows
    with CardStore(db) as store:                                        # a second open does not migrate again
        assert store.schema_version == SCHEMA_VERSION and store.count() == 5


def _open_at(path, start, q):
    import time as _t

    from damc.runtime.store import CardStore

    while _t.time() < start:
        pass
    try:
        with CardStore(path) as s:
            q.put(("ok", s._query("PRAGMA journal_mode")[0][0]))
    except Exception as e:  # noqa: BLE001 - reported to the parent
        q.put(("error", repr(e)))


def test_processes_opening_a_new_store_at_once_all_succeed(tmp_path):
    """Regression (CI): a second process opening a brand-new file while the first switches it to WAL got
    "database is locked" from the journal-mode pragma (SQLite does not wait there); opening must retry."""

    ctx = mp.get_context("fork")
    q = ctx.Queue()
    outcomes = []
    for attempt in range(3):
        path = str(tmp_path / f"race{attempt}" / "cards.db")
        start = time.time() + 0.3
        procs = [ctx.Process(target=_open_at, args=(path, start, q)) for _ in range(6)]
        for p in procs:
            p.start()
        outcomes += [q.get(timeout=60) for _ in procs]
        for p in procs:
            p.join(30)
    assert outcomes == [("ok", "wal")] * 18
