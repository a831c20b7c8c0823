"""The learned combiner: fitted with scikit-learn, stored as plain numbers, applied with numpy, calibrated to the
labels' delta units, and used by the runtime's `scorer=` path."""

import json

import numpy as np
import pandas as pd
import pytest

from damc.cards import Card
from damc.runtime.combiner import FEATURES, Combiner, base_features, candidate_features
from damc.scorer.combiner import choose_k_min, choose_threshold, feature_matrix, fit, fit_combiner


def _rows(n_dec=30, n_cards=12, seed=0):
    """Label-like rows whose delta depends on the student score and on recency, with noise."""
    rng = np.random.default_rng(seed)
    rows, student = [], []
    for d in range(n_dec):
        for c in range(n_cards):
            s = rng.normal()
            age = int(rng.integers(0, 40))
            kind = ["tool_result", "tool_error", "user", "assistant"][c % 4]
            delta = 0.3 * max(s, 0) + 0.2 * (age < 5) - 0.05 * (kind == "assistant") + rng.normal(0, 0.02)
            rows.append({"decision_id": f"d{d}", "card_id": f"c{c}", "delta": delta, "card_age": age, "card_kind": kind,
                         "feat_bm25": rng.random(), "feat_cosine": rng.random(), "feat_pinned": float(kind == "tool_error")})
            student.append(s)
    return pd.DataFrame(rows), np.array(student)


def test_the_fitted_combiner_predicts_deltas_in_label_units_and_round_trips(tmp_path):
    train, st = _rows(seed=0)
    dev, st_dev = _rows(seed=1)
    comb, tau, report = fit_combiner(train, st, dev, st_dev, min_delta=0.1)
    pred = comb.predict(feature_matrix(dev, st_dev))
    truth = dev["delta"].to_numpy()
    # calibrated: predicted deltas are in the labels' units (bin means match), the sign is kept
    order = np.argsort(pred)
    for part in np.array_split(order, 4):
        assert abs(pred[part].mean() - truth[part].mean()) < 0.05
    assert report["dev"]["spearman_combiner"] > report["dev"]["spearman_student"] > 0
    assert report["threshold"]["chosen_on"] == "dev" and tau is not None
    assert report["features"] == "all"                        # recency helps on dev too: every signal is kept
    assert report["dev_spearman_by_features"]["all"] > report["dev_spearman_by_features"]["student"]
    assert (truth[pred >= tau] >= 0.1).mean() > 0.7          # what clears τ mostly matters to the teacher
    comb.save(tmp_path / "combiner.json")
    again = Combiner.load(tmp_path / "combiner.json")
    np.testing.assert_array_equal(again.predict(feature_matrix(dev, st_dev)), pred)
    assert "pickle" not in (tmp_path / "combiner.json").read_text() and again.units == "nats per action token"


def test_a_heldout_fit_does_not_inherit_the_students_in_sample_confidence(caplog):
    """On its training rows the student has fitted the labels (here: exactly); on new decisions it is noise and
    recency is what predicts the teacher. Fitted on the training rows the combiner trusts the student; fitted
    on the held-out rows (out-of-sample student scores) it ranks new decisions by what really predicts them."""
    from damc.ranking import spearman

    def rows(seed, n_dec=20):
        df, _ = _rows(n_dec=n_dec, seed=seed)
        df["delta"] = 0.4 * (df["card_age"] < 8) + np.random.default_rng(seed + 9).normal(0, 0.02, len(df))
        return df

    train, dev, new = rows(0), rows(1), rows(2)
    noise = lambda df, s: np.random.default_rng(s).normal(size=len(df))   # noqa: E731
    st_train = train["delta"].to_numpy() * 10                             # in sample: the student "knows" them
    by_train, _, _ = fit_combiner(train, st_train, dev, noise(dev, 1), fit_on="train")
    by_heldout, tau, rep = fit_combiner(train, st_train, dev, noise(dev, 1), fit_on="heldout")
    assert rep["fitted_on"] == "heldout" and rep["threshold"]["chosen_on"] == "dev (out of fold)" and tau is not None

    def rho(comb):
        pred = comb.predict(feature_matrix(new, noise(new, 2)))
        return np.mean([spearman(g["p"], g["delta"]) for _, g in new.assign(p=pred).groupby("decision_id")])

    r_heldout, r_train = rho(by_heldout), rho(by_train)        # measured: 0.48 vs 0.10
    assert r_heldout > 0.35 and r_heldout > r_train + 0.25, (r_heldout, r_train)
    with caplog.at_level("WARNING"):
        _, _, few = fit_combiner(train, st_train, dev[dev.decision_id.isin(["d0", "d1"])],
                                 noise(dev, 1)[:24], fit_on="heldout")
    assert few["fitted_on"] == "train" and "2 held-out decisions" in caplog.text
    with pytest.raises(ValueError, match="fit_on must be 'train' or 'heldout'"):
        fit_combiner(train, st_train, dev, noise(dev, 1), fit_on="dev")


