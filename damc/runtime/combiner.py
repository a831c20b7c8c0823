"""The learned combiner: one calibrated value per candidate from the student's score and the runtime's cheap signals.

Features per candidate (`candidate_features`): the student scorer's score, BM25 of the decision query over the
candidates (relative to the best), the embedding cosine the memory's index already holds, `log1p(age)` in
messages, the card kind (one-hot) and whether it is pinned (an error or a user constraint). A small model fitted
on the labels (scikit-learn, `damc.scorer.combiner`) maps them to a score, and an isotonic map turns that score
into the **predicted delta in the labels' units** (nats per action token) — calibrated, so `Threshold(τ)` keeps
the cards worth τ in every decision, and a negative value says a card is expected to hurt.

The score is one of two kinds (`Combiner.fusion`): `"linear"` — a weighted sum of the standardised features — or
`"rank"` — reciprocal-rank fusion of the features it uses (Cormack et al., 2009): each feature ranks the
candidates of the decision, and a card's score is Σ w_f · k / (k + rank_f) (rank 0 first, k = `rrf_k`). Rank
fusion reads only each signal's order within the decision, so it carries to a domain whose score scale moved;
with weights on BM25 and cosine alone it is the cascade's first stage (`rrf` policy), with one feature that
feature's ranking — which is how the fit keeps the exported scorer never worse than its best signal on dev.

The fitted model is plain numbers in `combiner.json` beside the scorer (no pickle): this module only reads it
and applies it with numpy, so the runtime needs no scikit-learn.

Example:
    >>> comb = Combiner.load("artifacts/scorer/combiner.json")
    >>> values = comb.predict(candidate_features(query, cards, memory=memory, student=scores))
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from damc.cards import Card
from damc.query import age_in_messages, card_document, query_body
from damc.runtime.lexical import bm25_scores, bm25_tokens
from damc.runtime.scope import scope_of
from damc.runtime.valuers.heuristic import is_pinned

KINDS = ("tool_result", "tool_error", "user", "assistant")
FEATURES = ("student", "bm25", "cosine", "log_age") + tuple(f"kind_{k}" for k in KINDS) + ("pinned",)
COMBINER_FILE = "combiner.json"
TIE_BREAK = 1e-3   # weight of the linear score added to the isotonic value (orders cards within a plateau)
FUSIONS = ("linear", "rank")
RRF_K = 60         # the reciprocal-rank constant, as the cascade's first stage (`damc.runtime.valuers.learned.rrf`)


def rank_terms(x: np.ndarray, groups: Sequence[Any] | None = None, k: int = RRF_K) -> np.ndarray:
    """`k / (k + rank)` of every column of `x` within each group of rows (rank 0 = the highest value; ties by row
    order, as `damc.runtime.valuers.learned.rrf`); `groups` None: the rows are one decision's candidates."""
    x = np.asarray(x, dtype=np.float64)
    out = np.empty_like(x)
    if groups is None:
        parts = [np.arange(len(x))]
    else:
        g = np.asarray(groups)
        _, inv = np.unique(g, return_inverse=True)
        order = np.argsort(inv, kind="stable")
        parts = np.split(order, np.cumsum(np.bincount(inv))[:-1])
    for idx in parts:
        ranks = np.argsort(np.argsort(-x[idx], axis=0, kind="stable"), axis=0, kind="stable")
        out[idx] = k / (k + ranks)
    return out


def base_features(query: str, cards: Sequence[Card], cosine: Sequence[float] | None = None) -> dict[str, np.ndarray]:
    """Every feature but the student's, one array each (`(n_cards,)`).

    Args:
        query: the decision query.
        cards: the candidates (ages set by the runtime; a card without age counts as age 0).
        cosine: the query–card embedding cosines (the memory's index); zeros when not given.
    """
    n = len(cards)
    bm25 = bm25_scores([bm25_tokens(card_document(c)) for c in cards], bm25_tokens(query_body(query)))
    top = bm25.max(initial=0.0)
    ages = np.array([age_in_messages(c) or 0 for c in cards], dtype=np.float64)
    out = {"bm25": bm25 / top if top > 0 else np.zeros(n), "cosine": np.asarray(cosine if cosine is not None
                                                                                else np.zeros(n), dtype=np.float64),
           "log_age": np.log1p(ages), "pinned": np.array([float(is_pinned(c)) for c in cards])}
    for k in KINDS:
        out[f"kind_{k}"] = np.array([float(c.kind == k) for c in cards])
    return out


