"""The concurrent load run reads back exactly what its workers wrote (threads; processes are slow)."""

from __future__ import annotations

import pytest

from damc.bench.loadtest import run_concurrent


def test_threads_read_back_exactly(tmp_path):
    r = run_concurrent(str(tmp_path), n=3, mode="threads", turns=2)
    assert r["read_back_exact"] and r["contexts"] == 6
    assert r["cards_written"] == r["cards_in_store"] == 3 * 2 * 3


@pytest.mark.slow
def test_processes_read_back_exactly(tmp_path):
    r = run_concurrent(str(tmp_path), n=2, mode="processes", turns=2)
    assert r["read_back_exact"] and r["cards_in_store"] == 12
    with pytest.raises(ValueError, match="mode"):
        run_concurrent(str(tmp_path), n=1, mode="fibers")
