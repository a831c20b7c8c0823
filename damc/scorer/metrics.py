"""Teacher-fidelity metrics: how well a card ranking agrees with the teacher's deltas, per decision.

One definition each (DESIGN.md, "Metrics"):

* **spearman** — Spearman rank correlation of scores vs. teacher deltas over a decision's cards
  (decisions whose deltas or scores are all equal are skipped: the correlation is undefined).
* **ndcg@5** — NDCG of the score ranking with gains = the positive part of the teacher delta
  (cards that do not help the gold action gain nothing); decisions with no positive delta are skipped.
* **recall3@5** — share of the teacher's top-3 cards found in the scorer's top-5; only decisions with
  more than 5 cards count (with ≤ 5 cards it is trivially 1).

Each is summarised over decisions by its mean and median with percentile-bootstrap 95 % intervals.
Baselines for the same decisions: `cosine` (sentence-embedding similarity of decision and card texts)
and `recency` (later card = higher).

Example:
    >>> decisions = [{"deltas": [0.5, 0.0, -0.1, 2.0], "scores": [0.4, 0.1, 0.0, 1.0]}]
    >>> fidelity(decisions)["spearman"]["mean"]
    1.0
"""

from __future__ import annotations

import logging
import os
from typing import Any, Callable, Sequence

import numpy as np

logger = logging.getLogger(__name__)

METRICS = ("spearman", "ndcg@5", "recall3@5")


def spearman(scores: Sequence[float], deltas: Sequence[float]) -> float:
    """Spearman correlation (average ranks for ties); NaN when either side is constant."""
    from scipy.stats import rankdata

    a, b = np.asarray(scores, dtype=np.float64), np.asarray(deltas, dtype=np.float64)
    if len(a) < 2 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return float("nan")
    ra, rb = rankdata(a), rankdata(b)
    return float(np.corrcoef(ra, rb)[0, 1])


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


def bootstrap_ci(values: Sequence[float], stat: Callable[[np.ndarray], float] = np.mean, n_boot: int = 1000,
                 alpha: float = 0.05, seed: int = 0) -> tuple[float, float]:
    """Percentile-bootstrap (1 − alpha) interval of `stat` over `values` (NaN-free)."""
    v = np.asarray(values, dtype=np.float64)
    if len(v) == 0:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(v), size=(n_boot, len(v)))
    boots = np.array([stat(v[i]) for i in idx])
    return float(np.quantile(boots, alpha / 2)), float(np.quantile(boots, 1 - alpha / 2))


def summarize(values: Sequence[float], seed: int = 0) -> dict[str, Any]:
    """`{"mean", "mean_ci", "median", "median_ci", "n"}` over the non-NaN values."""
    v = np.asarray([x for x in values if x == x], dtype=np.float64)
    if len(v) == 0:
        return {"mean": None, "mean_ci": [None, None], "median": None, "median_ci": [None, None], "n": 0}
    return {"mean": float(v.mean()), "mean_ci": list(bootstrap_ci(v, np.mean, seed=seed)),
            "median": float(np.median(v)), "median_ci": list(bootstrap_ci(v, np.median, seed=seed)),
            "n": int(len(v))}


def per_decision(scores: Sequence[float], deltas: Sequence[float]) -> dict[str, float]:
    """The three fidelity metrics of one decision."""
    return {"spearman": spearman(scores, deltas), "ndcg@5": ndcg_at_k(scores, deltas, 5),
            "recall3@5": recall_at(scores, deltas, 3, 5)}


def fidelity(decisions: Sequence[dict[str, Any]], key: str = "scores", seed: int = 0) -> dict[str, Any]:
    """Summaries of the fidelity metrics over decisions, each a dict with `deltas` and `key` lists.

    Returns:
        `{"spearman": summary, "ndcg@5": summary, "recall3@5": summary, "n_decisions": int}`.
    """
    per = [per_decision(d[key], d["deltas"]) for d in decisions]
    out: dict[str, Any] = {m: summarize([p[m] for p in per], seed=seed) for m in METRICS}
    out["n_decisions"] = len(decisions)
    return out


def recency_scores(positions: Sequence[int]) -> np.ndarray:
    """Recency baseline: the later the card, the higher its score."""
    return np.asarray(positions, dtype=np.float64)


