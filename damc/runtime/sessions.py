"""Conversation identity in the store: each session's hash chain (`SessionChains`, a `CardStore` mixin over the
`session_messages` table and `sessions.view`) and the session a message list belongs to (`resolve_session`). The
memory's side (`observe_session`, the ingest transaction) is `damc.runtime.observe`; the digests and the alignment
itself are `damc.runtime.identity`.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from typing import Any, Sequence

from damc.episodes import message_text
from damc.runtime.identity import (
    Alignment,
    ConversationMismatchError,
    align,
    chain_next,
    derive_session_id,
    opening_length,
)
from damc.runtime.schema import chunks
from damc.runtime.scope import DEFAULT_SCOPE, Scope

logger = logging.getLogger(__name__)


KEEP_VIEW = object()   # `ingest_messages`: leave the session's view as the store extends it


class Stale(Exception):
    """Another writer changed the session between aligning a message list and ingesting it (retried)."""


class SessionChains:
    """The store half of conversation identity (mixed into `CardStore`: `_query`, `transaction`)."""

    def extend_chain(self, session_id: str, scope: Scope, n0: int, digests: Sequence[str], view: Any) -> None:
        """Append a batch's message digests to a session's hash chain (store indices `n0, n0 + 1, ...`) and set its
        view (`view`, or the stored view extended by the new indices when `KEEP_VIEW`). Call it inside the ingest
        transaction (`CardStore.ingest`'s batch function), so the chain is written with the cards or not at all."""
        c: sqlite3.Connection = self._conn  # type: ignore[attr-defined]
        key = (scope.user_id, scope.agent_key, session_id)
        row = c.execute("SELECT chain FROM session_messages WHERE user_id = ? AND agent_id = ? AND session_id = ? "
                        "AND idx = ?", key + (n0 - 1,)).fetchone()
        prev = row[0] if row else None
        rows = []
        for j, d in enumerate(digests):
            prev = chain_next(prev, d)
            rows.append(key + (n0 + j, d, prev))
        c.executemany("INSERT OR REPLACE INTO session_messages VALUES (?, ?, ?, ?, ?, ?)", rows)
        if view is KEEP_VIEW:
            old = c.execute("SELECT view FROM sessions WHERE user_id = ? AND agent_id = ? AND session_id = ?",
                            key).fetchone()
            view = json.loads(old[0]) + list(range(n0, n0 + len(rows))) if old and old[0] else None
        c.execute("UPDATE sessions SET view = ? WHERE user_id = ? AND agent_id = ? AND session_id = ?",
                  (json.dumps(view) if view is not None else None,) + key)

    def session_view(self, session_id: str, scope: Scope = DEFAULT_SCOPE) -> tuple[int, list[int] | None]:
        """`(messages stored, view)` of a session: its message counter and the caller's latest list as store
        indices (None: the stored order; `damc.runtime.identity`)."""
        where, args = scope.where()
        rows = self._query(f"SELECT n_messages, view FROM sessions WHERE {where} AND session_id = ?",
                           args + (session_id,))
        return (rows[0][0], json.loads(rows[0][1]) if rows[0][1] else None) if rows else (0, None)

    def chain_rows(self, session_id: str, indices: Sequence[int] | None = None,
                   scope: Scope = DEFAULT_SCOPE) -> dict[int, tuple[str, str]]:
        """`{store index: (message digest, chain value)}` of a session's hash chain (only `indices` when given)."""
        where, args = scope.where()
        sql = f"SELECT idx, digest, chain FROM session_messages WHERE {where} AND session_id = ?"
        if indices is None:
            return {r[0]: (r[1], r[2]) for r in self._query(sql, args + (session_id,))}
        out: dict[int, tuple[str, str]] = {}
        for chunk in chunks([int(i) for i in indices]):
            for r in self._query(sql + f" AND idx IN ({','.join('?' * len(chunk))})", args + (session_id,) + tuple(chunk)):
                out[r[0]] = (r[1], r[2])
        return out

    def backfill_chain(self, session_id: str, digests: dict[int, str], scope: Scope = DEFAULT_SCOPE) -> None:
        """Give a session stored before hash chains existed the digests of its messages (missing rows only)."""
        if not digests:
            return
        key = (scope.user_id, scope.agent_key, session_id)
        with self.transaction() as c:
            have = dict(c.execute("SELECT idx, chain FROM session_messages WHERE user_id = ? AND agent_id = ? AND "
                                  "session_id = ?", key).fetchall())
            for idx in sorted(digests):
                if idx not in have:
                    have[idx] = chain_next(have.get(idx - 1), digests[idx])
                    c.execute("INSERT OR IGNORE INTO session_messages VALUES (?, ?, ?, ?, ?, ?)",
                              key + (idx, digests[idx], have[idx]))

    def sessions_holding(self, digests: Sequence[str], base: str, scope: Scope = DEFAULT_SCOPE,
                         limit: int = 8) -> list[str]:
        """Sessions named `base` or `base~...` of a scope whose chains hold any of these message digests, the one
        holding most of them first (where a trimmed history of a derived session is looked for)."""
        where, args = scope.where()
        counts: dict[str, int] = {}
        for chunk in chunks(list(dict.fromkeys(digests))):
            for sid, k in self._query(
                    f"SELECT session_id, count(*) FROM session_messages WHERE {where} AND digest IN "
                    f"({','.join('?' * len(chunk))}) AND (session_id = ? OR substr(session_id, 1, ?) = ?) "
                    "GROUP BY session_id", args + tuple(chunk) + (base, len(base) + 1, base + "~")):
                counts[sid] = counts.get(sid, 0) + k
        return sorted(counts, key=lambda sid: -counts[sid])[:limit]


def align_session(store: Any, sid: str, digests: list[str], u: int, scope: Scope, need_diff: bool = False
                  ) -> tuple[Alignment, int, list[int] | None]:
    """`identity.align` of a message list with one stored session: `(alignment, messages stored, view)`."""
    n, view = store.session_view(sid, scope)
    al = align(digests, u, n, view, lambda idx: store.chain_rows(sid, idx, scope), need_diff=need_diff)
    return al, n, view


def resolve_session(store: Any, msgs: list[Any], digests: list[str], u: int, base: str, scope: Scope,
                    on_mismatch: str = "new_session") -> tuple[str, Alignment, int, list[int] | None]:
    """The session a message list belongs to: `base` when it continues (or re-syncs with) it; else, with
    `on_mismatch="new_session"`, `{base}~{hash of its opening}`, a session of that family its trimmed history
    re-syncs with, or — when that derived session went another way — `{base}~{hash of the list up to the first
    difference}`.

    Raises:
        ConversationMismatchError: `on_mismatch="error"` and the list does not continue `base`.
    """
    error = on_mismatch == "error"
    al, n, view = align_session(store, base, digests, u, scope, need_diff=error)
    if al.ok:
        return base, al, n, view
    if error:
        k = al.first_diff if al.first_diff is not None else 0
        m = msgs[k] if k < len(msgs) and isinstance(msgs[k], dict) else {}
        preview = message_text(m)[:60] if isinstance(m.get("content"), (str, list)) else ""
        raise ConversationMismatchError(base, k, f" (messages[{k}] is the {m.get('role', '?')} message "
                                        f"{preview!r})" if preview else "")
    sid = derive_session_id(base, digests[:opening_length(msgs)])
    al, n, view = align_session(store, sid, digests, u, scope, need_diff=True)
    if al.ok and n == 0:   # new, unless it is the trimmed history of a conversation stored earlier
        recent = [d for d, m in zip(digests[:u], msgs) if not (isinstance(m, dict) and m.get("role") == "system")]
        for other in store.sessions_holding(recent[-64:], base, scope):
            if other not in (base, sid):
                found = align_session(store, other, digests, u, scope)
                if found[0].ok:
                    return (other,) + found
    seen = {sid}
    while not al.ok:       # the derived session holds a conversation that opened alike and went another way
        k = al.first_diff if al.first_diff is not None else len(digests) - 1
        sid = derive_session_id(base, digests[:k + 1])
        if sid in seen:
            raise ConversationMismatchError(base, k, " and no derived session fits it either")
        seen.add(sid)
        al, n, view = align_session(store, sid, digests, u, scope, need_diff=True)
    return sid, al, n, view
