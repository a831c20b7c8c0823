"""Memory policies on a real synthetic episode with the decision LLM's real tokenizer: budgets hold,
the current turn is always verbatim, each policy keeps what it says it keeps."""

from dataclasses import replace

import pytest

from damc.cards import cards_before, encode_episode, token_counter
from damc.data.episodes import decision_points
from damc.data.synthetic import generate_episodes
from damc.models import load_tokenizer
from damc.eval.policies import POLICIES, PolicyContext, greedy_budget, make_policy, trim_history
from damc.prompting import HISTORY_HEADER, message_to_chat


@pytest.fixture(scope="module")
def setup():
    tok = load_tokenizer("smollm2-135m")
    ctx = PolicyContext(count_tokens=token_counter(tok), window_tokens=8192)
    ep = generate_episodes(1, seed=11)[0]
    cards = encode_episode(ep, count_tokens=ctx.count_tokens)
    dp = [d for d in decision_points(ep) if d.key_card_ids][-1]  # a late decision that needs earlier facts
    return ctx, dp, cards_before(cards, dp.current_turn_start)


def _ends_with_current_turn(out, dp):
    tail = out.messages[len(out.messages) - len(dp.current_turn):]
    assert tail == [message_to_chat(m) for m in dp.current_turn]


@pytest.mark.parametrize("name", ["window", "recency", "bm25", "obs_mask", "oracle"])
@pytest.mark.parametrize("budget", [128, 512])
def test_budgeted_policies_respect_the_budget_and_keep_the_current_turn(setup, name, budget):
    ctx, dp, cards = setup
    out = make_policy(name).build(dp, cards, budget, ctx)
    assert 0 <= out.history_tokens <= budget
    _ends_with_current_turn(out, dp)
    assert out.messages[0]["role"] == "system" and out.overhead_ms >= 0
    assert set(out.kept_card_ids) <= {c.card_id for c in cards}


