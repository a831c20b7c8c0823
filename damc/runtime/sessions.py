"""Conversation identity in the store and the memory: each session's hash chain (`SessionChains`, a `CardStore`
mixin over the `session_messages` table and `sessions.view`) and the session a message list belongs to
(`resolve_session`, `observe_session`). The digests and the alignment itself are `damc.runtime.identity`.

    observe_session ─► resolve_session ─► align (per candidate session) ─► one ingest transaction (cards + chain)
"""

from __future__ import annotations

import json
import logging
import sqlite3
from typing import TYPE_CHECKING, Any, Sequence

from damc.data.episodes import message_text
from damc.runtime.assemble import split_conversation
from damc.runtime.identity import (Alignment, ConversationMismatchError, align, chain_next, derive_session_id,
                                   message_digest, opening_length)
from damc.runtime.scope import DEFAULT_SCOPE, Scope

if TYPE_CHECKING:
    from damc.runtime.memory import DecisionAwareMemory

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
        for chunk in _chunks_of([int(i) for i in indices]):
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
        for chunk in _chunks_of(list(dict.fromkeys(digests))):
            for sid, k in self._query(
                    f"SELECT session_id, count(*) FROM session_messages WHERE {where} AND digest IN "
                    f"({','.join('?' * len(chunk))}) AND (session_id = ? OR substr(session_id, 1, ?) = ?) "
                    "GROUP BY session_id", args + tuple(chunk) + (base, len(base) + 1, base + "~")):
                counts[sid] = counts.get(sid, 0) + k
        return sorted(counts, key=lambda sid: -counts[sid])[:limit]


def _chunks_of(ids: Sequence[Any]) -> Any:
    from damc.runtime.store import _chunks

    return _chunks(ids)


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


def as_ingested(m: Any, summary: bool) -> Any:
    """A summary that arrived as a (non-leading) system message is stored as a card of its own (system messages
    make none), with the text as written."""
    if summary and isinstance(m, dict) and m.get("role") == "system":
        return {**m, "role": "user"}
    return m


def ingest_messages(memory: "DecisionAwareMemory", msgs: list[Any], sid: str, scope: Scope, digests: list[str], *,
                    view: Any = KEEP_VIEW, expect_n: int | None = None,
                    meta: list[dict[str, Any] | None] | None = None) -> list[str]:
    """One ingest transaction (`DecisionAwareMemory.add_messages`): the cards of `msgs`, the session counter, and
    the hash chain extended by `digests` (the view set to `view` unless `KEEP_VIEW`). Returns the card ids written.

    Raises:
        Stale: the session no longer holds `expect_n` messages (another writer came first).
        EpisodeFormatError: a malformed message (nothing is written).
    """
    import time

    from damc.cards import token_counter
    from damc.runtime.ingest import ingest_batch
    from damc.runtime.valuers import is_pinned
    from damc.runtime.verbs import iso

    count = token_counter(memory.tokenizer) if memory.tokenizer is not None else None
    stamp = iso(time.time()) if memory.config.stamp_time else None

    def batch(state: dict[str, Any], get_card: Any) -> tuple[list[Any], list[bool], dict[str, Any], list[str]]:
        if expect_n is not None and state["n_messages"] != expect_n:
            raise Stale()
        cards, pinned, new_state, ids = ingest_batch(msgs, sid, state, get_card, count=count, stamp=stamp,
                                                     is_pinned=is_pinned, max_chars=memory.config.max_card_chars,
                                                     meta=meta)
        memory.store.extend_chain(sid, scope, state["n_messages"], digests, view)
        return cards, pinned, new_state, ids

    return memory.store.ingest(sid, batch, scope=scope)


def observe_session(memory: "DecisionAwareMemory", msgs: list[Any], session_id: str | None, scope: Scope
                    ) -> tuple[str, int, int]:
    """`DecisionAwareMemory.observe` on cleaned messages: `(session id used, messages recorded, store index of the
    current turn)`."""
    u = split_conversation(msgs)[3]
    digests = [message_digest(m, memory._memo) for m in msgs]
    for _ in range(5):   # another process may write the same session between aligning and ingesting
        sid, al, n, view = resolve_session(memory.store, msgs, digests, u, session_id or memory.config.session_id,
                                           scope, memory.config.on_mismatch)
        if al.backfill:
            memory.store.backfill_chain(sid, al.backfill, scope)
        if not al.new and al.view == view:
            break
        batch = [as_ingested(msgs[k], k in al.summaries and k > 0) for k in al.new]
        meta = [{"summary": True} if k in al.summaries and not (k == 0 and msgs[k].get("role") == "system")
                else None for k in al.new]
        try:
            ingest_messages(memory, batch, sid, scope, [digests[k] for k in al.new], view=al.view, expect_n=n,
                            meta=meta)
        except Stale:
            continue
        if al.resynced:
            logger.info("session %s/%s re-synced a trimmed or compacted history: %d new message(s)", scope, sid,
                        len(al.new))
        break
    else:
        raise RuntimeError(f"session {sid!r} kept changing under concurrent writers; try again")
    memory.index.sync()
    return sid, len(al.new), al.turn_position
