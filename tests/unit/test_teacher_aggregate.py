"""KNNValue: card values for a new decision from labels of similar past decisions (real MiniLM-L6)."""

import datasets
import numpy as np
import pytest

from damc.runtime.knn import KNNValue


def labels() -> datasets.Dataset:
    rows = []
    for i, oid in enumerate(["88412", "77120", "55301", "66019"]):
        dec = f"user: I want a refund for order {oid}, it arrived broken\ntools: get_order, refund_order"
        key = f'[tool_result] get_order(order_id="{oid}") -> {{"status": "delivered", "total": 59.9}}'
        filler = f'[tool_result] search_kb(query="store opening hours {i}") -> Our stores open at 9am.'
        rows += [{"decision_text": dec, "card_text": key, "delta": 12.0 + i},
                 {"decision_text": dec, "card_text": filler, "delta": 0.2}]
    for i in range(3):  # unrelated decisions where the store-hours card mattered
        dec = f"user: when does the store in city {i} open?\ntools: search_kb"
        rows.append({"decision_text": dec, "card_text": "[user] what about weekends?", "delta": 5.0})
    return datasets.Dataset.from_list(rows)


@pytest.fixture(scope="module")
def knn():
    return KNNValue(k=3, k_cards=4).fit(labels())


def test_seen_key_card_beats_filler_in_a_similar_decision(knn):
    q = "user: please refund order 88412, the box was damaged\ntools: get_order, refund_order"
    key = '[tool_result] get_order(order_id="88412") -> {"status": "delivered", "total": 59.9}'
    filler = '[tool_result] search_kb(query="store opening hours 0") -> Our stores open at 9am.'
    v = knn.value(q, [key, filler])
    assert v[0] == pytest.approx(12.0) and v[1] == pytest.approx(0.2)


def test_new_cards_of_a_new_episode_fall_back_to_similar_cards(knn):
    q = "user: I need my money back for order 31337, it is broken\ntools: get_order, refund_order"
    key = '[tool_result] get_order(order_id="31337") -> {"status": "delivered", "total": 20.0}'
    filler = '[tool_result] search_kb(query="store opening hours") -> Stores open at 10am on Sundays.'
    v = knn.value(q, [key, filler])
    assert v[0] > 5.0 and v[0] > 10 * v[1]
    assert np.all(np.isfinite(v))


def test_empty_inputs(knn):
    assert knn.value("anything", []).shape == (0,)
    with pytest.raises(ValueError):
        KNNValue().fit({"decision_text": [], "card_text": [], "delta": []})
