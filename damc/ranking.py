"""Ranking and its statistics: Spearman, NDCG, hit and recall of a card ranking; bootstrap intervals (scipy).

The ground floor that the teacher (label agreement, estimator comparison), the scorer (fidelity) and eval (the
harness's memory metrics and tables) all read, so none of them imports another for a metric. Ranking metrics
compare a ranking (`scores`, higher first; ties: the earlier card) with the teacher's deltas or key-card flags:
**spearman** (`scipy.stats.spearmanr`), **ndcg_at_k** (gains max(delta, 0)), **recall_at** (teacher top-3 in
the ranking's top-5) and **hit_at_k** (a key card among the k best).

Decisions of one episode are not independent (they share the history, the user and the task), so every
interval over decisions can be a **cluster bootstrap**: episodes are resampled with replacement and a
resample's statistic is the ratio of sums over the drawn episodes (for a mean: Σ values / Σ counts).
Without clusters it is the plain percentile bootstrap. Both run through `scipy.stats.bootstrap`.

Example:
    >>> bootstrap_ci([1, 0, 1, 1], np.mean, n_boot=200)
    (0.25, 1.0)
    >>> paired_bootstrap([1, 1, 0, 1], [0, 1, 0, 0], clusters=["a", "a", "b", "c"])["delta"]
    0.5
    >>> spearman([0.4, 0.1, 0.0, 1.0], [0.5, 0.0, -0.1, 2.0])
    1.0
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, Sequence

import numpy as np


def _percentile_bootstrap(data: tuple[np.ndarray, ...], statistic: Callable[..., np.ndarray], *, n_boot: int,
                          alpha: float, seed: int, paired: bool) -> tuple[float, float, np.ndarray]:
    """`scipy.stats.bootstrap` (percentile method, vectorised): (lo, hi, bootstrap distribution)."""
    from damc.extras import requires

    with requires("bootstrap intervals"):
        from scipy.stats import bootstrap

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # DegenerateDataWarning when every value is equal: the interval is a point
        res = bootstrap(data, statistic, n_resamples=n_boot, confidence_level=1 - alpha, method="percentile",
                        paired=paired, vectorized=True, random_state=np.random.default_rng(seed))
    dist = np.asarray(res.bootstrap_distribution, dtype=float)
    lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
    if not np.isfinite(lo) or not np.isfinite(hi):  # all resamples equal
        lo, hi = float(np.min(dist)), float(np.max(dist))
    return lo, hi, dist


def _cluster_sums(values: np.ndarray, clusters: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
    """Per-cluster sums of `values` and counts, clusters in first-seen order."""
    ids: dict[Any, int] = {}
    idx = np.array([ids.setdefault(c, len(ids)) for c in clusters])
    return np.bincount(idx, weights=values, minlength=len(ids)), np.bincount(idx, minlength=len(ids)).astype(float)


def _ratio(s: np.ndarray, n: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.sum(s, axis=axis) / np.maximum(np.sum(n, axis=axis), 1e-12)


def bootstrap_ci(values: Sequence[float], stat: Callable[..., Any] = np.mean, *, clusters: Sequence[Any] | None = None,
                 n_boot: int = 1000, alpha: float = 0.05, seed: int = 0) -> tuple[float, float]:
    """Percentile-bootstrap (1 − alpha) interval of `stat` over `values` (NaN, NaN when empty).

    Args:
        values: one value per observation.
        stat: `np.mean` or `np.median` (or any numpy reducer taking `axis=`).
        clusters: one cluster id per value (e.g. the episode): resample clusters, not values. Only for `np.mean`.
        n_boot: resamples.
        alpha: 1 − confidence level.
        seed: resampling seed.
    """
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        return (float("nan"), float("nan"))
    if clusters is not None:
        if stat is not np.mean:
            raise ValueError("a cluster bootstrap is defined here for the mean only")
        s, n = _cluster_sums(x, clusters)
        if len(s) < 2:
            return (float(x.mean()), float(x.mean()))
        lo, hi, _ = _percentile_bootstrap((s, n), _ratio, n_boot=n_boot, alpha=alpha, seed=seed, paired=True)
        return (lo, hi)
    if x.size < 2:
        return (float(stat(x)), float(stat(x)))
    lo, hi, _ = _percentile_bootstrap((x,), lambda a, axis=-1: stat(a, axis=axis), n_boot=n_boot, alpha=alpha,
                                      seed=seed, paired=False)
    return (lo, hi)


def paired_bootstrap(a: Sequence[float], b: Sequence[float], *, clusters: Sequence[Any] | None = None,
                     n_boot: int = 1000, alpha: float = 0.05, seed: int = 0) -> dict[str, Any]:
    """Mean difference `a − b` over paired observations with a (cluster) percentile-bootstrap interval.

    Returns:
        `{"delta", "ci": [lo, hi], "n", "n_clusters", "p_le_0", "se"}` — `p_le_0` is the bootstrap share of
        resamples with delta ≤ 0 (a one-sided check that `a` beats `b`); `se` the bootstrap standard error of the
        delta (absent with fewer than two clusters).

    Raises:
        ValueError: `a`, `b` (and `clusters`) differ in length.
    """
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape or (clusters is not None and len(clusters) != a.size):
        raise ValueError(f"paired samples differ in length: {a.shape} vs {b.shape}"
                         + (f" vs {len(clusters)} clusters" if clusters is not None else ""))
    n_clusters = len(set(clusters)) if clusters is not None else int(a.size)
    if a.size == 0:
        return {"delta": float("nan"), "ci": [float("nan"), float("nan")], "n": 0, "n_clusters": 0,
                "p_le_0": float("nan")}
    d = a - b
    if n_clusters < 2:
        return {"delta": float(d.mean()), "ci": [float(d.mean())] * 2, "n": int(d.size), "n_clusters": n_clusters,
                "p_le_0": float(d.mean() <= 0)}
    if clusters is not None:
        s, n = _cluster_sums(d, clusters)
        lo, hi, dist = _percentile_bootstrap((s, n), _ratio, n_boot=n_boot, alpha=alpha, seed=seed, paired=True)
    else:
        lo, hi, dist = _percentile_bootstrap((d,), lambda x, axis=-1: np.mean(x, axis=axis), n_boot=n_boot,
                                             alpha=alpha, seed=seed, paired=False)
    return {"delta": float(d.mean()), "ci": [lo, hi], "n": int(d.size), "n_clusters": n_clusters,
            "p_le_0": float(np.mean(dist <= 0)), "se": float(np.std(dist, ddof=1))}


def summarize_values(values: Sequence[float], seed: int = 0, n_boot: int = 1000) -> dict[str, Any]:
    """`{"mean", "mean_ci", "median", "median_ci", "n"}` over the non-NaN values (None when there are none)."""
    v = np.asarray([x for x in values if x == x], dtype=float)
    if len(v) == 0:
        return {"mean": None, "mean_ci": [None, None], "median": None, "median_ci": [None, None], "n": 0}
    return {"mean": float(v.mean()), "mean_ci": list(bootstrap_ci(v, np.mean, seed=seed, n_boot=n_boot)),
            "median": float(np.median(v)), "median_ci": list(bootstrap_ci(v, np.median, seed=seed, n_boot=n_boot)),
            "n": int(len(v))}


# ----------------------------------------------------------------------------- ranking metrics

def spearman(scores: Sequence[float], deltas: Sequence[float]) -> float:
    """Spearman correlation (average ranks for ties, `scipy.stats.spearmanr`); NaN when either side is constant."""
    from damc.extras import requires

    with requires("Spearman correlation"):
        from scipy.stats import spearmanr

    a, b = np.asarray(scores, dtype=np.float64), np.asarray(deltas, dtype=np.float64)
    if len(a) < 2 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return float("nan")
    return float(spearmanr(a, b).statistic)


def ndcg_at_k(scores: Sequence[float], deltas: Sequence[float], k: int = 5) -> float:
    """NDCG@k of the score order with gains max(delta, 0); NaN when no card has a positive delta."""
    s, g = np.asarray(scores, dtype=np.float64), np.clip(np.asarray(deltas, dtype=np.float64), 0, None)
    if g.sum() <= 0:
        return float("nan")
    disc = 1.0 / np.log2(np.arange(2, k + 2))
    top = np.argsort(-s, kind="stable")[:k]
    ideal = np.sort(g)[::-1][:k]
    return float((g[top] * disc[:len(top)]).sum() / (ideal * disc[:len(ideal)]).sum())


def recall_at(scores: Sequence[float], deltas: Sequence[float], k_teacher: int = 3, k_pred: int = 5) -> float:
    """Share of the teacher's top-`k_teacher` cards inside the scorer's top-`k_pred`; NaN if n ≤ k_pred."""
    s, d = np.asarray(scores, dtype=np.float64), np.asarray(deltas, dtype=np.float64)
    if len(s) <= k_pred:
        return float("nan")
    teacher = set(np.argsort(-d, kind="stable")[:k_teacher].tolist())
    pred = set(np.argsort(-s, kind="stable")[:k_pred].tolist())
    return len(teacher & pred) / len(teacher)


def hit_at_k(scores: Sequence[float], is_key: Sequence[bool], k: int) -> float:
    """1.0 when a key card is among the `k` best-scored cards (ties: the earlier card), NaN without key cards."""
    keys = np.asarray(is_key, dtype=bool)
    if not keys.any():
        return float("nan")
    top = np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")[:k]
    return float(keys[top].any())
