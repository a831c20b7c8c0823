"""The SQLite layout of the card store, and the migrations that bring older stores up to it.

`SCHEMA_VERSION` is stored in the database (`schema_version` table). `CardStore` creates the layout in an
empty file, migrates an older one in place on open (one transaction: a crash leaves the old layout intact),
and refuses a newer one.

Versions:
    1. cards, sessions, contexts keyed by card id / session id alone.
    2. every row carries its scope (`user_id`, `agent_id`; "" = no agent): card ids are unique per scope,
       sessions and saved contexts are keyed by (scope, session). v1 rows land in the default scope.
    3. an `events` table: what happened to a card after it was written (archived, merged, merged into another,
       restored to the hot tier), for `DecisionAwareMemory.history`; v2 stores get their past archives and
       merges back-filled from the cards' own rows (`archived_at`, `meta["merged_from"]`), marked `backfilled`.
    4. conversation identity (`damc.runtime.identity`): `session_messages` holds each session's hash chain (one
       row per ingested message: its digest and the chain value), `sessions.view` the caller's latest list as
       store indices after a trimmed/compacted history re-synced (NULL: the stored order). v3 sessions have no
       chain rows; their first later call adopts the caller's messages as the chain.
    5. the embedding cache is keyed by content too: `embeddings.digest` (indexed) is a hash of the scope and the
       text that was embedded (`damc.runtime.index.text_digest`), so a card whose text its scope embedded before
       — a repeated identical tool call, a card re-written unchanged — gets that vector instead of being embedded
       again. v4 rows have no digest (NULL): they match by row and `seq` alone, as before.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from typing import Any, Iterator, Sequence

logger = logging.getLogger(__name__)


class StoreError(RuntimeError):
    """The store file cannot be used (not SQLite, damaged, locked past the busy timeout, a newer schema); the
    message names the file. Raised by `damc.runtime.store.CardStore` (also importable from there)."""

SCHEMA_VERSION = 5  # 1: no scopes; 2: every row carries (user_id, agent_id), card ids unique per scope; 3: events;
#                    4: per-session message hash chains (conversation identity); 5: embedding cache keyed by content

SCHEMA = """
CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS cards (
    rowid INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id TEXT NOT NULL DEFAULT 'default',
    agent_id TEXT NOT NULL DEFAULT '',
    card_id TEXT NOT NULL,
    session_id TEXT NOT NULL,
    position INTEGER NOT NULL,
    kind TEXT NOT NULL,
    tier TEXT NOT NULL DEFAULT 'hot',
    pinned INTEGER NOT NULL DEFAULT 0,
    n_tokens INTEGER NOT NULL DEFAULT 0,
    t REAL NOT NULL,
    seq INTEGER NOT NULL,
    value_max REAL,
    value_last REAL,
    value_n INTEGER NOT NULL DEFAULT 0,
    archived_at REAL,
    data TEXT NOT NULL,
    UNIQUE (user_id, agent_id, card_id)
);
CREATE INDEX IF NOT EXISTS cards_scope_tier ON cards (user_id, agent_id, tier, rowid);
CREATE INDEX IF NOT EXISTS cards_scope_pinned ON cards (user_id, agent_id, pinned, tier, rowid);
CREATE INDEX IF NOT EXISTS cards_seq ON cards (seq);
CREATE INDEX IF NOT EXISTS cards_scope_session ON cards (user_id, agent_id, session_id, position);
CREATE TABLE IF NOT EXISTS embeddings (
    card_rowid INTEGER PRIMARY KEY,
    seq INTEGER NOT NULL,
    model TEXT NOT NULL,
    vector BLOB NOT NULL,
    digest TEXT
);
CREATE TABLE IF NOT EXISTS sessions (
    user_id TEXT NOT NULL DEFAULT 'default',
    agent_id TEXT NOT NULL DEFAULT '',
    session_id TEXT NOT NULL,
    n_messages INTEGER NOT NULL DEFAULT 0,
    pending TEXT NOT NULL DEFAULT '{}',
    view TEXT,
    PRIMARY KEY (user_id, agent_id, session_id)
);
CREATE TABLE IF NOT EXISTS session_messages (
    user_id TEXT NOT NULL DEFAULT 'default',
    agent_id TEXT NOT NULL DEFAULT '',
    session_id TEXT NOT NULL,
    idx INTEGER NOT NULL,
    digest TEXT NOT NULL,
    chain TEXT NOT NULL,
    PRIMARY KEY (user_id, agent_id, session_id, idx)
);
CREATE INDEX IF NOT EXISTS session_messages_digest ON session_messages (user_id, agent_id, digest);
CREATE TABLE IF NOT EXISTS contexts (
    user_id TEXT NOT NULL DEFAULT 'default',
    agent_id TEXT NOT NULL DEFAULT '',
    session_id TEXT NOT NULL,
    created REAL NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (user_id, agent_id, session_id)
);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id TEXT NOT NULL DEFAULT 'default',
    agent_id TEXT NOT NULL DEFAULT '',
    card_id TEXT NOT NULL,
    event TEXT NOT NULL,
    t REAL NOT NULL,
    detail TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS events_card ON events (user_id, agent_id, card_id, id);
