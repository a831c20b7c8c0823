"""The vector index of a PostgreSQL card store: embeddings in the cards table, searched by pgvector.

`PgCardIndex` has `CardIndex`'s method surface (`damc.runtime.storage.VectorIndex`) and reuses its encoding path
(`damc.runtime.encoder`: the same encoder the FAISS index uses); what FAISS keeps in a file lives in the database,
so there is nothing to load, save or rebuild on open.

* **sync** embeds hot cards whose vector is missing or older than the card, claiming rows with
  `FOR UPDATE SKIP LOCKED`, so workers syncing at once never encode the same card twice.
* **search** filters scope, session and tier in the `WHERE` of the same statement that orders by distance. A
  scope (or session) of n cards in a table of N is searched exactly while n ≤ max(`PgConfig.exact_max`,
  √(`PgConfig.exact_factor` · k · N)) (its rows through the scope b-tree, a distance for each — no HNSW candidate
  list to starve; below that size cheaper than a filtered HNSW scan, which reads ~k · N / n rows); a bigger one
  through HNSW with
  `hnsw.ef_search` raised by how small a share of the table the scope is (about 2k · table / scope, at least
  `PgConfig.ef_search`, at most 1000), and `hnsw.iterative_scan = strict_order` where pgvector ≥ 0.8 offers it.
  Without iterative scans (pgvector < 0.8, e.g. pgserver 0.1.4's 0.6.2) a scope too small a share of the table
  for 1000 candidates to hold k of its cards is searched exactly, and a filtered HNSW scan that returns fewer
  than k rows is redone exactly: a short list is never returned.
* The database records which encoder made its vectors; a worker with another one is refused until
  `rebuild()` re-embeds every card.

Example:
    >>> index = PgCardIndex(PgCardStore("postgresql://damc@db.internal/agents"), "minilm-l6")
    >>> index.sync()
    >>> rowids, sims = index.search_text("where is order 88412?", k=20, scope=Scope("alice"))
"""

from __future__ import annotations

import json
import logging
import math
from typing import Any, Sequence

import numpy as np

from damc.cards import Card
from damc.models import DEFAULT_ENCODER
from damc.runtime.index import CardIndex, text_digest
from damc.runtime.pgschema import LOCK_KEY, filters_sql
from damc.runtime.pgstore import PgCardStore, scope_sql
from damc.runtime.scope import DEFAULT_SCOPE, Scope
from damc.runtime.store import StoreError

logger = logging.getLogger(__name__)

MAX_EF_SEARCH = 1000    # pgvector's upper bound for hnsw.ef_search


def _as_array(vec: Any) -> np.ndarray:
    """A stored pgvector value as float32 numpy (pgvector's Python type, or a plain sequence)."""
    return np.asarray(vec.to_numpy() if hasattr(vec, "to_numpy") else vec, dtype=np.float32)


