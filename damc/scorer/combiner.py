"""Fit the learned combiner on the labels (scikit-learn), choose its variant, threshold and floor on dev.

The student scores every labelled card of the training decisions; with the runtime signals the labels carry
(`feat_bm25`, `feat_cosine`, `feat_pinned`, `card_age`, `card_kind`) they form the `damc.runtime.combiner.FEATURES`
matrix. A Huber-loss linear model (robust to the heavy tail of counterfactual deltas) gives a score, and an
isotonic regression maps that score onto the teacher's delta — so the combiner predicts deltas in the labels'
units (nats per action token), the sign kept. Both are saved as plain numbers (`Combiner`, no pickle).

Which signals it weighs, and how, is decided on the dev decisions (`combiner.features=auto`, the default): each of
`VARIANTS` is fitted — the linear model over every signal, the student's score alone (a calibration of the
student), reciprocal-rank fusions of the student with BM25 and cosine (`Combiner.fusion="rank"`: each signal's
order within the decision, not its scale), and the retrieval signals alone (BM25, cosine, both fused: the `bm25`,
`similarity` and `rrf` policies) — and the one kept has the best key hit at `SELECT_K` cards in its worst dev
domain relative to that domain's best retrieval signal (`choose_variant`). So the exported scorer is never below
its best signal on a dev domain: where the student does not help, the combiner says so (a warning, and
`features` in the report names a retrieval variant) and ranks as that signal does. Without key cards on dev
(labels without `is_key`) the variant ranking dev closest to the labels (mean per-decision Spearman) is kept.
The linear variants are fitted on the training rows
(`combiner.fit_on=train`, the default) or, with `fit_on=heldout`, on the dev rows, whose student scores are out of
sample (classic stacking: the student has fitted its training rows, so a combiner fitted there may trust it more
than new decisions warrant), then judged out of fold. The threshold τ shipped with the scorer is chosen on the dev
decisions (out of fold for `heldout`): the predicted delta that best separates the cards the labels say matter
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


def fit_rank(x: np.ndarray, y: np.ndarray, groups: Sequence[Any], use: Sequence[str]) -> Combiner:
    """Reciprocal-rank fusion of the `use` features, equal weights (`Combiner.fusion="rank"`), then an isotonic map
    from the fused score to the delta: nothing is learnt but the calibration, so the ranking is the signals'."""
    from sklearn.isotonic import IsotonicRegression

    coef = np.array([1.0 if f in use else 0.0 for f in FEATURES])
    comb = Combiner(list(FEATURES), [0.0] * len(FEATURES), [1.0] * len(FEATURES), coef.tolist(), 0.0, [0.0], [0.0],
                    fusion="rank")
    score = comb.score(x, groups)
    iso = IsotonicRegression(out_of_bounds="clip").fit(score, y)
    comb.iso_x, comb.iso_y = [float(v) for v in iso.X_thresholds_], [float(v) for v in iso.y_thresholds_]
    return comb


# The combiner's variants: (fusion, features used; None: all). `auto` fits each and keeps the best on dev.
VARIANTS: dict[str, tuple[str, tuple[str, ...] | None]] = {   # in order of preference among near-ties
    "rank:student+bm25+cosine": ("rank", ("student", "bm25", "cosine")),
    "rank:student+cosine": ("rank", ("student", "cosine")),
    "rank:student+bm25": ("rank", ("student", "bm25")),
    "student": ("linear", ("student",)),                            # a calibration of the student alone
    "all": ("linear", None),                                        # every signal, linear (Huber)
    "rank:bm25+cosine": ("rank", ("bm25", "cosine")),               # the cascade's first stage: the `rrf` policy
    "rank:cosine": ("rank", ("cosine",)),                           # embedding similarity alone: `similarity`
    "rank:bm25": ("rank", ("bm25",)),                               # BM25 alone: `bm25`
}
BASELINES = ("rank:bm25", "rank:cosine", "rank:bm25+cosine")   # retrieval without learning, as variants
SELECT_K = 4   # key hit at this many cards (the harness's operating point) chooses the variant


def key_hit(rows: Any, pred: Sequence[float], k: int = SELECT_K) -> tuple[float | None, int]:
    """The share of decisions with a key card (`is_key`) that have one among their `k` best predicted rows, and how
    many such decisions there are (None, 0 when none)."""
    if "is_key" not in rows.columns or len(rows) == 0:
        return None, 0
    rank = _ranks(np.asarray(pred, dtype=float), rows["decision_id"].to_numpy())
    d = rows.assign(_top=rank < k, _key=rows["is_key"].fillna(False).astype(bool))
    by = d.groupby("decision_id", sort=False)
    has_key = by["_key"].any()
    hit = by.apply(lambda g: bool((g["_top"] & g["_key"]).any()), include_groups=False)[has_key]
    return (float(hit.mean()), int(has_key.sum())) if has_key.any() else (None, 0)


