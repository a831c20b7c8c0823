"""Teacher backends, contexts and estimators on real small episodes with the real smollm2-135m."""

import json
import logging

import numpy as np
import pytest
from conftest import small_episode

from damc.episodes import Episode, decision_points
from damc.prompting import HISTORY_HEADER, action_text, format_prompt
from damc.teacher.context import build_context, candidate_cards, memory_line
from damc.teacher.estimators import AblationLasso, GroupedLeaveOneOut, LeaveOneIn, LeaveOneOut, LooLoi


def last_decision(ep: Episode):
    return [dp for dp in decision_points(ep) if candidate_cards(dp)][-1]


@pytest.fixture(scope="module")
def teacher32():
    from damc.teacher.backends import HFTeacher

    return HFTeacher("smollm2-135m", dtype="float32", device="cpu", batch_size=4)


@pytest.fixture(scope="module")
def loo_naive(teacher32):
    """The last decision of the small episode, its four newest candidates and their naive leave-one-out (every row
    run in full): the reference the prefix-reusing paths are checked against."""
    dp = last_decision(small_episode())
    cards = candidate_cards(dp, teacher32.tokenizer)[-4:]
    return dp, cards, LeaveOneOut(reuse_prefix=False).estimate(teacher32, dp, cards)


def test_subset_segments_are_the_runtime_prompt_with_those_cards(teacher32):
    dp = last_decision(small_episode())
    ctx = build_context(teacher32, dp)
    n = len(ctx.cards)
    assert n >= 3
    for keep in ([0], list(range(1, n)), list(range(n)), [n - 1]):
        assert "".join(ctx.segments(keep=keep)) == format_prompt(teacher32.tokenizer, ctx.messages(keep))
    # with every card: the runtime's own prompt, one `[card_id] <template>` line per candidate, oldest first
    full = "".join(ctx.segments())
    assert ctx.lines == [memory_line(c) for c in ctx.cards] and all(ln in full for ln in ctx.lines)
    assert [c.position for c in ctx.cards] == sorted(c.position for c in ctx.cards)
    assert HISTORY_HEADER in "".join(ctx.segments(keep=[]))   # no card: the header stays, empty
    assert ctx.action == action_text(dp.gold)


def test_loo_prefix_reuse_matches_naive_fp32(teacher32, loo_naive):
    dp, cards, naive = loo_naive
    reuse = LeaveOneOut(reuse_prefix=True).estimate(teacher32, dp, cards)
    assert np.max(np.abs(naive.deltas - reuse.deltas)) < 1e-3
    assert abs(naive.logp_full - reuse.logp_full) < 1e-3
    assert reuse.n_forward == naive.n_forward == len(cards) + 1
    assert reuse.n_forward_tokens < 0.9 * naive.n_forward_tokens  # the prefix before each card is not rerun
    assert reuse.extra["naive_tokens"] == naive.n_forward_tokens
    # delta = (full - without) per action token, and the full log-prob is the plain log_prob of the context
    np.testing.assert_allclose(reuse.deltas, (reuse.logp_full - reuse.logp_without) / reuse.n_action_tokens)
    np.testing.assert_allclose(reuse.logp_with, reuse.logp_full)
    lp = teacher32.log_prob(build_context(teacher32, dp, cards).messages(), action_text(dp.gold))
    assert abs(lp.sum() - reuse.logp_full) < 1e-3 and len(lp) == reuse.n_action_tokens


def test_log_prob_many_matches_single_calls(teacher32):
    dp = last_decision(small_episode())
    msgs = build_context(teacher32, dp, candidate_cards(dp)[-2:]).messages()
    actions = [action_text(dp.gold), 'get_order(order_id="1")', "Sure, anything else?"]
    many = teacher32.log_prob_many(msgs, actions)
    for a, lp in zip(actions, many):
        np.testing.assert_allclose(lp, teacher32.log_prob(msgs, a), atol=1e-3)


