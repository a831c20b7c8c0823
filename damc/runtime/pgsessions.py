"""Conversation identity in PostgreSQL: each session's hash chain (`PgSessionChains`, a `PgCardStore` mixin over
`damc_session_messages` and `damc_sessions.view`), with the semantics of the SQLite store's
`damc.runtime.sessions.SessionChains` (the alignment itself is `damc.runtime.identity`; which session a message list
belongs to, `damc.runtime.sessions.resolve_session`, runs unchanged on either store).

`extend_chain` writes on the connection of the ingest transaction that calls it (`PgCardStore.ingest` keeps it in a
thread-local while its batch function runs), so a batch's chain rows commit with its cards or not at all.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any, Sequence

from damc.runtime.identity import chain_next
from damc.runtime.pgschema import scope_sql
from damc.runtime.scope import DEFAULT_SCOPE, Scope

logger = logging.getLogger(__name__)


class PgSessionChains:
    """The store half of conversation identity for `PgCardStore` (`_query`, `transaction`)."""

    _tx: threading.local   # .conn: the connection of this store's ingest transaction running on this thread

    def extend_chain(self, session_id: str, scope: Scope, n0: int, digests: Sequence[str], view: Any) -> None:
        """Append a batch's message digests to a session's chain (store indices `n0, n0 + 1, ...`) and set its view
        (`view`, or the stored one extended by the new indices when `sessions.KEEP_VIEW`). Only inside `ingest`."""
        from damc.runtime.sessions import KEEP_VIEW

        c = getattr(self._tx, "conn", None)
        if c is None:
            raise RuntimeError("extend_chain runs inside PgCardStore.ingest's batch function (its transaction)")
        key = (scope.user_id, scope.agent_key, session_id)
        row = c.execute("SELECT chain FROM damc_session_messages WHERE user_id = %s AND agent_id = %s AND "
                        "session_id = %s AND idx = %s", key + (n0 - 1,)).fetchone()
        prev = row[0] if row else None
        rows = []
        for j, d in enumerate(digests):
            prev = chain_next(prev, d)
            rows.append(key + (n0 + j, d, prev))
        with c.cursor() as cur:
            cur.executemany("INSERT INTO damc_session_messages VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (user_id, "
                            "agent_id, session_id, idx) DO UPDATE SET digest = excluded.digest, chain = excluded.chain",
                            rows)
        if view is KEEP_VIEW:
            old = c.execute("SELECT view FROM damc_sessions WHERE user_id = %s AND agent_id = %s AND session_id = %s",
                            key).fetchone()
            view = json.loads(old[0]) + list(range(n0, n0 + len(rows))) if old and old[0] else None
        c.execute("UPDATE damc_sessions SET view = %s WHERE user_id = %s AND agent_id = %s AND session_id = %s",
                  (json.dumps(view) if view is not None else None,) + key)

    def session_view(self, session_id: str, scope: Scope = DEFAULT_SCOPE) -> tuple[int, list[int] | None]:
        """`(messages stored, view)` of a session (view None: the stored order)."""
        where, args = scope_sql(scope)
        rows = self._query(f"SELECT n_messages, view FROM damc_sessions WHERE {where} AND session_id = %s",
                           args + (session_id,))
        return (rows[0][0], json.loads(rows[0][1]) if rows[0][1] else None) if rows else (0, None)

    def chain_rows(self, session_id: str, indices: Sequence[int] | None = None,
                   scope: Scope = DEFAULT_SCOPE) -> dict[int, tuple[str, str]]:
        """`{store index: (message digest, chain value)}` of a session's chain (only `indices` when given)."""
        where, args = scope_sql(scope)
        sql = f"SELECT idx, digest, chain FROM damc_session_messages WHERE {where} AND session_id = %s"
        if indices is None:
            return {r[0]: (r[1], r[2]) for r in self._query(sql, args + (session_id,))}
        return {r[0]: (r[1], r[2]) for r in self._query(sql + " AND idx = ANY(%s)",
                                                        args + (session_id, [int(i) for i in indices]))}

    def backfill_chain(self, session_id: str, digests: dict[int, str], scope: Scope = DEFAULT_SCOPE) -> None:
        """Give a session stored before hash chains existed the digests of its messages (missing rows only)."""
        if not digests:
            return
        key = (scope.user_id, scope.agent_key, session_id)
        with self.transaction() as c:
            have = dict(c.execute("SELECT idx, chain FROM damc_session_messages WHERE user_id = %s AND agent_id = %s "
                                  "AND session_id = %s", key).fetchall())
            for idx in sorted(digests):
                if idx not in have:
                    have[idx] = chain_next(have.get(idx - 1), digests[idx])
                    c.execute("INSERT INTO damc_session_messages VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT DO "
                              "NOTHING", key + (idx, digests[idx], have[idx]))

    def sessions_holding(self, digests: Sequence[str], base: str, scope: Scope = DEFAULT_SCOPE,
                         limit: int = 8) -> list[str]:
        """Sessions named `base` or `base~...` of a scope whose chains hold any of these digests, most first."""
        where, args = scope_sql(scope)
        rows = self._query(
            f"SELECT session_id, count(*) FROM damc_session_messages WHERE {where} AND digest = ANY(%s) AND "
            "(session_id = %s OR left(session_id, %s) = %s) GROUP BY session_id",
            args + (list(dict.fromkeys(digests)), base, len(base) + 1, base + "~"))
        counts = {sid: int(k) for sid, k in rows}
        return sorted(counts, key=lambda sid: -counts[sid])[:limit]


__all__ = ["PgSessionChains"]