def key_hits_by_domain(rows: Any, pred: Sequence[float], domains: Sequence[str] | None,
                       k: int = SELECT_K) -> dict[str, dict[str, Any]]:
    """`{domain: {"key_hit", "decisions"}}` over the rows of each domain (one `"all"` domain when None)."""
    pred = np.asarray(pred, dtype=float)
    if domains is None:
        names, doms = ["all"], np.array(["all"] * len(rows))
    else:
        doms = np.asarray(domains)
        names = sorted(set(doms.tolist()))
    out = {}
    for name in names:
        m = doms == name
        hit, n = key_hit(rows[m].reset_index(drop=True), pred[m], k)
        if hit is not None:
            out[str(name)] = {"key_hit": hit, "decisions": n}
    return out


def choose_variant(hits: dict[str, dict[str, dict[str, Any]]], rho: dict[str, float],
                   order: Sequence[str]) -> tuple[str, str]:
    """The variant to keep, and why.

    With key hits (per variant, per dev domain): each variant's margin is its worst key hit relative to the best
    retrieval baseline of that domain (`BASELINES`), then its mean key hit over the domains. The best by (margin,
    mean, dev Spearman) sets the bar; every variant whose margin is at least min(the best margin, 0) — never below
    its best signal on a dev domain when the best is not — and that is at most one decision behind the best in every
    dev domain (the dev splits are small: a one-decision lead is noise) is as good, and the first of those in
    `order` is kept: `VARIANTS` lists the fusions of the student with
    retrieval first (each signal's order, robust to a score scale that moves out of domain), then the student
    alone, the linear fit, and the retrieval signals last. Without key cards on dev: the dev Spearman (then the
    order)."""
    usable = [v for v in order if hits.get(v)]
    if usable and set(hits[usable[0]]) and all(set(hits[v]) == set(hits[usable[0]]) for v in usable):
        doms = sorted(hits[usable[0]])
        base = {d: max((hits[b][d]["key_hit"] for b in BASELINES if b in hits and hits[b]), default=0.0)
                for d in doms}
        margin = {v: min(hits[v][d]["key_hit"] - base[d] for d in doms) for v in usable}
        mean = {v: float(np.mean([hits[v][d]["key_hit"] for d in doms])) for v in usable}
        best = max(usable, key=lambda v: (round(margin[v], 9), round(mean[v], 9), rho.get(v, float("-inf")),
                                          -order.index(v)))
        def close(v: str) -> bool:   # at most one decision behind the best in every dev domain
            return all(hits[v][d]["key_hit"] >= hits[best][d]["key_hit"] - 1.0 / hits[best][d]["decisions"] - 1e-9
                       for d in doms)

        near = [v for v in usable if margin[v] >= min(margin[best], 0.0) - 1e-9 and close(v)]
        chosen = near[0] if near else best
        return chosen, (f"dev key hit@{SELECT_K}: not below the best retrieval signal on any dev domain (where one "
                        f"variant reaches it), at most one decision per domain behind the best ({best}), first in "
                        f"order of preference")
    if rho:
        best = max(rho, key=lambda v: (rho[v], -order.index(v)))
        return best, "dev Spearman with the labels (no key cards on dev)"
    return order[0], "no dev split: the first variant"


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
    rho = np.array([spearman(g["_pred"], g["delta"]) for _, g in d.groupby("decision_id")], dtype=float)
    rho = rho[np.isfinite(rho)]
    # NaN (no warning) when no decision has two distinct predictions and deltas: nothing to correlate
    return float(rho.mean()) if rho.size else float("nan")