def test_auto_features_drop_signals_that_only_helped_on_the_training_rows():
    """BM25 tracks the teacher on the training rows but is noise on dev: `features=auto` keeps the student alone
    (the combiner is then a calibration of the student) and ranks dev better than the all-signal fit."""
    rng = np.random.default_rng(5)

    def rows(n_dec, spurious):
        out, st = [], []
        for d in range(n_dec):
            for c in range(10):
                s_, b = rng.normal(), rng.random()
                delta = 0.2 * s_ + (1.0 * b if spurious else 0.0) + rng.normal(0, 0.05)
                out.append({"decision_id": f"d{d}", "card_id": f"c{c}", "delta": delta, "card_age": 3,
                            "card_kind": "tool_result", "feat_bm25": b, "feat_cosine": 0.5, "feat_pinned": 0.0})
                st.append(s_)
        return pd.DataFrame(out), np.array(st)

    train, st = rows(30, spurious=True)
    dev, st_dev = rows(15, spurious=False)
    comb, _, rep = fit_combiner(train, st, dev, st_dev)
    by = rep["dev_spearman_by_features"]
    assert rep["features"] == "student" and by["student"] > by["all"] + 0.1, by
    assert comb.coef[FEATURES.index("bm25")] == 0.0 and comb.coef[FEATURES.index("student")] > 0
    forced, _, rep_all = fit_combiner(train, st, dev, st_dev, features="all")
    assert rep_all["features"] == "all" and forced.coef[FEATURES.index("bm25")] > 0
    with pytest.raises(ValueError, match="features must be 'auto' or one of"):
        fit_combiner(train, st, dev, st_dev, features="bm25")


def test_choose_threshold_maximises_f1():
    pred = np.array([0.9, 0.8, 0.7, 0.2, 0.1])
    delta = np.array([0.5, 0.4, 0.0, 0.3, 0.0])
    tau, f1 = choose_threshold(pred, delta, 0.3)
    assert tau == pytest.approx(0.2) and f1 == pytest.approx(6 / 7)   # keep 4: all 3 positives, 1 false one
    assert choose_threshold(pred, np.zeros(5), 0.3) == (None, 0.0)


def test_choose_k_min_picks_the_top_k_rule_with_the_best_f1_whatever_the_scale():
    # 3 decisions of 6 cards; the two best-ranked cards of each are the ones that matter, on shifted scales
    pred = np.concatenate([np.array([6, 5, 4, 3, 2, 1.0]) + off for off in (0.0, -100.0, 50.0)])
    delta = np.tile([0.5, 0.4, 0.0, 0.0, 0.0, 0.0], 3)
    groups = np.repeat(["a", "b", "c"], 6)
    k, rep = choose_k_min(pred, delta, groups, 0.3)
    assert k == 2 == rep["top_k_best"] and rep["f1_top_k"] == pytest.approx(1.0)
    # τ = 5 fits decision a's scale only: it keeps none of b and all of c; the floor gives b its two best back
    k, rep = choose_k_min(pred, delta, groups, 0.3, tau=5.0)
    assert k == 2 and rep["f1_threshold_alone"] == pytest.approx(8 / 14)    # kept 8, 4 of the 6 that matter
    assert rep["f1_threshold_and_floor"] == pytest.approx(12 / 16)         # kept 10, all 6
    # one more matters in decision a only: F1 of top-2 (12/13) still beats top-3 (14/16)
    delta[2] = 0.5
    assert choose_k_min(pred, delta, groups, 0.3)[0] == 2
    assert choose_k_min(pred, np.zeros(18), groups, 0.3)[0] == 0          # nothing matters: no floor to learn
    # every card matters: the best top-k rule keeps all six, capped at what τ keeps in the median decision (2)
    k, rep = choose_k_min(pred, np.ones(18), groups, 0.3, tau=5.0)
    assert (rep["top_k_best"], rep["cap_median_kept_by_tau"], k) == (6, 2, 2)
    assert choose_k_min(pred, np.ones(18), groups, 0.3, tau=1e9)[0] == 1    # τ keeps none: a floor of one