def test_sliding_window_cache_falls_back_to_full_rows(teacher32, loo_naive, monkeypatch, caplog):
    """A model whose KV cache keeps only the last W positions (Gemma 3's sliding layers) cannot reuse a
    prefix: the rows must run in full and give the naive result, not a shape error."""
    from transformers import DynamicCache

    dp, cards, naive = loo_naive
    real_base = type(teacher32)._run_base

    def windowed_base(self, ids, n_act):
        lp, cache = real_base(self, ids, n_act)
        w = 8  # every layer keeps its last 8 positions, like a sliding-window layer
        return lp, DynamicCache([(layer.keys[:, :, -w:], layer.values[:, :, -w:]) for layer in cache.layers])

    monkeypatch.setattr(type(teacher32), "_run_base", windowed_base)
    monkeypatch.setattr(teacher32, "_last", None)   # an earlier test's cache would be reused across calls
    with caplog.at_level(logging.WARNING, logger="damc.llm"):
        got = LeaveOneOut(reuse_prefix=True).estimate(teacher32, dp, cards)
    assert np.max(np.abs(got.deltas - naive.deltas)) < 1e-3
    assert got.extra["naive_tokens"] == got.n_forward_tokens          # nothing was reused
    assert "sliding-window KV cache" in caplog.text


def test_ablation_cost_is_independent_of_card_count_and_seeded(teacher32):
    dp = last_decision(small_episode())
    cards = candidate_cards(dp, teacher32.tokenizer)
    est = AblationLasso(n_samples=3, keep_prob=0.5, seed=3)
    a = est.estimate(teacher32, dp, cards[-2:])
    b = est.estimate(teacher32, dp, cards[-3:])
    assert a.n_forward == b.n_forward == 4
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


def test_window_drops_the_oldest_lines_with_a_warning(teacher32, caplog):
    dp = last_decision(small_episode())
    cards = candidate_cards(dp, teacher32.tokenizer)
    ctx = build_context(teacher32, dp, cards)
    full = sum(teacher32.count_tokens(s) for s in ctx.segments()) + teacher32.count_tokens(ctx.action)
    est = LeaveOneOut(max_context_tokens=full - 5)
    with caplog.at_level(logging.WARNING, logger="damc.teacher.context"):
        res = est.estimate(teacher32, dp, cards)
    assert "dropped the 1 oldest" in caplog.text
    assert np.isnan(res.deltas[0]) and np.all(np.isfinite(res.deltas[1:]))
    assert res.extra["dropped"] == [cards[0].card_id]


def _call(i, name, args):
    return {"role": "assistant", "content": None, "tool_calls": [{"id": f"c{i}", "type": "function", "function": {
        "name": name, "arguments": json.dumps(args)}}]}


_TOOLS = [{"type": "function", "function": {"name": n, "parameters": {"type": "object", "properties": {}}}}
          for n in ("get_order", "get_customer", "get_weather")]


def _duplicated_fact_decision():
    """A decision whose key fact (order 88412) sits in two cards; other cards are noise."""
    call, tools = _call, _TOOLS
    msgs = [{"role": "system", "content": "You are a support agent. Call tools as name(arg=value)."},
            {"role": "user", "content": "Hi, this is Ann Lee."},
            call(2, "get_customer", {"name": "Ann Lee"}),
            {"role": "tool", "tool_call_id": "c2", "content": json.dumps({"customer_id": "C-7", "orders": ["88412"]})},
            {"role": "user", "content": "My order number is 88412, it never arrived."},
            {"role": "assistant", "content": "I am sorry to hear that."},
            {"role": "user", "content": "By the way, what is the weather in Paris?"},
            call(7, "get_weather", {"city": "Paris"}),
            {"role": "tool", "tool_call_id": "c7", "content": json.dumps({"city": "Paris", "sky": "sunny", "temp": 21})},
            {"role": "assistant", "content": "It is sunny in Paris, 21 degrees."},
            {"role": "user", "content": "Thanks. Now please look up my order."},
            call(11, "get_order", {"order_id": "88412"})]
    ep = Episode("dup", msgs, "test", tools)
    return [dp for dp in decision_points(ep) if dp.index == 11][0]


