"""Fit the learned combiner on the teacher's labels (scikit-learn), and choose its threshold on dev.

The student scores every labelled card of the training decisions; with the runtime signals the labels carry
(`feat_bm25`, `feat_cosine`, `feat_pinned`, `card_age`, `card_kind`) they form the `damc.runtime.combiner.FEATURES`
matrix. A Huber-loss linear model (robust to the heavy tail of counterfactual deltas) gives a score, and an
isotonic regression maps that score onto the teacher's delta — so the combiner predicts deltas in the labels'
units (nats per action token), the sign kept. Both are saved as plain numbers (`Combiner`, no pickle).

The threshold τ shipped with the scorer is chosen on the **dev** decisions: the predicted delta that best
separates the cards the teacher says matter (delta ≥ `min_delta`) from the rest (max F1). The A/B harness sweeps
thresholds on its own dev split as well.

Example:
    >>> comb, tau, report = fit_combiner(train_rows, train_scores, dev_rows, dev_scores)
    >>> comb.save(run_dir / "combiner.json")
"""

from __future__ import annotations

import logging
from typing import Any, Sequence

import numpy as np

from damc.runtime.combiner import FEATURES, KINDS, Combiner

logger = logging.getLogger(__name__)

NEEDED = ("feat_bm25", "feat_cosine", "feat_pinned", "card_age", "card_kind")


def has_features(columns: Sequence[str]) -> bool:
    """Whether a label set carries the runtime signals the combiner needs (labels made since RENDER_VERSION 2)."""
    return all(c in set(columns) for c in NEEDED)


def feature_matrix(rows: Any, student: Sequence[float]) -> np.ndarray:
    """`(n, len(FEATURES))` from label rows (a DataFrame) and the student's score of each row."""
    n = len(rows)
    cols = {"student": np.asarray(student, dtype=np.float64), "bm25": rows["feat_bm25"].to_numpy(float),
            "cosine": rows["feat_cosine"].to_numpy(float), "pinned": rows["feat_pinned"].to_numpy(float),
            "log_age": np.log1p(rows["card_age"].fillna(0).to_numpy(float))}
    for k in KINDS:
        cols[f"kind_{k}"] = (rows["card_kind"] == k).to_numpy(float)
    assert all(len(v) == n for v in cols.values())
    return np.stack([cols[f] for f in FEATURES], axis=1)


def fit(x: np.ndarray, y: np.ndarray, epsilon: float = 1.35, alpha: float = 1e-3) -> Combiner:
    """A Huber linear model on standardised features, then an isotonic map from its score to the delta."""
    from sklearn.isotonic import IsotonicRegression
    from sklearn.linear_model import HuberRegressor

    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    scale[scale < 1e-9] = 1.0
    z = (x - mean) / scale
    lin = HuberRegressor(epsilon=epsilon, alpha=alpha, max_iter=2000).fit(z, y)
    score = z @ lin.coef_ + lin.intercept_
    iso = IsotonicRegression(out_of_bounds="clip").fit(score, y)
    return Combiner(list(FEATURES), mean.tolist(), scale.tolist(), lin.coef_.tolist(), float(lin.intercept_),
                    [float(v) for v in iso.X_thresholds_], [float(v) for v in iso.y_thresholds_])


def choose_threshold(pred: np.ndarray, delta: np.ndarray, min_delta: float) -> tuple[float | None, float]:
    """The predicted-delta threshold with the best F1 for `delta ≥ min_delta` (None when no card qualifies)."""
    positive = delta >= min_delta
    if not positive.any():
        return None, 0.0
    best, best_f1 = None, -1.0
    for tau in np.unique(pred):
        keep = pred >= tau
        tp = float((keep & positive).sum())
        f1 = 2 * tp / max(keep.sum() + positive.sum(), 1)
        if f1 > best_f1:
            best, best_f1 = float(tau), f1
    return best, best_f1


def fit_combiner(train: Any, train_student: Sequence[float], dev: Any | None = None,
                 dev_student: Sequence[float] | None = None, min_delta: float = 0.05) -> tuple[Combiner, float | None,
                                                                                             dict[str, Any]]:
    """Fit on the training rows, report on both splits, choose τ on dev (train when there is no dev split).

    Args:
        train / dev: label rows (DataFrames with the `NEEDED` columns, `delta`, `decision_id`).
        train_student / dev_student: the student's score of each row.
        min_delta: the delta (nats per action token) above which the teacher says a card matters.

    Returns:
        (combiner, threshold, report) — the report has per-split Spearman (mean over decisions) of the student
        alone and of the combiner against the teacher's deltas.
    """
    from damc.eval.metrics import spearman

    comb = fit(feature_matrix(train, train_student), train["delta"].to_numpy(float))
    report: dict[str, Any] = {}
    for name, rows, st in (("train", train, train_student), ("dev", dev, dev_student)):
        if rows is None or st is None or len(rows) == 0:
            continue
        pred = comb.predict(feature_matrix(rows, st))
        d = rows.assign(_pred=pred, _st=np.asarray(st, dtype=float))
        rho_c = [spearman(g["_pred"], g["delta"]) for _, g in d.groupby("decision_id")]
        rho_s = [spearman(g["_st"], g["delta"]) for _, g in d.groupby("decision_id")]
        report[name] = {"spearman_combiner": float(np.nanmean(rho_c)), "spearman_student": float(np.nanmean(rho_s)),
                        "decisions": int(d["decision_id"].nunique())}
    sel, sel_st = (dev, dev_student) if dev is not None and len(dev) else (train, train_student)
    tau, f1 = choose_threshold(comb.predict(feature_matrix(sel, sel_st)), sel["delta"].to_numpy(float), min_delta)
    report["threshold"] = {"tau": tau, "f1": f1, "min_delta": min_delta, "chosen_on": "dev" if sel is dev else "train"}
    comb.metrics = report
    logger.info("combiner: %s", report)
    return comb, tau, report
