"""SQLite card store: the durable half of DAMC's runtime memory (the FAISS index is rebuilt from it).

One SQLite file holds every card as exact JSON (`Card.to_dict`), with a few indexed columns for the
queries the runtime needs (recent cards, pinned cards, a session's history, lifecycle). Cards live in
one of two tiers: `hot` (retrievable, in the FAISS index) and `cold` (archived or merged away; kept
for `expand` and audits, never retrieved).

Durability and concurrency:
* WAL journal mode, `busy_timeout`, and every write batch in one `BEGIN IMMEDIATE` transaction, so two
  processes adding at once serialise instead of losing rows, and a process killed mid-batch leaves
  either the whole batch or none of it.
* A monotonically increasing `seq` is bumped on every card insert/update/tier change; the index
  records the highest `seq` it has seen, so staleness is one integer comparison.
* Card embeddings are cached in the `embeddings` table (one row per card: its `seq`, the model, the vector and
  the digest of the embedded text), so a missing or corrupt FAISS file is rebuilt from SQLite without
  re-encoding, and a card whose text was embedded before (a repeated identical tool call) is not embedded again.
* `schema_version` records the layout (`damc.runtime.schema`); an older store is migrated on open, a newer
  one raises.

Scopes (`damc.runtime.scope.Scope`): every row carries `user_id` and `agent_id`, card ids are unique per scope,
and every read that serves retrieval (`get`, `recent`, `pinned`, `by_rowids`, `rows_for`, `session_cards`,
lifecycle rows, values, saved contexts) takes the scope and puts it in its `WHERE`. The few store-wide reads
(`stamp`, `changed_since`, `hot_rows`, `all_cards(scope=None)`, `count(scope=None)`) serve the index and audits.

Example:
    >>> store = CardStore("runs/mem/cards.db")
    >>> alice = Scope("alice")
    >>> store.add_cards(cards, session_id="s1", scope=alice)
    >>> store.get("s1:3:0", alice).tool_name
    'get_order'
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from damc.cards import Card
from damc.runtime import schema, sessions
from damc.runtime.schema import chunks as _chunks
from damc.runtime.scope import DEFAULT_SCOPE, Scope
from damc.runtime.store_verbs import StoreVerbsMixin

logger = logging.getLogger(__name__)

SCHEMA_VERSION = schema.SCHEMA_VERSION
StoreError = schema.StoreError   # the store file cannot be used (not SQLite, damaged, a newer schema)


@dataclass
class StoreConfig:
    """How the SQLite connection behaves.

    Attributes:
        busy_timeout_ms: how long a writer waits for another process's lock before failing (ms).
        synchronous: SQLite `synchronous` pragma: "NORMAL" (durable at checkpoints, fast) or "FULL".
    """

    busy_timeout_ms: int = 30_000   # two writers queue for up to 30 s instead of raising "database is locked"
    synchronous: str = "NORMAL"     # NORMAL is crash-safe in WAL mode (a power cut may lose the last commits)


@dataclass
class StoredCard:
    """A card with its store bookkeeping.

    Attributes:
        card: the card, exactly as written.
        rowid: store row id (also the FAISS id).
        session_id: session that wrote it.
        tier: "hot" or "cold".
        pinned: errors and user constraints are pinned candidates.
        t: epoch seconds (card timestamp if it had one, else ingest time).
        seq: change counter of the last write to this row.
        scope: whose card it is.
    """

    card: Card
    rowid: int
    session_id: str
    tier: str
    pinned: bool
    t: float
    seq: int
    scope: Scope = DEFAULT_SCOPE


def parse_time(ts: str | None) -> float | None:
    """Epoch seconds of an ISO 8601 timestamp (a trailing Z is UTC), None when absent or unparseable."""
    if not ts:
        return None
    from datetime import datetime, timezone

    try:
        dt = datetime.fromisoformat(ts.replace("Z", "+00:00"))
    except (ValueError, TypeError, AttributeError):
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.timestamp()


class CardStore(StoreVerbsMixin, sessions.SessionChains):
    """Cards in SQLite (WAL, one transaction per write batch, hot/cold tiers, one scope per row).

    Args:
        path: SQLite file path, or ":memory:" (one process, nothing persisted).
        config: connection settings.

    The object is safe to share between threads (one connection guarded by a lock); use one
    `CardStore` per process. History and erasure (the store half of Mem0's verbs) are in `StoreVerbsMixin`.
    """

    def __init__(self, path: str | os.PathLike = ":memory:", config: StoreConfig | None = None):
        self.path = str(path)
        self.config = config or StoreConfig()
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        # isolation_level=None: we issue BEGIN/COMMIT ourselves (BEGIN IMMEDIATE takes the write lock up front).
        self._conn = sqlite3.connect(self.path, timeout=self.config.busy_timeout_ms / 1000,
                                     isolation_level=None, check_same_thread=False)
        c = self._conn
        try:
            c.execute(f"PRAGMA busy_timeout={int(self.config.busy_timeout_ms)}")
            if self.path != ":memory:":
                mode = self._enable_wal(c)
                if str(mode).lower() != "wal":
                    logger.warning("SQLite refused WAL mode (got %s) for %s", mode, self.path)
            c.execute(f"PRAGMA synchronous={self.config.synchronous}")
            c.execute("PRAGMA secure_delete=ON")  # freed pages and cells are zeroed: erased text leaves the file
            with self.transaction():
                self._open_schema(c)
        except sqlite3.DatabaseError as e:   # not SQLite, damaged, or locked past busy_timeout: name the file
            c.close()
            raise StoreError(f"{self.path} is not a usable DAMC card store ({e}); move it aside or use another path") from e

    def _enable_wal(self, c: sqlite3.Connection) -> str:
        """Switch the file to WAL, retrying while another process opens it at the same moment.

        Changing the journal mode needs an exclusive lock, and SQLite answers "database is locked" at once
        (the busy handler is not consulted on that path) when a second process is opening the same new
        file; so retry with backoff up to `busy_timeout_ms`. A file already in WAL needs no change.
        """
        deadline = time.monotonic() + self.config.busy_timeout_ms / 1000
        delay = 0.005
        while True:
            try:
                mode = c.execute("PRAGMA journal_mode").fetchone()[0]
                if str(mode).lower() == "wal":
                    return mode
                return c.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            except sqlite3.OperationalError as e:
                if "locked" not in str(e) and "busy" not in str(e):
                    raise
                if time.monotonic() >= deadline:
                    raise StoreError(f"{self.path}: could not switch to WAL mode within "
                                     f"{self.config.busy_timeout_ms} ms (another process holds the lock): {e}") from e
                time.sleep(delay)
                delay = min(delay * 2, 0.2)

    def _open_schema(self, c: sqlite3.Connection) -> None:
        """Create the layout in an empty file, migrate an older one, refuse a newer one (inside a transaction)."""
        version = schema.stored_version(c)
        if version is None:
            schema.create(c)
            c.execute("DELETE FROM schema_version")
            c.execute("INSERT INTO schema_version VALUES (?)", (SCHEMA_VERSION,))
            c.execute("INSERT OR IGNORE INTO counters VALUES ('seq', 0)")
        elif version > SCHEMA_VERSION:
            raise StoreError(f"{self.path} has schema version {version}; this DAMC reads up to {SCHEMA_VERSION}")
        while version is not None and version < SCHEMA_VERSION:
            logger.info("migrating %s from schema version %d to %d", self.path, version, version + 1)
            schema.MIGRATIONS[version](c)
            version += 1

    # ------------------------------------------------------------------ plumbing

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction (`BEGIN IMMEDIATE` ... `COMMIT`, rolled back on any exception)."""
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def _next_seq(self, c: sqlite3.Connection, n: int = 1) -> int:
        """Reserve `n` sequence numbers inside the current transaction; returns the first."""
        c.execute("UPDATE counters SET value = value + ? WHERE name = 'seq'", (n,))
        return c.execute("SELECT value FROM counters WHERE name = 'seq'").fetchone()[0] - n + 1

    def _query(self, sql: str, args: Sequence[Any] = ()) -> list[tuple]:
        with self._lock:
            return self._conn.execute(sql, args).fetchall()

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> "CardStore":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def schema_version(self) -> int:
        return self._query("SELECT version FROM schema_version")[0][0]

    @property
    def journal_mode(self) -> str:
        return str(self._query("PRAGMA journal_mode")[0][0]).lower()

    # ------------------------------------------------------------------ writes

    def _upsert(self, c: sqlite3.Connection, cards: Sequence[Card], session_id: str,
                pinned: Sequence[bool] | None, now: float, scope: Scope = DEFAULT_SCOPE) -> list[int]:
        seq0 = self._next_seq(c, len(cards))
        rowids = []
        for j, card in enumerate(cards):
            t = parse_time(card.timestamp) or now
            pin = int(bool(pinned[j])) if pinned is not None else 0
            row = c.execute(
                "INSERT INTO cards (user_id, agent_id, card_id, session_id, position, kind, tier, pinned, n_tokens, "
                "t, seq, data) VALUES (?, ?, ?, ?, ?, ?, 'hot', ?, ?, ?, ?, ?) "
                "ON CONFLICT(user_id, agent_id, card_id) DO UPDATE SET kind=excluded.kind, "
                "pinned=max(pinned, excluded.pinned), n_tokens=excluded.n_tokens, seq=excluded.seq, "
                "data=excluded.data RETURNING rowid",
                (scope.user_id, scope.agent_key, card.card_id, session_id, card.position, card.kind, pin,
                 card.n_tokens, t, seq0 + j, card.to_json()),
            ).fetchone()
            rowids.append(row[0])
        return rowids

    def add_cards(self, cards: Sequence[Card], session_id: str | None = None,
                  pinned: Sequence[bool] | None = None, *, scope: Scope = DEFAULT_SCOPE) -> list[int]:
        """Insert cards (or update those whose `card_id` exists in the scope) in one transaction; returns rowids.

        Args:
            cards: cards to write.
            session_id: session tag (default: each card's `episode_id`).
            pinned: per card, whether it is a pinned candidate (errors, user constraints).
            scope: whose cards they are.
        """
        if not cards:
            return []
        now = time.time()
        with self.transaction() as c:
            if session_id is None:
                out = []
                for card in cards:  # rare path (mixed sessions): still one transaction
                    out += self._upsert(c, [card], card.episode_id, None if pinned is None
                                        else [pinned[len(out)]], now, scope)
                return out
            return self._upsert(c, cards, session_id, pinned, now, scope)

    def ingest(self, session_id: str, fn: Any, *, scope: Scope = DEFAULT_SCOPE) -> Any:
        """Run `fn(state, get_card) -> (cards, pinned, new_state, result)` inside one write transaction.

        `state` is the session's `{"n_messages": int, "pending": {call_id: card_id}}` (sessions are keyed by
        scope and session id); `get_card(card_id)` reads the scope's cards. The cards are upserted and the new
        state saved atomically with them, so a crash never splits a batch from the session counter.
        Returns `result`.
        """
        now = time.time()
        key = (scope.user_id, scope.agent_key, session_id)
        with self.transaction() as c:
            row = c.execute("SELECT n_messages, pending FROM sessions WHERE user_id = ? AND agent_id = ? AND "
                            "session_id = ?", key).fetchone()
            state = {"n_messages": row[0], "pending": json.loads(row[1])} if row else {"n_messages": 0, "pending": {}}
            cards, pinned, new_state, result = fn(state, lambda cid: self._get_in_tx(cid, scope))
            if cards:
                self._upsert(c, cards, session_id, pinned, now, scope)
            c.execute("INSERT INTO sessions (user_id, agent_id, session_id, n_messages, pending) VALUES (?, ?, ?, ?, ?) "
                      "ON CONFLICT(user_id, agent_id, session_id) DO UPDATE SET n_messages=excluded.n_messages, "
                      "pending=excluded.pending", key + (new_state["n_messages"], json.dumps(new_state["pending"])))
            return result

    def _get_in_tx(self, card_id: str, scope: Scope) -> Card | None:
        where, args = scope.where()
        row = self._conn.execute(f"SELECT data FROM cards WHERE {where} AND card_id = ?", args + (card_id,)).fetchone()
        return Card.from_dict(json.loads(row[0])) if row else None

    def session_state(self, session_id: str, scope: Scope = DEFAULT_SCOPE) -> dict[str, Any]:
        where, args = scope.where()
        rows = self._query(f"SELECT n_messages, pending FROM sessions WHERE {where} AND session_id = ?",
                           args + (session_id,))
        return {"n_messages": rows[0][0], "pending": json.loads(rows[0][1])} if rows else \
            {"n_messages": 0, "pending": {}}

    def set_tier(self, card_ids: Sequence[str], tier: str, now: float | None = None, *,
                 scope: Scope = DEFAULT_SCOPE, event: str | None = None, detail: dict[str, Any] | None = None) -> int:
        """Move a scope's cards to `hot` or `cold` in one transaction; returns how many changed. With `event`, each
        card that changed gets that event (and `detail`) in its history, in the same transaction."""
        if tier not in ("hot", "cold"):
            raise ValueError(f"tier must be 'hot' or 'cold', got {tier!r}")
        if not card_ids:
            return 0
        now = time.time() if now is None else now
        with self.transaction() as c:
            return self._set_tier_tx(c, card_ids, tier, now, scope, event, detail)

    def record_values(self, values: dict[str, float], scope: Scope = DEFAULT_SCOPE) -> None:
        """Remember the latest and maximum value each card got (for `archive`); does not bump `seq`."""
        if not values:
            return
        where, args = scope.where()
        with self.transaction() as c:
            c.executemany(f"UPDATE cards SET value_last = ?, value_max = max(coalesce(value_max, ?), ?), "
                          f"value_n = value_n + 1 WHERE {where} AND card_id = ?",
                          [(float(v), float(v), float(v)) + args + (k,) for k, v in values.items()])

    def save_context(self, session_id: str, data: dict[str, Any], scope: Scope = DEFAULT_SCOPE) -> None:
        """Keep the last built context of a session (for `scripts/explain.py`)."""
        with self.transaction() as c:
            c.execute("INSERT INTO contexts VALUES (?, ?, ?, ?, ?) ON CONFLICT(user_id, agent_id, session_id) "
                      "DO UPDATE SET created=excluded.created, data=excluded.data",
                      (scope.user_id, scope.agent_key, session_id, time.time(), json.dumps(data, ensure_ascii=False)))

    def last_context(self, session_id: str | None = None, scope: Scope = DEFAULT_SCOPE) -> dict[str, Any] | None:
        """The last saved context of a scope's session (the scope's most recent one when None)."""
        where, args = scope.where()
        if session_id is None:
            rows = self._query(f"SELECT data FROM contexts WHERE {where} ORDER BY created DESC LIMIT 1", args)
        else:
            rows = self._query(f"SELECT data FROM contexts WHERE {where} AND session_id = ?", args + (session_id,))
        return json.loads(rows[0][0]) if rows else None

    # ------------------------------------------------------------------ embeddings

    def put_embeddings(self, rows: Sequence[tuple[int, int]], vectors: np.ndarray, model: str,
                       digests: Sequence[str | None] | None = None) -> None:
        """Cache embeddings for `(rowid, seq)` rows (float32, one row per card), each with the digest of the text
        it embeds (`damc.runtime.index.text_digest`; None: matched by `seq` alone)."""
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        digests = list(digests) if digests is not None else [None] * len(rows)
        with self.transaction() as c:
            c.executemany("INSERT OR REPLACE INTO embeddings (card_rowid, seq, model, vector, digest) "
                          "VALUES (?, ?, ?, ?, ?)",
                          [(r, s, model, vectors[i].tobytes(), digests[i]) for i, (r, s) in enumerate(rows)])

    def get_embeddings(self, rows: Sequence[tuple[int, int]], model: str, dim: int) -> dict[int, np.ndarray]:
        """Cached embeddings whose seq and model still match, by rowid."""
        out: dict[int, np.ndarray] = {}
        want = dict(rows)
        for chunk in _chunks(list(want)):
            q = f"SELECT card_rowid, seq, model, vector FROM embeddings WHERE card_rowid IN ({','.join('?' * len(chunk))})"
            for r, s, m, blob in self._query(q, chunk):
                if s == want[r] and m == model and len(blob) == 4 * dim:
                    out[r] = np.frombuffer(blob, dtype=np.float32)
        return out

    def embeddings_by_digest(self, digests: Sequence[str], model: str, dim: int) -> dict[str, np.ndarray]:
        """Cached embeddings of these scoped texts (`damc.runtime.index.text_digest`, which keys the scope) under
        `model`, from any row that holds one: a text its scope embedded once is not embedded again."""
        out: dict[str, np.ndarray] = {}
        for chunk in _chunks(sorted(set(digests))):
            q = f"SELECT digest, vector FROM embeddings WHERE digest IN ({','.join('?' * len(chunk))}) AND model = ?"
            for d, blob in self._query(q, chunk + [model]):
                if len(blob) == 4 * dim:
                    out.setdefault(d, np.frombuffer(blob, dtype=np.float32))
        return out

    # ------------------------------------------------------------------ reads

    _COLS = "data, rowid, session_id, tier, pinned, t, seq, user_id, agent_id"

    @staticmethod
    def _stored(row: tuple) -> StoredCard:
        return StoredCard(Card.from_dict(json.loads(row[0])), row[1], row[2], row[3], bool(row[4]), row[5], row[6],
                          Scope(row[7], row[8] or None))

    def get(self, card_id: str, scope: Scope = DEFAULT_SCOPE) -> Card | None:
        """The scope's card with this id (any tier), exactly as written; None when the scope has none."""
        sc = self.get_stored(card_id, scope)
        return sc.card if sc else None

    def get_stored(self, card_id: str, scope: Scope = DEFAULT_SCOPE) -> StoredCard | None:
        where, args = scope.where()
        rows = self._query(f"SELECT {self._COLS} FROM cards WHERE {where} AND card_id = ?", args + (card_id,))
        return self._stored(rows[0]) if rows else None

    def holds_elsewhere(self, card_id: str, scope: Scope) -> bool:
        """Whether a card with this id exists in some *other* scope (for `expand`'s PermissionError)."""
        return bool(self._query("SELECT 1 FROM cards WHERE card_id = ? AND NOT (user_id = ? AND agent_id = ?) LIMIT 1",
                                (card_id, scope.user_id, scope.agent_key)))

    def rows_for(self, card_ids: Sequence[str], scope: Scope = DEFAULT_SCOPE) -> dict[str, tuple[int, int]]:
        """`card_id -> (rowid, seq)` for the ids the scope holds (any tier)."""
        out: dict[str, tuple[int, int]] = {}
        where, args = scope.where()
        for chunk in _chunks(list(dict.fromkeys(card_ids))):
            for cid, r, s in self._query(f"SELECT card_id, rowid, seq FROM cards WHERE {where} AND card_id IN "
                                         f"({','.join('?' * len(chunk))})", args + tuple(chunk)):
                out[cid] = (r, s)
        return out

    def by_rowids(self, rowids: Sequence[int], scope: Scope | None) -> list[StoredCard]:
        """Cards for these rowids, in the given order; rows of other scopes and unknown rowids are skipped.

        `scope=None` reads any scope: index maintenance only (embedding rows), never retrieval.
        """
        if not rowids:
            return []
        got: dict[int, StoredCard] = {}
        where, args = scope.where() if scope is not None else ("1", ())
        for chunk in _chunks([int(r) for r in rowids]):
            for row in self._query(f"SELECT {self._COLS} FROM cards WHERE {where} AND rowid IN "
                                   f"({','.join('?' * len(chunk))})", args + tuple(chunk)):
                got[row[1]] = self._stored(row)
        return [got[int(r)] for r in rowids if int(r) in got]

    def _scoped(self, sql_where: str, args: tuple, scope: Scope, session_id: str | None, tail: str) -> list[StoredCard]:
        where, sargs = scope.where()
        if session_id is not None:
            where, sargs = where + " AND session_id = ?", sargs + (session_id,)
        return [self._stored(r) for r in self._query(
            f"SELECT {self._COLS} FROM cards WHERE {where} AND {sql_where} {tail}", sargs + args)]

    def recent(self, n: int, tier: str = "hot", *, scope: Scope = DEFAULT_SCOPE,
               session_id: str | None = None) -> list[StoredCard]:
        """The `n` most recently inserted cards of a tier in a scope (one session of it when given), newest first."""
        return self._scoped("tier = ?", (tier, n), scope, session_id, "ORDER BY rowid DESC LIMIT ?")

    def pinned(self, n: int, *, scope: Scope = DEFAULT_SCOPE, session_id: str | None = None) -> list[StoredCard]:
        """The `n` most recent pinned hot cards of a scope (one session of it when given), newest first."""
        return self._scoped("pinned = 1 AND tier = 'hot'", (n,), scope, session_id, "ORDER BY rowid DESC LIMIT ?")

    def session_cards(self, session_id: str, tier: str | None = None, *,
                      scope: Scope = DEFAULT_SCOPE) -> list[StoredCard]:
        """A session's cards in message order."""
        return self._scoped("tier = ?" if tier else "1", (tier,) if tier else (), scope, session_id,
                            "ORDER BY position, rowid")

    def all_cards(self, tier: str | None = "hot", scope: Scope | None = None) -> list[StoredCard]:
        """Every card of a tier (None: all tiers) of a scope (None: every scope — audits and tests, not retrieval)."""
        conds, args = [], ()
        if scope is not None:
            w, args = scope.where()
            conds.append(w)
        if tier:
            conds.append("tier = ?")
            args = args + (tier,)
        sql = f"SELECT {self._COLS} FROM cards" + (" WHERE " + " AND ".join(conds) if conds else "") + " ORDER BY rowid"
        return [self._stored(r) for r in self._query(sql, args)]

    def changed_since(self, seq: int) -> list[tuple[int, int, str, str, str, str]]:
        """`(rowid, seq, tier, user_id, agent_id, session_id)` of every row written after `seq`."""
        return self._query("SELECT rowid, seq, tier, user_id, agent_id, session_id FROM cards WHERE seq > ? "
                           "ORDER BY seq", (seq,))

    def hot_rows(self) -> list[tuple[int, int, str, str, str]]:
        """`(rowid, seq, user_id, agent_id, session_id)` of every hot card (index maintenance)."""
        return self._query("SELECT rowid, seq, user_id, agent_id, session_id FROM cards WHERE tier = 'hot' "
                           "ORDER BY rowid")

    def stamp(self) -> dict[str, int]:
        """What an index built now must match: hot card count, max rowid and the change counter."""
        n, mx = self._query("SELECT count(*), coalesce(max(rowid), 0) FROM cards WHERE tier = 'hot'")[0]
        seq = self._query("SELECT value FROM counters WHERE name = 'seq'")[0][0]
        return {"count": n, "max_rowid": mx, "seq": seq}

    def sum_tokens(self, session_id: str, before_position: int, scope: Scope = DEFAULT_SCOPE) -> int:
        """Total `n_tokens` of a session's cards that start before a message index (any tier)."""
        where, args = scope.where()
        return self._query(f"SELECT coalesce(sum(n_tokens), 0) FROM cards WHERE {where} AND session_id = ? AND "
                           "position < ?", args + (session_id, before_position))[0][0]

    def lifecycle_rows(self, tier: str = "hot", scope: Scope = DEFAULT_SCOPE
                       ) -> list[tuple[str, float, float | None, bool]]:
        """`(card_id, t, value_max, pinned)` of a scope's cards, for lifecycle decisions."""
        where, args = scope.where()
        return [(r[0], r[1], r[2], bool(r[3])) for r in self._query(
            f"SELECT card_id, t, value_max, pinned FROM cards WHERE {where} AND tier = ?", args + (tier,))]

    def count(self, tier: str | None = None, scope: Scope | None = None) -> int:
        """Cards of a tier (None: all) in a scope (None: the whole store)."""
        conds, args = ["1"], ()
        if scope is not None:
            w, args = scope.where()
            conds.append(w)
        if tier is not None:
            conds.append("tier = ?")
            args = args + (tier,)
        return self._query("SELECT count(*) FROM cards WHERE " + " AND ".join(conds), args)[0][0]

    def integrity_check(self) -> str:
        return self._query("PRAGMA integrity_check")[0][0]