"""

# v1 -> v2: the v1 tables are renamed aside, recreated with scope columns (every old row lands in the default
# scope, rowids kept, so FAISS ids and cached embeddings stay valid), copied and dropped — in one transaction.
_V1_COLUMNS = {
    "cards": "rowid, card_id, session_id, position, kind, tier, pinned, n_tokens, t, seq, value_max, value_last, "
             "value_n, archived_at, data",
    "sessions": "session_id, n_messages, pending",
    "contexts": "session_id, created, data",
}
_V1_INDEXES = ("cards_tier", "cards_pinned", "cards_seq", "cards_session")


def create(c: sqlite3.Connection) -> None:
    """Create the current layout (statement by statement: `executescript()` would COMMIT the caller's
    transaction)."""
    for stmt in SCHEMA.split(";"):
        if stmt.strip():
            c.execute(stmt)
    _embedding_digests(c)


def _embedding_digests(c: sqlite3.Connection) -> None:
    """The content key of the embedding cache (schema 5): `embeddings.digest` and its index, added if missing (an
    older `embeddings` table survives `CREATE TABLE IF NOT EXISTS`)."""
    if "digest" not in {row[1] for row in c.execute("PRAGMA table_info(embeddings)")}:
        c.execute("ALTER TABLE embeddings ADD COLUMN digest TEXT")
    c.execute("CREATE INDEX IF NOT EXISTS embeddings_digest ON embeddings (digest)")


def stored_version(c: sqlite3.Connection) -> int | None:
    """The schema version recorded in the file; None for an empty file."""
    if c.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'").fetchone() is None:
        return None
    row = c.execute("SELECT version FROM schema_version").fetchone()
    return None if row is None else int(row[0])


def migrate_v1_to_v2(c: sqlite3.Connection) -> None:
    """Add scopes to a v1 store inside the caller's transaction (rowids, seq numbers and embeddings are kept)."""
    for name in _V1_INDEXES:
        c.execute(f"DROP INDEX IF EXISTS {name}")
    for table in _V1_COLUMNS:
        c.execute(f"ALTER TABLE {table} RENAME TO {table}_v1")
    create(c)
    for table, cols in _V1_COLUMNS.items():
        c.execute(f"INSERT INTO {table} ({cols}) SELECT {cols} FROM {table}_v1")
        c.execute(f"DROP TABLE {table}_v1")
    c.execute("UPDATE schema_version SET version = 2")


def migrate_v2_to_v3(c: sqlite3.Connection) -> None:
    """Add the `events` table inside the caller's transaction and back-fill it from what v2 rows record: a
    merged card (`meta["merged_from"]`) gets a "merge" event, each of its sources a "merged_into" event, and
    every other cold card an "archive" event, at the time it went cold (`archived_at`)."""
    create(c)  # IF NOT EXISTS throughout: only the events table is new
    rows = c.execute("SELECT user_id, agent_id, card_id, tier, archived_at, data FROM cards "
                     "WHERE tier = 'cold' OR data LIKE '%merged_from%' ORDER BY rowid").fetchall()
    events = backfilled_events(rows)
    c.executemany("INSERT INTO events (user_id, agent_id, card_id, event, t, detail) VALUES (?, ?, ?, ?, ?, ?)",
                  events)
    c.execute("UPDATE schema_version SET version = 3")


def backfilled_events(rows: list[tuple]) -> list[tuple]:
    """History events a store without an events table implies, oldest first: `rows` are `(user_id, agent_id,
    card_id, tier, archived_at, data)` of the cold and merged cards; a merged card (`meta["merged_from"]`) gets a
    "merge" event, each of its sources a "merged_into" event, and every other cold card an "archive" event, at the
    time it went cold. Shared by the SQLite (v2 -> v3) and PostgreSQL (`damc.runtime.pgschema`) migrations."""
    into: dict[tuple[str, str, str], str] = {}
    cold_at = {(u, a, cid): at for u, a, cid, tier, at, _ in rows if tier == "cold"}
    events = []
    for u, a, cid, _, _, data in rows:
        sources = (json.loads(data).get("meta") or {}).get("merged_from")
        if not isinstance(sources, list):
            continue
        at = max((cold_at.get((u, a, s)) or 0.0 for s in sources), default=0.0)
        events.append((u, a, cid, "merge", at, json.dumps({"sources": sources, "backfilled": True})))
        for s in sources:
            into[(u, a, s)] = cid
    for (u, a, cid), at in cold_at.items():
        if (u, a, cid) in into:
            events.append((u, a, cid, "merged_into", at or 0.0, json.dumps({"into": into[(u, a, cid)],
                                                                            "backfilled": True})))
        else:
            events.append((u, a, cid, "archive", at or 0.0, json.dumps({"backfilled": True})))
    return sorted(events, key=lambda e: e[4])


def migrate_v3_to_v4(c: sqlite3.Connection) -> None:
    """Add the hash-chain table and `sessions.view` inside the caller's transaction (idempotent: a store migrated
    through `create` already has them)."""
    if "view" not in {row[1] for row in c.execute("PRAGMA table_info(sessions)")}:
        c.execute("ALTER TABLE sessions ADD COLUMN view TEXT")
    create(c)
    c.execute("UPDATE schema_version SET version = 4")


def migrate_v4_to_v5(c: sqlite3.Connection) -> None:
    """Add `embeddings.digest` and its index inside the caller's transaction (idempotent; existing vectors are
    kept, with no digest: they still match by row and `seq`)."""
    _embedding_digests(c)
    c.execute("UPDATE schema_version SET version = 5")


# from version -> to version + 1
MIGRATIONS = {1: migrate_v1_to_v2, 2: migrate_v2_to_v3, 3: migrate_v3_to_v4, 4: migrate_v4_to_v5}


def chunks(ids: Sequence[Any], n: int = 900) -> Iterator[list[Any]]:
    """SQLite caps bound parameters: query long id lists 900 at a time (the store and its mixins share this)."""
    ids = list(ids)
    for i in range(0, len(ids), n):
        yield ids[i:i + n]
