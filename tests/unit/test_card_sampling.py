"""Which cards a decision's training list keeps when it has more than `data.max_cards` (`card_subset`): `uniform`
draws as before (the shipped profiles' fingerprints and lists unchanged), `informative` keeps the needed cards and
the rivals first. No model."""

import random

import pytest
from omegaconf import OmegaConf

from damc.configs import as_spelled_before
from damc.scorer.train import card_subset

# 48 candidates as the grounded labels give them: two needed cards, three hard negatives, one rival, the rest neutral
DELTAS = [0.0] * 48
DELTAS[7], DELTAS[40] = 1.0, 0.75
DELTAS[3] = DELTAS[11] = DELTAS[30] = -0.5
DELTAS[22] = -1.0


def test_uniform_is_the_draw_it_always_was():
    old = sorted(random.Random(5).sample(list(range(48)), 8))   # the code before `sampling` existed
    assert card_subset(DELTAS, 8, random.Random(5), "uniform") == old
    assert card_subset(DELTAS, 8, random.Random(5)) == old


def test_informative_keeps_the_needed_cards_and_the_strongest_negatives():
    for seed in range(20):
        idx = card_subset(DELTAS, 8, random.Random(seed), "informative")
        assert len(idx) == 8 and len(set(idx)) == 8 and idx == sorted(idx)
        assert {7, 40, 22} <= set(idx)                          # both needed cards and the rival
        assert len({3, 11, 30} & set(idx)) >= 1                 # a quarter of the list: the rival and a hard negative
    # the hard negative that joins the rival is drawn at random among equals, not always the first in order
    picks = {tuple(sorted({3, 11, 30} & set(card_subset(DELTAS, 8, random.Random(s), "informative"))))
             for s in range(30)}
    assert len(picks) > 1


def test_informative_caps_positives_at_half_the_list_and_fills_with_others():
    many = [1.0 - i / 100 for i in range(10)] + [0.0] * 30   # ten needed cards, graded
    idx = card_subset(many, 8, random.Random(0), "informative")
    assert set(range(4)) <= set(idx) and len(idx) == 8      # the four best positives, then a random fill
    assert card_subset(many[:6], 8, random.Random(0), "informative") == list(range(6))   # short lists: all kept
    assert card_subset(many, None, random.Random(0), "informative") == list(range(40))


def test_a_teacher_delta_list_without_negatives_still_fills_the_list():
    deltas = [0.01 * i for i in range(30)]                   # all ≥ 0: no negative to keep
    idx = card_subset(deltas, 8, random.Random(1), "informative")
    assert len(idx) == 8 and set(range(26, 30)) <= set(idx)


def test_an_unknown_sampling_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="data.sampling='top'.*uniform, informative"):
        card_subset(DELTAS, 8, random.Random(0), "top")


def test_sampling_at_its_default_leaves_a_train_stage_fingerprint_as_it_was():
    base = {"trainer": {"epochs": 1}, "data": {"labels": "x", "max_cards": 8}}
    assert as_spelled_before(OmegaConf.create({**base, "data": {**base["data"], "sampling": "uniform"}})) == base
    changed = as_spelled_before(OmegaConf.create({**base, "data": {**base["data"], "sampling": "informative"}}))
    assert changed["data"]["sampling"] == "informative"
