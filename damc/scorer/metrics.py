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
from typing import Any, Sequence

import numpy as np

from damc.models import DEFAULT_ENCODER
from damc.ranking import ndcg_at_k, recall_at, spearman, summarize_values

logger = logging.getLogger(__name__)

METRICS = ("spearman", "ndcg@5", "recall3@5")


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
    out: dict[str, Any] = {m: summarize_values([p[m] for p in per], seed=seed) for m in METRICS}
    out["n_decisions"] = len(decisions)
    return out


def recency_scores(positions: Sequence[int]) -> np.ndarray:
    """Recency baseline: the later the card, the higher its score."""
    return np.asarray(positions, dtype=np.float64)


def cosine_scores(decisions: Sequence[dict[str, Any]], encoder: Any | str = DEFAULT_ENCODER,
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
                            encoder: Any | str = DEFAULT_ENCODER, seed: int = 0) -> dict[str, Any]:
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
                    max_decisions: int | None = None, encoder: Any | str = DEFAULT_ENCODER, seed: int = 0
                    ) -> dict[str, Any]:
    """Fidelity of an exported scorer against any label set, beside the cosine and recency baselines.

    The same metrics `scripts/train.py` writes for its dev split, for a scorer and labels of your choice:
    another teacher's labels of the same decisions, or labels of a domain the scorer never saw.

    Args:
        scorer: a `CardScorer` or an exported scorer directory (fp32 torch when it has the weights, else the
            runtime's int8 ONNX).
        labels: a label set (directory, parquet or JSONL) or a `datasets.Dataset` of label rows.
        episodes: only decisions of these episode ids (e.g. a run's `dev_episodes` from `train_meta.json`).
        max_decisions: the first N decisions (by decision id) after the episode filter.

    Returns:
        `fidelity_with_baselines(...)` plus `"teacher"` (the label set's teacher names).

    Raises:
        ValueError: no labelled decision with ≥ 2 cards is left after the filters.
    """
    from damc.labels import group_decisions, load_labels

    if isinstance(scorer, (str, os.PathLike)):
        from damc.runtime.scorer import CardScorer

        # fp32 torch when the export has the weights (`export.py fp32=true`), else what the runtime loads (int8 ONNX)
        backend = "torch" if os.path.exists(os.path.join(scorer, "config.json")) else "auto"
        scorer = CardScorer.from_pretrained(scorer, dtype="float32", backend=backend)
    ds = load_labels(labels) if isinstance(labels, (str, os.PathLike)) else labels
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
