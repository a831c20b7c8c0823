"""Scopes: whose memory a card is. Every card belongs to exactly one scope and no retrieval path crosses one.

A scope follows Mem0's convention: `user_id` (required, default "default") and an optional `agent_id`; the
session id stays the conversation (Mem0's `run_id`). Scopes match exactly: a memory opened for
`Scope("alice")` never sees the cards of `Scope("alice", agent_id="billing")` and vice versa.

Inside a scope, the cards of *other sessions* are candidates only when the memory is opened with
`share_sessions=True` (off by default: a new conversation starts from its own history only).

Example:
    >>> Scope("alice", "billing").where()
    ('user_id = ? AND agent_id = ?', ('alice', 'billing'))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

DEFAULT_USER = "default"
_MAX_ID = 256  # characters; ids are keys, not documents


def _check_id(value: object, field: str, optional: bool) -> None:
    if value is None and optional:
        return
    if not isinstance(value, str) or not value or len(value) > _MAX_ID:
        raise ValueError(f"scope field {field!r} must be a non-empty string of at most {_MAX_ID} characters, "
                         f"got {value!r:.80}")
    if any(ord(ch) < 32 for ch in value):
        raise ValueError(f"scope field {field!r} holds control characters: {value!r:.80}")


@dataclass(frozen=True)
class Scope:
    """Whose memory: `user_id` and an optional `agent_id` (None is a scope of its own, not a wildcard).

    Attributes:
        user_id: the end user (customer, account) the conversation belongs to.
        agent_id: the agent (deployment, persona) within that user's memory; None = no agent.

    Raises:
        ValueError: an empty or non-string id (names the field).
    """

    user_id: str = DEFAULT_USER
    agent_id: str | None = None

    def __post_init__(self) -> None:
        _check_id(self.user_id, "user_id", optional=False)
        _check_id(self.agent_id, "agent_id", optional=True)

    @property
    def agent_key(self) -> str:
        """`agent_id` as stored (SQLite column is NOT NULL: "" stands for None)."""
        return self.agent_id or ""

    def where(self, prefix: str = "") -> tuple[str, tuple[str, str]]:
        """The SQL condition selecting this scope's rows, and its parameters."""
        return f"{prefix}user_id = ? AND {prefix}agent_id = ?", (self.user_id, self.agent_key)

    @classmethod
    def of(cls, user_id: str | None = None, agent_id: str | None = None, default: "Scope | None" = None) -> "Scope":
        """`default` with the given ids overriding it (the per-call form of the memory's scope)."""
        base = default or cls()
        if user_id is None and agent_id is None:
            return base
        return cls(user_id if user_id is not None else base.user_id,
                   agent_id if agent_id is not None else base.agent_id)

    def __str__(self) -> str:
        return self.user_id + (f"/{self.agent_id}" if self.agent_id else "")


DEFAULT_SCOPE = Scope()


def tag_card(card: Any, scope: Scope) -> Any:
    """Mark a retrieved card with its scope (`meta["scope"]`), so valuers read the right scope's embeddings
    and the value cache never serves one scope's entry to another."""
    card.meta = {**(card.meta or {}), "scope": [scope.user_id, scope.agent_id]}
    return card


def scope_of(cards: Sequence[Any]) -> Scope:
    """The scope the memory tagged these candidates with (`tag_card`); the default scope for untagged cards.

    Raises:
        ValueError: the cards carry different scopes (a candidate list never mixes them).
    """
    tags = {tuple((c.meta or {}).get("scope") or (DEFAULT_USER, None)) for c in cards}
    if len(tags) > 1:
        raise ValueError(f"cards of several scopes in one candidate list: {sorted(map(str, tags))[:3]}")
    return Scope(*tags.pop()) if tags else DEFAULT_SCOPE
