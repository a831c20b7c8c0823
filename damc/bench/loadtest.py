"""Concurrent load on one store directory: N threads or N processes, each driving its own session.

Each worker opens a `DecisionAwareMemory` on the shared directory (threads share one memory object, processes
open their own), then runs `turns` turns of a synthetic support conversation: record the turn's messages and
build the context for the next user message (`build_context` ingests, retrieves, values, selects, compresses and
assembles). Workers alternate between two users, so two scopes are written at once. Afterwards every session is
read back from SQLite and compared with what its worker wrote: the card count and a SHA-256 over the cards
(`Card.to_dict`, sorted by id) must match exactly.

`scripts/bench_memory.py --concurrent N` runs it for threads and for processes and prints the report.

Example:
    >>> report = run_concurrent("runs/load", n=4, mode="threads", turns=6)
    >>> report["read_back_exact"], report["contexts_per_s"]
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing as mp
import random
import threading
import time
from typing import Any

import numpy as np

from damc.cards import Card, encode_messages
from damc.models import DEFAULT_ENCODER

TOOLS = [{"type": "function", "function": {"name": n, "parameters": {"type": "object", "properties": {}}}}
         for n in ("get_order", "refund", "track_parcel")]


def turn(worker: int, t: int, rng: random.Random) -> list[dict[str, Any]]:
    """One synthetic turn: a user question, a tool call with its JSON result, a reply."""
    oid, cid = str(rng.randint(10000, 99999)), f"w{worker}c{t}"
    res = {"order_id": oid, "state": rng.choice(["shipped", "lost", "late"]), "notes": "lorem " * rng.randint(2, 30)}
    if rng.random() < 0.15:
        res = {"status": "error", "code": rng.choice([404, 500]), "message": "upstream failure"}
    return [{"role": "user", "content": f"Where is order {oid}? (worker {worker}, turn {t})"},
            {"role": "assistant", "content": None, "tool_calls": [{"id": cid, "type": "function", "function": {
                "name": rng.choice(["get_order", "track_parcel"]), "arguments": json.dumps({"order_id": oid})}}]},
            {"role": "tool", "tool_call_id": cid, "content": json.dumps(res)},
            {"role": "assistant", "content": f"Order {oid} is {res.get('state', 'unavailable')}."}]


def cards_digest(cards: list[Card]) -> str:
    """SHA-256 over the cards' exact dicts, in card-id order."""
    h = hashlib.sha256()
    for c in sorted(cards, key=lambda c: c.card_id):
        h.update(json.dumps(c.to_dict(), sort_keys=True, ensure_ascii=False).encode("utf-8"))
    return h.hexdigest()


def _open(path: str, encoder: str) -> Any:
    from damc.runtime.memory import DecisionAwareMemory, MemoryConfig

    return DecisionAwareMemory(path, valuer="heuristic", encoder=encoder, tokenizer=None,
                               config=MemoryConfig(stamp_time=False))


def drive(memory: Any, worker: int, turns: int) -> dict[str, Any]:
    """Run one worker's session; returns its latencies, timing window and the digest of what it wrote."""
    rng = random.Random(worker)
    user, session = f"user{worker % 2}", f"session{worker}"
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are a support agent."}]
    lat: list[float] = []
    t0 = time.time()
    for t in range(turns):
        msgs += turn(worker, t, rng)
        start = time.perf_counter()
        memory.build_context(msgs + [{"role": "user", "content": f"And order {t}? (worker {worker})"}], tools=TOOLS,
                             session_id=session, user_id=user)
        lat.append((time.perf_counter() - start) * 1000)
    expected = encode_messages(msgs, session)
    return {"worker": worker, "user": user, "session": session, "latencies_ms": lat, "t0": t0, "t1": time.time(),
            "n_cards": len(expected), "digest": cards_digest(expected)}


def _process_main(path: str, encoder: str, worker: int, turns: int, queue: Any) -> None:
    memory = _open(path, encoder)
    memory.index.sync()  # load the encoder before the clock starts
    queue.put(drive(memory, worker, turns))
    memory.close()


def _collect(queue: Any, procs: list[Any], timeout_s: float) -> list[dict[str, Any]]:
    """One result per worker process; fails at once (not after `timeout_s`) when a worker died without one."""
    import queue as queue_mod

    results: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout_s
    while len(results) < len(procs):
        try:
            results.append(queue.get(timeout=1.0))
            continue
        except queue_mod.Empty:
            pass
        dead = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
        if dead:
            raise RuntimeError(f"a load-test worker process failed (exit codes "
                               f"{[p.exitcode for p in procs]}); its traceback is on stderr above")
        if time.monotonic() >= deadline:
            raise TimeoutError(f"load-test workers returned {len(results)} of {len(procs)} results in {timeout_s} s")
    return results


def run_concurrent(path: str, n: int, mode: str = "threads", turns: int = 6,
                   encoder: str = DEFAULT_ENCODER) -> dict[str, Any]:
    """N workers against one store directory or PostgreSQL URL (`mode`: "threads" or "processes"); see module
    docstring."""
    if mode == "threads":
        memory = _open(path, encoder)
        memory.index.sync()
        results: list[dict[str, Any]] = []
        lock = threading.Lock()

        def work(w: int) -> None:
            r = drive(memory, w, turns)
            with lock:
                results.append(r)

        threads = [threading.Thread(target=work, args=(w,)) for w in range(n)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        memory.close()
    elif mode == "processes":
        ctx = mp.get_context("spawn")
        queue = ctx.Queue()
        procs = [ctx.Process(target=_process_main, args=(path, encoder, w, turns, queue)) for w in range(n)]
        for p in procs:
            p.start()
        results = _collect(queue, procs, timeout_s=1800)
        for p in procs:
            p.join(60)
        if any(p.exitcode != 0 for p in procs):
            raise RuntimeError(f"worker exit codes {[p.exitcode for p in procs]}")
    else:
        raise ValueError(f"mode must be 'threads' or 'processes', got {mode!r}")
    return _report(path, n, mode, turns, results)


def _report(path: str, n: int, mode: str, turns: int, results: list[dict[str, Any]]) -> dict[str, Any]:
    from damc.runtime.scope import Scope
    from damc.runtime.storage import open_store

    lat = np.array([x for r in results for x in r["latencies_ms"]], dtype=np.float64)
    wall = max(r["t1"] for r in results) - min(r["t0"] for r in results)
    mismatches = []
    with open_store(path) as store:   # the memory directory or the postgresql:// URL the workers used
        for r in results:
            got = [sc.card for sc in store.session_cards(r["session"], scope=Scope(r["user"]))]
            if len(got) != r["n_cards"] or cards_digest(got) != r["digest"]:
                mismatches.append({"session": r["session"], "written": r["n_cards"], "read": len(got)})
        total = store.count()
    return {"mode": mode, "workers": n, "turns_per_worker": turns, "contexts": int(len(lat)),
            "wall_s": round(wall, 2), "contexts_per_s": round(len(lat) / wall, 2),
            "cards_written": sum(r["n_cards"] for r in results), "cards_in_store": total,
            "cards_per_s": round(sum(r["n_cards"] for r in results) / wall, 1),
            "build_context_ms": {"p50": round(float(np.percentile(lat, 50)), 1),
                                 "p95": round(float(np.percentile(lat, 95)), 1)},
            "read_back_exact": not mismatches, "mismatches": mismatches}
