"""What Mem0's verbs return in DAMC: `MemoryItem` (a card with its scope, tier and, from `search`, its score and
the reasons it was retrieved) and `CardEvent` (one line of a card's history).

`DecisionAwareMemory.get_all / search / get / history / delete / delete_all / reset` live in
`damc.runtime.memory`; this module holds their return types and the rule that decides what a deletion takes
with it (`erasure_plan`). The shapes follow Mem0's (`id`, `memory`, `metadata`, `score`, `user_id`, `agent_id`,
`run_id`, `created_at`) but stay dataclasses holding the `Card` itself: `to_dict()` gives the Mem0-shaped dict
for code written against Mem0's JSON.

Example:
    >>> items = memory.search("where is order 88412?", user_id="alice", limit=5)
    >>> [(i.id, round(i.score, 2), i.reasons) for i in items]
    [('chat-1:3:0', 0.61, ['similar', 'bm25', 'pinned']), ...]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Sequence

from damc.cards import Card
from damc.runtime.store import StoredCard


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


def erasure_plan(target: StoredCard, derived_from: Callable[[Sequence[str]], Sequence[StoredCard]]
                 ) -> tuple[list[str], list[str]]:
    """What deleting `target` takes with it, as `(delete, restore)` card ids.

    * a merged card takes its sources (`meta["merged_from"]`: they are its history and hold its text);
    * every merged card that repeats text of a deleted card (`derived_from(ids)`: `CardStore.derived_from`) goes
      too, and its other sources — cold only because it replaced them — return to the hot tier (`restore`), so a
      deletion forgets the target's text and nothing else.
    """
    delete = list(dict.fromkeys([target.card.card_id] + list((target.card.meta or {}).get("merged_from") or [])))
    derived = [sc for sc in derived_from(delete) if sc.card.card_id not in delete]
    gone = set(delete) | {sc.card.card_id for sc in derived}
    restore = [s for sc in derived for s in (sc.card.meta or {}).get("merged_from") or [] if s not in gone]
    return delete + [sc.card.card_id for sc in derived], list(dict.fromkeys(restore))