def cosine_scores(decisions: Sequence[dict[str, Any]], encoder: Any | str = "minilm-l6",
                  batch_size: int = 64) -> list[np.ndarray]:
    """Embedding baseline: cosine(decision_text, card_text) with a sentence encoder, per decision.

    Args:
        decisions: dicts with `query` (str) and `docs` (list[str]).
        encoder: a `SentenceTransformer` or a name for `damc.models.load_sentence_encoder`.
    """
    if isinstance(encoder, str):
        from damc.models import load_sentence_encoder

        encoder = load_sentence_encoder(encoder)
    texts = sorted({d["query"] for d in decisions} | {c for d in decisions for c in d["docs"]})
    emb = encoder.encode(texts, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True)
    index = {t: i for i, t in enumerate(texts)}
    out = []
    for d in decisions:
        q = emb[index[d["query"]]]
        out.append(np.asarray([float(emb[index[c]] @ q) for c in d["docs"]]))
    return out


def fidelity_with_baselines(decisions: Sequence[dict[str, Any]], scorer_scores: Sequence[Sequence[float]],
                            encoder: Any | str = "minilm-l6", seed: int = 0) -> dict[str, Any]:
    """Fidelity of the scorer and of the cosine and recency baselines on the same decisions.

    Args:
        decisions: dicts with `query`, `docs`, `deltas`, `positions` (one entry per card).
        scorer_scores: the scorer's scores, aligned with `decisions[i]["docs"]`.

    Returns:
        `{"scorer": fidelity, "cosine": fidelity, "recency": fidelity, "n_decisions", "n_pairs"}`.
    """
    cos = cosine_scores(decisions, encoder)
    rows = [{"deltas": list(d["deltas"]), "scorer": list(s), "cosine": list(c),
             "recency": list(recency_scores(d["positions"]))}
            for d, s, c in zip(decisions, scorer_scores, cos)]
    out: dict[str, Any] = {name: fidelity(rows, key=name, seed=seed) for name in ("scorer", "cosine", "recency")}
    out["n_decisions"] = len(decisions)
    out["n_pairs"] = int(sum(len(d["docs"]) for d in decisions))
    return out


def flatten(metrics: dict[str, Any], prefix: str = "") -> dict[str, float]:
    """`{"scorer/spearman/mean": 0.71, ...}` — scalars only, for loggers."""
    flat: dict[str, float] = {}
    for k, v in metrics.items():
        name = f"{prefix}{k}"
        if isinstance(v, dict):
            flat.update(flatten(v, name + "/"))
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            flat[name] = float(v)
    return flat


def scorer_fidelity(scorer: Any, labels: Any, episodes: Sequence[str] | None = None,
                    max_decisions: int | None = None, encoder: Any | str = "minilm-l6", seed: int = 0
                    ) -> dict[str, Any]:
    """Fidelity of an exported scorer against any label set, beside the cosine and recency baselines.

    The same metrics `scripts/train.py` writes for its dev split, for a scorer and labels of your choice:
    another teacher's labels of the same decisions, or labels of a domain the scorer never saw.

    Args:
        scorer: a `CardScorer` or an exported scorer directory (loaded in fp32 with the torch backend).
        labels: a label set (directory, parquet or JSONL) or a `datasets.Dataset` of label rows.
        episodes: only decisions of these episode ids (e.g. a run's `dev_episodes` from `train_meta.json`).
        max_decisions: the first N decisions (by decision id) after the episode filter.

    Returns:
        `fidelity_with_baselines(...)` plus `"teacher"` (the label set's teacher names).

    Raises:
        ValueError: no labelled decision with ≥ 2 cards is left after the filters.
    """
    from damc.scorer.train import group_decisions, read_labels

    if isinstance(scorer, (str, os.PathLike)):
        from damc.scorer import CardScorer

        scorer = CardScorer.from_pretrained(scorer, dtype="float32", backend="torch")
    ds = read_labels(labels) if isinstance(labels, (str, os.PathLike)) else labels
    decisions = group_decisions(ds)
    if episodes is not None:
        keep = set(episodes)
        decisions = [d for d in decisions if d.episode_id in keep]
    if max_decisions:
        decisions = decisions[: int(max_decisions)]
    if not decisions:
        raise ValueError(f"no labelled decision with ≥ 2 cards in {labels}"
                         + (" from the given episodes" if episodes is not None else ""))
    scores = [scorer.score(d.query, d.docs) for d in decisions]
    out = fidelity_with_baselines([d.as_dict() for d in decisions], scores, encoder=encoder, seed=seed)
    out["teacher"] = sorted(set(ds.unique("teacher")))
    return out
