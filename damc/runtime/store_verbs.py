"""History and erasure of stored cards: the `CardStore` methods behind Mem0's verbs (`DecisionAwareMemory.history`,
`delete`, `delete_all`, `reset`).

* **History**: the `events` table (schema 3, `damc.runtime.schema`) records what happened to a card after it was
  written — "archive", "merge", "merged_into", "restore" — in the same transaction as the change itself.
* **Erasure**: `delete_cards`, `delete_scope` and `wipe` remove rows from every table that holds a card's text or
  anything derived from it (cards with their value statistics, cached embeddings, events, saved contexts,
  sessions) in one transaction and bump the `erased` counter, so every `CardIndex` on the store — in this process or
  another — drops the vectors before it searches or saves again. `scrub` then makes the deleted bytes unreadable
  on disk: `secure_delete` (on for every connection) zeroes cells as they are freed, `VACUUM` rewrites the file
  from live rows (b-tree rebalancing can leave stale copies of live cells in a page's free gap, which a later
  deletion does not reach, and stores written before `secure_delete` have unzeroed free space), and a `TRUNCATE`
  checkpoint empties the WAL.

Example:
    >>> rowids = store.delete_scope(Scope("alice"))
    >>> index.forget(rowids)
    >>> store.scrub()
    {'vacuumed': True, 'checkpoint_busy': False, 'wal_bytes': 0}
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from damc.cards import Card
from damc.runtime.schema import chunks as _chunks
from damc.runtime.scope import DEFAULT_SCOPE, Scope

if TYPE_CHECKING:
    from damc.runtime.store import StoredCard

logger = logging.getLogger(__name__)


class StoreVerbsMixin:
    """History events and erasure for `CardStore` (which provides `transaction`, `_query`, `_upsert`, `_scoped`,
    `_next_seq` and `path`)."""

    def _set_tier_tx(self, c: sqlite3.Connection, card_ids: Sequence[str], tier: str, now: float, scope: Scope,
                     event: str | None = None, detail: dict[str, Any] | None = None) -> int:
        """`set_tier`'s body, inside the caller's transaction."""
        where, args = scope.where()
        seq0 = self._next_seq(c, len(card_ids))
        n = 0
        for j, cid in enumerate(card_ids):
            changed = c.execute(f"UPDATE cards SET tier = ?, seq = ?, archived_at = ? WHERE {where} AND card_id = ? "
                                "AND tier != ?", (tier, seq0 + j, now if tier == "cold" else None) + args + (cid, tier)
                                ).rowcount
            if changed and event:
                self._add_event(c, cid, event, now, detail, scope)
            n += changed
        return n

    def _add_event(self, c: sqlite3.Connection, card_id: str, event: str, t: float, detail: dict[str, Any] | None,
                   scope: Scope) -> None:
        c.execute("INSERT INTO events (user_id, agent_id, card_id, event, t, detail) VALUES (?, ?, ?, ?, ?, ?)",
                  (scope.user_id, scope.agent_key, card_id, event, t, json.dumps(detail or {}, ensure_ascii=False)))

    def events(self, card_id: str, scope: Scope = DEFAULT_SCOPE) -> list[tuple[str, float, dict[str, Any]]]:
        """`(event, t, detail)` of a scope's card in the order they happened ("archive", "merge", "merged_into",
        "restore"; see `damc.runtime.schema`)."""
        where, args = scope.where()
        return [(e, t, json.loads(d)) for e, t, d in self._query(
            f"SELECT event, t, detail FROM events WHERE {where} AND card_id = ? ORDER BY id", args + (card_id,))]

    def merge_cards(self, card: Card, session_id: str, pinned: bool, member_ids: Sequence[str], *,
                    scope: Scope = DEFAULT_SCOPE, now: float | None = None) -> int:
        """Write a merged card and move the cards it replaces to the cold tier, with their history events ("merge"
        on the new card, "merged_into" on each member), in one transaction. Returns the new card's rowid."""
        now = time.time() if now is None else now
        sources = (card.meta or {}).get("merged_from") or list(member_ids)
        with self.transaction() as c:
            rowid = self._upsert(c, [card], session_id, [pinned], now, scope)[0]
            self._add_event(c, card.card_id, "merge", now, {"sources": list(sources)}, scope)
            self._set_tier_tx(c, member_ids, "cold", now, scope, "merged_into", {"into": card.card_id})
            return rowid

    def derived_from(self, card_ids: Sequence[str], scope: Scope = DEFAULT_SCOPE) -> list[StoredCard]:
        """The scope's merged cards (any tier) that repeat text of these cards (their `meta["merged_from"]` names
        one of them)."""
        ids = set(card_ids)
        return [sc for sc in self._scoped("data LIKE ?", ('%"merged_from"%',), scope, None, "ORDER BY rowid")
                if ids & set((sc.card.meta or {}).get("merged_from") or [])]

    @staticmethod
    def _bump_erasures(c: sqlite3.Connection) -> None:
        c.execute("INSERT INTO counters VALUES ('erased', 1) ON CONFLICT(name) DO UPDATE SET value = value + 1")

    def erasures(self) -> int:
        """How many erasures (`delete_cards`, `delete_scope`, `wipe`) the store has seen: an index that saw fewer
        still holds vectors of erased cards and must be rebuilt (`CardIndex.sync`)."""
        rows = self._query("SELECT value FROM counters WHERE name = 'erased'")
        return int(rows[0][0]) if rows else 0

    @staticmethod
    def _tables(c: sqlite3.Connection) -> list[tuple[str, set[str]]]:
        """`(table, column names)` of every table of the file but SQLite's own."""
        names = [r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND "
                                         "name NOT LIKE 'sqlite_%' ORDER BY name")]
        return [(n, {r[1] for r in c.execute(f'PRAGMA table_info("{n}")')}) for n in names]

    def _delete_rowids(self, c: sqlite3.Connection, rowids: Sequence[int]) -> None:
        for chunk in _chunks(list(rowids)):
            marks = ",".join("?" * len(chunk))
            c.execute(f"DELETE FROM embeddings WHERE card_rowid IN ({marks})", chunk)
            c.execute(f"DELETE FROM cards WHERE rowid IN ({marks})", chunk)

    def delete_cards(self, card_ids: Sequence[str], scope: Scope = DEFAULT_SCOPE, *, restore: Sequence[str] = (),
                     detail: dict[str, Any] | None = None, sessions: Sequence[str] = ()) -> list[int]:
        """Erase a scope's cards in one transaction: their rows (text, value statistics), cached embeddings and
        history events; the saved contexts that show them (those of the cards' sessions, and any other of the
        scope naming a card or holding its text); and pending-call entries pointing at them. The cards in
        `restore` go back to the hot tier with a "restore" event (`detail`). The scope's rows of `sessions` go from
        every table with a `session_id` column (session state, saved contexts, and any a later schema adds).
        Returns the erased rowids (the index must drop them: `CardIndex.forget`)."""
        ids = list(dict.fromkeys(card_ids))
        where, args = scope.where()
        with self.transaction() as c:
            rows: list[tuple] = []
            for chunk in _chunks(ids):
                rows += c.execute(f"SELECT rowid, session_id, data FROM cards WHERE {where} AND card_id IN "
                                  f"({','.join('?' * len(chunk))})", args + tuple(chunk)).fetchall()
            self._delete_rowids(c, [r[0] for r in rows])
            for chunk in _chunks(ids):
                c.execute(f"DELETE FROM events WHERE {where} AND card_id IN ({','.join('?' * len(chunk))})",
                          args + tuple(chunk))
            shown = {r[1] for r in rows}   # sessions whose saved context may show the cards
            texts = [json.dumps(json.loads(r[2]).get("raw_text") or "", ensure_ascii=False)[1:-1] for r in rows]
            for sid, data in c.execute(f"SELECT session_id, data FROM contexts WHERE {where}", args).fetchall():
                if sid in shown or any(cid in data for cid in ids) or any(t and t in data for t in texts):
                    c.execute(f"DELETE FROM contexts WHERE {where} AND session_id = ?", args + (sid,))
            gone = set(ids)
            for sid, pending in c.execute(f"SELECT session_id, pending FROM sessions WHERE {where}", args).fetchall():
                left = {k: v for k, v in json.loads(pending).items() if v not in gone}
                if len(left) != len(json.loads(pending)):
                    c.execute(f"UPDATE sessions SET pending = ? WHERE {where} AND session_id = ?",
                              (json.dumps(left),) + args + (sid,))
            for table, cols in self._tables(c) if sessions else []:
                if {"user_id", "agent_id", "session_id"} <= cols and table != "cards":
                    for sid in sessions:
                        c.execute(f'DELETE FROM "{table}" WHERE {where} AND session_id = ?', args + (sid,))
            if restore:
                self._set_tier_tx(c, [r for r in restore if r not in gone], "hot", time.time(), scope, "restore",
                                  detail)
            self._bump_erasures(c)
        return [r[0] for r in rows]

    def delete_scope(self, scope: Scope, *, all_agents: bool = False) -> list[int]:
        """Erase every row of a scope (with `all_agents`: of every scope of its user) in one transaction: cards,
        their cached embeddings, and the rows of every table keyed by scope (sessions, saved contexts, events, and
        any table a later schema adds with `user_id` and `agent_id` columns). Returns the erased card rowids."""
        cond, args = ("user_id = ?", (scope.user_id,)) if all_agents else scope.where()
        with self.transaction() as c:
            rowids = [r[0] for r in c.execute(f"SELECT rowid FROM cards WHERE {cond}", args)]
            self._delete_rowids(c, rowids)
            for table, cols in self._tables(c):
                if {"user_id", "agent_id"} <= cols:
                    c.execute(f'DELETE FROM "{table}" WHERE {cond}', args)
            self._bump_erasures(c)
        return rowids

    def wipe(self) -> list[int]:
        """Erase every row of every table but the layout's own (`schema_version`, `counters`: the change counter
        stays monotonic, so no index or process mistakes a new card for an old one). Returns the erased card
        rowids."""
        with self.transaction() as c:
            rowids = [r[0] for r in c.execute("SELECT rowid FROM cards")]
            for table, _ in self._tables(c):
                if table not in ("schema_version", "counters"):
                    c.execute(f'DELETE FROM "{table}"')
            self._bump_erasures(c)
        return rowids

    def scrub(self, vacuum: bool = True) -> dict[str, Any]:
        """Make erased rows unreadable on disk. Deleted cells are zeroed as they are freed (`secure_delete`, on for
        every connection of this class); `VACUUM` then rewrites the file from live rows only (it also drops older
        versions of updated rows left in free space by stores written before `secure_delete`), and a `TRUNCATE`
        checkpoint copies the WAL into the file and empties it.

        Returns:
            `{"vacuumed": bool, "checkpoint_busy": bool, "wal_bytes": int}`; a busy checkpoint (another connection
            is reading) leaves erased pages in the WAL until the next checkpoint, and is logged as a warning.
        """
        out: dict[str, Any] = {"vacuumed": False, "checkpoint_busy": False, "wal_bytes": 0}
        if self.path == ":memory:":
            return out
        with self._lock:
            if vacuum:
                try:
                    self._conn.execute("VACUUM")
                    out["vacuumed"] = True
                except sqlite3.OperationalError as e:
                    logger.warning("%s: VACUUM after an erasure failed (%s); erased rows are zeroed but the file "
                                   "keeps its free pages until the next VACUUM", self.path, e)
            busy = self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
        out["checkpoint_busy"] = bool(busy)
        wal = Path(self.path + "-wal")
        out["wal_bytes"] = wal.stat().st_size if wal.exists() else 0
        if busy:
            logger.warning("%s: the WAL checkpoint after an erasure was blocked by another connection; erased pages "
                           "stay in %s until the next checkpoint", self.path, wal.name)
        return out
