"""Tools above the runtime, outside the library's layers: benchmarks, the load test and the explain CLI.

* `scorer` — the scorer benchmark (`scripts/bench_scorer.py`): the runtime's scorer against the teacher;
* `loadtest` — concurrent `DecisionAwareMemory` users on one store (`scripts/bench_memory.py`);
* `explain` — `scripts/explain.py`: a stored session's last context, or one decision of an episode file.

They may import any layer; no library module imports them (tests/unit/test_architecture.py).
"""
