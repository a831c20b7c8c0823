"""PostgreSQL + pgvector storage: the card store of a fleet of workers on one database.

`DecisionAwareMemory("postgresql://user@host/db")` (or a `psycopg_pool.ConnectionPool`) opens `PgCardStore` +
`PgCardIndex` (`damc.runtime.pgindex`) instead of SQLite + FAISS (`damc.runtime.storage.open_storage`); both have
the method surface of `CardStore` / `CardIndex` that the memory, lifecycle, valuers and Mem0's verbs call
(`damc.runtime.storage.CardStorage`, `VectorIndex`; history and erasure: `damc.runtime.pgverbs`; hash chains:
`damc.runtime.pgsessions`). The layout and its versions: `damc.runtime.pgschema`.

Guarantees (the same as the embedded store's):

* **one transaction per write call** — `ingest` locks the session row (`SELECT ... FOR UPDATE`), so two workers
  appending to one conversation serialise, and a worker killed mid-call leaves nothing of it (the server rolls
  back a transaction whose connection died);
* **created idempotently** — `CREATE ... IF NOT EXISTS` under an advisory lock, the schema version recorded;
* **scopes inside the vector query** (`damc.runtime.pgindex`): scope and session filters sit in the statement
  that orders by distance;
* **connection loss is an error, not a hang** — a call interrupted by a server restart or a dropped connection
  raises `StoreConnectionError` (its transaction rolled back or, if the connection died during COMMIT, of unknown
  outcome: `ingest` is safe to retry, it resumes from the stored message count); the pool checks connections
  before handing them out, so the next call reconnects.

A process must not share a pool across `fork`: open the memory in the worker. Needs
`pip install 'damc[postgres]'` (psycopg 3, psycopg-pool, pgvector). The library never starts a server.

Example:
    >>> memory = DecisionAwareMemory("postgresql://damc@db.internal/agents", user_id="alice")
    >>> ctx = memory.build_context(messages, tools=tools, session_id="chat-42")
"""

from __future__ import annotations

import json
import logging
import threading
import time
import weakref
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

from damc.cards import Card
from damc.extras import requires
from damc.runtime.pgschema import filters_sql, open_schema, scope_sql
from damc.runtime.pgsessions import PgSessionChains
from damc.runtime.pgverbs import PgStoreVerbsMixin
from damc.runtime.scope import DEFAULT_SCOPE, Scope
from damc.runtime.store import CardStore, StoredCard, StoreError, parse_time

logger = logging.getLogger(__name__)

class StoreConnectionError(StoreError):
    """The database could not be reached, or the connection dropped during a call (the next call reconnects)."""


@dataclass
class PgConfig:
    """How a PostgreSQL memory connects and searches.

    Attributes:
        min_size: connections the pool keeps open (per process).
        max_size: most connections the pool opens (per process; workers × max_size ≤ the server's
            `max_connections`).
        connect_timeout_s: how long a call waits for a connection (or the first connect) before failing (s).
        statement_timeout_ms: a statement running longer is cancelled by the server (ms; 0: no limit); a batch
            written in one pipeline (`add_cards`, `sync`) counts as one statement.
        hnsw_m: HNSW links per node (pgvector's `m`), used when the index is created.
        hnsw_ef_construction: HNSW build candidate list (pgvector's `ef_construction`), used at creation.
        ef_search: least HNSW candidates per search (`hnsw.ef_search`, raised for a scope that is a small share
            of the table; ≤ 1000; recall vs. latency).
        exact_max: a scope (or session) with at most this many hot cards is searched exactly (its rows through the
            scope b-tree; cost grows with the scope, not the table).
        exact_factor: a scope of n cards in a table of N is also searched exactly while n ≤ √(exact_factor · k · N):
            a filtered HNSW scan reads about k · N / n rows (each with its graph links) to find k of the scope's,
            so below that size one distance per scope card is cheaper (at 1M cards and k = 30: scopes up to ~11k
            cards; docs/runtime.md, "Serving many agents", has the measurement).
        embed_batch: cards `sync` encodes and writes per transaction.
        check_connection: test a pooled connection before each use (one round trip; survives server restarts).
    """

    min_size: int = 1
    max_size: int = 4
    connect_timeout_s: float = 10.0
    statement_timeout_ms: int = 30_000
    hnsw_m: int = 16
    hnsw_ef_construction: int = 64
    ef_search: int = 100
    exact_max: int = 2_000
    exact_factor: float = 4.0
    embed_batch: int = 256
    check_connection: bool = True


