"""A fleet of worker processes on one PostgreSQL database, and a server restart in the middle of a run.

Each worker is its own process with its own connection pool and its own scope (user `u{w}`, sessions shared
within it, so a scope filter is all that keeps other workers' cards out); it records a conversation turn by
turn and builds the context of each next decision. Afterwards every worker's cards are read back from the
server and compared with what it wrote (count + SHA-256 over the exact cards), and no context or direct vector
search ever returned another scope's card. N = 1, 4, 16 and 64 workers, 3 turns each, loopback (a Unix socket),
each run bounded at 120 s. The workers fork from the test process (64 spawned interpreters would spend
minutes importing on a 2-core box) and use a hashing 384-dimension encoder (no model to load per worker); the
real encoder's end-to-end path is in tests/integration/test_store_backends.py.
"""

from __future__ import annotations

import multiprocessing as mp
import random
import threading
import time

import pytest
from test_store_backends import HashEncoder

from damc.bench.loadtest import TOOLS, _collect, cards_digest, turn
from damc.cards import encode_messages
from damc.runtime.scope import Scope


def _worker(url: str, w: int, turns: int, queue, progress, retry_s: float, pause_s: float) -> None:
    from damc.runtime.memory import DecisionAwareMemory, MemoryConfig
    from damc.runtime.pgstore import PgConfig, StoreConnectionError

    mem = DecisionAwareMemory(url, tokenizer=None, encoder=HashEncoder(), user_id=f"u{w}", share_sessions=True,
                              store_config=PgConfig(min_size=1, max_size=1, connect_timeout_s=30),  # 64 forks connecting at once
                              config=MemoryConfig(stamp_time=False))
    rng = random.Random(w)
    msgs = [{"role": "system", "content": "You are a support agent."}]
    errors, foreign, lat = [], [], []
    for t in range(turns):
        msgs += turn(w, t, rng)
        deadline = time.monotonic() + retry_s
        while True:
            start = time.perf_counter()
            try:
                ctx = mem.build_context(msgs + [{"role": "user", "content": f"And order {t}? (worker {w})"}],
                                        tools=TOOLS, session_id=f"w{w}")
                ids, _ = mem.index.search_text("Where is order (worker, turn) shipped lost late", 50, mem.scope)
                scopes = {sc.scope for sc in mem.store.by_rowids(ids, None)}
                break
            except StoreConnectionError as e:      # the server went away: say so, then try the same call again
                errors.append(str(e)[:300])
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        lat.append((time.perf_counter() - start) * 1000)
        foreign += [c for c in ctx.candidate_ids if not c.startswith(f"w{w}:")]
        foreign += [str(s) for s in scopes if s != mem.scope]
        with progress.get_lock():
            progress.value += 1
        time.sleep(pause_s)
    expected = encode_messages(msgs, f"w{w}")
    queue.put({"worker": w, "n_cards": len(expected), "digest": cards_digest(expected), "errors": errors,
               "foreign": foreign, "latencies_ms": lat})
    mem.close()


def run_fleet(url: str, n: int, turns: int, *, pause_s: float = 0.0, during=None, timeout_s: float = 120.0) -> dict:
    """Run `n` forked workers on `url`, optionally calling `during(progress)` while they run; read everything back."""
    from damc.runtime.pgstore import PgCardStore

    PgCardStore(url).close()           # the schema exists before the workers race for it
    ctx = mp.get_context("fork")
    queue, progress = ctx.Queue(), ctx.Value("i", 0)
    t0 = time.time()
    procs = [ctx.Process(target=_worker, args=(url, w, turns, queue, progress, 60.0, pause_s)) for w in range(n)]
    for p in procs:
        p.start()
    if during is not None:
        during(progress)
    results = _collect(queue, procs, timeout_s=timeout_s)
    for p in procs:
        p.join(30)
    wall = time.time() - t0
    mismatches = []
    with PgCardStore(url) as store:
        for r in results:
            got = [sc.card for sc in store.session_cards(f"w{r['worker']}", scope=Scope(f"u{r['worker']}"))]
            if len(got) != r["n_cards"] or cards_digest(got) != r["digest"]:
                mismatches.append((r["worker"], r["n_cards"], len(got)))
        total = store.count()
    return {"workers": n, "wall_s": round(wall, 1), "exit_codes": [p.exitcode for p in procs], "results": results,
            "mismatches": mismatches, "cards_in_store": total, "cards_written": sum(r["n_cards"] for r in results)}


@pytest.mark.parametrize("n", [1, 4, 16, 64])
def test_fleet_reads_back_exactly_and_never_crosses_scopes(pg_url, n):
    report = run_fleet(pg_url, n, turns=3)
    assert report["exit_codes"] == [0] * n
    assert report["mismatches"] == [] and report["cards_in_store"] == report["cards_written"] == n * 3 * 3
    assert [f for r in report["results"] for f in r["foreign"]] == []
    assert report["wall_s"] < 120, report["wall_s"]


def test_server_restart_mid_run_is_survived(pg_url, pg_server):
    """The server restarts (fast shutdown: every connection cut) while 4 workers run; calls caught by it raise
    `StoreConnectionError`, the next ones reconnect, and every card is read back exactly."""
    if pg_server.handle is None:
        pytest.skip("DAMC_PG_URL names a server the tests did not start, so they cannot restart it")
    restarted = []

    def restart_when_busy(progress) -> None:
        deadline = time.monotonic() + 60
        while progress.value < 6 and time.monotonic() < deadline:
            time.sleep(0.05)
        pg_server.restart()
        restarted.append(progress.value)

    report = run_fleet(pg_url, 4, turns=12, pause_s=0.15, during=restart_when_busy)
    assert restarted and restarted[0] < 4 * 12, "the restart happened after the run, not during it"
    assert report["exit_codes"] == [0] * 4
    assert report["mismatches"] == [] and report["cards_in_store"] == report["cards_written"] == 4 * 12 * 3
    assert [f for r in report["results"] for f in r["foreign"]] == []
    errors = [e for r in report["results"] for e in r["errors"]]
    assert all("PostgreSQL" in e and ("failed during this call" in e or "no PostgreSQL connection" in e)
               for e in errors), errors[:3]


def test_interrupted_call_raises_clear_error_and_next_call_works(pg_url, pg_server):
    """A statement in flight when the server restarts raises `StoreConnectionError` (not a hang, not a raw
    driver error); the same store's next call reconnects on its own."""
    from damc.runtime.pgstore import PgCardStore, StoreConnectionError

    if pg_server.handle is None:
        pytest.skip("DAMC_PG_URL names a server the tests did not start, so they cannot restart it")
    store = PgCardStore(pg_url)
    store.add_cards(encode_messages([{"role": "user", "content": "hello"}], "s"), "s")
    caught = []

    def long_call() -> None:
        try:
            store._query("SELECT pg_sleep(20)")
        except Exception as e:  # noqa: BLE001 - inspected below
            caught.append(e)

    th = threading.Thread(target=long_call)
    th.start()
    time.sleep(0.5)
    pg_server.restart()
    th.join(30)
    assert len(caught) == 1 and isinstance(caught[0], StoreConnectionError), caught
    assert "failed during this call" in str(caught[0]) and "next call reconnects" in str(caught[0])
    assert store.count() == 1 and store.get("s:0").raw_text == "hello"      # the next call works
    store.close()