def test_tau_and_k_min_are_chosen_on_the_pooled_dev_of_every_domain():
    """Two training domains whose deltas sit on different scales: τ is the pooled one (reported beside each
    domain's own), and k_min comes from the same pooled rows."""
    train, st = _rows(seed=0)
    dev_a, st_a = _rows(n_dec=10, seed=1)
    dev_b, st_b = _rows(n_dec=10, seed=2)
    dev_b = dev_b.assign(decision_id="b" + dev_b["decision_id"], delta=dev_b["delta"] - 0.1)   # a lower scale
    dev, st_dev = pd.concat([dev_a, dev_b], ignore_index=True), np.concatenate([st_a, st_b])
    doms = ["a"] * len(dev_a) + ["b"] * len(dev_b)
    comb, tau, rep = fit_combiner(train, st, dev, st_dev, min_delta=0.1, dev_domains=doms)
    by = rep["threshold"]["by_domain"]
    assert rep["threshold"]["pooled_domains"] == ["a", "b"] and by["a"]["decisions"] == by["b"]["decisions"] == 10
    pred = comb.predict(feature_matrix(dev, st_dev))
    assert tau == choose_threshold(pred, dev["delta"].to_numpy(), 0.1)[0]                 # the pooled τ ships
    assert (tau, rep["k_min"]) == (rep["threshold"]["tau"], rep["floor"]["k_min"]) and rep["k_min"] >= 1
    assert rep["k_min"] == choose_k_min(pred, dev["delta"].to_numpy(), dev["decision_id"].to_numpy(), 0.1, tau)[0]
    assert rep["floor"]["chosen_on"] == "dev"
    _, _, forced = fit_combiner(train, st, dev, st_dev, min_delta=0.1, k_min=0)
    assert forced["k_min"] == 0 and forced["floor"]["chosen_by"] == "forced (combiner.k_min)"
    with pytest.raises(ValueError, match="k_min must be 'auto' or a whole number"):
        fit_combiner(train, st, dev, st_dev, k_min=-1)
    with pytest.raises(ValueError, match="dev_domains has 3 entries"):
        fit_combiner(train, st, dev, st_dev, dev_domains=["a"] * 3)


def test_bad_combiner_files_are_refused_with_the_reason(tmp_path):
    comb = fit(np.random.default_rng(0).normal(size=(40, len(FEATURES))), np.random.default_rng(1).normal(size=40))
    good = json.loads(json.dumps(comb.__dict__))
    f = tmp_path / "c.json"
    f.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        Combiner.load(f)
    f.write_text(json.dumps({k: v for k, v in good.items() if k != "coef"}))
    with pytest.raises(ValueError, match="missing coef"):
        Combiner.load(f)
    f.write_text(json.dumps({**good, "features": good["features"][:-1]}))
    with pytest.raises(ValueError, match="refit the combiner"):
        Combiner.load(f)


def test_runtime_features_are_what_the_labels_store():
    cards = [Card("e:1", "e", 1, "user", "user", "my order is 88412", meta={"age": 9}),
             Card("e:2:0", "e", 2, "tool", "tool_error", "get_order(order_id=88412) -> error", tool_name="get_order",
                  arguments={"order_id": "88412"}, status="error", error={"code": 500, "message": "x"},
                  meta={"age": 0}),
             Card("e:4", "e", 4, "assistant", "assistant", "the weather is sunny", meta={"age": 3})]
    f = base_features("order 88412?", cards, cosine=[0.1, 0.2, 0.3])
    assert f["bm25"].max() == pytest.approx(1.0) and f["bm25"][2] == 0.0
    assert f["log_age"].tolist() == pytest.approx(np.log1p([9, 0, 3]).tolist())
    assert f["pinned"].tolist() == [0.0, 1.0, 0.0] and f["kind_tool_error"].tolist() == [0.0, 1.0, 0.0]
    x = candidate_features("order 88412?", cards, student=[1.0, 2.0, 3.0])
    assert x.shape == (3, len(FEATURES)) and x[:, FEATURES.index("student")].tolist() == [1.0, 2.0, 3.0]