def _redact(url: str) -> str:
    """The URL without its password (for messages)."""
    if "@" not in url or "://" not in url:
        return url
    head, rest = url.split("://", 1)
    cred, host = rest.rsplit("@", 1)
    return f"{head}://{cred.split(':', 1)[0]}@{host}"


class PgCardStore(PgStoreVerbsMixin, PgSessionChains):
    """Cards in PostgreSQL (see module docstring); the method surface of `CardStore`.

    Args:
        conn: a `postgresql://` URL (the store opens and owns a pool) or a `psycopg_pool.ConnectionPool` (used
            as is, not closed by `close`).
        config: pool and search settings.

    Raises:
        MissingExtraError: psycopg / psycopg-pool are not installed.
        StoreConnectionError: the server cannot be reached within `connect_timeout_s`.
        StoreError: the database holds a newer DAMC schema, or the pgvector extension is missing and cannot be
            created by this user.
    """

    _COLS = "data, rowid, session_id, tier, pinned, t, seq, user_id, agent_id"

    def __init__(self, conn: Any, config: PgConfig | None = None):
        with requires("the PostgreSQL backend"):
            import psycopg  # noqa: F401
            from psycopg_pool import ConnectionPool
        self.config = cfg = config or PgConfig()
        self._registered: "weakref.WeakSet[Any]" = weakref.WeakSet()
        self._tx = threading.local()   # .conn: the ingest transaction's connection while its batch runs (pgsessions)
        self.url = conn   # what opened it (the URL with its password, or the pool): to open the same store again
        if isinstance(conn, str):
            self.where = _redact(conn)
            kwargs = {"connect_timeout": max(1, int(cfg.connect_timeout_s))}
            if cfg.statement_timeout_ms:
                kwargs["options"] = f"-c statement_timeout={int(cfg.statement_timeout_ms)}"
            self.pool = ConnectionPool(conn, min_size=cfg.min_size, max_size=cfg.max_size, kwargs=kwargs,
                                       timeout=cfg.connect_timeout_s, open=True, name="damc",
                                       check=ConnectionPool.check_connection if cfg.check_connection else None)
            self._owns_pool = True
            try:
                self.pool.wait(timeout=cfg.connect_timeout_s)
            except Exception as e:  # noqa: BLE001 - PoolTimeout: the reason is in the pool's log
                self.pool.close()
                raise StoreConnectionError(f"cannot connect to PostgreSQL at {self.where} within "
                                           f"{cfg.connect_timeout_s} s ({type(e).__name__}: {e}); is the server up "
                                           "and the URL right (user, host, database)?") from e
        else:
            self.pool, self._owns_pool = conn, False
            self.where = f"pool {getattr(conn, 'name', '?')}"
        self.dim: int | None = None          # vector dimension once the index has added the column
        self.pgvector_version = "0"
        self._open_schema()

    # ------------------------------------------------------------------ plumbing

    @contextmanager
    def transaction(self, *, vectors: bool = True, read_only: bool = False) -> Iterator[Any]:
        """One transaction on a pooled connection: committed when the block ends, rolled back on any exception.
        `read_only`: no transaction at all (autocommit: each statement alone, two round trips fewer) — for reads.

        Raises:
            StoreConnectionError: no connection within `connect_timeout_s`, or the connection dropped (server
                restart, network); the transaction did not commit (see module docstring for COMMIT itself).
        """
        import psycopg
        from psycopg_pool import PoolTimeout

        try:
            with self.pool.connection(timeout=self.config.connect_timeout_s) as conn:
                if vectors and conn not in self._registered:
                    from pgvector.psycopg import register_vector

                    register_vector(conn)   # numpy arrays <-> vector, binary; once per connection
                    self._registered.add(conn)
                if read_only:
                    conn.autocommit = True
                    try:
                        yield conn
                    finally:
                        if not conn.closed:
                            conn.autocommit = False
                else:
                    with conn.transaction():
                        yield conn
        except PoolTimeout as e:
            raise StoreConnectionError(f"no PostgreSQL connection to {self.where} within "
                                       f"{self.config.connect_timeout_s} s: {e}") from e
        except psycopg.errors.QueryCanceled as e:   # an OperationalError too, but the connection is fine
            raise StoreError(f"PostgreSQL at {self.where} cancelled a statement of this call ({str(e).strip()}); the "
                             "transaction was rolled back; raise PgConfig.statement_timeout_ms "
                             f"(now {self.config.statement_timeout_ms} ms) for bigger batches") from e
        except psycopg.OperationalError as e:
            raise StoreConnectionError(f"PostgreSQL connection to {self.where} failed during this call "
                                       f"({str(e).strip()}); nothing of the call was committed unless the connection "
                                       "dropped at COMMIT; the next call reconnects") from e

    def _query(self, sql: str, args: Sequence[Any] = ()) -> list[tuple]:
        """One read statement's rows (autocommit: no BEGIN / COMMIT round trips)."""
        with self.transaction(read_only=True) as c:
            return c.execute(sql, args).fetchall()

    def _open_schema(self) -> None:
        """Create the layout if missing (advisory lock: workers starting together do it once), refuse a newer one."""
        with self.transaction(vectors=False) as c:
            self.pgvector_version, self.dim = open_schema(c, self.where)

    def close(self) -> None:
        if self._owns_pool:
            self.pool.close()

    def __enter__(self) -> "PgCardStore":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def schema_version(self) -> int:
        return int(self._query("SELECT value FROM damc_meta WHERE key = 'schema_version'")[0][0])

    # ------------------------------------------------------------------ writes

    def _upsert(self, c: Any, cards: Sequence[Card], session_id: str, pinned: Sequence[bool] | None, now: float,
                scope: Scope = DEFAULT_SCOPE) -> list[int]:
        if not cards:
            return []
        params = [(scope.user_id, scope.agent_key, card.card_id, session_id, card.position, card.kind,
                   bool(pinned[j]) if pinned is not None else False, card.n_tokens,
                   parse_time(card.timestamp) or now, card.to_json()) for j, card in enumerate(cards)]
        rowids = []
        with c.cursor() as cur:
            cur.executemany(
                "INSERT INTO damc_cards (user_id, agent_id, card_id, session_id, position, kind, pinned, n_tokens, t, "
                "seq, data) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, nextval('damc_seq'), %s) "
                "ON CONFLICT (user_id, agent_id, card_id) DO UPDATE SET kind = excluded.kind, "
                "pinned = damc_cards.pinned OR excluded.pinned, n_tokens = excluded.n_tokens, seq = excluded.seq, "
                "data = excluded.data RETURNING rowid", params, returning=True)
            while True:
                rowids.append(cur.fetchone()[0])
                if not cur.nextset():
                    break
        return rowids

    def add_cards(self, cards: Sequence[Card], session_id: str | None = None,
                  pinned: Sequence[bool] | None = None, *, scope: Scope = DEFAULT_SCOPE) -> list[int]:
        """Insert cards (or update those whose `card_id` exists in the scope) in one transaction; returns rowids."""
        if not cards:
            return []
        now = time.time()
        with self.transaction() as c:
            if session_id is None:
                return [self._upsert(c, [card], card.episode_id, None if pinned is None else [pinned[j]], now,
                                     scope)[0] for j, card in enumerate(cards)]
            return self._upsert(c, cards, session_id, pinned, now, scope)

    def ingest(self, session_id: str, fn: Any, *, scope: Scope = DEFAULT_SCOPE) -> Any:
        """`CardStore.ingest` on PostgreSQL: the session row is locked for the transaction, so concurrent batches
        of one conversation apply one after the other."""
        now = time.time()
        key = (scope.user_id, scope.agent_key, session_id)
        with self.transaction() as c:
            c.execute("INSERT INTO damc_sessions (user_id, agent_id, session_id) VALUES (%s, %s, %s) "
                      "ON CONFLICT DO NOTHING", key)
            row = c.execute("SELECT n_messages, pending FROM damc_sessions WHERE user_id = %s AND agent_id = %s AND "
                            "session_id = %s FOR UPDATE", key).fetchone()
            state = {"n_messages": row[0], "pending": json.loads(row[1])}
            self._tx.conn = c   # the batch function's `extend_chain` writes in this transaction
            try:
                cards, pinned, new_state, result = fn(state, lambda cid: self._get_in_tx(c, cid, scope))
            finally:
                self._tx.conn = None
            if cards:
                self._upsert(c, cards, session_id, pinned, now, scope)
            c.execute("UPDATE damc_sessions SET n_messages = %s, pending = %s WHERE user_id = %s AND agent_id = %s "
                      "AND session_id = %s", (new_state["n_messages"], json.dumps(new_state["pending"])) + key)
            return result

    def _get_in_tx(self, c: Any, card_id: str, scope: Scope) -> Card | None:
        where, args = scope_sql(scope)
        row = c.execute(f"SELECT data FROM damc_cards WHERE {where} AND card_id = %s", args + (card_id,)).fetchone()
        return Card.from_dict(json.loads(row[0])) if row else None

    def session_state(self, session_id: str, scope: Scope = DEFAULT_SCOPE) -> dict[str, Any]:
        where, args = scope_sql(scope)
        rows = self._query(f"SELECT n_messages, pending FROM damc_sessions WHERE {where} AND session_id = %s",
                           args + (session_id,))
        return {"n_messages": rows[0][0], "pending": json.loads(rows[0][1])} if rows else \
            {"n_messages": 0, "pending": {}}

    set_tier = CardStore.set_tier   # the same body: validation, then `_set_tier_tx` (pgverbs) in one transaction

    def record_values(self, values: dict[str, float], scope: Scope = DEFAULT_SCOPE) -> None:
        """Remember the latest and maximum value each card got (for `archive`); does not bump `seq`."""
        if not values:
            return
        where, args = scope_sql(scope)
        with self.transaction() as c, c.cursor() as cur:
            cur.executemany(f"UPDATE damc_cards SET value_last = %s, value_max = greatest(coalesce(value_max, %s), %s), "
                            f"value_n = value_n + 1 WHERE {where} AND card_id = %s",
                            [(float(v), float(v), float(v)) + args + (k,) for k, v in values.items()])

    def save_context(self, session_id: str, data: dict[str, Any], scope: Scope = DEFAULT_SCOPE) -> None:
        """Keep the last built context of a session."""
        with self.transaction() as c:
            c.execute("INSERT INTO damc_contexts VALUES (%s, %s, %s, %s, %s) ON CONFLICT (user_id, agent_id, "
                      "session_id) DO UPDATE SET created = excluded.created, data = excluded.data",
                      (scope.user_id, scope.agent_key, session_id, time.time(), json.dumps(data, ensure_ascii=False)))

    def last_context(self, session_id: str | None = None, scope: Scope = DEFAULT_SCOPE) -> dict[str, Any] | None:
        """The last saved context of a scope's session (the scope's most recent one when None)."""
        where, args = scope_sql(scope)
        if session_id is None:
            rows = self._query(f"SELECT data FROM damc_contexts WHERE {where} ORDER BY created DESC LIMIT 1", args)
        else:
            rows = self._query(f"SELECT data FROM damc_contexts WHERE {where} AND session_id = %s",
                               args + (session_id,))
        return json.loads(rows[0][0]) if rows else None

    # ------------------------------------------------------------------ reads

    @staticmethod
    def _stored(row: tuple) -> StoredCard:
        return CardStore._stored(row)

    def get(self, card_id: str, scope: Scope = DEFAULT_SCOPE) -> Card | None:
        """The scope's card with this id (any tier), exactly as written; None when the scope has none."""
        sc = self.get_stored(card_id, scope)
        return sc.card if sc else None

    def get_stored(self, card_id: str, scope: Scope = DEFAULT_SCOPE) -> StoredCard | None:
        where, args = scope_sql(scope)
        rows = self._query(f"SELECT {self._COLS} FROM damc_cards WHERE {where} AND card_id = %s", args + (card_id,))
        return self._stored(rows[0]) if rows else None

    def holds_elsewhere(self, card_id: str, scope: Scope) -> bool:
        """Whether a card with this id exists in some *other* scope (for `expand`'s PermissionError)."""
        return bool(self._query("SELECT 1 FROM damc_cards WHERE card_id = %s AND NOT (user_id = %s AND agent_id = %s) "
                                "LIMIT 1", (card_id, scope.user_id, scope.agent_key)))

    def rows_for(self, card_ids: Sequence[str], scope: Scope = DEFAULT_SCOPE) -> dict[str, tuple[int, int]]:
        """`card_id -> (rowid, seq)` for the ids the scope holds (any tier)."""
        where, args = scope_sql(scope)
        return {cid: (r, s) for cid, r, s in self._query(
            f"SELECT card_id, rowid, seq FROM damc_cards WHERE {where} AND card_id = ANY(%s)",
            args + (list(dict.fromkeys(card_ids)),))}

    def by_rowids(self, rowids: Sequence[int], scope: Scope | None) -> list[StoredCard]:
        """Cards for these rowids, in the given order; other scopes' rows and unknown rowids are skipped
        (`scope=None`: any scope, index maintenance only)."""
        if not len(rowids):
            return []
        where, args = scope_sql(scope) if scope is not None else ("TRUE", ())
        got = {row[1]: self._stored(row) for row in self._query(
            f"SELECT {self._COLS} FROM damc_cards WHERE {where} AND rowid = ANY(%s)",
            args + ([int(r) for r in rowids],))}
        return [got[int(r)] for r in rowids if int(r) in got]

    def _scoped(self, cond: str, args: tuple, scope: Scope, session_id: str | None, tail: str) -> list[StoredCard]:
        where, sargs = scope_sql(scope)
        if session_id is not None:
            where, sargs = where + " AND session_id = %s", sargs + (session_id,)
        return [self._stored(r) for r in self._query(
            f"SELECT {self._COLS} FROM damc_cards WHERE {where} AND {cond} {tail}", sargs + args)]

    def recent(self, n: int, tier: str = "hot", *, scope: Scope = DEFAULT_SCOPE,
               session_id: str | None = None) -> list[StoredCard]:
        """The `n` most recently inserted cards of a tier in a scope (one session of it when given), newest first."""
        return self._scoped("tier = %s", (tier, n), scope, session_id, "ORDER BY rowid DESC LIMIT %s")

    def pinned(self, n: int, *, scope: Scope = DEFAULT_SCOPE, session_id: str | None = None) -> list[StoredCard]:
        """The `n` most recent pinned hot cards of a scope (one session of it when given), newest first."""
        return self._scoped("pinned AND tier = 'hot'", (n,), scope, session_id, "ORDER BY rowid DESC LIMIT %s")

    def session_cards(self, session_id: str, tier: str | None = None, *,
                      scope: Scope = DEFAULT_SCOPE) -> list[StoredCard]:
        """A session's cards in message order."""
        return self._scoped("tier = %s" if tier else "TRUE", (tier,) if tier else (), scope, session_id,
                            "ORDER BY position, rowid")

    def all_cards(self, tier: str | None = "hot", scope: Scope | None = None) -> list[StoredCard]:
        """Every card of a tier (None: all) of a scope (None: every scope — audits and tests, not retrieval)."""
        where, args = filters_sql(scope, tier=tier or None)
        return [self._stored(r) for r in self._query(
            f"SELECT {self._COLS} FROM damc_cards WHERE {where} ORDER BY rowid", args)]

    def stamp(self) -> dict[str, int]:
        """Hot card count, max rowid and the change counter (the last `seq` handed out)."""
        n, mx = self._query("SELECT count(*), coalesce(max(rowid), 0) FROM damc_cards WHERE tier = 'hot'")[0]
        seq = self._query("SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM damc_seq")[0][0]
        return {"count": int(n), "max_rowid": int(mx), "seq": int(seq)}

    def sum_tokens(self, session_id: str, before_position: int, scope: Scope = DEFAULT_SCOPE) -> int:
        """Total `n_tokens` of a session's cards that start before a message index (any tier)."""
        where, args = scope_sql(scope)
        return int(self._query(f"SELECT coalesce(sum(n_tokens), 0) FROM damc_cards WHERE {where} AND session_id = %s "
                               "AND position < %s", args + (session_id, before_position))[0][0])

    def lifecycle_rows(self, tier: str = "hot", scope: Scope = DEFAULT_SCOPE
                       ) -> list[tuple[str, float, float | None, bool]]:
        """`(card_id, t, value_max, pinned)` of a scope's cards, for lifecycle decisions."""
        where, args = scope_sql(scope)
        return [(r[0], r[1], r[2], bool(r[3])) for r in self._query(
            f"SELECT card_id, t, value_max, pinned FROM damc_cards WHERE {where} AND tier = %s", args + (tier,))]

    def count(self, tier: str | None = None, scope: Scope | None = None) -> int:
        """Cards of a tier (None: all) in a scope (None: the whole store)."""
        where, args = filters_sql(scope, tier=tier)
        return int(self._query(f"SELECT count(*) FROM damc_cards WHERE {where}", args)[0][0])

    def integrity_check(self) -> str:
        """"ok" when every row's JSON parses into a card with the row's id (an audit that reads every card)."""
        bad = [rowid for rowid, cid, data in self._query("SELECT rowid, card_id, data FROM damc_cards")
               if json.loads(data).get("card_id") != cid]
        return "ok" if not bad else f"{len(bad)} rows whose data does not match their card_id (rowids {bad[:5]})"


__all__ = ["PgCardStore", "PgConfig", "StoreConnectionError", "scope_sql"]