def test_full_keeps_everything_and_ignores_the_budget(setup):
    ctx, dp, cards = setup
    out = make_policy("full").build(dp, cards, 64, replace(ctx, window_tokens=None))
    assert out.kept_card_ids == [c.card_id for c in cards] and out.history_tokens > 64
    _ends_with_current_turn(out, dp)
    assert not POLICIES["full"].budgeted
    # only the decision LLM's window limits it: the oldest messages go first
    capped = make_policy("full").build(dp, cards, 64, replace(ctx, window_tokens=out.history_tokens // 2 + 1500))
    assert capped.history_tokens < out.history_tokens and capped.kept_card_ids[-1] == out.kept_card_ids[-1]
    _ends_with_current_turn(capped, dp)


def test_window_is_the_last_messages_of_the_history(setup):
    ctx, dp, cards = setup
    out = make_policy("window", n_messages=10).build(dp, cards, 10**6, ctx)
    hist = out.messages[1: len(out.messages) - len(dp.current_turn)]
    want = [message_to_chat(m) for m in dp.history[-10:]]
    assert 8 <= len(hist) <= 10 and hist == want[len(want) - len(hist):]  # never starts on an orphan tool result
    assert hist[0]["role"] != "tool"


def test_obs_mask_replaces_old_tool_outputs_only(setup):
    ctx, dp, cards = setup
    pol = make_policy("obs_mask", keep_last=2)
    out = pol.build(dp, cards, 10**6, ctx)
    tools = [m for m in out.messages[1: len(out.messages) - len(dp.current_turn)] if m["role"] == "tool"]
    assert all(m["content"] == pol.placeholder for m in tools[:-2])
    assert all(m["content"] != pol.placeholder for m in tools[-2:])


def test_oracle_keeps_the_key_cards(setup):
    ctx, dp, cards = setup
    out = make_policy("oracle").build(dp, cards, 10**6, ctx)
    assert set(out.kept_card_ids) == set(dp.key_card_ids) & {c.card_id for c in cards}


def test_compressed_cards_go_into_the_relevant_history_section_tagged(setup):
    ctx, dp, cards = setup
    pol = make_policy("bm25", compress=True)
    out = pol.build(dp, cards, 256, ctx)
    system = out.messages[0]["content"]
    assert HISTORY_HEADER in system
    for cid in out.kept_card_ids:
        assert f"[{cid}]" in system
    assert len(out.messages) == 1 + len(dp.current_turn)  # no raw history messages
    assert out.history_tokens <= 256


def test_greedy_budget_packs_best_first_and_returns_chronological_order():
    assert greedy_budget([5, 5, 5], [0.1, 0.9, 0.5], 10) == [1, 2]
    assert greedy_budget([8, 3, 3], [0.9, 0.5, 0.1], 7) == [1, 2]  # the best does not fit: skipped
    assert greedy_budget([1, 1], [1.0, 1.0], 1) == [1]  # ties go to the newer card


def test_trim_history_never_starts_on_a_tool_result(setup):
    ctx, dp, _ = setup
    for n in range(1, 12):
        idx = trim_history(dp.history, ctx, max_messages=n, budget=None)
        assert len(idx) <= n and (not idx or dp.history[idx[0]]["role"] != "tool")


def test_unknown_policy_and_missing_paths_fail_clearly():
    with pytest.raises(KeyError, match="known:"):
        make_policy("nope")
    with pytest.raises(ValueError, match="scorer="):
        make_policy("damc_student")
    with pytest.raises(ValueError, match="labels="):
        make_policy("damc_knn")


def test_top_k_and_min_score_cap_a_card_policy_below_its_budget(setup):
    ctx, dp, cards = setup
    free = make_policy("recency").build(dp, cards, 10**6, ctx)
    capped = make_policy("recency", top_k=3).build(dp, cards, 10**6, ctx)
    assert capped.kept_card_ids == free.kept_card_ids[-3:]  # the 3 newest, still chronological
    assert capped.history_tokens < free.history_tokens
    # min_score in the policy's own units: recency scores are the card positions 0..n-1
    n = len(cards)
    thr = make_policy("recency", min_score=n - 5).build(dp, cards, 10**6, ctx)
    assert thr.kept_card_ids == [c.card_id for c in cards[-5:]]
    both = make_policy("recency", min_score=n - 5, top_k=2).build(dp, cards, 10**6, ctx)
    assert both.kept_card_ids == [c.card_id for c in cards[-2:]]
    # the budget still binds: the caps only ever remove cards
    tight = make_policy("recency", top_k=3).build(dp, cards, 64, ctx)
    assert tight.history_tokens <= 64 and set(tight.kept_card_ids) <= set(capped.kept_card_ids)
    none = make_policy("recency", min_score=10**9).build(dp, cards, 10**6, ctx)
    assert none.kept_card_ids == [] and none.history_tokens == 0
    _ends_with_current_turn(none, dp)


def test_caps_are_validated_and_only_for_card_policies():
    with pytest.raises(ValueError, match="top_k must be a positive integer"):
        make_policy("bm25", top_k=0)
    with pytest.raises(ValueError, match="min_score must be a number"):
        make_policy("bm25", min_score="high")
    with pytest.raises(ValueError, match="does not pack cards by value"):
        make_policy("window", top_k=3)
    with pytest.raises(ValueError, match="does not pack cards by value"):
        make_policy("oracle", top_k=3)  # it keeps the gold's cards by its own rule


def test_reused_scores_are_scored_once_per_decision_and_still_timed(setup):
    import time

    from damc.eval.policies import RecencyPolicy

    ctx, dp, cards = setup

    class Slow(RecencyPolicy):
        calls = 0

        def score(self, dp, cards, ctx):
            Slow.calls += 1
            time.sleep(0.05)
            return super().score(dp, cards, ctx)

    pol = Slow()
    a = pol.build(dp, cards, 256, ctx)
    pol.build(dp, cards, 512, ctx)
    assert Slow.calls == 2                      # off by default: the runtime never sees stale scores
    pol.reuse_scores = True
    a2 = pol.build(dp, cards, 256, ctx)         # scored (nothing to reuse yet)
    b2 = pol.build(dp, cards, 512, ctx)         # same decision, same cards, other budget: reused
    assert Slow.calls == 3
    assert a2.kept_card_ids == a.kept_card_ids and len(b2.kept_card_ids) > len(a2.kept_card_ids)
    assert b2.overhead_ms >= 50                 # the reused scoring time is still counted
    pol.build(dp, cards[:-1], 512, ctx)         # other cards: scored afresh
    assert Slow.calls == 4
