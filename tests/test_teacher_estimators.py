"""Teacher backends, contexts and estimators on real small episodes with the real smollm2-135m."""

import logging

import numpy as np
import pytest
from conftest import small_episode

from damc.data.episodes import Episode, decision_points
from damc.prompting import action_text, format_prompt
from damc.teacher.context import ContextConfig, build_context, candidate_cards
from damc.teacher.estimators import AblationLasso, GroupedLeaveOneOut, LeaveOneOut




def last_decision(ep: Episode):
    return [dp for dp in decision_points(ep) if candidate_cards(dp)][-1]


@pytest.fixture(scope="module")
def teacher32():
    from damc.teacher.backends import HFTeacher

    return HFTeacher("smollm2-135m", dtype="float32", device="cpu", batch_size=4)


def test_subset_segments_are_the_shared_rendering(teacher32):
    dp = last_decision(small_episode())
    ctx = build_context(teacher32, dp)
    n = len(ctx.cards)
    assert n >= 3
    for keep in ([], [0], list(range(1, n)), list(range(n))):
        assert "".join(ctx.segments(keep=keep)) == format_prompt(teacher32.tokenizer, ctx.messages(keep))
    assert ctx.action == action_text(dp.gold)


def test_loo_prefix_reuse_matches_naive_fp32(teacher32):
    dp = last_decision(small_episode())
    cards = candidate_cards(dp, teacher32.tokenizer)[-4:]
    naive = LeaveOneOut(reuse_prefix=False).estimate(teacher32, dp, cards)
    reuse = LeaveOneOut(reuse_prefix=True).estimate(teacher32, dp, cards)
    assert np.max(np.abs(naive.deltas - reuse.deltas)) < 1e-3
    assert abs(naive.logp_full - reuse.logp_full) < 1e-3
    assert reuse.n_forward == naive.n_forward == len(cards) + 1
    assert reuse.n_forward_tokens < 0.8 * naive.n_forward_tokens  # the prefix before each card is not rerun
    assert reuse.extra["naive_tokens"] == naive.n_forward_tokens
    # delta = full - without, and the full log-prob is the plain log_prob of the context
    np.testing.assert_allclose(reuse.deltas, reuse.logp_full - reuse.logp_without)
    lp = teacher32.log_prob(build_context(teacher32, dp, cards).messages(), action_text(dp.gold))
    assert abs(lp.sum() - reuse.logp_full) < 1e-3 and len(lp) == reuse.n_action_tokens


def test_log_prob_many_matches_single_calls(teacher32):
    dp = last_decision(small_episode())
    msgs = build_context(teacher32, dp, candidate_cards(dp)[-2:]).messages()
    actions = [action_text(dp.gold), 'get_order(order_id="1")', "Sure, anything else?"]
    many = teacher32.log_prob_many(msgs, actions)
    for a, lp in zip(actions, many):
        np.testing.assert_allclose(lp, teacher32.log_prob(msgs, a), atol=1e-3)


def test_sliding_window_cache_falls_back_to_full_rows(teacher32, monkeypatch, caplog):
    """A model whose KV cache keeps only the last W positions (Gemma 3's sliding layers) cannot reuse a
    prefix: the rows must run in full and give the naive result, not a shape error."""
    from transformers import DynamicCache

    dp = last_decision(small_episode())
    cards = candidate_cards(dp, teacher32.tokenizer)[-4:]
    naive = LeaveOneOut(reuse_prefix=False).estimate(teacher32, dp, cards)
    real_base = type(teacher32)._run_base

    def windowed_base(self, ids, n_act):
        lp, cache = real_base(self, ids, n_act)
        w = 8  # every layer keeps its last 8 positions, like a sliding-window layer
        return lp, DynamicCache([(layer.keys[:, :, -w:], layer.values[:, :, -w:]) for layer in cache.layers])

    monkeypatch.setattr(type(teacher32), "_run_base", windowed_base)
    with caplog.at_level(logging.WARNING, logger="damc.teacher.backends"):
        got = LeaveOneOut(reuse_prefix=True).estimate(teacher32, dp, cards)
    assert np.max(np.abs(got.deltas - naive.deltas)) < 1e-3
    assert got.extra["naive_tokens"] == got.n_forward_tokens          # nothing was reused
    assert "sliding-window KV cache" in caplog.text


def test_ablation_cost_is_independent_of_card_count_and_seeded(teacher32):
    dp = last_decision(small_episode())
    cards = candidate_cards(dp, teacher32.tokenizer)
    est = AblationLasso(n_samples=6, keep_prob=0.5, seed=3)
    a = est.estimate(teacher32, dp, cards[-2:])
    b = est.estimate(teacher32, dp, cards[-3:])
    assert a.n_forward == b.n_forward == 7
    assert np.all(np.isfinite(b.deltas)) and b.deltas.shape == (3,)
    again = est.estimate(teacher32, dp, cards[-3:])
    np.testing.assert_allclose(again.deltas, b.deltas, atol=1e-6)
    assert (est.masks(dp.decision_id, 3) == est.masks(dp.decision_id, 3)).all()


def test_grouped_loo_groups_copies_of_a_fact():
    from damc.cards import encode_messages

    msgs = [{"role": "user", "content": "Hi, my order is 88412"},
            {"role": "assistant", "content": "Let me check order 88412."},
            {"role": "user", "content": "Also, how is the weather today?"},
            {"role": "assistant", "content": "Sunny, 25 degrees."}]
    cards = encode_messages(msgs, "e")
    groups = GroupedLeaveOneOut().groups(cards)
    assert groups[0] == groups[1] == frozenset({0, 1})  # both copies of 88412 leave together
    assert groups[2] == frozenset({2})


def test_long_card_truncated_with_warning_and_window_drops_oldest(teacher32, caplog):
    ep = small_episode()
    dp = last_decision(ep)
    cards = candidate_cards(dp, teacher32.tokenizer)
    long = cards[-1]
    import dataclasses

    long = dataclasses.replace(long, raw_text="very long text " * 400, tool_name=None, role="user", kind="user")
    cards = cards[:-1] + [long]
    with caplog.at_level(logging.WARNING, logger="damc.teacher.context"):
        ctx = build_context(teacher32, dp, cards, ContextConfig(max_card_tokens=32))
    assert "truncated" in caplog.text and long.card_id in ctx.truncated
    assert len(ctx.cards) == len(cards)  # kept, never silently dropped
    assert teacher32.count_tokens(ctx.cards[-1].raw_text) <= 40 and ctx.cards[-1].raw_text.endswith("[truncated]")
    # a window that only fits the last cards: the oldest go, with a warning, and get NaN deltas
    full = sum(teacher32.count_tokens(s) for s in ctx.segments()) + teacher32.count_tokens(ctx.action)
    caplog.clear()
    est = LeaveOneOut(max_card_tokens=32, max_context_tokens=full - 5)
    with caplog.at_level(logging.WARNING, logger="damc.teacher.context"):
        res = est.estimate(teacher32, dp, cards)
    assert "dropped the 1 oldest" in caplog.text
    assert np.isnan(res.deltas[0]) and np.all(np.isfinite(res.deltas[1:]))
    assert res.extra["dropped"] == [cards[0].card_id]