class PgCardIndex(CardIndex):
    """The vector index of a `PgCardStore`: embeddings in the cards table, searched by pgvector (HNSW or exact).

    Encoding, the query-vector cache and `card_vectors` are `CardIndex`'s (one encoder path for both backends);
    what FAISS kept in a file lives in the database, so there is nothing to load, save or rebuild on open.

    Args:
        store: the `PgCardStore`.
        encoder / encoder_name / encoder_backend / scorer_dir: as `CardIndex`.

    Raises (on first use):
        StoreError: the database's vectors come from another encoder or dimension (`rebuild` re-embeds them all).
    """

    def __init__(self, store: PgCardStore, encoder: str | Any = DEFAULT_ENCODER, *, encoder_name: str | None = None,
                 encoder_backend: str = "auto", scorer_dir: Any = None):
        super().__init__(store, encoder, None, None, encoder_name=encoder_name, encoder_backend=encoder_backend,
                         scorer_dir=scorer_dir)
        self.store: PgCardStore = store
        self._ready = False
        # the path the last `search` took: "exact", "hnsw" (iterative where pgvector >= 0.8), or "hnsw+exact" (the
        # filtered HNSW scan came back short and was redone exactly); for benchmarks and debugging
        self.last_search_path: str | None = None

    # ------------------------------------------------------------------ layout

    def _ensure_vectors(self, replace: bool = False) -> None:
        """Add the `embedding vector(dim)` column and its HNSW index if missing, or check they match this encoder
        (`replace`: switch the database to this encoder, emptying every stored vector)."""
        if self._ready and not replace:
            return
        dim = self._ensure_dim()
        cfg = self.store.config
        with self.store.transaction(vectors=False) as c:
            c.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_KEY,))
            meta = dict(c.execute("SELECT key, value FROM damc_meta WHERE key IN ('dim', 'model')").fetchall())
            if meta and not replace:
                if int(meta["dim"]) != dim or meta["model"] != self.model_name:
                    raise StoreError(
                        f"{self.store.where} holds vectors of encoder {meta['model']!r} ({meta['dim']} dims); this "
                        f"memory's encoder is {self.model_name!r} ({dim} dims). Open it with the same encoder, or "
                        "switch every worker at once and call `memory.index.rebuild()` to re-embed all cards")
            else:
                if meta:   # replace: drop the old column (and its index) so the dimension may change
                    c.execute("DROP INDEX IF EXISTS damc_cards_hnsw")
                    c.execute("ALTER TABLE damc_cards DROP COLUMN IF EXISTS embedding")
                    c.execute("UPDATE damc_cards SET emb_seq = NULL, emb_model = NULL, emb_digest = NULL")
                c.execute(f"ALTER TABLE damc_cards ADD COLUMN IF NOT EXISTS embedding vector({int(dim)})")
                c.execute(f"CREATE INDEX IF NOT EXISTS damc_cards_hnsw ON damc_cards USING hnsw (embedding "
                          f"vector_ip_ops) WITH (m = {int(cfg.hnsw_m)}, ef_construction = "
                          f"{int(cfg.hnsw_ef_construction)}) WHERE tier = 'hot'")
                for k, v in (("dim", str(dim)), ("model", self.model_name)):
                    c.execute("INSERT INTO damc_meta VALUES (%s, %s) ON CONFLICT (key) DO UPDATE SET value = "
                              "excluded.value", (k, v))
        self.store.dim = dim
        self._ready = True

    # ------------------------------------------------------------------ lifecycle

    def load(self) -> bool:
        """Nothing to load: the vectors live in the database."""
        self.last_rebuild_reason = None
        return True

    def save(self, force: bool = False) -> bool:
        """Nothing to save: every vector is written by `sync` in its own transaction."""
        return False

    @property
    def memo(self) -> Any:
        """No text memo on the server backend: another worker's erasure would not reach this process's memo in
        time (`IndexConfig.encode_memo` is the embedded store's)."""
        return self.encoder

    def forget(self, rowids: Sequence[int]) -> None:
        """After an erasure: the vectors went with their rows (`PgCardStore.delete_cards` / `delete_scope` /
        `wipe`), so only the last query (it may quote erased text) is dropped from memory."""
        with self._lock:
            self._last_query = None
            self.erased = self.store.erasures()

    def rebuild(self, reason: str = "requested") -> None:
        """Switch the database to this index's encoder and re-embed every hot card (all workers at once)."""
        logger.info("re-embedding every card of %s (%s)", self.store.where, reason)
        self.last_rebuild_reason = reason
        self._ensure_vectors(replace=True)
        self.sync()

    def sync(self) -> int:
        """Embed hot cards whose vector is missing or older than the card; returns how many were brought up to
        date (a card whose text was embedded before gets that vector: `_refresh`).

        Rows are claimed `FOR UPDATE SKIP LOCKED`, `embed_batch` per transaction, so workers syncing at once
        share the work instead of repeating it.
        """
        self._ensure_vectors()
        n = 0
        while True:
            with self.store.transaction() as c:
                rows = c.execute("SELECT rowid, seq, data, user_id, agent_id FROM damc_cards WHERE tier = 'hot' AND "
                                 "emb_seq IS DISTINCT FROM seq ORDER BY rowid LIMIT %s FOR UPDATE SKIP LOCKED",
                                 (self.store.config.embed_batch,)).fetchall()
                if not rows:
                    return n
                self._refresh(c, rows)
            n += len(rows)

    def _refresh(self, c: Any, rows: Sequence[tuple[int, int, str, str, str]]) -> dict[int, np.ndarray]:
        """Store the vectors of `(rowid, seq, data, user_id, agent_id)` rows inside `c`'s transaction and return
        them by rowid: a text some card of the same scope already holds a vector for (`emb_digest`, which keys the
        scope too) takes that vector; each other text is embedded once."""
        from damc.query import card_document

        docs = {r: card_document(Card.from_dict(json.loads(d))) for r, _, d, _, _ in rows}
        digests = {r: text_digest(docs[r], u, a) for r, _, _, u, a in rows}
        known = {d: _as_array(v) for d, v in c.execute(
            "SELECT DISTINCT ON (emb_digest) emb_digest, embedding FROM damc_cards WHERE emb_digest = ANY(%s) AND "
            "emb_model = %s AND embedding IS NOT NULL", (sorted(set(digests.values())), self.model_name)).fetchall()}
        todo = {digests[r]: docs[r] for r, *_ in rows if digests[r] not in known}   # each new text once
        if todo:
            known.update(zip(todo, self.encode(list(todo.values()))))
        with c.cursor() as cur:
            cur.executemany("UPDATE damc_cards SET embedding = %s, emb_seq = seq, emb_model = %s, emb_digest = %s "
                            "WHERE rowid = %s AND seq = %s",
                            [(known[digests[r]], self.model_name, digests[r], r, s) for r, s, *_ in rows])
        return {r: known[digests[r]] for r, *_ in rows}

    def _vectors_for(self, rows: Sequence[tuple[int, int]]) -> np.ndarray:
        """Embeddings for `(rowid, seq)` rows: stored where current, taken from a card with the same text or
        encoded (and stored) otherwise."""
        if not rows:
            return np.zeros((0, self.dim or 0), dtype=np.float32)
        self._ensure_vectors()
        want = dict(rows)
        got: dict[int, np.ndarray] = {}
        stale: list[tuple[int, int, str, str, str]] = []
        for r, s, es, vec, data, u, a in self.store._query(
                "SELECT rowid, seq, emb_seq, embedding, data, user_id, agent_id FROM damc_cards WHERE rowid = ANY(%s)",
                (list(want),)):
            if vec is not None and es == s == want[r]:
                got[r] = _as_array(vec)
            else:
                stale.append((r, s, data, u, a))
        if stale:
            with self.store.transaction() as c:
                got.update(self._refresh(c, stale))
        return np.stack([got[r] for r, _ in rows if r in got]).astype(np.float32)

    @property
    def ntotal(self) -> int:
        """Hot cards with a vector."""
        if not self._ready:
            self._ensure_vectors()
        return int(self.store._query("SELECT count(*) FROM damc_cards WHERE tier = 'hot' AND embedding IS NOT NULL")
                   [0][0])

    # ------------------------------------------------------------------ search

    def holds_any(self, scope: Scope | None = DEFAULT_SCOPE, session_id: str | None = None) -> bool:
        """Whether `search` could find a hot card of `scope` (and of its session `session_id` when given)."""
        where, args = filters_sql(scope, "tier = 'hot'", session_id=session_id)
        with self.store.transaction(read_only=True) as c:
            return c.execute(f"SELECT 1 FROM damc_cards WHERE {where} LIMIT 1", args).fetchone() is not None

    def search(self, query_vec: np.ndarray, k: int, scope: Scope | None = DEFAULT_SCOPE,
               session_id: str | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top-k rowids and cosine similarities among the hot cards of `scope` (and of its session `session_id`
        when given), filtered in the same statement as the vector order; exact for small scopes, HNSW for big ones
        (exact again if the filtered HNSW scan comes back short; see module docstring).
        `scope=None` searches every card: maintenance only."""
        empty = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32))
        if k <= 0:
            return empty
        self._ensure_vectors()
        cfg = self.store.config
        q = np.ascontiguousarray(query_vec, dtype=np.float32).reshape(-1)
        where, args = filters_sql(scope, "tier = 'hot'", "embedding IS NOT NULL", session_id=session_id)
        # `+ 0` hides the distance from the HNSW index, so the planner reads the scope's rows through its b-tree
        exact = (f"SELECT rowid, -(embedding <#> %s) FROM damc_cards WHERE {where} "
                 f"ORDER BY (embedding <#> %s) + 0 LIMIT %s")
        # the scope's size, as far as the path choice needs it: a scope the planner's row estimate (statistics, no
        # scan) puts far above the exact path's bound is not counted; any other is counted on the scope b-tree up to
        # that bound, so a search never counts a million-card scope row by row
        count_where, _ = filters_sql(scope, "tier = 'hot'", session_id=session_id)   # same args: no fixed ones
        iterative = self.iterative_scans
        with self.store.transaction(read_only=True) as c:
            total = int(c.execute("SELECT reltuples::bigint FROM pg_class WHERE oid = 'damc_cards'::regclass"
                                  ).fetchone()[0] or 0)
            # exact below max(exact_max, √(exact_factor · k · N)): cheaper than a filtered HNSW scan there; without
            # iterative scans also below the share at which 1000 HNSW candidates cannot hold k of the scope's cards
            bound = max(cfg.exact_max, math.isqrt(int(cfg.exact_factor * k * max(total, 1))))
            if not iterative:
                bound = max(bound, math.ceil(k * max(total, 1) / MAX_EF_SEARCH))
            estimate = 0
            if total > 4 * bound:
                plan = c.execute(f"EXPLAIN (FORMAT JSON) SELECT 1 FROM damc_cards WHERE {count_where}",
                                 args).fetchone()[0]
                estimate = int(plan[0]["Plan"]["Plan Rows"])
            if estimate > 4 * bound:
                n = estimate
            else:
                n = int(c.execute(f"SELECT count(*) FROM (SELECT 1 FROM damc_cards WHERE {count_where} LIMIT %s) s",
                                  args + (bound + 1,)).fetchone()[0])
                if n == 0:
                    return empty
                n = max(n, estimate) if n > bound else n
            total = max(n, total)
            # a filtered HNSW scan sees about ef · n / total of the scope's cards: ef is raised for a small share
            ef = min(MAX_EF_SEARCH, max(cfg.ef_search, k, math.ceil(2 * k * total / n)))
            if n <= bound:
                rows = c.execute(exact, (q,) + args + (q, k)).fetchall()
                self.last_search_path = "exact"
            else:
                with c.transaction():   # SET LOCAL needs a transaction
                    c.execute("SELECT set_config('hnsw.ef_search', %s, true)" + (
                        ", set_config('hnsw.iterative_scan', 'strict_order', true)" if iterative else ""), (str(ef),))
                    rows = c.execute(f"SELECT rowid, -(embedding <#> %s) FROM damc_cards WHERE {where} "
                                     f"ORDER BY embedding <#> %s LIMIT %s", (q,) + args + (q, k)).fetchall()
                self.last_search_path = "hnsw"
                if len(rows) < k:   # the filter starved the HNSW candidate list: never return a short list
                    rows = c.execute(exact, (q,) + args + (q, k)).fetchall()
                    self.last_search_path = "hnsw+exact"
        return (np.array([r[0] for r in rows], dtype=np.int64), np.array([r[1] for r in rows], dtype=np.float32))

    @property
    def iterative_scans(self) -> bool:
        """Whether the server's pgvector (>= 0.8) offers iterative index scans (`hnsw.iterative_scan`)."""
        return _version(self.store.pgvector_version) >= (0, 8)

    def explain_search(self, query_vec: np.ndarray, k: int, scope: Scope) -> str:
        """The server's plan for the exact and the HNSW form of a scoped search (for docs and debugging)."""
        q = np.ascontiguousarray(query_vec, dtype=np.float32).reshape(-1)
        w, args = scope_sql(scope)
        out = []
        with self.store.transaction() as c:
            for order in ("(embedding <#> %s) + 0", "embedding <#> %s"):
                plan = c.execute(f"EXPLAIN SELECT rowid FROM damc_cards WHERE tier = 'hot' AND embedding IS NOT NULL "
                                 f"AND {w} ORDER BY {order} LIMIT %s", args + (q, k)).fetchall()
                out.append("\n".join(r[0] for r in plan))
        return "\n\n".join(out)


def _version(text: str) -> tuple[int, ...]:
    """`"0.6.2"` -> `(0, 6, 2)` (non-numeric parts count as 0)."""
    return tuple(int(p) if p.isdigit() else 0 for p in str(text).split("."))
