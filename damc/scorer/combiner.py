"""Fit the learned combiner on the teacher's labels (scikit-learn), and choose its threshold on dev.

The student scores every labelled card of the training decisions; with the runtime signals the labels carry
(`feat_bm25`, `feat_cosine`, `feat_pinned`, `card_age`, `card_kind`) they form the `damc.runtime.combiner.FEATURES`
matrix. A Huber-loss linear model (robust to the heavy tail of counterfactual deltas) gives a score, and an
isotonic regression maps that score onto the teacher's delta — so the combiner predicts deltas in the labels'
units (nats per action token), the sign kept. Both are saved as plain numbers (`Combiner`, no pickle).

Which signals it may weigh is decided on the dev decisions (`combiner.features=auto`, the default): every signal,
or the student's score alone (then it only calibrates the student), whichever ranks dev closer to the teacher —
a signal must help on decisions the combiner was not fitted on. It is fitted on the training rows
(`combiner.fit_on=train`, the default) or, with `fit_on=heldout`, on the dev rows, whose student scores are out of
sample (classic stacking: the student has fitted its training rows, so a combiner fitted there may trust it more
than new decisions warrant), then judged out of fold. The threshold τ shipped with the scorer is chosen on the dev
decisions (out of fold for `heldout`): the predicted delta that best separates the cards the teacher says matter
(delta ≥ `min_delta`) from the rest (max F1). The A/B harness sweeps thresholds on its own dev split as well.

The dev decisions are pooled over every training domain: `damc.scorer.train` splits each label set of
`data.labels` (one per domain) by episode and passes all their dev decisions here, so τ is one value that
separates well across domains, not only in the largest one (`dev_domains` adds each domain's own τ to the report,
to show how far apart they lie). With τ the same pool chooses the floor `k_min` (`choose_k_min`): the runtime
keeps the best `k_min` cards of a decision whatever τ says (`damc.runtime.select.Threshold`), because a value
scale learnt in these domains moves in a domain nobody trained on, and τ can then sit above every value.

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


def fit(x: np.ndarray, y: np.ndarray, epsilon: float = 1.35, alpha: float = 1e-3,
        use: Sequence[str] | None = None) -> Combiner:
    """A Huber linear model on standardised features, then an isotonic map from its score to the delta.

    `use`: the features the linear model may weigh (None: all of `FEATURES`); the others get weight 0."""
    from sklearn.isotonic import IsotonicRegression
    from sklearn.linear_model import HuberRegressor

    mask = np.array([use is None or f in use for f in FEATURES])
    mean = np.where(mask, x.mean(axis=0), 0.0)
    scale = x.std(axis=0)
    scale[(scale < 1e-9) | ~mask] = 1.0
    z = (x - mean) / scale
    z[:, ~mask] = 0.0
    lin = HuberRegressor(epsilon=epsilon, alpha=alpha, max_iter=2000).fit(z, y)
    coef = np.where(mask, lin.coef_, 0.0)
    score = z @ coef + lin.intercept_
    iso = IsotonicRegression(out_of_bounds="clip").fit(score, y)
    return Combiner(list(FEATURES), mean.tolist(), scale.tolist(), coef.tolist(), float(lin.intercept_),
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


def _ranks(pred: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Each row's 0-based rank by prediction, best first, within its decision (ties: row order)."""
    import pandas as pd

    return pd.DataFrame({"g": groups, "p": pred}).groupby("g", sort=False)["p"].rank(
        method="first", ascending=False).to_numpy(int) - 1


