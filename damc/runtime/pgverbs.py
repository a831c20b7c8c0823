"""History and erasure of cards in PostgreSQL: the `PgCardStore` methods behind Mem0's verbs (`history`, `delete`,
`delete_all`, `reset`), with the semantics of the SQLite store's (`damc.runtime.store_verbs`).

* **History**: `damc_events` (schema 2, `damc.runtime.pgschema`) records "archive", "merge", "merged_into" and
  "restore" in the same transaction as the change itself.
* **Erasure**: `delete_cards`, `delete_scope` and `wipe` delete, in one transaction, every row that holds a card's
  text or anything derived from it — the card row (its text, value statistics and its embedding, which lives in
  the same row), its events, the saved contexts that show it, pending-call entries naming it, and (for a scope or
  a session) the rows of every `damc_` table keyed by it — and bump the `erased` counter in `damc_meta`. After
  COMMIT no row of any `damc_` table, visible to any query, holds the text. What erasure does *not* mean on a
  server: PostgreSQL's MVCC leaves the deleted tuples in the table files as dead tuples until `VACUUM` (which
  `scrub` runs; it marks the space reusable, it does not zero it: `VACUUM FULL` rewrites the tables), the WAL
  keeps the rows until its segments are recycled, and base backups, WAL archives and replicas keep them for as
  long as they are retained — docs/runtime.md "Serving many agents", erasure.

Example:
    >>> rowids = store.delete_scope(Scope("alice"))
    >>> store.scrub()
    {'vacuumed': True, 'full': False, 'tables': [...]}
"""

from __future__ import annotations

import json
import logging
import time
from typing import TYPE_CHECKING, Any, Sequence

from damc.runtime.pgschema import scope_sql
from damc.runtime.scope import DEFAULT_SCOPE, Scope
from damc.runtime.store_verbs import StoreVerbsMixin

if TYPE_CHECKING:
    from damc.runtime.store import StoredCard

logger = logging.getLogger(__name__)


