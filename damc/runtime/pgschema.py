"""The PostgreSQL layout of the card store (`damc.runtime.pgstore`), created idempotently and versioned.

Tables are prefixed `damc_`, so they can sit in a database that holds other things:

* `damc_cards`: one row per card, the exact card JSON in `data` (text, not jsonb: key order and float text
  round-trip exactly), indexed scope / session / tier / pinned columns, `seq` from the sequence `damc_seq` (a
  sequence, not a counter row, so writers never queue on one hot row), and the card's embedding in
  `embedding vector(dim)` with `emb_seq` / `emb_model` saying which version of the card it encodes and
  `emb_digest` the digest of the text it embeds (`damc.runtime.index.text_digest`: a text some card already
  holds a vector for is not embedded again). `dim` is the
  encoder's (384 for all-MiniLM-L6-v2): the column and its HNSW index (`vector_ip_ops`, partial on hot cards)
  are added by the first `PgCardIndex` that knows the encoder (`damc.runtime.pgindex`);
* `damc_sessions` (message count and pending tool calls per scope + session), `damc_contexts` (the last built
  context per session), `damc_events` (a card's history after it was written: "archive", "merge", "merged_into",
  "restore", as the SQLite store's `events`), `damc_meta` (schema version, vector dimension, encoder name, and
  `erased`: how many erasures the store has seen).

Every worker runs `open_schema` on open: `CREATE ... IF NOT EXISTS` under a transaction-level advisory lock (so
workers starting together create it once), the version recorded in `damc_meta`, older layouts migrated by
`PG_MIGRATIONS`, a newer one refused.

Versions:
    1. cards / sessions / contexts / meta; the vector column added by the index.
    2. `damc_events`, back-filled from what v1 rows record (`damc.runtime.schema.backfilled_events`).
    3. conversation identity: `damc_session_messages` (each session's hash chain: one row per ingested message,
       its digest and chain value) and `damc_sessions.view` (`damc.runtime.pgsessions`), as SQLite's schema 4.
    4. `damc_cards.emb_digest`: the embedding is keyed by content too, as SQLite's schema 5 (v3 vectors have no
       digest and match by `emb_seq` alone).
"""

from __future__ import annotations

import logging
from typing import Any

from damc.runtime.schema import backfilled_events
from damc.runtime.scope import Scope
from damc.runtime.store import StoreError

logger = logging.getLogger(__name__)

PG_SCHEMA_VERSION = 4   # 1: cards / sessions / contexts / meta, the vector column added by the index; 2: events;
#                         3: session hash chains; 4: the embedding's text digest
LOCK_KEY = 0x44414D43   # pg_advisory_xact_lock key ("DAMC") held while creating or changing the layout
MAX_EF_SEARCH = 1000    # pgvector's upper bound for hnsw.ef_search

SCHEMA = """
CREATE TABLE IF NOT EXISTS damc_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE SEQUENCE IF NOT EXISTS damc_seq;
CREATE TABLE IF NOT EXISTS damc_cards (
    rowid BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id TEXT NOT NULL,
    agent_id TEXT NOT NULL DEFAULT '',
    card_id TEXT NOT NULL,
    session_id TEXT NOT NULL,
    position INTEGER NOT NULL,
    kind TEXT NOT NULL,
    tier TEXT NOT NULL DEFAULT 'hot',
    pinned BOOLEAN NOT NULL DEFAULT FALSE,
    n_tokens INTEGER NOT NULL DEFAULT 0,
    t DOUBLE PRECISION NOT NULL,
    seq BIGINT NOT NULL,
    value_max DOUBLE PRECISION,
    value_last DOUBLE PRECISION,
    value_n INTEGER NOT NULL DEFAULT 0,
    archived_at DOUBLE PRECISION,
    data TEXT NOT NULL,
    emb_seq BIGINT,
    emb_model TEXT,
    emb_digest TEXT,
    UNIQUE (user_id, agent_id, card_id)
);
CREATE INDEX IF NOT EXISTS damc_cards_scope_tier ON damc_cards (user_id, agent_id, tier, rowid);
CREATE INDEX IF NOT EXISTS damc_cards_scope_session ON damc_cards (user_id, agent_id, session_id, tier, position);
CREATE INDEX IF NOT EXISTS damc_cards_scope_pinned ON damc_cards (user_id, agent_id, rowid) WHERE pinned AND tier = 'hot';
CREATE INDEX IF NOT EXISTS damc_cards_unembedded ON damc_cards (rowid) WHERE tier = 'hot' AND emb_seq IS DISTINCT FROM seq;
ALTER TABLE damc_cards ADD COLUMN IF NOT EXISTS emb_digest TEXT;
CREATE INDEX IF NOT EXISTS damc_cards_emb_digest ON damc_cards (emb_digest) WHERE emb_digest IS NOT NULL;
CREATE TABLE IF NOT EXISTS damc_sessions (
    user_id TEXT NOT NULL,
    agent_id TEXT NOT NULL DEFAULT '',
    session_id TEXT NOT NULL,
    n_messages INTEGER NOT NULL DEFAULT 0,
    pending TEXT NOT NULL DEFAULT '{}',
    view TEXT,
    PRIMARY KEY (user_id, agent_id, session_id)
);
CREATE TABLE IF NOT EXISTS damc_session_messages (
    user_id TEXT NOT NULL,
    agent_id TEXT NOT NULL DEFAULT '',
    session_id TEXT NOT NULL,
    idx INTEGER NOT NULL,
    digest TEXT NOT NULL,
    chain TEXT NOT NULL,
    PRIMARY KEY (user_id, agent_id, session_id, idx)
);
CREATE INDEX IF NOT EXISTS damc_session_messages_digest ON damc_session_messages (user_id, agent_id, digest);
CREATE TABLE IF NOT EXISTS damc_contexts (
    user_id TEXT NOT NULL,
    agent_id TEXT NOT NULL DEFAULT '',
    session_id TEXT NOT NULL,
    created DOUBLE PRECISION NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (user_id, agent_id, session_id)
);
CREATE TABLE IF NOT EXISTS damc_events (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id TEXT NOT NULL,
    agent_id TEXT NOT NULL DEFAULT '',
    card_id TEXT NOT NULL,
    event TEXT NOT NULL,
    t DOUBLE PRECISION NOT NULL,
    detail TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS damc_events_card ON damc_events (user_id, agent_id, card_id, id);
"""