def test_cards_on_one_isotonic_plateau_keep_the_linear_order():
    """A step-shaped calibration map would tie every card on a plateau; the tie-break keeps the linear score's
    order while staying within 1e-3 nats/token of the calibrated value."""
    from damc.runtime.combiner import TIE_BREAK

    comb = Combiner(features=["student"], mean=[0.0], scale=[1.0], coef=[1.0], intercept=0.0,
                    iso_x=[-1.0, 0.0, 1.0, 2.0], iso_y=[0.0, 0.5, 0.5, 1.0])   # a plateau over [0, 1]
    x = np.array([[0.2], [0.9], [0.5], [-0.5]])
    pred = comb.predict(x)
    assert list(np.argsort(-pred)) == [1, 2, 0, 3]                             # no ties: the linear order
    plain = np.interp(x[:, 0], comb.iso_x, comb.iso_y)
    assert np.all(np.abs(pred - plain) <= TIE_BREAK * np.abs(x[:, 0]) + 1e-6)


def _cascade_setup():
    """Six cards whose BM25 with the query falls card by card, a combiner weighting student 1.0 and BM25 0.5, and a
    scorer that records what it reads (and rates the *lexically weakest* cards highest)."""
    from damc.runtime.valuers import ScorerValuer

    words = "order 88412 refund replacement berlin office".split()
    cards = [Card(f"c{i}", "s", i, "user", "user", " ".join(words[: 6 - i]) + " x")
             for i in range(6)]
    n = len(FEATURES)
    coef = [0.0] * n
    coef[FEATURES.index("student")], coef[FEATURES.index("bm25")] = 1.0, 0.5
    comb = Combiner(features=list(FEATURES), mean=[0.0] * n, scale=[1.0] * n, coef=coef, intercept=0.0,
                    iso_x=[-100.0, 100.0], iso_y=[-100.0, 100.0])

    class Recording:
        combiner = comb
        seen: list[list[str]] = []

        def score(self, q, cs):
            self.seen.append([c.card_id for c in cs])
            return np.array([float(c.card_id[1:]) for c in cs])    # c5 best, c0 worst

    return cards, comb, Recording, ScorerValuer


def test_max_scored_cross_encodes_only_the_cheap_signals_best_and_ranks_the_rest_below_them():
    cards, comb, Recording, ScorerValuer = _cascade_setup()
    query = "user: order 88412 refund replacement berlin office"
    full = ScorerValuer(Recording()).value(query, cards)
    rec = Recording()
    rec.seen = []
    v = ScorerValuer(rec, max_scored=3).value(query, cards)
    assert rec.seen == [["c0", "c1", "c2"]]                 # the three best by BM25 (the cheap prior), nothing else
    np.testing.assert_allclose(v[:3], full[:3], rtol=1e-6)  # cross-encoded cards: exactly the full path's values
    assert v[3:].max() < v[:3].min()                         # never outranking a card the student read
    assert v[3] > v[4] > v[5]                                # the rest keep the cheap prior's order
    _, notes = ScorerValuer(rec, max_scored=3).value_with_notes(query, cards)
    assert notes == [None] * 3 + ["not_cross_encoded"] * 3     # the cards the student never read, named
    # at or above the candidate count, and at 0, every card is scored: the full path, bit for bit
    rec.seen = []
    np.testing.assert_array_equal(ScorerValuer(rec, max_scored=6).value(query, cards), full)
    np.testing.assert_array_equal(ScorerValuer(rec, max_scored=0).value(query, cards), full)
    assert rec.seen[:2] == [[c.card_id for c in cards]] * 2
    assert ScorerValuer(rec, max_scored=0).value_with_notes(query, cards)[1] == [None] * 6
    with pytest.raises(ValueError, match="max_scored"):
        ScorerValuer(rec, max_scored=-1)