def test_loi_credits_both_copies_of_a_duplicated_fact_where_loo_credits_neither(teacher32):
    dp = _duplicated_fact_decision()
    cards = candidate_cards(dp, teacher32.tokenizer)
    copies = [i for i, c in enumerate(cards) if "88412" in c.raw_text]
    others = [i for i in range(len(cards)) if i not in copies]
    assert len(copies) == 2 and len(others) >= 3
    loo = LeaveOneOut().estimate(teacher32, dp, cards)
    loi = LeaveOneIn().estimate(teacher32, dp, cards)
    # each copy alone raises the gold a lot; removing one copy costs little, because the other stays
    assert min(loi.deltas[copies]) > max(loi.deltas[others]) and min(loi.deltas[copies]) > 0.1
    assert max(abs(loo.deltas[copies])) < 0.5 * min(loi.deltas[copies])
    # loi: one short context per card beside the empty one, sharing the prefix before the memory lines
    assert loi.n_forward == len(cards) + 1 and loi.n_forward_tokens < loo.n_forward_tokens
    np.testing.assert_allclose(loi.deltas, (loi.logp_with - loi.logp_without) / loi.n_action_tokens)
    both = LooLoi().estimate(teacher32, dp, cards)
    np.testing.assert_allclose(both.deltas, (loo.deltas + loi.deltas) / 2, atol=1e-4)
    np.testing.assert_allclose(both.deltas, (both.logp_with - both.logp_without) / both.n_action_tokens, atol=1e-6)
    assert both.n_forward == loo.n_forward + loi.n_forward


def test_deltas_are_per_action_token(teacher32):
    """Doubling the action's length leaves a per-token delta of the same size, not twice as big."""
    dp = _duplicated_fact_decision()
    cards = candidate_cards(dp, teacher32.tokenizer)
    res = LeaveOneIn().estimate(teacher32, dp, cards)
    assert res.n_action_tokens == len(teacher32.encode(action_text(dp.gold)))
    total = res.logp_with - res.logp_without
    np.testing.assert_allclose(res.deltas * res.n_action_tokens, total)


def test_the_reference_row_reuses_the_previous_calls_prefix_exactly(teacher32, monkeypatch):
    """Two calls sharing a long prefix (the system prompt of an episode): the second runs only what follows it,
    with the same log-probs as a cold run."""
    from damc.prompting import prompt_segments

    dp = last_decision(small_episode())
    msgs = build_context(teacher32, dp).messages()
    other = build_context(teacher32, dp, candidate_cards(dp)[-1:]).messages()
    action = action_text(dp.gold)
    teacher32._last = None
    monkeypatch.setattr(teacher32, "prefix_block", 64)  # a small episode: its system prompt spans a few 64-token blocks, not a 256 one
    cold = teacher32.log_prob(other, action)
    assert teacher32._base_tokens_run == len(teacher32.segment_ids(prompt_segments(teacher32.tokenizer, other))) + \
        len(teacher32.encode(action))                       # nothing to reuse: the whole row ran
    teacher32.log_prob(msgs, action)                         # leaves its KV cache behind
    warm = teacher32.log_prob(other, action)                 # shares the system prompt with the last call
    assert teacher32._base_tokens_run < 0.8 * len(teacher32.segment_ids(prompt_segments(teacher32.tokenizer, other)))
    np.testing.assert_allclose(warm, cold, atol=1e-4)


def test_bf16_log_probs_do_not_depend_on_what_ran_before():
    """In bf16 a matmul over 900 tokens and over 768 + 132 differ in the last bits; the reference row runs block by
    block and reuses only whole blocks, so a row scores the same after another call as in a fresh process (a
    resumed labelling or evaluation run gives the uninterrupted values)."""
    from damc.teacher.backends import HFTeacher

    t = HFTeacher("smollm2-135m", dtype="bfloat16", device="cpu")
    t.prefix_block = 64      # the runtime's 256-token blocks, scaled down: bf16 matmuls are slow without bf16 units
    text = t.encode("The quick brown fox jumps over the lazy dog near the river bank. " * 15)
    assert len(text) > 2 * t.prefix_block + 40
    first = (text[:175] + t.encode(" and then the cat said hello to everyone in the room"), 8)
    second = (text[:160] + t.encode(" while the dog slept quietly by the warm fireplace tonight"), 8)
    cold = t.score_rows([second])[0][0]
    t.score_rows([first])                         # leaves its KV cache behind
    warm = t.score_rows([second])[0][0]           # reuses the two whole blocks it shares with `first`
    assert t._base_tokens_run == len(second[0]) - 2 * t.prefix_block
    np.testing.assert_array_equal(warm, cold)