class PgStoreVerbsMixin:
    """History events and erasure for `PgCardStore` (which provides `transaction`, `_query`, `_upsert`, `_scoped`,
    `pool` and `where`)."""

    def _set_tier_tx(self, c: Any, card_ids: Sequence[str], tier: str, now: float, scope: Scope,
                     event: str | None = None, detail: dict[str, Any] | None = None) -> int:
        """`set_tier`'s body inside the caller's transaction; each card that changed gets `event` in its history."""
        where, args = scope_sql(scope)
        changed = [r[0] for r in c.execute(
            f"UPDATE damc_cards SET tier = %s, seq = nextval('damc_seq'), archived_at = %s WHERE {where} AND "
            "card_id = ANY(%s) AND tier != %s RETURNING card_id",
            (tier, now if tier == "cold" else None) + args + (list(card_ids), tier)).fetchall()]
        if event:
            order = {cid: j for j, cid in enumerate(card_ids)}
            for cid in sorted(changed, key=lambda x: order.get(x, 0)):
                self._add_event(c, cid, event, now, detail, scope)
        return len(changed)

    @staticmethod
    def _add_event(c: Any, card_id: str, event: str, t: float, detail: dict[str, Any] | None, scope: Scope) -> None:
        c.execute("INSERT INTO damc_events (user_id, agent_id, card_id, event, t, detail) VALUES (%s, %s, %s, %s, %s, "
                  "%s)", (scope.user_id, scope.agent_key, card_id, event, t,
                          json.dumps(detail or {}, ensure_ascii=False)))

    def events(self, card_id: str, scope: Scope = DEFAULT_SCOPE) -> list[tuple[str, float, dict[str, Any]]]:
        """`(event, t, detail)` of a scope's card in the order they happened."""
        where, args = scope_sql(scope)
        return [(e, t, json.loads(d)) for e, t, d in self._query(
            f"SELECT event, t, detail FROM damc_events WHERE {where} AND card_id = %s ORDER BY id", args + (card_id,))]

    # the same body on either store: `_upsert`, `_add_event` and `_set_tier_tx` in one `transaction`
    merge_cards = StoreVerbsMixin.merge_cards

    def derived_from(self, card_ids: Sequence[str], scope: Scope = DEFAULT_SCOPE) -> list[StoredCard]:
        """The scope's merged cards (any tier) whose `meta["merged_from"]` names one of these cards."""
        ids = set(card_ids)
        return [sc for sc in self._scoped("data LIKE %s", ('%"merged_from"%',), scope, None, "ORDER BY rowid")
                if ids & set((sc.card.meta or {}).get("merged_from") or [])]

    @staticmethod
    def _bump_erasures(c: Any) -> None:
        c.execute("INSERT INTO damc_meta VALUES ('erased', '1') ON CONFLICT (key) DO UPDATE SET "
                  "value = (damc_meta.value::bigint + 1)::text")

    def erasures(self) -> int:
        """How many erasures (`delete_cards`, `delete_scope`, `wipe`) the store has seen."""
        rows = self._query("SELECT value FROM damc_meta WHERE key = 'erased'")
        return int(rows[0][0]) if rows else 0

    @staticmethod
    def _tables(c: Any) -> list[tuple[str, set[str]]]:
        """`(table, column names)` of every `damc_` table of the current schema."""
        cols: dict[str, set[str]] = {}
        for table, col in c.execute(
                "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = "
                "current_schema() AND table_name LIKE 'damc\\_%%' ORDER BY table_name").fetchall():
            cols.setdefault(table, set()).add(col)
        return sorted(cols.items())

    def delete_cards(self, card_ids: Sequence[str], scope: Scope = DEFAULT_SCOPE, *, restore: Sequence[str] = (),
                     detail: dict[str, Any] | None = None, sessions: Sequence[str] = ()) -> list[int]:
        """Erase a scope's cards in one transaction (`CardStore.delete_cards`): their rows with the embedding,
        their events, the saved contexts that show them, pending-call entries naming them; `restore` goes back to
        the hot tier with a "restore" event; the scope's rows of `sessions` go from every `damc_` table with a
        `session_id` column. Returns the erased rowids."""
        ids = list(dict.fromkeys(card_ids))
        where, args = scope_sql(scope)
        with self.transaction() as c:
            rows = c.execute(f"DELETE FROM damc_cards WHERE {where} AND card_id = ANY(%s) RETURNING rowid, session_id, "
                             "data", args + (ids,)).fetchall()
            c.execute(f"DELETE FROM damc_events WHERE {where} AND card_id = ANY(%s)", args + (ids,))
            shown = {r[1] for r in rows}
            texts = [json.dumps(json.loads(r[2]).get("raw_text") or "", ensure_ascii=False)[1:-1] for r in rows]
            for sid, data in c.execute(f"SELECT session_id, data FROM damc_contexts WHERE {where}", args).fetchall():
                if sid in shown or any(cid in data for cid in ids) or any(t and t in data for t in texts):
                    c.execute(f"DELETE FROM damc_contexts WHERE {where} AND session_id = %s", args + (sid,))
            gone = set(ids)
            for sid, pending in c.execute(f"SELECT session_id, pending FROM damc_sessions WHERE {where}",
                                          args).fetchall():
                left = {k: v for k, v in json.loads(pending).items() if v not in gone}
                if len(left) != len(json.loads(pending)):
                    c.execute(f"UPDATE damc_sessions SET pending = %s WHERE {where} AND session_id = %s",
                              (json.dumps(left),) + args + (sid,))
            for table, cols in self._tables(c) if sessions else []:
                if {"user_id", "agent_id", "session_id"} <= cols and table != "damc_cards":
                    c.execute(f'DELETE FROM "{table}" WHERE {where} AND session_id = ANY(%s)',
                              args + (list(sessions),))
            if restore:
                self._set_tier_tx(c, [r for r in restore if r not in gone], "hot", time.time(), scope, "restore",
                                  detail)
            self._bump_erasures(c)
        return [r[0] for r in rows]

    def delete_scope(self, scope: Scope, *, all_agents: bool = False) -> list[int]:
        """Erase every row of a scope (with `all_agents`: of every scope of its user) from every `damc_` table
        keyed by scope, in one transaction. Returns the erased card rowids."""
        cond, args = ("user_id = %s", (scope.user_id,)) if all_agents else scope_sql(scope)
        with self.transaction() as c:
            rowids = [r[0] for r in c.execute(f"DELETE FROM damc_cards WHERE {cond} RETURNING rowid", args)]
            for table, cols in self._tables(c):
                if {"user_id", "agent_id"} <= cols and table != "damc_cards":
                    c.execute(f'DELETE FROM "{table}" WHERE {cond}', args)
            self._bump_erasures(c)
        return sorted(rowids)

    def wipe(self) -> list[int]:
        """Erase every row of every `damc_` table but `damc_meta` (schema version, encoder, the erasure counter;
        the `damc_seq` sequence stays monotonic). Returns the erased card rowids."""
        with self.transaction() as c:
            rowids = [r[0] for r in c.execute("DELETE FROM damc_cards RETURNING rowid")]
            for table, _ in self._tables(c):
                if table not in ("damc_meta", "damc_cards"):
                    c.execute(f'DELETE FROM "{table}"')
            self._bump_erasures(c)
        return sorted(rowids)

    def scrub(self, vacuum: bool = True, *, full: bool = False) -> dict[str, Any]:
        """After an erasure: `VACUUM` the `damc_` tables (outside a transaction), so the dead tuples that still
        hold erased rows are removed from the tables and their indexes and the space is marked reusable. Plain
        `VACUUM` does not zero that space and takes no exclusive lock; `full=True` runs `VACUUM FULL`, which
        rewrites each table from live rows (the erased bytes leave the table files) but locks the tables while it
        runs. Neither reaches the WAL, WAL archives, base backups or replicas (see module docstring).

        Returns:
            `{"vacuumed": bool, "full": bool, "tables": [...]}`; a failed VACUUM (e.g. not the table owner) is
            logged as a warning and reported as `vacuumed: False`: the rows are erased either way.
        """
        out: dict[str, Any] = {"vacuumed": False, "full": bool(full), "tables": []}
        if not vacuum:
            return out
        import psycopg

        with self.transaction(vectors=False, read_only=True) as c:
            tables = [t for t, _ in self._tables(c)]
            try:
                for t in tables:
                    c.execute(f'VACUUM {"FULL " if full else ""}"{t}"')
                out.update(vacuumed=True, tables=tables)
            except psycopg.Error as e:
                logger.warning("%s: VACUUM after an erasure failed (%s); the erased rows are gone from every query "
                               "but their dead tuples stay in the table files until the next (auto)vacuum",
                               self.where, str(e).strip())
        return out


__all__ = ["PgStoreVerbsMixin"]