def test_the_runtime_and_the_harness_take_max_scored_from_the_memory_config():
    from damc.eval.policies import make_policy
    from damc.eval.policy_base import PolicyEnv
    from damc.runtime.memory import MemoryConfig, default_valuer

    cards, comb, Recording, _ = _cascade_setup()
    assert default_valuer(Recording(), MemoryConfig(max_scored=4)).inner.max_scored == 4
    assert default_valuer(Recording()).inner.max_scored == MemoryConfig().max_scored
    policy = make_policy("damc", scorer="unused")
    policy.scorer = Recording()                              # an object, so nothing is loaded from disk
    env = PolicyEnv(count_tokens=len, memory=MemoryConfig(max_scored=5))
    assert policy.make_valuer(env).inner.max_scored == 5


def _keyed_rows(n_dec, domain, student, seed):
    """Decisions of 10 cards with one key card each (`is_key`, grounded-like deltas: key 1, top-cosine non-key
    -0.5, the rest 0): cosine finds the key card in about two decisions of three; the student scores the key card
    `student` (margin, noise sd) above the others: (2, 0.3) finds it, (1, 1) is weak, (0, 1) is noise."""
    rng = np.random.default_rng(seed)
    out, st = [], []
    for d in range(n_dec):
        key = int(rng.integers(10))
        cos = rng.random(10) * 0.5
        if rng.random() < 0.67:
            cos[key] = 0.9
        for c in range(10):
            is_key = c == key
            delta = 1.0 if is_key else (-0.5 if cos[c] == cos.max() else 0.0)
            out.append({"decision_id": f"{domain}{d}", "card_id": f"c{c}", "delta": delta, "is_key": is_key,
                        "card_age": int(rng.integers(1, 30)), "card_kind": "tool_result", "feat_bm25": rng.random(),
                        "feat_cosine": float(cos[c]), "feat_pinned": 0.0, "domain": domain})
            st.append((student[0] if is_key else 0.0) + rng.normal(0, student[1]))
    return pd.DataFrame(out), np.array(st)


STRONG, WEAK, NOISE = (2.0, 0.3), (1.0, 1.0), (0.0, 1.0)


def _two_domains(student_a, student_b, seed=0):
    parts = [_keyed_rows(n, dom, finds, seed + i) for i, (n, dom, finds) in enumerate(
        [(40, "a", student_a), (40, "b", student_b), (30, "a", student_a), (30, "b", student_b)])]
    train = pd.concat([parts[0][0], parts[1][0]], ignore_index=True)
    dev = pd.concat([parts[2][0], parts[3][0]], ignore_index=True)
    return train, np.concatenate([parts[0][1], parts[1][1]]), dev, np.concatenate([parts[2][1], parts[3][1]])


def test_the_combiner_is_never_below_its_best_retrieval_signal_on_a_dev_domain(caplog):
    """The student finds the key card in domain a and is weaker than cosine in b: the kept variant's key hit at four
    cards is at least that of BM25, cosine and their fusion in *each* dev domain, and it still uses the student.
    Where the student is noise everywhere and the candidates are the student's own variants and the retrieval
    signals, a retrieval signal is kept, with a warning."""
    from damc.scorer.combiner import BASELINES, VARIANTS

    train, st, dev, st_dev = _two_domains(STRONG, WEAK)
    comb, _, rep = fit_combiner(train, st, dev, st_dev, dev_domains=dev["domain"].tolist())
    hits = rep["dev_key_hit_by_features"]
    assert set(hits) == set(VARIANTS) and set(hits[rep["features"]]) == {"a", "b"}
    for dom in ("a", "b"):
        assert hits[rep["features"]][dom]["key_hit"] >= max(hits[b][dom]["key_hit"] for b in BASELINES), (dom, hits)
    assert hits["student"]["b"]["key_hit"] < hits["rank:cosine"]["b"]["key_hit"]   # the student alone fails b
    assert "student" in comb.uses() and rep["uses"] == comb.uses()
    assert hits[rep["features"]]["a"]["key_hit"] > hits["rank:cosine"]["a"]["key_hit"]   # and helps in a

    train, st, dev, st_dev = _two_domains(NOISE, NOISE, seed=7)
    with caplog.at_level("WARNING", logger="damc.scorer.combiner"):
        comb, _, rep = fit_combiner(train, st, dev, st_dev, dev_domains=dev["domain"].tolist(),
                                    candidates=["student", "rank:student+cosine", *BASELINES])
    assert set(rep["dev_key_hit_by_features"]) == {"student", "rank:student+cosine", *BASELINES}
    assert rep["features"] in BASELINES and "student" not in comb.uses(), rep["features"]
    assert "no variant with the student reaches the best retrieval signal" in caplog.text