def test_fields_render_gives_the_fields_lines_and_the_same_prompt_algebra(teacher32):
    """`ContextConfig(render="fields")`: each line is the runtime's `fields` line under the decision query; subsets
    still concatenate to the prompt with those cards; an unknown render is a clear error."""
    from damc.teacher.context import ContextConfig, decision_query

    dp = last_decision(small_episode())
    ctx = build_context(teacher32, dp, None, ContextConfig(render="fields"))
    assert ctx.lines == [memory_line(c, "fields", decision_query(dp)) for c in ctx.cards]
    assert ctx.lines != [memory_line(c) for c in ctx.cards]          # some tool result reads differently
    for keep in ([0], list(range(len(ctx.cards)))):
        assert "".join(ctx.segments(keep=keep)) == format_prompt(teacher32.tokenizer, ctx.messages(keep))
    with pytest.raises(ValueError, match="teacher render must be one of"):
        LeaveOneIn(render="raw")


def _look_alike_decision():
    """A decision whose gold uses order 88412 while a look-alike card lists the caller's other order, 77301 — the
    value the episode's recorded rival (`distractors`) uses."""
    from damc.episodes import Episode

    call, tools = _call, _TOOLS
    msgs = [{"role": "system", "content": "You are a support agent. Call tools as name(arg=value)."},
            {"role": "user", "content": "Hi, this is Ann Lee. My parcel never arrived."},
            call(2, "get_customer", {"name": "Ann Lee"}),
            {"role": "tool", "tool_call_id": "c2", "content": json.dumps({"customer_id": "C-7", "last_order": "88412"})},
            {"role": "user", "content": "My sister Eve ordered too."},
            call(5, "get_customer", {"name": "Eve Lee"}),
            {"role": "tool", "tool_call_id": "c5", "content": json.dumps({"customer_id": "C-9", "last_order": "77301"})},
            {"role": "user", "content": "What is the weather in Paris?"},
            call(8, "get_weather", {"city": "Paris"}),
            {"role": "tool", "tool_call_id": "c8", "content": json.dumps({"city": "Paris", "sky": "sunny"})},
            {"role": "user", "content": "Thanks. Now please look up my own last order."},
            call(11, "get_order", {"order_id": "88412"})]
    rivals = ['get_order(order_id="77301")', 'get_weather(city="Paris")']
    ep = Episode("lookalike", msgs, "test", tools, distractors={"11": rivals})
    return [dp for dp in decision_points(ep) if dp.index == 11][0], rivals


def test_loi_margin_takes_a_look_alikes_credit_away(teacher32):
    """`loi_margin` is `loi` minus how much the card raises the rivals: the card with the rival's order id loses
    what `loi` gave it (it raises the rival more than the gold), the card with the gold's id keeps its credit."""
    from damc.teacher.estimators import ESTIMATORS, LeaveOneInMargin

    dp, rivals = _look_alike_decision()
    cards = candidate_cards(dp, teacher32.tokenizer)
    gold_card = next(i for i, c in enumerate(cards) if "88412" in c.raw_text)
    look = next(i for i, c in enumerate(cards) if "77301" in c.raw_text)
    est = ESTIMATORS["loi_margin"]()
    assert isinstance(est, LeaveOneInMargin) and est.distractors(dp) == rivals
    res = est.estimate(teacher32, dp, cards)
    loi = LeaveOneIn().estimate(teacher32, dp, cards)
    np.testing.assert_allclose(res.extra["loi"], loi.deltas, atol=1e-4)
    np.testing.assert_allclose(res.deltas, np.array(res.extra["loi"]) - res.extra["rival_shift"], atol=1e-9)
    np.testing.assert_allclose(res.deltas, (res.logp_with - res.logp_without) / res.n_action_tokens, atol=1e-9)
    assert res.extra["distractors"] == rivals
    assert res.n_forward == (len(cards) + 1) * (1 + len(rivals))
    # the look-alike raises its rival: its margin value is below its loi value, and below the gold card's
    assert res.extra["rival_shift"][look] > 0 and res.deltas[look] < loi.deltas[look]
    assert res.deltas[gold_card] > res.deltas[look]
    # no rival at all: plain loi
    bare = LeaveOneInMargin(n_distractors=0).estimate(teacher32, dp, cards)
    np.testing.assert_allclose(bare.deltas, loi.deltas, atol=1e-4)
    assert bare.extra["distractors"] == []
