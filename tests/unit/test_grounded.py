"""Grounded targets on a hand-made episode, and hybrid = teacher + λ·grounded row by row (no model)."""

import json
import math

import pandas as pd
import pytest

from damc.cards import cards_before, encode_episode
from damc.episodes import Episode, decision_points
from damc.teacher.grounded import Grounded, grounded_targets, history_values
from damc.teacher.hybrid import choose_lambda, hybrid_frame


def _call(name, args, cid):
    return {"role": "assistant", "content": None,
            "tool_calls": [{"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]}


def _tool(cid, content):
    return {"role": "tool", "tool_call_id": cid, "content": json.dumps(content)}


def episode() -> Episode:
    """Ana's two orders: she returns the item of the delivered one (#W111); the pending one (#W222) is the rival."""
    msgs = [
        {"role": "system", "content": "You are a retail agent."},
        {"role": "user", "content": "Hi, I'm Ana, ana.k@example.com. I want to return something."},        # 1
        _call("find_user", {"email": "ana.k@example.com"}, "c1"),                                          # 2
        _tool("c1", {"user_id": "ana_42", "orders": ["#W111", "#W222"]}),                                   # 3
        _call("get_order", {"order_id": "#W111"}, "c2"),                                                   # 4
        _tool("c2", {"order_id": "#W111", "status": "delivered", "item_id": "I-9001"}),                     # 5
        _call("get_order", {"order_id": "#W222"}, "c3"),                                                   # 6
        _tool("c3", {"order_id": "#W222", "status": "pending", "item_id": "I-7007"}),                       # 7
        {"role": "assistant", "content": "Which order would you like to return from?"},                     # 8
        {"role": "user", "content": "the delivered one please"},                                            # 9
        _call("return_items", {"order_id": "#W111", "item_ids": ["I-9001"]}, "c4"),                         # 10
    ]
    return Episode("ana", msgs, "retail", [], {"10": ['return_items(order_id="#W222", item_ids=["I-7007"])']},
                   {"key_card_ids": {"10": ["ana:4:0"]}})


def _at(ep, index):
    dp = next(d for d in decision_points(ep) if d.index == index)
    return dp, cards_before(encode_episode(ep), dp.current_turn_start)


def test_the_key_card_is_highest_the_rival_lowest_and_a_superseded_copy_below_its_successor():
    dp, cards = _at(episode(), 10)
    by_pos = {c.position: c for c in cards}
    assert set(history_values(dp, cards)) == {"#W111", "I-9001"}
    g = grounded_targets(dp, cards)
    t = {c.position: x for c, x in zip(cards, g.targets)}
    why = {c.position: r for c, r in zip(cards, g.reasons)}
    key = next(p for p, c in by_pos.items() if c.card_id == "ana:4:0")
    assert key == 4 and t[key] == pytest.approx(1.0) and max(t.values()) == t[key]     # both values, newest holder
    # the order list (position 2) holds #W111 too, but the order's own record (4) repeats it later: superseded
    assert why[2] == "superseded" and 0.5 <= t[2] < t[key]
    # idf: #W111 has two holders, I-9001 one -> u = 1/3, 2/3; the list keeps half of #W111's third
    assert t[2] == pytest.approx(0.5 + 0.5 * (1 / 3) * 0.5)
    assert why[6] == "confuser" and t[6] == -1.0 and min(t.values()) == t[6]           # the rival order
    assert t[1] == 0.0 and why[1] == "neutral"                                          # no features: no hard negative
    # supersession off: the earlier copy is no longer graded down
    g1 = grounded_targets(dp, cards, superseded=1.0, value_weight="uniform")
    assert dict(zip([c.position for c in cards], g1.targets))[2] == pytest.approx(0.75)


def test_a_top_retrieval_card_holding_none_of_the_gold_values_is_a_hard_negative():
    dp, cards = _at(episode(), 10)
    feats = {c.card_id: {"bm25": 0.0, "cosine": 0.1} for c in cards}
    user = next(c for c in cards if c.position == 1)
    lst = next(c for c in cards if c.position == 2)
    feats[user.card_id] = {"bm25": 5.0, "cosine": 0.9}      # the best by both, but holds nothing the call used
    feats[lst.card_id] = {"bm25": 4.0, "cosine": 0.8}       # also a top card, but holds #W111: stays positive
    g = grounded_targets(dp, cards, feats, hard_k=1)
    t = dict(zip([c.position for c in cards], g.targets))
    assert t[1] == -0.5 and t[2] > 0.5 and t[6] == -1.0
    assert grounded_targets(dp, cards, feats, hard_k=0).targets == grounded_targets(dp, cards).targets


def test_a_value_the_current_turn_repeats_is_not_history_only():
    ep = episode()
    ep.messages[9] = {"role": "user", "content": "the delivered one please, #W111"}
    dp, cards = _at(ep, 10)
    assert history_values(dp, cards) == ["I-9001"]
    t = dict(zip([c.position for c in cards], grounded_targets(dp, cards).targets))
    assert t[4] == pytest.approx(1.0) and t[2] == -1.0     # the order list: #W111 (in the turn now) and the rival


def test_a_text_reply_has_no_grounded_target_and_bad_settings_are_refused():
    dp, cards = _at(episode(), 8)
    with pytest.raises(ValueError, match="text reply"):
        grounded_targets(dp, cards)
    dp, cards = _at(episode(), 10)
    with pytest.raises(ValueError, match="value_weight"):
        grounded_targets(dp, cards, value_weight="tfidf")
    res = Grounded().estimate(None, dp, cards)
    assert res.n_forward == 0 and all(math.isnan(x) for x in res.logp_with)
    assert list(res.deltas) == grounded_targets(dp, cards).targets


def _rows(decision, episode_id, cards, deltas, est, is_key=None):
    return [{"decision_id": decision, "episode_id": episode_id, "card_id": c, "decision_text": f"q {decision}",
             "card_text": f"card {c}", "delta": d, "estimator": est, "teacher": "t" if est != "grounded" else est,
             "logp_full": -1.0 if est != "grounded" else math.nan, "logp_without": -2.0 if est != "grounded"
             else math.nan, "n_action_tokens": 3, "is_key": (is_key or [False] * len(cards))[i]}
            for i, (c, d) in enumerate(zip(cards, deltas))]


def test_hybrid_is_teacher_plus_lambda_grounded_row_by_row():
    teacher = pd.DataFrame(_rows("e1@5", "e1", ["a", "b", "c"], [0.2, -0.1, 0.0], "loi")
                           + _rows("e1@7", "e1", ["a", "b"], [0.3, 0.1], "loi"))          # e1@7: a text reply
    grounded = pd.DataFrame(_rows("e1@5", "e1", ["a", "b", "c"], [1.0, -1.0, 0.0], "grounded")
                            + _rows("e2@3", "e2", ["x", "y"], [0.75, -0.5], "grounded"))  # the teacher skipped e2
    out, counts = hybrid_frame(teacher, grounded, 0.1)
    d = {(r.decision_id, r.card_id): r for r in out.itertuples()}
    assert d["e1@5", "a"].delta == pytest.approx(0.2 + 0.1 * 1.0)
    assert d["e1@5", "b"].delta == pytest.approx(-0.1 - 0.1)
    assert d["e1@5", "a"].estimator == "loi+grounded" and d["e1@5", "a"].logp_full == -1.0
    assert d["e1@7", "a"].delta == 0.3 and d["e1@7", "a"].estimator == "loi"             # teacher only
    assert d["e2@3", "x"].delta == pytest.approx(0.075) and d["e2@3", "x"].estimator == "grounded"
    assert counts == {"summed_rows": 3, "teacher_only_rows": 2, "teacher_rows_without_grounded_card": 0,
                      "teacher_only_decisions": 1, "grounded_only_rows": 2, "grounded_only_rows_dropped": 0,
                      "rows": 7, "decisions": 3}
    out0, _ = hybrid_frame(teacher, grounded, 0.0, grounded_only=False)
    assert sorted(out0.delta) == sorted(teacher.delta) and len(out0) == len(teacher)
    bad = grounded.copy()
    bad.loc[0, "card_text"] = "another rendering"
    with pytest.raises(ValueError, match="reads differently"):
        hybrid_frame(teacher, bad, 0.1)
    with pytest.raises(ValueError, match="lam"):
        hybrid_frame(teacher, grounded, -1.0)


def test_lambda_is_chosen_on_the_dev_episodes_by_the_documented_criterion():
    t_rows, g_rows = [], []
    for e in range(10):                                  # the teacher misses the key card; grounded finds it
        cards = ["k", "n1", "n2", "n3"]
        key = [True, False, False, False]
        t_rows += _rows(f"e{e}@9", f"e{e}", cards, [0.0, 0.3, 0.2, 0.1], "loi", key)
        g_rows += _rows(f"e{e}@9", f"e{e}", cards, [1.0, 0.0, 0.0, -0.5], "grounded", key)
    teacher, grounded = pd.DataFrame(t_rows), pd.DataFrame(g_rows)
    lam, table = choose_lambda(teacher, grounded, grid=(0.0, 0.05, 0.2, 1.0))
    rows = {r["lam"]: r for r in table}
    assert rows[0.0]["spearman_vs_teacher"] == pytest.approx(1.0) and rows[math.inf]["score"] is None
    assert lam == max((x for x in rows if x != math.inf), key=lambda x: (rows[x]["score"], -x))
    assert 0 < lam < 1.0 and rows[lam]["dev_decisions"] == 2     # 20 % of 10 episodes
    # a caller's criterion (e.g. a student's dev metric) decides instead
    lam2, _ = choose_lambda(teacher, grounded, grid=(0.0, 0.05, 0.2, 1.0), criterion=lambda rows, lam: -abs(lam - 0.2))
    assert lam2 == 0.2


def test_hybrid_refuses_label_sets_of_other_settings(tmp_path):
    from damc.teacher.hybrid import check_same_settings

    a, b = tmp_path / "a.jsonl", tmp_path / "copy" / "a.jsonl"
    b.parent.mkdir()
    a.write_text("{}\n")
    b.write_text("{}\n")
    for name, data, top_n in (("t", a, 16), ("g", b, 16), ("g2", b, 8)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "label_config.json").write_text(json.dumps(
            {"data": str(data), "memory": {"top_n": top_n}, "render_version": "3"}))
    check_same_settings(tmp_path / "t", tmp_path / "g")              # a copied split: same bytes, accepted
    with pytest.raises(ValueError, match="'memory'"):
        check_same_settings(tmp_path / "t", tmp_path / "g2")
    b.write_text('{"other": 1}\n')
    with pytest.raises(ValueError, match="'data'"):
        check_same_settings(tmp_path / "t", tmp_path / "g")