def test_a_rank_fusion_combiner_ranks_as_its_signals_do_and_round_trips(tmp_path):
    """`rank:bm25+cosine` orders one decision's candidates exactly as the cascade's first stage (`fused_order`);
    predicting many decisions at once (`groups`) equals predicting each alone; the file keeps the fusion, and a
    file with an unknown fusion is refused."""
    from damc.runtime.valuers.learned import fused_order
    from damc.scorer.combiner import fit_rank

    train, st, dev, st_dev = _two_domains(STRONG, STRONG)
    x = feature_matrix(train, st)
    comb = fit_rank(x, train["delta"].to_numpy(float), train["decision_id"].to_numpy(), ("bm25", "cosine"))
    assert comb.fusion == "rank" and comb.uses() == ["bm25", "cosine"]
    xd, groups = feature_matrix(dev, st_dev), dev["decision_id"].to_numpy()
    together = comb.predict(xd, groups)
    for g in np.unique(groups)[:10]:
        m = groups == g
        alone = comb.predict(xd[m])
        np.testing.assert_allclose(together[m], alone, rtol=0, atol=1e-6)
        assert np.argsort(-alone, kind="stable").tolist() == fused_order(xd[m]).tolist()
    comb.save(tmp_path / "combiner.json")
    again = Combiner.load(tmp_path / "combiner.json")
    assert again.fusion == "rank" and np.array_equal(again.predict(xd, groups), together)
    bad = json.loads((tmp_path / "combiner.json").read_text()) | {"fusion": "softmax"}
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    with pytest.raises(ValueError, match=r"bad.json: fusion must be one of \('linear', 'rank'\), got 'softmax'"):
        Combiner.load(tmp_path / "bad.json")


def test_a_one_decision_lead_on_a_small_dev_split_does_not_outrank_a_fusion_with_retrieval():
    """`choose_variant`: the student alone one decision ahead of the fusion in one domain (and tied in the other)
    is a near-tie, so the fusion — first in the order of preference — is kept; two decisions ahead, the student
    is; a variant below the best retrieval signal on a domain is never kept as a near-tie when another is not."""
    from damc.scorer.combiner import VARIANTS, choose_variant

    def h(a, b):   # key hits over 20 and 10 key decisions
        return {"a": {"key_hit": a / 20, "decisions": 20}, "b": {"key_hit": b / 10, "decisions": 10}}

    base = {"rank:bm25+cosine": h(12, 8), "rank:cosine": h(13, 9), "rank:bm25": h(10, 7)}
    rho = {}
    one = {**base, "student": h(19, 9), "rank:student+bm25+cosine": h(18, 9), "all": h(14, 9)}
    assert choose_variant(one, rho, list(VARIANTS))[0] == "rank:student+bm25+cosine"
    two = {**base, "student": h(19, 9), "rank:student+bm25+cosine": h(17, 9), "all": h(14, 9)}
    assert choose_variant(two, rho, list(VARIANTS))[0] == "student"
    below = {**base, "student": h(19, 9), "rank:student+bm25+cosine": h(19, 8), "all": h(14, 9)}
    assert choose_variant(below, rho, list(VARIANTS))[0] == "student"   # the fusion falls below cosine on b


def test_mean_spearman_is_the_mean_over_decisions_and_nan_without_a_warning_when_none_ranks():
    import warnings

    from damc.scorer.combiner import _mean_spearman

    rows = pd.DataFrame({"decision_id": ["a"] * 3 + ["b"] * 3 + ["c"] * 2,
                         "delta": [0.1, 0.2, 0.3, 0.3, 0.2, 0.1, 0.5, 0.5]})   # c: constant deltas, no rank
    assert _mean_spearman(rows, np.array([1, 2, 3, 1, 2, 3, 1, 2])) == pytest.approx((1.0 - 1.0) / 2)
    assert _mean_spearman(rows, np.array([1, 2, 3, 3, 2, 1, 0, 1])) == pytest.approx(1.0)
    flat = rows.assign(delta=0.2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")                  # numpy's "Mean of empty slice" would raise here
        assert np.isnan(_mean_spearman(flat, np.arange(8)))
