"""Selectors: top-k, threshold and time decay, all under a token budget."""

from __future__ import annotations

import numpy as np
import pytest

from damc.cards import Card
from damc.runtime.select import DecayHybrid, Threshold, TopK, decay_ages, default_budget
from damc.runtime.store import parse_time


def _card(i, ts=None):
    return Card(f"e:{i}", "e", i, "user", "user", f"message {i}", ts)


CARDS = [_card(i) for i in range(6)]
VALUES = np.array([0.9, 0.1, 0.5, 0.8, 0.3, 0.7], dtype=np.float32)


def test_default_budget():
    assert default_budget(8192, 2000) == int(6192 * 0.65)
    assert default_budget(1000, 1200) == 0
    with pytest.raises(ValueError):
        default_budget(100, 10, fraction=1.5)


def test_topk_respects_k_and_budget():
    sel = TopK(3).select(CARDS, VALUES, [10] * 6, budget=1000)
    assert sel.kept == [0, 3, 5] and sel.used_tokens == 30
    assert sel.dropped == {2: "rank", 4: "rank", 1: "rank"}
    # card 3 is too big for the budget: skipped for "budget", a smaller one further down takes its place
    sel = TopK(3).select(CARDS, VALUES, [10, 10, 10, 500, 10, 10], budget=100)
    assert sel.kept == [0, 5, 2] and sel.dropped[3] == "budget" and sel.used_tokens <= 100


def test_threshold():
    sel = Threshold(0.5).select(CARDS, VALUES, [10] * 6, budget=25)
    assert sel.kept == [0, 3]
    assert sel.dropped == {5: "budget", 2: "budget", 4: "below_threshold", 1: "below_threshold"}


def test_decay_hybrid_in_hours_and_turns():
    now = parse_time("2026-01-02T00:00:00Z")
    cards = [_card(0, "2026-01-01T00:00:00Z"), _card(1, "2026-01-01T23:00:00Z")]   # 24 h and 1 h old
    sel = DecayHybrid(lam=0.1, k=1).select(cards, np.array([0.9, 0.5]), [5, 5], budget=100, now=now)
    assert sel.kept == [1]   # 0.9·e^-2.4 ≈ 0.08 < 0.5·e^-0.1 ≈ 0.45
    np.testing.assert_allclose(sel.scores, [0.9 * np.exp(-2.4), 0.5 * np.exp(-0.1)], rtol=1e-5)
    ages, unit = decay_ages(CARDS, None)
    assert unit == "turns" and list(ages) == [5, 4, 3, 2, 1, 0]
    sel = DecayHybrid(lam=0.3, k=None, min_value=0.21).select(CARDS, VALUES, [1] * 6, budget=100)
    assert sel.kept == [5, 3, 4] and all(sel.dropped[i] == "below_threshold" for i in (0, 1, 2))
    assert DecayHybrid(lam=0.0, k=2).select(CARDS, VALUES, [1] * 6, 100).kept == [0, 3]


# ---------------------------------------------------------------- the floor: a threshold never starves a context

def test_a_floor_keeps_the_best_k_min_cards_when_every_value_falls_below_the_threshold():
    low = np.array([0.02, 0.07, 0.01, 0.09, 0.05, 0.03], dtype=np.float32)   # all below τ = 0.5 (out of domain)
    assert Threshold(0.5).select(CARDS, low, [10] * 6, budget=1000).kept == []   # k_min=0: the old behaviour
    assert Threshold(0.5, k_min=0).select(CARDS, low, [10] * 6, budget=1000).dropped == {
        i: "below_threshold" for i in range(6)}
    sel = Threshold(0.5, k_min=3).select(CARDS, low, [10] * 6, budget=1000)
    assert sel.kept == [3, 1, 4] and sel.floor == [3, 1, 4] and sel.used_tokens == 30   # the 3 best by value
    assert sel.dropped == {5: "below_threshold", 0: "below_threshold", 2: "below_threshold"}


def test_the_floor_respects_the_budget_and_the_cap_and_adds_nothing_above_it():
    low = np.array([0.02, 0.07, 0.01, 0.09, 0.05, 0.03], dtype=np.float32)
    # card 3 (the best) does not fit: skipped for "budget", the next best that fit make up the floor
    sel = Threshold(0.5, k_min=2).select(CARDS, low, [10, 10, 10, 500, 10, 10], budget=25)
    assert sel.kept == [1, 4] and sel.floor == [1, 4] and sel.used_tokens == 20 <= 25
    assert sel.dropped[3] == "budget" and sel.dropped[5] == "below_threshold"
    # a budget that holds one card: the floor keeps one, never overruns
    sel = Threshold(0.5, k_min=3).select(CARDS, low, [10] * 6, budget=15)
    assert sel.kept == [3] and sel.used_tokens == 10 and sel.dropped[1] == "budget"
    # k caps the floor too
    assert Threshold(0.5, k=1, k_min=3).select(CARDS, low, [10] * 6, budget=1000).kept == [3]
    # cards at or above τ count towards the floor
    sel = Threshold(0.5, k_min=3).select(CARDS, VALUES, [10] * 6, budget=1000)
    assert sel.kept == [0, 3, 5, 2] and sel.floor == []     # four pass τ = 0.5 already: the floor adds none
    sel = Threshold(0.75, k_min=3).select(CARDS, VALUES, [10] * 6, budget=1000)
    assert sel.kept == [0, 3, 5] and sel.floor == [5] and sel.dropped[2] == "below_threshold"


def test_decay_hybrid_floor_and_bad_k_min():
    sel = DecayHybrid(lam=0.0, k=None, min_value=0.95, k_min=2).select(CARDS, VALUES, [1] * 6, budget=100)
    assert sel.kept == [0, 3] and sel.floor == [0, 3]
    assert DecayHybrid(lam=0.0, k=None, min_value=0.95).select(CARDS, VALUES, [1] * 6, budget=100).kept == []
    for bad in (-1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="k_min must be a whole number of cards"):
            Threshold(0.5, k_min=bad)
