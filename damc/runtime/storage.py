"""What `DecisionAwareMemory` needs from storage, and which implementation a path or URL opens.

Storage is two objects, a card store and a vector index over its hot cards; the memory, the lifecycle
(`damc.runtime.lifecycle`) and the valuers call only the methods named in `CardStorage` and `VectorIndex`
below. Two implementations exist:

* **embedded** (default): `CardStore` (one SQLite file, WAL) + `CardIndex` (FAISS, persisted beside it, a cache
  of the store) — `DecisionAwareMemory("memory_dir")`, one machine, any number of processes on it;
* **server**: `PgCardStore` + `PgCardIndex` (`damc.runtime.pgstore`, `pgindex`: PostgreSQL + pgvector, the vectors in the
  cards table under an HNSW index, scope and session filters in the same SQL as the vector search) —
  `DecisionAwareMemory("postgresql://user@host/db")` or a `psycopg_pool.ConnectionPool`: a fleet of workers on
  one database. Needs `pip install 'damc[postgres]'`; psycopg is imported only when such a memory is opened.

`open_storage(path, encoder, ...)` picks one from its argument: a `postgresql://` / `postgres://` URL or a pool
opens the server backend, anything else (None, a directory, a `.db` file) the embedded one.

Example:
    >>> store, index = open_storage("runs/mem", "minilm-l6")            # SQLite + FAISS
    >>> store, index = open_storage("postgresql://damc@db.internal/agents", "minilm-l6")   # PostgreSQL
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence, runtime_checkable

import numpy as np

from damc.cards import Card
from damc.models import DEFAULT_ENCODER
from damc.runtime.paths import STORE_SUFFIXES
from damc.runtime.scope import Scope

URL_PREFIXES = ("postgresql://", "postgres://")


@runtime_checkable
class CardStorage(Protocol):
    """The card store as the runtime uses it (cards, scopes, sessions, values, tiers, saved contexts).

    Every read that serves retrieval takes a `Scope` and never returns another scope's rows; `scope=None` (where
    allowed) is for index maintenance and audits. Every write is one transaction: all of it or none of it.
    Rows are `damc.runtime.store.StoredCard`.
    """

    def ingest(self, session_id: str, fn: Callable[..., Any], *, scope: Scope = ...) -> Any:
        """Run `fn(state, get_card) -> (cards, pinned, new_state, result)` in one write transaction with the
        session's state locked; upsert the cards and save the state with them; return `result`."""

    def session_state(self, session_id: str, scope: Scope = ...) -> dict[str, Any]: ...

    def add_cards(self, cards: Sequence[Card], session_id: str | None = None,
                  pinned: Sequence[bool] | None = None, *, scope: Scope = ...) -> list[int]: ...

    def set_tier(self, card_ids: Sequence[str], tier: str, now: float | None = None, *, scope: Scope = ...,
                 event: str | None = None, detail: dict[str, Any] | None = None) -> int: ...

    def record_values(self, values: dict[str, float], scope: Scope = ...) -> None: ...

    def save_context(self, session_id: str, data: dict[str, Any], scope: Scope = ...) -> None: ...

    def last_context(self, session_id: str | None = None, scope: Scope = ...) -> dict[str, Any] | None: ...

    def get(self, card_id: str, scope: Scope = ...) -> Card | None: ...

    def get_stored(self, card_id: str, scope: Scope = ...) -> Any: ...

    def holds_elsewhere(self, card_id: str, scope: Scope) -> bool: ...

    def rows_for(self, card_ids: Sequence[str], scope: Scope = ...) -> dict[str, tuple[int, int]]: ...

    def by_rowids(self, rowids: Sequence[int], scope: Scope | None) -> list[Any]: ...

    def recent(self, n: int, tier: str = "hot", *, scope: Scope = ..., session_id: str | None = None) -> list[Any]: ...

    def pinned(self, n: int, *, scope: Scope = ..., session_id: str | None = None) -> list[Any]: ...

    def session_cards(self, session_id: str, tier: str | None = None, *, scope: Scope = ...) -> list[Any]: ...

    def all_cards(self, tier: str | None = "hot", scope: Scope | None = None) -> list[Any]: ...

    def lifecycle_rows(self, tier: str = "hot", scope: Scope = ...) -> list[tuple[str, float, float | None, bool]]: ...

    def count(self, tier: str | None = None, scope: Scope | None = None) -> int: ...

    def stamp(self) -> dict[str, int]: ...

    # conversation identity (`damc.runtime.sessions`, `observe`; `SessionChains` / `pgsessions.PgSessionChains`)

    def extend_chain(self, session_id: str, scope: Scope, n0: int, digests: Sequence[str], view: Any) -> None:
        """Append a batch's message digests to the session's hash chain, inside `ingest`'s batch function."""

    def session_view(self, session_id: str, scope: Scope = ...) -> tuple[int, list[int] | None]: ...

    def chain_rows(self, session_id: str, indices: Sequence[int] | None = None,
                   scope: Scope = ...) -> dict[int, tuple[str, str]]: ...

    def backfill_chain(self, session_id: str, digests: dict[int, str], scope: Scope = ...) -> None: ...

    def sessions_holding(self, digests: Sequence[str], base: str, scope: Scope = ..., limit: int = 8) -> list[str]: ...

    # history and erasure (Mem0's verbs, `damc.runtime.verbs`; `store_verbs` / `pgverbs`)

    def events(self, card_id: str, scope: Scope = ...) -> list[tuple[str, float, dict[str, Any]]]:
        """`(event, t, detail)` of a scope's card, oldest first ("archive", "merge", "merged_into", "restore")."""

    def merge_cards(self, card: Card, session_id: str, pinned: bool, member_ids: Sequence[str], *,
                    scope: Scope = ..., now: float | None = None) -> int:
        """Write a merged card, move its members cold, record the events: one transaction; the new rowid."""

    def derived_from(self, card_ids: Sequence[str], scope: Scope = ...) -> list[Any]:
        """The scope's merged cards whose `meta["merged_from"]` names one of these cards."""

    def delete_cards(self, card_ids: Sequence[str], scope: Scope = ..., *, restore: Sequence[str] = (),
                     detail: dict[str, Any] | None = None, sessions: Sequence[str] = ()) -> list[int]:
        """Erase cards and every row derived from them in one transaction; the erased rowids."""

    def delete_scope(self, scope: Scope, *, all_agents: bool = False) -> list[int]:
        """Erase every row of a scope (of every scope of its user) in one transaction; the erased rowids."""

    def wipe(self) -> list[int]:
        """Erase every row but the layout's own in one transaction; the erased rowids."""

    def erasures(self) -> int:
        """How many erasures the store has seen (an index that saw fewer holds erased vectors)."""

    def scrub(self, vacuum: bool = True) -> dict[str, Any]:
        """After an erasure: make erased rows unreadable where the backend can (SQLite: VACUUM + WAL checkpoint;
        PostgreSQL: VACUUM of the tables)."""

    def close(self) -> None: ...


