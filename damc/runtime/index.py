"""FAISS index of card embeddings, persisted beside the SQLite store and rebuilt from it when needed.

The index holds one vector per *hot* card (FAISS id = the card's store rowid), embedded from
`damc.query.card_document(card)` with any sentence encoder (default `minilm-l6`: sentence-transformers, or the
same model as int8 ONNX through `damc.runtime.encoder`; cosine similarity via normalised inner product). It is a cache of the store, never the source of truth:

* the file (`cards.faiss`) is one blob — magic, a JSON header with the store stamp (hot card count,
  max rowid, change counter `seq`, erasure count), the encoder name, dimension and a CRC32 — then the serialised FAISS
  index. It is written to a temp file and renamed, so a reader never sees half a file;
* on open, a missing file, a CRC/parse failure, another encoder, or a stamp the store cannot have
  produced (e.g. a newer `seq` than the store's) triggers a full rebuild from SQLite; a merely *stale*
  file (older `seq`) is caught up from the rows changed since; cards erased since (`CardStore.erasures()`: by
  this process or another) force a rebuild, so erased vectors are never searched or saved again;
* vectors are cached in the store's `embeddings` table with the digest of the text they embed
  (`text_digest`), so rebuilds re-encode only what changed, and a card whose text was embedded before (a
  repeated identical tool call, a card re-written unchanged) gets that vector, across processes too.

Index type: exact `flat` inner product (fast up to a few hundred thousand cards) or `ivf` (inverted
lists, trained on the cards; `auto` switches at `ivf_min_cards`). Both support removal, which
archiving needs.

Scopes: one index holds every scope; a search names its scope (and, unless sessions are shared, its session)
and FAISS only returns members of it — an `IDSelectorBitmap` over rowids built from an in-memory map
rowid → (scope, session) that is filled from SQLite on load and kept in step by `sync`. An IVF search widens
`nprobe` by `ntotal / members` (up to every list), so a small scope still gets its k nearest cards rather than
the few that happen to sit in the globally nearest lists. (`scripts/bench_memory.py --scoped` measures this
against one index per scope; docs/runtime.md has the figures.)

Example:
    >>> index = CardIndex(store, encoder="minilm-l6", path="runs/mem/cards.faiss")
    >>> index.sync()
    >>> rowids, sims = index.search_text("user: where is order 88412?", k=20, scope=Scope("alice"))
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import struct
import tempfile
import threading
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from damc.episodes import default_file_mode
from damc.models import DEFAULT_ENCODER
from damc.runtime.scope import DEFAULT_SCOPE, Scope
from damc.runtime.store import CardStore

logger = logging.getLogger(__name__)

MAGIC = b"DAMCIDX1"


def text_digest(text: str, user_id: str, agent_key: str = "") -> str:
    """The content key of a scope's embedded text in the stores' embedding caches (BLAKE2b-128, hex): a text a
    card of the same scope already holds a vector for is not embedded again. The scope is part of the key, so
    no scope can tell from its latency whether another scope ever stored a given text."""
    h = hashlib.blake2b(digest_size=16)
    for part in (user_id, agent_key, text):
        h.update(part.encode("utf-8", "surrogatepass") + b"\x00")
    return h.hexdigest()


@dataclass
class IndexConfig:
    """FAISS index settings.

    Attributes:
        index_type: "flat" (exact), "ivf" (inverted lists) or "auto" (ivf once there are `ivf_min_cards`).
        ivf_min_cards: card count from which "auto" builds an IVF index at (re)build time.
        nlist: IVF lists; 0 picks ~4·sqrt(n) (clipped to [64, 4096]).
        nprobe: IVF lists searched per query (recall vs. latency).
        encode_batch: cards per encoder batch.
        encode_memo: how many embedded texts (card documents, decision queries) the index remembers by their exact
            text, so one it meets again — the same query asked twice, a card's text before the store's
            content-keyed cache is consulted — is not embedded again (`damc.runtime.encoder.CachedEncoder`; 1,024 ≈
            1.5 MB; 0: off). In process memory only; emptied by every erasure (`forget`) and rebuild. The
            PostgreSQL backend keeps none (a worker cannot see another worker's erasure in time).
        save_interval_s: persist at most this often after incremental changes (0 = after every sync);
            the index is a cache of SQLite, so a lost save costs only re-adding the newest cards.
    """

    index_type: str = "auto"
    ivf_min_cards: int = 200_000
    nlist: int = 0
    nprobe: int = 16
    encode_batch: int = 128
    encode_memo: int = 1024
    save_interval_s: float = 30.0


class IndexCorruptError(RuntimeError):
    """The index file exists but cannot be trusted (bad magic, CRC, header or FAISS payload)."""


def new_faiss_index(dim: int, n_expected: int, config: IndexConfig | None = None) -> Any:
    """An empty FAISS index with ids, inner-product metric, of the configured type (IVF is untrained)."""
    import faiss

    config = config or IndexConfig()
    kind = config.index_type
    if kind == "auto":
        kind = "ivf" if n_expected >= config.ivf_min_cards else "flat"
    if kind == "flat":
        return faiss.IndexIDMap2(faiss.IndexFlatIP(dim))
    if kind == "ivf":
        nlist = config.nlist or int(min(4096, max(64, 4 * np.sqrt(max(n_expected, 1)))))
        quantizer = faiss.IndexFlatIP(dim)
        index = faiss.IndexIVFFlat(quantizer, dim, nlist, faiss.METRIC_INNER_PRODUCT)
        index.nprobe = config.nprobe
        return index
    raise ValueError(f"unknown index_type {config.index_type!r}; expected flat|ivf|auto")


def train_if_needed(index: Any, vectors: np.ndarray, seed: int = 0) -> None:
    """Train an IVF index on (a sample of) the vectors; no-op for flat indexes."""
    if getattr(index, "is_trained", True):
        return
    nlist = index.nlist
    n_train = min(len(vectors), max(nlist * 64, 10_000))
    rng = np.random.default_rng(seed)
    sample = vectors[rng.choice(len(vectors), n_train, replace=False)] if n_train < len(vectors) else vectors
    if len(sample) < nlist:  # too few points for this many lists: repeat with noise-free copies
        sample = np.concatenate([sample] * (nlist // max(len(sample), 1) + 1))
    index.train(np.ascontiguousarray(sample, dtype=np.float32))


def write_index_file(path: str | os.PathLike, index: Any, header: dict[str, Any]) -> None:
    """Write magic + header (with CRC32) + serialised index to a temp file, then rename over `path`."""
    import faiss

    payload = faiss.serialize_index(index).tobytes()
    head = json.dumps({**header, "crc32": zlib.crc32(payload), "payload_len": len(payload)}).encode()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(MAGIC + struct.pack("<Q", len(head)) + head + payload)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, default_file_mode())  # mkstemp creates 0600: the same mode as the cards.db beside it
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_index_file(path: str | os.PathLike) -> tuple[Any, dict[str, Any]]:
    """Read a file written by `write_index_file`.

    Raises:
        FileNotFoundError: no file.
        IndexCorruptError: anything else wrong with it.
    """
    import faiss

    blob = Path(path).read_bytes()
    if len(blob) < len(MAGIC) + 8 or not blob.startswith(MAGIC):
        raise IndexCorruptError(f"{path}: not a DAMC index file (bad magic)")
    (n,) = struct.unpack("<Q", blob[len(MAGIC):len(MAGIC) + 8])
    start = len(MAGIC) + 8
    try:
        header = json.loads(blob[start:start + n])
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise IndexCorruptError(f"{path}: unreadable header ({e})") from None
    payload = blob[start + n:]
    if len(payload) != header.get("payload_len") or zlib.crc32(payload) != header.get("crc32"):
        raise IndexCorruptError(f"{path}: payload length/CRC mismatch (truncated or overwritten)")
    try:
        index = faiss.deserialize_index(np.frombuffer(payload, dtype=np.uint8))
    except Exception as e:  # noqa: BLE001 - faiss raises RuntimeError with C++ messages
        raise IndexCorruptError(f"{path}: FAISS could not read the payload ({e})") from None
    return index, header


def load_card_encoder(spec: str | Any, backend: str = "auto") -> Any:
    """The sentence encoder behind a spec: an object with `.encode(texts, ...)` as is, else a registry name / path
    loaded by `damc.runtime.encoder` (`backend`: auto | onnx | torch)."""
    if not isinstance(spec, str):
        return spec
    from damc.runtime.encoder import choose_encoder, load_encoder

    return load_encoder(choose_encoder(spec, backend))


class ScopeMembers:
    """Which scope and session each indexed rowid belongs to, as two code arrays indexed by rowid (-1: absent).

    `selector(scope, session)` is an `IDSelectorBitmap` over the members, built with one vectorised
    comparison (a few ms at 1M rows).
    """

    def __init__(self) -> None:
        self.scope_codes: dict[tuple[str, str], int] = {}
        self.session_codes: dict[tuple[str, str, str], int] = {}
        self.scope_of = np.full(0, -1, dtype=np.int32)     # (max_rowid + 1,)
        self.session_of = np.full(0, -1, dtype=np.int32)   # (max_rowid + 1,)

    def _grow(self, rowid: int) -> None:
        if rowid < len(self.scope_of):
            return
        n = max(rowid + 1, 2 * len(self.scope_of), 1024)
        for name in ("scope_of", "session_of"):
            old = getattr(self, name)
            new = np.full(n, -1, dtype=np.int32)
            new[:len(old)] = old
            setattr(self, name, new)

    def add(self, rowid: int, user_id: str, agent_id: str, session_id: str) -> None:
        self._grow(rowid)
        self.scope_of[rowid] = self.scope_codes.setdefault((user_id, agent_id), len(self.scope_codes))
        self.session_of[rowid] = self.session_codes.setdefault((user_id, agent_id, session_id),
                                                               len(self.session_codes))

    def remove(self, rowid: int) -> None:
        if rowid < len(self.scope_of):
            self.scope_of[rowid] = self.session_of[rowid] = -1

    def mask(self, scope: Scope, session_id: str | None = None) -> np.ndarray:
        """Boolean membership over rowids (all False for a scope or session never seen)."""
        if session_id is None:
            code = self.scope_codes.get((scope.user_id, scope.agent_key))
            return self.scope_of == code if code is not None else np.zeros(len(self.scope_of), dtype=bool)
        code = self.session_codes.get((scope.user_id, scope.agent_key, session_id))
        return self.session_of == code if code is not None else np.zeros(len(self.session_of), dtype=bool)


class CardIndex:
    """Card embeddings in FAISS, kept in step with a `CardStore`.

    Args:
        store: the card store (source of truth).
        encoder: registry name / path of a sentence encoder, or an object with `.encode(texts, ...)`.
        path: where to persist the index (None: memory only).
        config: index settings.
        encoder_name: the name written into the stamp when `encoder` is an object (default: its `name`).
        encoder_backend: how a named encoder runs: "auto" | "onnx" | "torch" (`damc.runtime.encoder.choose_encoder`).
        scorer_dir: an exported scorer whose `encoder/` (ONNX) serves a named encoder it was exported from.
    """

    def __init__(self, store: CardStore, encoder: str | Any = DEFAULT_ENCODER, path: str | os.PathLike | None = None,
                 config: IndexConfig | None = None, encoder_name: str | None = None, encoder_backend: str = "auto",
                 scorer_dir: str | os.PathLike | None = None):
        from damc.runtime.encoder import choose_encoder

        self.store = store
        self.path = Path(path) if path else None
        self.config = config or IndexConfig()
        self._encoder = encoder if not isinstance(encoder, str) else None
        self._memo: Any = None   # the encoder behind the text memo (`memo`)
        self._choice = choose_encoder(encoder, encoder_backend, scorer_dir) if isinstance(encoder, str) else None
        self.model_name = encoder_name or (self._choice.name if self._choice is not None
                                           else getattr(encoder, "name", None) or type(encoder).__name__)
        self._index: Any = None
        self.seq = -1
        self.dim: int | None = None
        self.last_rebuild_reason: str | None = None  # why the last full rebuild happened (None: loaded/caught up)
        self._last_save = 0.0
        self._dirty = False
        self._last_query: tuple[str, np.ndarray] | None = None  # the last encoded query (valuers reuse it)
        self.members = ScopeMembers()
        self.erased = -1  # the store's erasure count this index has applied (-1: none loaded yet)
        self._lock = threading.RLock()  # sync/search from several threads of one process

    # ------------------------------------------------------------------ encoding

    @property
    def encoder(self) -> Any:
        if self._encoder is None:
            from damc.runtime.encoder import load_encoder

            self._encoder = load_encoder(self._choice)
        return self._encoder

    @property
    def memo(self) -> Any:
        """The encoder behind this index's text memo (`IndexConfig.encode_memo`), or the bare encoder when off."""
        if self._memo is None:
            from damc.runtime.encoder import CachedEncoder

            n = self.config.encode_memo
            self._memo = CachedEncoder(self.encoder, max_items=n) if n > 0 else self.encoder
        return self._memo

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Unit-norm float32 embeddings, (n, dim)."""
        if not texts:
            return np.zeros((0, self.dim or 0), dtype=np.float32)
        vecs = self.memo.encode(list(texts), batch_size=self.config.encode_batch, convert_to_numpy=True,
                                normalize_embeddings=True, show_progress_bar=False)
        vecs = np.ascontiguousarray(vecs, dtype=np.float32)
        self.dim = vecs.shape[1]
        return vecs

    def _vectors_for(self, rows: Sequence[tuple[int, int]]) -> np.ndarray:
        """Embeddings for `(rowid, seq)` rows: cached in SQLite where current (the row's own at its `seq`, or any
        row's vector of the same text in the same scope, by digest), encoded (and cached) otherwise."""
        from damc.query import card_document

        if not rows:
            return np.zeros((0, self.dim or 0), dtype=np.float32)
        cached = self.store.get_embeddings(rows, self.model_name, self.dim) if self.dim else {}
        missing = [(r, s) for r, s in rows if r not in cached]
        if missing:
            stored = {sc.rowid: sc for sc in self.store.by_rowids([r for r, _ in missing], None)}
            missing = [(r, s) for r, s in missing if r in stored]
            docs = {r: card_document(stored[r].card) for r, _ in missing}
            digests = {r: text_digest(d, stored[r].scope.user_id, stored[r].scope.agent_key) for r, d in docs.items()}
            known = self.store.embeddings_by_digest(list(digests.values()), self.model_name, self.dim) \
                if self.dim else {}
            todo = {digests[r]: docs[r] for r, _ in missing if digests[r] not in known}   # each new text once
            vecs = self.encode(list(todo.values()))
            known.update(zip(todo, vecs))
            new = np.stack([known[digests[r]] for r, _ in missing])
            self.store.put_embeddings(missing, new, self.model_name, [digests[r] for r, _ in missing])
            cached.update({r: new[i] for i, (r, _) in enumerate(missing)})
        return np.stack([cached[r] for r, _ in rows if r in cached]).astype(np.float32)

    def vectors_for(self, rows: Sequence[tuple[int, int]]) -> np.ndarray:
        """Unit embeddings of `(rowid, seq)` rows, `(n, dim)` (the `VectorIndex` method lifecycle's merge calls)."""
        return self._vectors_for(rows)

    def _ensure_dim(self) -> int:
        if self.dim is None:
            self.dim = int(self.encode(["dimension probe"]).shape[1])
        return self.dim

    # ------------------------------------------------------------------ lifecycle

    def _header(self) -> dict[str, Any]:
        return {"stamp": {**self.store.stamp(), "seq": self.seq, "count": int(self._index.ntotal),
                          "erased": self.erased},
                "model": self.model_name, "dim": self.dim, "type": type(self._index).__name__,
                "written": time.time()}

    def rebuild(self, reason: str = "requested") -> None:
        """Rebuild the whole index from the store's hot cards."""
        with self._lock:
            self._memo = None   # (an erasure by another process rebuilds too: no erased document stays in the memo)
            # an in-memory index is built fresh every time (the harness: one per episode): not worth an INFO line
            (logger.debug if self.path is None else logger.info)("rebuilding card index (%s)", reason)
            self.last_rebuild_reason = reason
            self.erased = self.store.erasures()
            stamp = self.store.stamp()
            hot = self.store.hot_rows()
            rows = [(r[0], r[1]) for r in hot]
            dim = self._ensure_dim()
            index = new_faiss_index(dim, len(rows), self.config)
            vecs = self._vectors_for(rows) if rows else np.zeros((0, dim), dtype=np.float32)
            if len(vecs):
                train_if_needed(index, vecs)
                index.add_with_ids(vecs, np.array([r for r, _ in rows], dtype=np.int64))
            elif not getattr(index, "is_trained", True):
                index = new_faiss_index(dim, 0, IndexConfig(index_type="flat"))
            self._index, self.seq = index, stamp["seq"]
            self._fill_members(hot)
            self._dirty = True
            self.save(force=True)

    def _fill_members(self, hot: Sequence[tuple[int, int, str, str, str]] | None = None) -> None:
        self.members = ScopeMembers()
        for rowid, _, user_id, agent_id, session_id in (self.store.hot_rows() if hot is None else hot):
            self.members.add(rowid, user_id, agent_id, session_id)

    def load(self) -> bool:
        """Load the persisted index if it is usable; returns False (with `last_rebuild_reason`) otherwise."""
        if self.path is None:
            self.last_rebuild_reason = "no path (memory only)"
            return False
        try:
            index, header = read_index_file(self.path)
        except FileNotFoundError:
            self.last_rebuild_reason = "missing"
            return False
        except IndexCorruptError as e:
            logger.warning("%s", e)
            self.last_rebuild_reason = "corrupt"
            return False
        stamp = self.store.stamp()
        h = header.get("stamp") or {}
        if header.get("model") != self.model_name:
            self.last_rebuild_reason = f"encoder changed ({header.get('model')} -> {self.model_name})"
            return False
        if h.get("seq", 1 << 62) > stamp["seq"] or h.get("count") != index.ntotal:
            self.last_rebuild_reason = "stamp does not match this store"
            return False
        if h.get("erased", 0) != self.store.erasures():   # saved before cards were erased: may hold their vectors
            self.last_rebuild_reason = "cards were erased since it was saved"
            return False
        self.erased = self.store.erasures()
        self._index, self.seq, self.dim = index, int(h["seq"]), int(header["dim"])
        if hasattr(index, "nprobe"):
            index.nprobe = self.config.nprobe
        self._fill_members()  # the store's hot rows now; `sync` applies what changed since the file's seq
        self.last_rebuild_reason = None
        return True

    def sync(self) -> int:
        """Bring the index in step with the store (load, rebuild or catch up); returns rows applied."""
        with self._lock:
            if self._index is None and not self.load():
                self.rebuild(self.last_rebuild_reason or "missing")
                return int(self._index.ntotal)
            if self.store.erasures() != self.erased:   # another process (or memory) erased cards
                self.rebuild("cards were erased")
                return int(self._index.ntotal)
            changed = self.store.changed_since(self.seq)
            if not changed:
                return 0
            return self._catch_up(changed)

    def _catch_up(self, changed: Sequence[tuple[int, int, str, str, str, str]]) -> int:
        import faiss

        latest: dict[int, tuple] = {}
        for row in changed:
            latest[row[0]] = row
        ids = np.array(list(latest), dtype=np.int64)
        self._index.remove_ids(faiss.IDSelectorArray(len(ids), faiss.swig_ptr(ids)))
        hot = [(r, row[1]) for r, row in latest.items() if row[2] == "hot"]
        for r, row in latest.items():
            self.members.remove(r)
            if row[2] == "hot":
                self.members.add(r, row[3], row[4], row[5])
        if hot:
            vecs = self._vectors_for(hot)
            self._index.add_with_ids(vecs, np.array([r for r, _ in hot], dtype=np.int64))
        self.seq = max(row[1] for row in changed)
        if self._index.ntotal != self.store.count("hot"):
            # a row changed under us between the two queries, or the file was older than it claimed
            self.rebuild("count mismatch after catch-up")
            return len(changed)
        self._dirty = True
        self.save()
        return len(changed)

    def save(self, force: bool = False) -> bool:
        """Persist (temp file + rename) if there is a path, unsaved changes and the interval has passed."""
        if self.path is None or self._index is None or not self._dirty:
            return False
        if self.store.erasures() != self.erased:   # never write back vectors another process erased
            self.rebuild("cards were erased")
            return True
        if not force and time.time() - self._last_save < self.config.save_interval_s:
            return False
        write_index_file(self.path, self._index, self._header())
        self._last_save, self._dirty = time.time(), False
        return True

    @property
    def ntotal(self) -> int:
        return 0 if self._index is None else int(self._index.ntotal)

    # ------------------------------------------------------------------ search

    def search(self, query_vec: np.ndarray, k: int, scope: Scope | None = DEFAULT_SCOPE,
               session_id: str | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top-k rowids and cosine similarities for one unit-norm query vector, among the cards of `scope` (and
        of its session `session_id` when given). `scope=None` searches every card: index maintenance only."""
        with self._lock:
            if self._index is None:
                self.sync()
            if self._index.ntotal == 0 or k <= 0:
                return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
            q = np.ascontiguousarray(query_vec.reshape(1, -1), dtype=np.float32)
            if scope is None:
                sims, ids = self._index.search(q, k)
            else:
                mask = self.members.mask(scope, session_id)
                n = int(mask.sum())
                if n == 0:
                    return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
                sims, ids = self._filtered_search(q, min(k, n), mask, n)
        keep = ids[0] >= 0
        return ids[0][keep], sims[0][keep]

    def _filtered_search(self, q: np.ndarray, k: int, mask: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
        """FAISS search restricted to the rowids set in `mask` (an IDSelectorBitmap over rowids)."""
        import faiss

        bitmap = np.packbits(mask, bitorder="little")  # bit i of byte i>>3 = rowid i; must outlive the search
        sel = faiss.IDSelectorBitmap(len(bitmap), faiss.swig_ptr(bitmap))
        if hasattr(self._index, "nprobe"):
            # widen the probe by how much of the index the scope is, so a small scope still fills k
            nprobe = min(self._index.nlist, math.ceil(self._index.nprobe * self._index.ntotal / n))
            params = faiss.SearchParametersIVF(sel=sel, nprobe=max(nprobe, self._index.nprobe))
        else:
            params = faiss.SearchParameters(sel=sel)
        return self._index.search(q, k, params=params)

    def search_text(self, text: str, k: int, scope: Scope | None = DEFAULT_SCOPE,
                    session_id: str | None = None) -> tuple[np.ndarray, np.ndarray]:
        """`search` for a query text. A scope (or session) without a card returns nothing without embedding the
        text: a conversation's first turn, with nothing stored yet, costs no encoder pass."""
        if k <= 0 or not self.holds_any(scope, session_id):
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        return self.search(self.query_vector(text), k, scope, session_id)

    def holds_any(self, scope: Scope | None = DEFAULT_SCOPE, session_id: str | None = None) -> bool:
        """Whether `search` could find a card of `scope` (and of its session `session_id` when given)."""
        with self._lock:
            if self._index is None:
                self.sync()
            if self._index.ntotal == 0:
                return False
            return scope is None or bool(self.members.mask(scope, session_id).any())

    def query_vector(self, text: str) -> np.ndarray:
        """The unit embedding of a query, `(dim,)`; the last one is kept, so a valuer reusing the search's
        query costs nothing."""
        if self._last_query is None or self._last_query[0] != text:
            self._last_query = (text, self.encode([text])[0])
        return self._last_query[1]

    def card_vectors(self, card_ids: Sequence[str], scope: Scope = DEFAULT_SCOPE) -> np.ndarray:
        """Unit embeddings of a scope's stored cards, `(n, dim)` in the given order (cached in SQLite; encoded
        when stale).

        Raises:
            KeyError: a card id the scope does not hold.
        """
        rows = self.store.rows_for(card_ids, scope)
        missing = [c for c in card_ids if c not in rows]
        if missing:
            raise KeyError(f"cards not in scope {scope}: {', '.join(missing[:5])}")
        order = [rows[c] for c in card_ids]
        vecs = self._vectors_for(sorted(set(order)))
        at = {r: i for i, r in enumerate(sorted(set(order)))}
        return vecs[[at[r] for r in order]]

    def forget(self, rowids: Sequence[int]) -> None:
        """Drop erased cards' vectors and the last query (it may quote them), then save at once: neither memory nor
        `cards.faiss` holds them. Rebuilds when another erasure is not applied yet; `sync` adds restored cards."""
        import faiss

        with self._lock:
            self._last_query = None
            self._memo = None   # the text memo may hold erased documents: a fresh one
            if self._index is None or self.erased != self.store.erasures() - 1:
                self.rebuild("cards were erased")
                return
            ids = np.array(sorted(int(r) for r in rowids), dtype=np.int64)
            if len(ids):
                self._index.remove_ids(faiss.IDSelectorArray(len(ids), faiss.swig_ptr(ids)))
                for r in ids:
                    self.members.remove(int(r))
            self.erased = self.store.erasures()
            self._dirty = True
            self.save(force=True)
