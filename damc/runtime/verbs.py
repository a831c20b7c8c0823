"""What Mem0's verbs return in DAMC: `MemoryItem` (a card with its scope, tier and, from `search`, its score and
the reasons it was retrieved) and `CardEvent` (one line of a card's history).

`DecisionAwareMemory` gets `get_all / search / get / history / delete / delete_all / reset` from `MemoryVerbs`
here, with their return types and the rule that decides what a deletion takes with it (`erasure_plan`); the
store half (events, erasure, scrubbing the files) is `damc.runtime.store_verbs`. The shapes follow Mem0's (`id`, `memory`, `metadata`, `score`, `user_id`, `agent_id`,
`run_id`, `created_at`) but stay dataclasses holding the `Card` itself: `to_dict()` gives the Mem0-shaped dict
for code written against Mem0's JSON.

Example:
    >>> items = memory.search("where is order 88412?", user_id="alice", limit=5)
    >>> items[0].reasons                      # why it was retrieved
    ['similar', 'bm25', 'recent', 'pinned']
    >>> items[0].to_dict()["memory"]          # Mem0's shape
"""

from __future__ import annotations

import copy
import logging
import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any, Callable, Sequence

from damc.cards import Card
from damc.query import card_document, query_body, render_decision_query
from damc.runtime.lexical import bm25_scores, bm25_tokens
from damc.runtime.scope import Scope, tag_card
from damc.runtime.store import StoredCard
from damc.runtime.valuers import CachedValuer, as_valuer

logger = logging.getLogger(__name__)


def iso(t: float) -> str:
    """UTC ISO 8601 with milliseconds and a trailing Z."""
    return datetime.fromtimestamp(t, tz=timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class MemoryItem:
    """One card as Mem0's verbs return it.

    Attributes:
        id: the card id (`[card_id]` in a built context; what `get`, `history` and `delete` take).
        memory: the card's text (`Card.raw_text`: a message, or a tool call with its result).
        card: the card itself, exactly as stored.
        session_id: the conversation that wrote it (Mem0's `run_id`).
        user_id / agent_id: its scope.
        tier: "hot" (retrievable) or "cold" (archived or merged away; `get` and `get_all(tier=None)` only).
        pinned: a pinned candidate (tool error, user constraint).
        created_at: when it was written (its message's timestamp, else the ingest time), ISO 8601 UTC.
        score: `search` only: the memory's valuer's value for the query (higher = more useful); None elsewhere.
        reasons: `search` only: why it was retrieved — "similar" (FAISS neighbour of the query), "bm25" (shares
            terms with the query: BM25 > 0), "recent" (among the scope's newest cards), "pinned".
        similarity: `search` only: cosine of card and query embeddings (None when not among the FAISS neighbours).
    """

    id: str
    memory: str
    card: Card
    session_id: str
    user_id: str
    agent_id: str | None
    tier: str
    pinned: bool
    created_at: str
    score: float | None = None
    reasons: list[str] = field(default_factory=list)
    similarity: float | None = None

    @property
    def metadata(self) -> dict[str, Any]:
        """Mem0's `metadata`: the card's kind, tool and status, and its `meta` (truncation, merge sources...)."""
        c = self.card
        return {"kind": c.kind, "role": c.role, "tool_name": c.tool_name, "status": c.status, "pinned": self.pinned,
                "tier": self.tier, **{k: v for k, v in (c.meta or {}).items() if k not in ("age", "scope")}}

    @classmethod
    def from_stored(cls, sc: StoredCard) -> "MemoryItem":
        return cls(sc.card.card_id, sc.card.raw_text, sc.card, sc.session_id, sc.scope.user_id, sc.scope.agent_id,
                   sc.tier, sc.pinned, iso(sc.t))

    def to_dict(self) -> dict[str, Any]:
        """Mem0's shape (`id`, `memory`, `metadata`, `score`, `user_id`, `agent_id`, `run_id`, `created_at`), plus
        DAMC's `reasons` and `similarity`."""
        return {"id": self.id, "memory": self.memory, "metadata": self.metadata, "score": self.score,
                "user_id": self.user_id, "agent_id": self.agent_id, "run_id": self.session_id,
                "created_at": self.created_at, "reasons": list(self.reasons), "similarity": self.similarity}


@dataclass
class CardEvent:
    """One line of a card's history (`DecisionAwareMemory.history`).

    Attributes:
        card_id: the card.
        event: "add" (written; from the card's own row), "archive" (moved to the cold tier by `archive`),
            "merge" (made by `merge_similar` from `detail["sources"]`), "merged_into" (replaced by the merged card
            `detail["into"]`), "restore" (back to the hot tier: the merged card that replaced it was deleted).
        at: when, ISO 8601 UTC.
        detail: the event's parameters; `backfilled: True` marks events rebuilt from a schema-2 store's rows.
    """

    card_id: str
    event: str
    at: str
    detail: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"memory_id": self.card_id, "event": self.event, "created_at": self.at, "detail": dict(self.detail)}