@runtime_checkable
class VectorIndex(Protocol):
    """Candidate search by vector with a scope (and session) filter, over a `CardStorage`'s hot cards.

    The vectors come from the index's sentence encoder (`damc.runtime.encoder`); `search` returns store rowids
    and cosine similarities of the scope's cards only, best first.
    """

    model_name: str

    def sync(self) -> int:
        """Embed what the store changed since the last call; returns the rows applied."""

    def search(self, query_vec: np.ndarray, k: int, scope: Scope | None = ...,
               session_id: str | None = None) -> tuple[np.ndarray, np.ndarray]: ...

    def search_text(self, text: str, k: int, scope: Scope | None = ...,
                    session_id: str | None = None) -> tuple[np.ndarray, np.ndarray]: ...

    def query_vector(self, text: str) -> np.ndarray: ...

    def card_vectors(self, card_ids: Sequence[str], scope: Scope = ...) -> np.ndarray: ...

    def forget(self, rowids: Sequence[int]) -> None:
        """After an erasure: drop the erased cards' vectors (and anything quoting them) from the index."""

    def vectors_for(self, rows: Sequence[tuple[int, int]]) -> np.ndarray:
        """Unit embeddings of `(rowid, seq)` rows (lifecycle's merge), `(n, dim)`."""

    @property
    def ntotal(self) -> int: ...

    def save(self, force: bool = False) -> bool: ...


