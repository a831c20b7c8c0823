"""Fidelity metrics and distillation losses: known values on hand-made rankings."""

import math

import numpy as np
import pytest
import torch

from damc.ranking import bootstrap_ci, ndcg_at_k, recall_at, spearman
from damc.ranking import summarize_values as summarize
from damc.scorer.losses import listwise_kl, pointwise_mse
from damc.scorer.metrics import fidelity


def test_spearman_perfect_reversed_and_constant():
    d = [0.1, 2.0, -0.5, 0.7]
    assert spearman([1, 4, 0, 3], d) == pytest.approx(1.0)
    assert spearman([-1, -4, 0, -3], d) == pytest.approx(-1.0)
    assert math.isnan(spearman([1, 1, 1, 1], d))


def test_ndcg_uses_positive_deltas_only():
    deltas = [3.0, 0.0, -1.0, 1.0, 0.0, 0.0]
    assert ndcg_at_k([5, 0, 0, 4, 0, 0], deltas, k=5) == pytest.approx(1.0)
    worse = ndcg_at_k([4, 0, 0, 5, 0, 0], deltas, k=5)   # the two helpful cards swapped
    assert 0 < worse < 1
    assert math.isnan(ndcg_at_k([1, 2], [-1.0, 0.0]))     # nothing helps: undefined


def test_recall_top3_in_top5():
    deltas = np.arange(8, dtype=float)                  # teacher top-3: cards 7, 6, 5
    assert recall_at(deltas, deltas) == 1.0
    assert recall_at(-deltas, deltas) == 0.0
    assert math.isnan(recall_at([1, 2, 3], [1, 2, 3]))  # ≤ 5 cards: trivially 1, not counted


def test_summary_and_bootstrap_interval_contain_the_mean():
    rng = np.random.default_rng(0)
    v = rng.normal(0.5, 0.1, 200)
    lo, hi = bootstrap_ci(v)
    assert lo < v.mean() < hi and hi - lo < 0.05
    s = summarize(list(v) + [float("nan")])
    assert s["n"] == 200 and s["mean_ci"][0] < s["mean"] < s["mean_ci"][1]
    out = fidelity([{"deltas": [0.5, 0.0, -0.1, 2.0], "scores": [0.4, 0.1, 0.0, 1.0]}])
    assert out["spearman"]["mean"] == pytest.approx(1.0) and out["n_decisions"] == 1


def test_listwise_kl_is_zero_at_the_target_and_ignores_padding():
    z = torch.tensor([[1.0, 0.0, -1.0, 0.0]])
    mask = torch.tensor([[True, True, True, False]])
    assert float(listwise_kl(z / 0.5, z, mask, temperature=0.5)) == pytest.approx(0.0, abs=1e-6)
    assert float(listwise_kl(torch.tensor([[0.0, 0.0, 0.0, 99.0]]), z, mask)) > 0.1
    # the padded slot's score never matters
    a = listwise_kl(torch.tensor([[0.3, 0.1, 0.0, 5.0]]), z, mask)
    b = listwise_kl(torch.tensor([[0.3, 0.1, 0.0, -5.0]]), z, mask)
    assert float(a) == pytest.approx(float(b))
    assert float(pointwise_mse(torch.tensor([[1.0, 0.0, -1.0, 7.0]]), z, mask)) == pytest.approx(0.0)