def fit_combiner(train: Any, train_student: Sequence[float], dev: Any | None = None,
                 dev_student: Sequence[float] | None = None, min_delta: float = 0.05,
                 fit_on: str = "train", features: str = "auto", k_min: int | str = "auto",
                 dev_domains: Sequence[str] | None = None,
                 candidates: Sequence[str] | None = None) -> tuple[Combiner, float | None, dict[str, Any]]:
    """Fit the combiner, report on both splits, choose τ and the floor `k_min`.

    `fit_on="train"`: fit on the training rows, choose τ on dev (train when there is no dev split). The
    student's scores of its own training rows are in sample, so a combiner fitted there may trust the student
    more than new decisions warrant. `fit_on="heldout"`: fit on the dev rows, whose student scores are out of
    sample (classic stacking), and judge it and choose τ on out-of-fold predictions (GroupKFold over dev
    decisions); falls back to `"train"` with fewer than `MIN_HELDOUT_DECISIONS` dev decisions.

    `features="auto"` fits every variant of `candidates` (default: all of `VARIANTS` — the linear model over every
    signal, the student alone, rank fusions of the student with BM25 and cosine, and the retrieval signals alone)
    and keeps the best on the dev decisions (`choose_variant`): key hit at `SELECT_K` cards in the worst dev domain
    relative to that domain's best retrieval signal, so the exported scorer is never below its best signal on a
    dev domain; the dev Spearman with the labels where dev has no key cards. A variant name forces that one.

    Args:
        train / dev: label rows (DataFrames with the `NEEDED` columns, `delta`, `decision_id`; `is_key` for the key
            hit).
        train_student / dev_student: the student's score of each row.
        min_delta: the delta (nats per action token) above which the teacher says a card matters.
        fit_on: "train" or "heldout" (see above).
        features: "auto" or a name of `VARIANTS` (see above).
        k_min: "auto" (`choose_k_min` on the rows τ is chosen on) or a number of cards, forced.
        dev_domains: the training domain of each dev row (pooled dev of several domains): the variant is chosen on
            each domain's key hit, and the report adds τ chosen on each domain's rows alone
            (`threshold.by_domain`); the shipped τ stays the pooled one.
        candidates: the variants `auto` chooses among (default: every one).

    Returns:
        (combiner, threshold, report) — the report has per-split Spearman (mean over decisions) of the student
        alone and of the combiner against the labels (for `heldout`, dev's figure is out of fold), `fitted_on`,
        `features` (the chosen variant) and why, each variant's dev Spearman and dev key hit per domain,
        `threshold` and `floor` (`k_min` and its F1s, `choose_k_min`).
    """
    if fit_on not in ("train", "heldout"):
        raise ValueError(f"combiner fit_on must be 'train' or 'heldout', got {fit_on!r}")
    if features != "auto" and features not in VARIANTS:
        raise ValueError(f"combiner features must be 'auto' or one of {sorted(VARIANTS)}, got {features!r}")
    names = list(candidates if candidates is not None else VARIANTS) if features == "auto" else [features]
    unknown = [n for n in names if n not in VARIANTS]
    if unknown or not names:
        raise ValueError(f"combiner candidates must be names of {sorted(VARIANTS)}, got {list(names)!r}")
    if k_min != "auto" and (isinstance(k_min, bool) or not isinstance(k_min, int) or k_min < 0):
        raise ValueError(f"combiner k_min must be 'auto' or a whole number of cards ≥ 0, got {k_min!r}")
    has_dev = dev is not None and dev_student is not None and len(dev) > 0
    n_dev = int(dev["decision_id"].nunique()) if has_dev else 0
    if fit_on == "heldout" and n_dev < MIN_HELDOUT_DECISIONS:
        logger.warning("combiner: %d held-out decisions (< %d): fitted on the training rows instead", n_dev,
                       MIN_HELDOUT_DECISIONS)
        fit_on = "train"
    if has_dev and dev_domains is not None and len(dev_domains) != len(dev):
        raise ValueError(f"dev_domains has {len(dev_domains)} entries for {len(dev)} dev rows")
    x_train, y_train = feature_matrix(train, train_student), train["delta"].to_numpy(float)
    g_train = train["decision_id"].to_numpy()
    x_dev, y_dev = (feature_matrix(dev, dev_student), dev["delta"].to_numpy(float)) if has_dev else (None, None)
    g_dev = dev["decision_id"].to_numpy() if has_dev else None
    fitted: dict[str, tuple[Combiner, np.ndarray | None]] = {}
    for name in names:
        fusion, use = VARIANTS[name]
        if fusion == "rank":   # nothing but the calibration is fitted: the dev ranking is the signals' own
            comb = fit_rank(x_dev, y_dev, g_dev, use) if fit_on == "heldout" else fit_rank(x_train, y_train,
                                                                                            g_train, use)
            fitted[name] = (comb, comb.predict(x_dev, g_dev) if has_dev else None)
        elif fit_on == "heldout":
            fitted[name] = (fit(x_dev, y_dev, use=use), _out_of_fold(x_dev, y_dev, g_dev, use=use))
        else:
            comb = fit(x_train, y_train, use=use)
            fitted[name] = (comb, comb.predict(x_dev) if has_dev else None)
    dev_rho = {n: _mean_spearman(dev, p) for n, (_, p) in fitted.items() if p is not None}
    dev_hits = {n: key_hits_by_domain(dev, p, dev_domains) for n, (_, p) in fitted.items() if p is not None}
    chosen, why = choose_variant(dev_hits, dev_rho, names) if len(names) > 1 else (names[0], "forced")
    comb, dev_pred = fitted[chosen]
    if chosen in BASELINES and len(names) > 1:
        logger.warning("combiner: no variant with the student reaches the best retrieval signal on every dev "
                       "domain; the scorer ranks by %s alone (dev key hit %s)", chosen, dev_hits.get(chosen))
    report: dict[str, Any] = {"fitted_on": fit_on, "features": chosen, "fusion": comb.fusion, "uses": comb.uses(),
                              "chosen_by": why, "dev_spearman_by_features": dev_rho,
                              "dev_key_hit_by_features": dev_hits}
    train_pred = comb.predict(x_train, g_train)
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