def scope_sql(scope: Scope) -> tuple[str, tuple[str, str]]:
    """`Scope.where()` with psycopg's `%s` placeholders."""
    where, args = scope.where()
    return where.replace("?", "%s"), args


def filters_sql(scope: Scope | None, *fixed: str, **equal: Any) -> tuple[str, tuple[Any, ...]]:
    """A `WHERE` body and its arguments: the `fixed` conditions, the scope's (when given) and `column = value` for
    each keyword whose value is not None (e.g. `tier=None` means every tier)."""
    conds, args = list(fixed) or ["TRUE"], ()
    if scope is not None:
        w, args = scope_sql(scope)
        conds.append(w)
    for column, value in equal.items():
        if value is not None:
            conds.append(f"{column} = %s")
            args = args + (value,)
    return " AND ".join(conds), args


def migrate_v1_to_v2(c: Any) -> None:
    """Add `damc_events` inside the caller's transaction, back-filled from the cold and merged cards."""
    create(c)   # IF NOT EXISTS throughout: only the events table is new
    rows = c.execute("SELECT user_id, agent_id, card_id, tier, archived_at, data FROM damc_cards "
                     "WHERE tier = 'cold' OR data LIKE '%%merged_from%%' ORDER BY rowid").fetchall()
    with c.cursor() as cur:
        cur.executemany("INSERT INTO damc_events (user_id, agent_id, card_id, event, t, detail) VALUES "
                        "(%s, %s, %s, %s, %s, %s)", backfilled_events(rows))


def migrate_v2_to_v3(c: Any) -> None:
    """Add the hash-chain table and `damc_sessions.view` inside the caller's transaction; v2 sessions have no
    chain rows: their first later call adopts the caller's messages as the chain (as SQLite's v3 -> v4)."""
    c.execute("ALTER TABLE damc_sessions ADD COLUMN IF NOT EXISTS view TEXT")
    create(c)


def migrate_v3_to_v4(c: Any) -> None:
    """Add `damc_cards.emb_digest` and its index (idempotent; stored vectors are kept and match by `emb_seq` as
    before)."""
    create(c)   # `ALTER TABLE damc_cards ADD COLUMN IF NOT EXISTS emb_digest` and its index


def create(c: Any) -> None:
    """Create the current layout, statement by statement (every one `IF NOT EXISTS`)."""
    for stmt in SCHEMA.split(";"):
        if stmt.strip():
            c.execute(stmt)

# from version -> function(conn) bringing it to version + 1, inside `open_schema`'s transaction
PG_MIGRATIONS: dict[int, Any] = {1: migrate_v1_to_v2, 2: migrate_v2_to_v3, 3: migrate_v3_to_v4}


def open_schema(c: Any, where: str) -> tuple[str, int | None]:
    """Create the layout if missing, migrate an older one, refuse a newer one — inside the caller's transaction.
    Returns the pgvector version and the vector dimension recorded by an index (None before the first).

    Raises:
        StoreError: pgvector missing and not creatable by this user, or a newer DAMC schema.
    """
    import psycopg

    c.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_KEY,))
    ext = c.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
    if ext is None:
        try:
            with c.transaction():   # a savepoint: a refused CREATE leaves the outer transaction usable
                c.execute("CREATE EXTENSION IF NOT EXISTS vector")
        except psycopg.errors.InsufficientPrivilege as e:
            raise StoreError(f"{where}: the pgvector extension is not installed in this database and "
                             f"this user may not create it ({e}); run `CREATE EXTENSION vector;` once as "
                             "a superuser or the database owner") from None
        except psycopg.errors.FeatureNotSupported as e:
            raise StoreError(f"{where}: pgvector is not available on this server ({e}); install it "
                             "(https://github.com/pgvector/pgvector)") from None
        ext = c.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
    pgvector_version = ext[0]
    have = c.execute("SELECT to_regclass('damc_meta') IS NOT NULL").fetchone()[0]
    version = None
    if have:
        row = c.execute("SELECT value FROM damc_meta WHERE key = 'schema_version'").fetchone()
        version = int(row[0]) if row else None
    if version is None:
        create(c)
        c.execute("INSERT INTO damc_meta VALUES ('schema_version', %s) ON CONFLICT (key) DO NOTHING",
                  (str(PG_SCHEMA_VERSION),))
        version = PG_SCHEMA_VERSION
    elif version > PG_SCHEMA_VERSION:
        raise StoreError(f"{where} has DAMC schema version {version}; this DAMC reads up to "
                         f"{PG_SCHEMA_VERSION}")
    while version < PG_SCHEMA_VERSION:
        logger.info("migrating %s from schema version %d to %d", where, version, version + 1)
        PG_MIGRATIONS[version](c)
        version += 1
        c.execute("UPDATE damc_meta SET value = %s WHERE key = 'schema_version'", (str(version),))
    row = c.execute("SELECT value FROM damc_meta WHERE key = 'dim'").fetchone()
    return pgvector_version, (int(row[0]) if row else None)