def choose_k_min(pred: np.ndarray, delta: np.ndarray, groups: np.ndarray, min_delta: float,
                 tau: float | None = None) -> tuple[int, dict[str, Any]]:
    """The floor: the `k` whose top-k rule (each decision's `k` best predicted cards, whatever their value) has the
    best F1 for `delta ≥ min_delta` over the decisions pooled (ties: the smaller `k`), capped — when τ is given —
    at the number of cards τ keeps in the median decision of the same rows (at least 1).

    The top-k rule reads only the ranking, not the value scale, so it is the part of the scorer that carries over
    to a domain where τ does not. The cap keeps the floor a floor: where the teacher says most cards matter, the
    best top-k rule keeps nearly all of them, and a floor that large would overrule τ in every decision; capped,
    it restores about as many cards as τ keeps in a typical decision of the domains it was chosen on. 0 when no
    card qualifies (no floor to learn). The report gives the uncapped best `k`, the cap, the chosen rule's F1,
    and the F1 of τ with the floor (`pred ≥ τ` or among the best `k_min`) and of τ alone, on the same rows.
    """
    pred, delta, groups = np.asarray(pred, dtype=float), np.asarray(delta, dtype=float), np.asarray(groups)
    positive = delta >= min_delta
    if not positive.any() or len(pred) == 0:
        return 0, {"k_min": 0, "f1_top_k": 0.0, "chosen_by": "no card reaches min_delta"}

    def f1(keep: np.ndarray) -> float:
        return 2 * float((keep & positive).sum()) / max(int(keep.sum() + positive.sum()), 1)

    rank = _ranks(pred, groups)
    best_k, best_f1 = 0, -1.0
    for k in range(1, int(rank.max()) + 2):
        f = f1(rank < k)
        if f > best_f1 + 1e-12:
            best_k, best_f1 = k, f
    report: dict[str, Any] = {"top_k_best": best_k, "f1_top_k_best": best_f1,
                              "chosen_by": "max F1 of the top-k rule (ties: fewer cards), capped at what τ keeps "
                                           "in the median decision"}
    k_min = best_k
    if tau is not None:
        import pandas as pd

        kept_by_tau = pd.Series(pred >= tau).groupby(groups).sum()
        cap = max(1, int(np.median(kept_by_tau.to_numpy())))
        k_min = min(best_k, cap)
        report |= {"cap_median_kept_by_tau": cap, "f1_threshold_and_floor": f1((pred >= tau) | (rank < k_min)),
                   "f1_threshold_alone": f1(pred >= tau)}
    report |= {"k_min": k_min, "f1_top_k": f1(rank < k_min)}
    return k_min, report


MIN_HELDOUT_DECISIONS = 5   # fewer held-out decisions than this: fit on the training rows instead (with a warning)


def _out_of_fold(x: np.ndarray, y: np.ndarray, groups: np.ndarray, folds: int = 5,
                 use: Sequence[str] | None = None) -> np.ndarray:
    """Each row's prediction by a combiner fitted on the other decisions' rows (GroupKFold by decision)."""
    from sklearn.model_selection import GroupKFold

    out = np.empty(len(y))
    for fit_idx, held in GroupKFold(n_splits=min(folds, len(set(groups)))).split(x, y, groups):
        out[held] = fit(x[fit_idx], y[fit_idx], use=use).predict(x[held])
    return out


def _mean_spearman(rows: Any, pred: np.ndarray) -> float:
    from damc.ranking import spearman

    d = rows.assign(_pred=np.asarray(pred, dtype=float))
    return float(np.nanmean([spearman(g["_pred"], g["delta"]) for _, g in d.groupby("decision_id")]))


