"""Conversation identity on the memory's side: which session a live message list belongs to and the one ingest
transaction that records its new messages with their hash chain (`DecisionAwareMemory.observe` / `add_messages`).
The store's half (the chains, alignment queries) is `damc.runtime.sessions`; the digests and the alignment itself
are `damc.runtime.identity`.

    observe_session ─► resolve_session ─► align (per candidate session) ─► one ingest transaction (cards + chain)
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from damc.cards import token_counter
from damc.runtime.assemble import split_conversation
from damc.runtime.identity import message_digest
from damc.runtime.ingest import ingest_batch
from damc.runtime.scope import Scope
from damc.runtime.sessions import KEEP_VIEW, Stale, resolve_session
from damc.runtime.valuers import is_pinned
from damc.runtime.verbs import iso as iso_time

if TYPE_CHECKING:
    from damc.runtime.memory import DecisionAwareMemory

logger = logging.getLogger(__name__)


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
    count = token_counter(memory.tokenizer) if memory.tokenizer is not None else None
    stamp = iso_time(time.time()) if memory.config.stamp_time else None

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