def erasure_plan(targets: Sequence[StoredCard], derived_from: Callable[[Sequence[str]], Sequence[StoredCard]]
                 ) -> tuple[list[str], list[str]]:
    """What deleting `targets` takes with it, as `(delete, restore)` card ids.

    * a merged card takes its sources (`meta["merged_from"]`: they are its history and hold its text);
    * every merged card that repeats text of a deleted card (`derived_from(ids)`: `CardStore.derived_from`) goes
      too, and its other sources — cold only because it replaced them — return to the hot tier (`restore`), so a
      deletion forgets the target's text and nothing else.
    """
    delete = list(dict.fromkeys(cid for t in targets
                                for cid in [t.card.card_id, *((t.card.meta or {}).get("merged_from") or [])]))
    derived = [sc for sc in derived_from(delete) if sc.card.card_id not in delete]
    gone = set(delete) | {sc.card.card_id for sc in derived}
    restore = [s for sc in derived for s in (sc.card.meta or {}).get("merged_from") or [] if s not in gone]
    return delete + [sc.card.card_id for sc in derived], list(dict.fromkeys(restore))


class MemoryVerbs:
    """Mem0's verbs, mixed into `DecisionAwareMemory` (which provides `store`, `index`, `valuer`, `config`, `_scope`
    and `candidates`)."""

    def _stored_or_raise(self, card_id: str, scope: Scope) -> StoredCard:
        """The scope's stored card (any tier); `PermissionError` when only another scope holds the id, else
        `KeyError` (`expand`, `get`, `history`, `delete`)."""
        sc = self.store.get_stored(card_id, scope)
        if sc is None:
            if self.store.holds_elsewhere(card_id, scope):
                raise PermissionError(f"card {card_id!r} belongs to another scope than {scope}")
            raise KeyError(f"no card {card_id!r} in scope {scope} of this memory")
        return sc

    def get_all(self, *, user_id: str | None = None, agent_id: str | None = None, session_id: str | None = None,
                tier: str | None = "hot", limit: int | None = None) -> list[MemoryItem]:
        """Every card of a scope (Mem0's `get_all`): one session of it when `session_id` is given (in message order),
        else all its sessions (in the order they were written).

        Args:
            user_id / agent_id: the scope (default: the memory's); scopes match exactly, as everywhere in DAMC.
            session_id: one conversation (Mem0's `run_id`).
            tier: "hot" (retrievable; default), "cold" (archived or merged away) or None (both).
            limit: at most this many (None: all).

        Raises:
            ValueError: an unknown tier or a limit below 1.
        """
        if tier not in ("hot", "cold", None):
            raise ValueError(f"tier must be 'hot', 'cold' or None (both), got {tier!r}")
        if limit is not None and limit < 1:
            raise ValueError(f"limit must be ≥ 1 (None: all), got {limit}")
        scope = self._scope(user_id, agent_id)
        rows = self.store.session_cards(session_id, tier, scope=scope) if session_id is not None \
            else self.store.all_cards(tier, scope)
        return [MemoryItem.from_stored(sc) for sc in rows[:limit]]

    def search(self, query: str, *, user_id: str | None = None, agent_id: str | None = None,
               session_id: str | None = None, limit: int = 10, threshold: float | None = None,
               now: float | None = None) -> list[MemoryItem]:
        """A scope's hot cards most useful for `query` (Mem0's `search`), best first, each with its score and the
        reasons it was retrieved.

        The same machinery as `build_context`: the candidates (FAISS neighbours ∪ recent ∪ pinned, `candidates`,
        with `top_n` widened to `limit`) over every session of the scope (or one, `session_id`), valued by the
        memory's valuer for the query rendered as a decision query. Nothing is recorded (no value statistics, no
        saved context): a search is not a decision.

        Args:
            query: what to look for (plain text, e.g. the user's question).
            user_id / agent_id: the scope (default: the memory's).
            session_id: search one conversation only.
            limit: at most this many cards.
            threshold: leave out cards whose score is below it.
            now: epoch seconds for time-aware valuers (default: now).

        Raises:
            ValueError: an empty query or a limit below 1.
        """
        if not isinstance(query, str) or not query.strip():
            raise ValueError(f"search needs a non-empty query string, got {query!r:.80}")
        if limit < 1:
            raise ValueError(f"limit must be ≥ 1, got {limit}")
        scope = self._scope(user_id, agent_id)
        cfg = replace(self.config, share_sessions=session_id is None, top_n=max(self.config.top_n, limit),
                      max_candidates=max(self.config.max_candidates, limit))
        q = render_decision_query([{"role": "user", "content": query}])
        stored, why = self.candidates(q, session_id=session_id, user_id=scope.user_id, agent_id=scope.agent_id,
                                      config=cfg)
        if not stored:
            return []
        cards = [tag_card(copy.copy(sc.card), sc.scope) for sc in stored]   # the items keep the untagged cards
        valuer = as_valuer(self.valuer)
        valuer.bind(self)
        now = time.time() if now is None else now
        values = valuer.value_with_notes(q, cards, now)[0]
        lexical = bm25_scores([bm25_tokens(card_document(c)) for c in cards], bm25_tokens(query_body(q)))
        sims = self.index.card_vectors([c.card_id for c in cards], scope) @ self.index.query_vector(q)
        items = []
        for i, sc in enumerate(stored):
            item = MemoryItem.from_stored(sc)
            got = why[sc.card.card_id] + (["bm25"] if lexical[i] > 0 else [])
            item.reasons = [r for r in ("similar", "bm25", "recent", "pinned") if r in got]
            item.score, item.similarity = float(values[i]), float(sims[i])
            if threshold is None or item.score >= threshold:
                items.append(item)
        items.sort(key=lambda it: (-it.score, -(it.similarity or 0.0), it.id))
        return items[:limit]

    def get(self, card_id: str, *, user_id: str | None = None, agent_id: str | None = None) -> MemoryItem:
        """One card of the scope, hot or cold (Mem0's `get`).

        Raises:
            PermissionError: the card belongs to another scope only (as `expand`).
            KeyError: no scope holds a card with this id.
        """
        return MemoryItem.from_stored(self._stored_or_raise(card_id, self._scope(user_id, agent_id)))

    def history(self, card_id: str, *, user_id: str | None = None, agent_id: str | None = None) -> list[CardEvent]:
        """What happened to a card, oldest first (Mem0's `history`): "add", then "archive", "merge", "merged_into"
        and "restore" events as the lifecycle recorded them (`CardEvent`). A deleted card has no history (erasure
        keeps no trace of it; Mem0 keeps a DELETE event).

        Raises:
            PermissionError / KeyError: as `get`.
        """
        scope = self._scope(user_id, agent_id)
        sc = self._stored_or_raise(card_id, scope)
        return [CardEvent(card_id, "add", iso(sc.t), {"session_id": sc.session_id})] + \
            [CardEvent(card_id, e, iso(t), d) for e, t, d in self.store.events(card_id, scope)]

    def delete(self, card_id: str, *, user_id: str | None = None, agent_id: str | None = None,
               vacuum: bool = True) -> list[str]:
        """Erase one card of the scope (Mem0's `delete`) — its text, vector, value statistics and history, the saved
        contexts that show it — and scrub the store's files (`CardStore.scrub`).

        Merges are followed (`damc.runtime.verbs.erasure_plan`): a merged card goes with its sources; a merged
        card that repeats the deleted card's text goes too, and its other sources return to the hot tier.

        Args:
            card_id: the card.
            user_id / agent_id: the scope (default: the memory's).
            vacuum: rewrite the SQLite file (`VACUUM`, O(store size)); without it deleted rows are still zeroed.

        Returns:
            The ids of every card erased.

        Raises:
            PermissionError / KeyError: as `get` (nothing is erased).
        """
        scope = self._scope(user_id, agent_id)
        delete, restore = erasure_plan([self._stored_or_raise(card_id, scope)],
                                       lambda ids: self.store.derived_from(ids, scope))
        held = self.store.rows_for(delete, scope)
        rowids = self.store.delete_cards(delete, scope, restore=restore, detail={"deleted": card_id})
        self._after_erasure(rowids, vacuum)
        logger.info("deleted %d cards of %s (%s), %d restored", len(rowids), scope, card_id, len(restore))
        return [c for c in delete if c in held]

    def delete_all(self, *, user_id: str | None = None, agent_id: str | None = None, session_id: str | None = None,
                   all_agents: bool = False, vacuum: bool = True) -> int:
        """Erase every card of a scope (Mem0's `delete_all`): texts, vectors, cached embeddings, value statistics,
        sessions, saved contexts, history; then clear the value cache and scrub the store's files, so no file of
        the store directory holds the scope's text (docs/runtime.md "Erasure").

        Args:
            user_id / agent_id: the scope; at least one must be given (as Mem0: `reset()` erases everything).
                Scopes match exactly: `user_id="alice"` alone is Alice without an agent, unless `all_agents`.
            session_id: erase one conversation of the scope only (Mem0's `run_id`): its cards (merges followed as
                in `delete`), its session state and saved context.
            all_agents: every scope of the user (Mem0's `delete_all(user_id=...)`, which matches any agent).
            vacuum: as `delete`.

        Returns:
            How many cards were erased.

        Raises:
            ValueError: neither `user_id` nor `agent_id` given, or `session_id` with `all_agents`.
        """
        if user_id is None and agent_id is None:
            raise ValueError("delete_all needs user_id= or agent_id= (the scope to erase); reset() erases everything")
        if session_id is not None and all_agents:
            raise ValueError("delete_all: session_id= erases one conversation of one scope; drop all_agents=True")
        scope = self._scope(user_id, agent_id)
        if session_id is not None:
            delete, restore = erasure_plan(self.store.session_cards(session_id, scope=scope),
                                           lambda ids: self.store.derived_from(ids, scope))
            rowids = self.store.delete_cards(delete, scope, restore=restore, detail={"deleted_session": session_id},
                                             sessions=[session_id])
        else:
            rowids = self.store.delete_scope(scope, all_agents=all_agents)
        self._after_erasure(rowids, vacuum)
        logger.info("erased %d cards of %s%s", len(rowids), scope, f" session {session_id!r}" if session_id else
                    " (all agents)" if all_agents else "")
        return len(rowids)

    def reset(self, *, vacuum: bool = True) -> int:
        """Erase everything (Mem0's `reset`): every scope's cards, sessions, contexts and history, the index and the
        value cache. The memory stays open and usable. Returns how many cards were erased."""
        rowids = self.store.wipe()
        self._after_erasure(rowids, vacuum)
        logger.info("reset: erased %d cards", len(rowids))
        return len(rowids)

    def _after_erasure(self, rowids: Sequence[int], vacuum: bool) -> dict[str, Any]:
        """Drop erased cards from the index (saved at once) and every in-memory cache, then scrub the files."""
        self.index.forget(rowids)
        self.index.sync()                          # cards an erasure restored to the hot tier
        stack: list[Any] = [self.valuer]
        while stack:                               # CachedValuers anywhere in the valuer (Hybrid, Cached...)
            v = stack.pop()
            if isinstance(v, CachedValuer):
                v.clear()
            stack += [getattr(v, name) for name in ("inner", "prior", "learned") if getattr(v, name, None)]
        return self.store.scrub(vacuum)