def is_server_url(path: Any) -> bool:
    """Whether `path` names a PostgreSQL server (a URL or a `psycopg_pool` pool) rather than a local path."""
    if isinstance(path, str):
        return path.startswith(URL_PREFIXES)
    return type(path).__module__.startswith("psycopg_pool")


def embedded_paths(path: str | os.PathLike | None) -> tuple[str, str | None]:
    """The SQLite file and FAISS file of an embedded memory: None → in memory; a `.db` file → the FAISS file beside
    it; a directory (created) → `cards.db` and `cards.faiss` inside."""
    if path is None:
        return ":memory:", None
    p = Path(path)
    if p.suffix in STORE_SUFFIXES:
        return str(p), str(p.with_suffix(".faiss"))
    p.mkdir(parents=True, exist_ok=True)
    return str(p / "cards.db"), str(p / "cards.faiss")


def open_storage(path: Any, encoder: str | Any = DEFAULT_ENCODER, *, store_config: Any = None,
                 index_config: Any = None, encoder_backend: str = "auto",
                 scorer_dir: str | os.PathLike | None = None) -> tuple[CardStorage, VectorIndex]:
    """The store and index for `path` (see module docstring).

    Args:
        path: None, a directory, a `.db` file, a `postgresql://` URL or a `psycopg_pool.ConnectionPool`.
        encoder: the sentence encoder of the index (registry name, path or object; `damc.runtime.encoder`).
        store_config: `StoreConfig` (SQLite) or `PgConfig` (PostgreSQL); None: the defaults.
        index_config: `IndexConfig` (FAISS; ignored by the server backend, whose index lives in the database).
        encoder_backend / scorer_dir: how a named encoder runs (`damc.runtime.encoder.choose_encoder`).

    Raises:
        MissingExtraError: a server URL without the `[postgres]` extra installed.
    """
    if is_server_url(path):
        from damc.runtime.pgindex import PgCardIndex
        from damc.runtime.pgstore import PgCardStore

        store = PgCardStore(path, store_config)
        return store, PgCardIndex(store, encoder, encoder_backend=encoder_backend, scorer_dir=scorer_dir)
    from damc.runtime.index import CardIndex
    from damc.runtime.store import CardStore

    db, faiss_path = embedded_paths(path)
    store = CardStore(db, store_config)
    return store, CardIndex(store, encoder, faiss_path, index_config, encoder_backend=encoder_backend,
                            scorer_dir=scorer_dir)


def open_store(path: Any, store_config: Any = None) -> CardStorage:
    """Only the card store behind `path` (audits, `explain_store`, the load test's read-back): a memory directory,
    a `.db` file, a server URL or a pool. Never creates an embedded store that does not exist.

    Raises:
        FileNotFoundError: a local path without a store.
    """
    if is_server_url(path):
        from damc.runtime.pgstore import PgCardStore

        return PgCardStore(path, store_config)
    from damc.runtime.store import CardStore

    p = Path(path)
    db = p if p.suffix in STORE_SUFFIXES else p / "cards.db"
    if not db.exists():
        raise FileNotFoundError(f"no DAMC store at {db}")
    return CardStore(db, store_config)