def fit_combiner(train: Any, train_student: Sequence[float], dev: Any | None = None,
                 dev_student: Sequence[float] | None = None, min_delta: float = 0.05,
                 fit_on: str = "train", features: str = "auto", k_min: int | str = "auto",
                 dev_domains: Sequence[str] | None = None) -> tuple[Combiner, float | None, dict[str, Any]]:
    """Fit the combiner, report on both splits, choose τ and the floor `k_min`.

    `fit_on="train"`: fit on the training rows, choose τ on dev (train when there is no dev split). The
    student's scores of its own training rows are in sample, so a combiner fitted there may trust the student
    more than new decisions warrant. `fit_on="heldout"`: fit on the dev rows, whose student scores are out of
    sample (classic stacking), and judge it and choose τ on out-of-fold predictions (GroupKFold over dev
    decisions); falls back to `"train"` with fewer than `MIN_HELDOUT_DECISIONS` dev decisions.

    `features="auto"` fits two variants — every signal (`all`) and the student's score alone (`student`, then
    the combiner is only a calibration of the student) — and keeps the one whose ranking agrees better with the
    teacher on the dev decisions (mean per-decision Spearman; `all` on a tie or without a dev split): a signal
    the linear model weighs must help on decisions it was not fitted on. `"all"` / `"student"` force one.

    Args:
        train / dev: label rows (DataFrames with the `NEEDED` columns, `delta`, `decision_id`).
        train_student / dev_student: the student's score of each row.
        min_delta: the delta (nats per action token) above which the teacher says a card matters.
        fit_on: "train" or "heldout" (see above).
        features: "auto", "all" or "student" (see above).
        k_min: "auto" (`choose_k_min` on the rows τ is chosen on) or a number of cards, forced.
        dev_domains: the training domain of each dev row (pooled dev of several domains): the report adds τ
            chosen on each domain's rows alone (`threshold.by_domain`); the shipped τ stays the pooled one.

    Returns:
        (combiner, threshold, report) — the report has per-split Spearman (mean over decisions) of the student
        alone and of the combiner against the teacher's deltas (for `heldout`, dev's combiner figure is out of
        fold), `fitted_on`, `features`, each variant's dev Spearman, `threshold` and `floor` (`k_min` and its
        F1s, `choose_k_min`).
    """
    if fit_on not in ("train", "heldout"):
        raise ValueError(f"combiner fit_on must be 'train' or 'heldout', got {fit_on!r}")
    if features not in ("auto", "all", "student"):
        raise ValueError(f"combiner features must be 'auto', 'all' or 'student', got {features!r}")
    if k_min != "auto" and (isinstance(k_min, bool) or not isinstance(k_min, int) or k_min < 0):
        raise ValueError(f"combiner k_min must be 'auto' or a whole number of cards ≥ 0, got {k_min!r}")
    has_dev = dev is not None and dev_student is not None and len(dev) > 0
    n_dev = int(dev["decision_id"].nunique()) if has_dev else 0
    if fit_on == "heldout" and n_dev < MIN_HELDOUT_DECISIONS:
        logger.warning("combiner: %d held-out decisions (< %d): fitted on the training rows instead", n_dev,
                       MIN_HELDOUT_DECISIONS)
        fit_on = "train"
    variants = {"all": None, "student": ("student",)}
    names = ["all", "student"] if features == "auto" else [features]
    x_train, y_train = feature_matrix(train, train_student), train["delta"].to_numpy(float)
    x_dev, y_dev = (feature_matrix(dev, dev_student), dev["delta"].to_numpy(float)) if has_dev else (None, None)
    fitted: dict[str, tuple[Combiner, np.ndarray | None]] = {}
    for name in names:
        if fit_on == "heldout":
            fitted[name] = (fit(x_dev, y_dev, use=variants[name]),
                            _out_of_fold(x_dev, y_dev, dev["decision_id"].to_numpy(), use=variants[name]))
        else:
            comb = fit(x_train, y_train, use=variants[name])
            fitted[name] = (comb, comb.predict(x_dev) if has_dev else None)
    dev_rho = {n: _mean_spearman(dev, p) for n, (_, p) in fitted.items() if p is not None}
    chosen = max(dev_rho, key=lambda n: (dev_rho[n], n == "all")) if len(dev_rho) > 1 else names[0]
    comb, dev_pred = fitted[chosen]
    report: dict[str, Any] = {"fitted_on": fit_on, "features": chosen, "dev_spearman_by_features": dev_rho}
    train_pred = comb.predict(x_train)
    for name, rows, st, pred in (("train", train, train_student, train_pred), ("dev", dev, dev_student, dev_pred)):
        if rows is None or st is None or len(rows) == 0:
            continue
        report[name] = {"spearman_combiner": _mean_spearman(rows, pred),
                        "spearman_student": _mean_spearman(rows, np.asarray(st, dtype=float)),
                        "decisions": int(rows["decision_id"].nunique())}
    sel_pred, sel_delta = (dev_pred, y_dev) if has_dev else (train_pred, y_train)
    sel_groups = (dev if has_dev else train)["decision_id"].to_numpy()
    tau, f1 = choose_threshold(np.asarray(sel_pred), sel_delta, min_delta)
    report["threshold"] = {"tau": tau, "f1": f1, "min_delta": min_delta,
                           "chosen_on": ("dev (out of fold)" if fit_on == "heldout" else "dev") if has_dev else "train"}
    if has_dev and dev_domains is not None:
        doms = np.asarray(dev_domains)
        if len(doms) != len(dev):
            raise ValueError(f"dev_domains has {len(doms)} entries for {len(dev)} dev rows")
        report["threshold"]["pooled_domains"] = sorted(set(doms.tolist()))
        report["threshold"]["by_domain"] = {
            str(name): {"tau": choose_threshold(np.asarray(sel_pred)[doms == name], sel_delta[doms == name],
                                                min_delta)[0],
                        "decisions": int(len(set(sel_groups[doms == name].tolist())))}
            for name in sorted(set(doms.tolist()))}
    if k_min == "auto":
        chosen_k, floor = choose_k_min(np.asarray(sel_pred), sel_delta, sel_groups, min_delta, tau)
    else:
        chosen_k, floor = int(k_min), {"k_min": int(k_min), "chosen_by": "forced (combiner.k_min)"}
    report["floor"] = {**floor, "chosen_on": report["threshold"]["chosen_on"]}
    report["k_min"] = chosen_k
    comb.metrics = report
    logger.info("combiner: %s", report)
    return comb, tau, report