def candidate_features(query: str, cards: Sequence[Card], *, memory: Any = None,
                       student: Sequence[float] | None = None) -> np.ndarray:
    """The feature matrix `(n_cards, len(FEATURES))` in `FEATURES` order (the cosine from `memory`'s index)."""
    cos = None
    if memory is not None and cards:
        q = memory.index.query_vector(query)                                 # (dim,)
        cos = memory.index.card_vectors([c.card_id for c in cards], scope_of(cards)) @ q      # (n,)
    f = base_features(query, cards, cos)
    f["student"] = np.zeros(len(cards)) if student is None else np.asarray(student, dtype=np.float64)
    return np.stack([f[name] for name in FEATURES], axis=1) if cards else np.zeros((0, len(FEATURES)))


@dataclass
class Combiner:
    """A score over the features (linear, or reciprocal-rank fusion) and an isotonic calibration map, as plain
    numbers.

    Attributes:
        features: feature names, in column order.
        mean / scale: standardisation of each feature (scale 1 where a feature is constant; unused by `rank`).
        coef / intercept: the score's weights: over standardised features (`linear`), or of each feature's
            rank term `k / (k + rank)` within the decision (`rank`; weight 0: the feature is not used).
        iso_x / iso_y: increasing knots of the isotonic map from linear score to delta (np.interp; clipped ends).
        units: what `predict` returns.
        metrics: fit statistics (train and dev), for the record.
    """

    features: list[str]
    mean: list[float]
    scale: list[float]
    coef: list[float]
    intercept: float
    iso_x: list[float]
    iso_y: list[float]
    units: str = "nats per action token"
    metrics: dict[str, Any] = field(default_factory=dict)
    fusion: str = "linear"
    rrf_k: int = RRF_K

    def score(self, x: np.ndarray, groups: Sequence[Any] | None = None) -> np.ndarray:
        """The uncalibrated score, `(n,)`. `groups`: the decision of each row, for `rank` fusion (None: the rows
        are one decision's candidates, as the runtime calls it)."""
        if self.fusion == "rank":
            return rank_terms(x, groups, self.rrf_k) @ np.asarray(self.coef) + self.intercept
        z = (np.asarray(x, dtype=np.float64) - np.asarray(self.mean)) / np.asarray(self.scale)
        return z @ np.asarray(self.coef) + self.intercept

    def uses(self) -> list[str]:
        """The features with a non-zero weight."""
        return [f for f, c in zip(self.features, self.coef) if c != 0]

    def predict(self, x: np.ndarray, groups: Sequence[Any] | None = None) -> np.ndarray:
        """The predicted delta of each row, `(n,)` (float32); `groups` as in `score`.

        Isotonic regression fitted on a few hundred label rows is a step function: many candidates land on one
        plateau and would tie, so the ranking the linear score holds would be lost to the selector's tie-break.
        `TIE_BREAK` × the linear score is added — strictly increasing, at most ~0.001 nats per token off the
        calibration — so cards on one plateau keep their order."""
        if len(x) == 0:
            return np.zeros(0, dtype=np.float32)
        z = self.score(x, groups)
        return (np.interp(z, self.iso_x, self.iso_y) + TIE_BREAK * z).astype(np.float32)

    def save(self, path: str | Path) -> None:
        from damc.episodes import atomic_write_text

        atomic_write_text(Path(path), json.dumps(asdict(self), indent=2))

    @classmethod
    def load(cls, path: str | Path) -> "Combiner":
        """Read `combiner.json`.

        Raises:
            ValueError: the file is not a combiner (names the missing field), or its features are not `FEATURES`.
        """
        try:
            d = json.loads(Path(path).read_text())
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: line {e.lineno}: not valid JSON ({e.msg})") from None
        missing = [k for k in ("features", "mean", "scale", "coef", "intercept", "iso_x", "iso_y") if k not in d]
        if missing:
            raise ValueError(f"{path}: not a combiner file (missing {', '.join(missing)})")
        if list(d["features"]) != list(FEATURES):
            raise ValueError(f"{path}: features {d['features']} differ from this DAMC's {list(FEATURES)}; "
                             f"refit the combiner (scripts/train.py)")
        if not all(math.isfinite(v) for v in d["coef"] + d["iso_x"] + d["iso_y"]):
            raise ValueError(f"{path}: non-finite coefficients")
        if d.get("fusion", "linear") not in FUSIONS:
            raise ValueError(f"{path}: fusion must be one of {FUSIONS}, got {d['fusion']!r}")
        if not isinstance(d.get("rrf_k", RRF_K), int) or d.get("rrf_k", RRF_K) < 1:
            raise ValueError(f"{path}: rrf_k must be a whole number ≥ 1, got {d['rrf_k']!r}")
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})
