"""Memory policies on a real synthetic episode with the decision LLM's real tokenizer, through the runtime:
budgets hold, the current turn is always verbatim, card policies are exactly `DecisionAwareMemory.build_context`
with their valuer, each policy keeps what it says it keeps, and no deployable policy can see the gold."""

import copy
import functools
import json

import pytest

from damc.cards import token_counter
from damc.data.synthetic import generate_episodes
from damc.episodes import decision_points
from damc.eval.policies import (
    POLICIES,
    CardPolicy,
    DecisionView,
    GoldView,
    PolicyEnv,
    Setting,
    decision_messages,
    make_policy,
    trim_history,
)
from damc.models import DEFAULT_ENCODER, load_tokenizer
from damc.prompting import HISTORY_HEADER, message_to_chat
from damc.runtime.encoder import cached_encoder
from damc.runtime.memory import DecisionAwareMemory
from damc.runtime.valuers import CachedValuer


@functools.cache
def encoder():
    """One encoder for every memory of the module, loaded on first use (an exact-text memo in front of the runtime's):
    a card's vector is a function of its text, so memories built fresh in each test embed only what no earlier one did."""
    return cached_encoder(DEFAULT_ENCODER)


DEPLOYABLE = ["full", "window", "obs_mask", "heuristic", "recency", "similarity", "bm25", "rrf", "generative_agents"]


@pytest.fixture(scope="module")
def setup():
    tok = load_tokenizer("smollm2-135m")
    env = PolicyEnv(count_tokens=token_counter(tok), window_tokens=8192)
    ep = generate_episodes(1, seed=11)[0]
    dp = [d for d in decision_points(ep) if d.key_card_ids][-1]  # a late decision that needs earlier facts
    memory = DecisionAwareMemory(None, valuer="heuristic", tokenizer=tok, encoder=encoder())   # policies bring their own valuers
    view = DecisionView.of(dp)
    memory.observe(view.messages, view.session_id)
    return env, dp, view, memory, tok


def _build(name, setup, setting, **kw):
    env, dp, view, memory, _ = setup
    pol = make_policy(name, **kw)
    gold = GoldView.of(dp) if pol.needs_gold else None
    valuer = CachedValuer(pol.make_valuer(env, gold)) if isinstance(pol, CardPolicy) else None
    return pol.build(view, setting, env, memory=memory, valuer=valuer)


def _ends_with_current_turn(out, dp):
    tail = out.messages[len(out.messages) - len(dp.current_turn):]
    assert tail == [message_to_chat(m) for m in dp.current_turn]


@pytest.mark.parametrize("name", ["window", "obs_mask", "recency", "bm25", "rrf", "heuristic", "oracle", "oracle_fill"])
@pytest.mark.parametrize("budget", [128, 512])
def test_budgeted_policies_respect_the_budget_and_keep_the_current_turn(setup, name, budget):
    out = _build(name, setup, Setting(budget))
    assert 0 <= out.history_tokens <= budget
    _ends_with_current_turn(out, setup[1])
    assert out.messages[0]["role"] == "system" and out.timings_ms["total"] >= 0
    assert set(out.kept_card_ids) <= set(out.candidate_ids)


def test_a_card_policy_is_exactly_the_runtime_a_user_calls(setup):
    """`heuristic` builds the same prompt as a user's own `DecisionAwareMemory(valuer="heuristic")` fed the same
    conversation: same candidates, same packing, same compressed lines, same assembly."""
    env, dp, view, _, tok = setup
    user = DecisionAwareMemory(None, valuer="heuristic", tokenizer=tok, session_id=view.session_id,
                               encoder=encoder())
    for k in range(1, len(view.messages) + 1):  # the conversation arrives message by message
        user.observe(view.messages[:k])
    ctx = user.build_context(list(view.messages), list(view.tools), budget_tokens=512)
    out = _build("heuristic", setup, Setting(512, top_k=12))   # without a scorer the default selector is TopK(12)
    assert out.messages == decision_messages(view.messages, view.tools, ctx)   # the harness's text rendering of it
    assert out.kept_card_ids == [s.card_id for s in ctx.selected] and ctx.selected
    assert sorted(out.candidate_ids) == sorted(ctx.candidate_ids)


def test_template_and_raw_render_the_same_cards_differently(setup):
    tmpl = _build("bm25", setup, Setting(10**5, top_k=3))
    raw = _build("bm25", setup, Setting(10**5, top_k=3, render="raw"))
    assert tmpl.kept_card_ids == raw.kept_card_ids and len(raw.kept_card_ids) == 3
    for out in (tmpl, raw):
        memory = out.messages[1]["content"]   # the fenced memory message after the system prompt
        assert HISTORY_HEADER in memory and all(f"[{cid}]" in memory for cid in out.kept_card_ids)
        assert HISTORY_HEADER not in out.messages[0]["content"]
        assert len(out.messages) == 3 + len(setup[1].current_turn)  # system, memory, tools; no raw history
    assert raw.history_tokens > tmpl.history_tokens  # templates compress
    assert Setting(512, render="raw").key == "512/raw" and Setting(512, top_k=4).key == "512/k4"
    with pytest.raises(ValueError, match="render"):
        _build("bm25", setup, Setting(512, render="fancy"))


def test_full_keeps_everything_and_ignores_the_budget(setup):
    env, dp, view, memory, _ = setup
    out = make_policy("full").build(view, Setting(64), PolicyEnv(env.count_tokens))
    assert out.kept_card_ids == out.candidate_ids and out.history_tokens > 64
    _ends_with_current_turn(out, dp)
    assert not POLICIES["full"].budgeted
    # only the decision LLM's window limits it: the oldest messages go first
    capped = make_policy("full").build(view, Setting(64), PolicyEnv(env.count_tokens, None, out.history_tokens // 2 + 1500))
    assert capped.history_tokens < out.history_tokens and capped.kept_card_ids[-1] == out.kept_card_ids[-1]
    _ends_with_current_turn(capped, dp)
    # counted as truncated only when the window cut it (card policies: not applicable)
    assert out.truncated is False and capped.truncated is True
    assert _build("bm25", setup, Setting(512)).truncated is None


class _RecordingScorer:
    """A student stand-in that records which cards the cascade hands it, in order (its scores: all zero)."""

    def __init__(self):
        self.seen = []

    def score(self, query, cards):
        self.seen.append([c.card_id for c in cards])
        return [0.0] * len(cards)


class _PlainCombiner:
    """A combiner stand-in: the value is the student column (what matters here is which cards get there)."""

    def __init__(self):
        from damc.runtime.combiner import FEATURES

        self.col = FEATURES.index("student")
        self.mean = [0.0] * len(FEATURES)

    def predict(self, x):
        return x[:, self.col].astype(float)


def test_rrf_ranks_the_candidates_in_the_cascades_first_stage_order(setup):
    """`rrf` through the harness's policy path ranks a real episode's candidates exactly in the order in which
    the `damc` cascade (`ScorerValuer(max_scored=M)`) picks the candidates its student reads."""
    from damc.runtime.valuers import ScorerValuer

    env, dp, view, memory, _ = setup
    out = _build("rrf", setup, Setting(10**6))               # everything fits: every candidate is kept and valued
    assert len(out.candidate_ids) >= 6 and sorted(out.kept_card_ids) == sorted(out.candidate_ids)
    order = sorted(out.values, key=lambda cid: -out.values[cid])
    assert len(set(out.values.values())) == len(order) and max(out.values.values()) == 1.0
    m = len(order) // 2
    student = _RecordingScorer()
    memory.build_context(list(view.messages), list(view.tools), budget_tokens=10**6, session_id=view.session_id,
                         now=view.now, valuer=ScorerValuer(student, combiner=_PlainCombiner(), max_scored=m))
    assert student.seen == [order[:m]]                        # the cascade's first stage: the same cards, same order
    # and it is neither BM25 alone nor cosine alone on this decision
    bm25 = _build("bm25", setup, Setting(10**6))
    sim = _build("similarity", setup, Setting(10**6))
    assert order != sorted(bm25.values, key=lambda c: -bm25.values[c]) or \
        order != sorted(sim.values, key=lambda c: -sim.values[c])


def _n_prefix(out) -> int:
    """Assembled messages before the history: system, the fenced memory message (if any), tools."""
    n = 1
    while n < len(out.messages) and (out.messages[n]["role"] == "system" or
                                     out.messages[n]["content"].startswith(HISTORY_HEADER)):
        n += 1
    return n


def test_window_is_the_last_messages_of_the_history(setup):
    env, dp, view, _, _ = setup
    out = make_policy("window", n_messages=10).build(view, Setting(10**6), env)
    hist = out.messages[_n_prefix(out): len(out.messages) - len(dp.current_turn)]
    want = [message_to_chat(m) for m in dp.history[-10:]]
    assert 8 <= len(hist) <= 10 and hist == want[len(want) - len(hist):]  # never starts on an orphan tool result
    assert hist[0]["role"] != "tool"


def test_obs_mask_replaces_old_tool_outputs_only(setup):
    env, dp, view, _, _ = setup
    pol = make_policy("obs_mask", keep_last=2)
    out = pol.build(view, Setting(10**6), env)
    tools = [m for m in out.messages[_n_prefix(out): len(out.messages) - len(dp.current_turn)] if m["role"] == "tool"]
    assert all(m["content"] == pol.placeholder for m in tools[:-2])
    assert all(m["content"] != pol.placeholder for m in tools[-2:])


def test_oracle_keeps_exactly_the_key_cards_that_reached_the_candidates(setup):
    out = _build("oracle", setup, Setting(10**6))
    keys = set(setup[1].key_card_ids)
    assert set(out.kept_card_ids) == keys & set(out.candidate_ids) and out.kept_card_ids


def test_oracle_fill_puts_the_key_cards_first_then_follows_rrf(setup):
    """A budget that holds every candidate: `oracle` sends the key cards alone, `oracle_fill` everything `rrf` sends.
    Two cards more than the key cards: the key cards, then `rrf`'s two best other cards."""
    keys = set(setup[1].key_card_ids)
    wide = {name: _build(name, setup, Setting(10**6)) for name in ("oracle", "oracle_fill", "rrf")}
    assert set(wide["oracle_fill"].kept_card_ids) == set(wide["rrf"].kept_card_ids) == set(wide["rrf"].candidate_ids)
    assert set(wide["oracle"].kept_card_ids) < set(wide["oracle_fill"].kept_card_ids)
    ranked = sorted(wide["rrf"].values, key=wide["rrf"].values.get, reverse=True)   # rrf's order of the candidates
    held = [c for c in ranked if c in keys]
    fill = _build("oracle_fill", setup, Setting(10**6, top_k=len(held) + 2))
    others = [c for c in ranked if c not in keys][:2]
    assert held and set(fill.kept_card_ids) == set(held) | set(others)
    assert len(fill.kept_card_ids) == len(held) + 2 < len(ranked)
    with pytest.raises(ValueError, match="GoldView"):
        make_policy("oracle_fill").make_valuer(setup[0], None)


def test_top_k_and_threshold_keep_fewer_cards_than_the_budget_allows(setup):
    free = _build("recency", setup, Setting(10**6))
    top3 = _build("recency", setup, Setting(10**6, top_k=3))
    assert len(top3.kept_card_ids) == 3 and top3.history_tokens < free.history_tokens
    assert set(top3.kept_card_ids) <= set(free.kept_card_ids)
    # recency values are exp(-rank / 8): τ = exp(-4.5/8) keeps the 5 newest candidates
    thr = _build("recency", setup, Setting(10**6, threshold=0.57))
    assert len(thr.kept_card_ids) == 5 and set(top3.kept_card_ids) < set(thr.kept_card_ids)
    both = _build("recency", setup, Setting(10**6, top_k=2, threshold=0.57))
    assert set(both.kept_card_ids) < set(top3.kept_card_ids) and len(both.kept_card_ids) == 2
    tight = _build("recency", setup, Setting(64, top_k=3))
    assert tight.history_tokens <= 64
    none = _build("recency", setup, Setting(10**6, threshold=2.0))
    assert none.kept_card_ids == [] and none.history_tokens == 0
    _ends_with_current_turn(none, setup[1])


def test_trim_history_never_starts_on_a_tool_result(setup):
    env, dp, _, _, _ = setup
    for n in range(1, 12):
        idx = trim_history(dp.history, env, max_messages=n, budget=None)
        assert len(idx) <= n and (not idx or dp.history[idx[0]]["role"] != "tool")


def test_unknown_policy_and_missing_paths_fail_clearly(setup):
    with pytest.raises(KeyError, match="known:"):
        make_policy("nope")
    with pytest.raises(ValueError, match="scorer="):
        make_policy("damc")
    with pytest.raises(ValueError, match="labels="):
        make_policy("damc_knn")
    with pytest.raises(TypeError, match="policy 'bm25'"):
        make_policy("bm25", top_k=3)   # selection is a Setting, not a policy option
    with pytest.raises(ValueError, match="GoldView"):
        make_policy("oracle").make_valuer(setup[0], None)


def _poisoned(dp):
    """The same decision with a different gold action, different future messages and other key cards."""
    ep = copy.deepcopy(dp.episode)
    k = dp.index
    ep.messages[k] = {"role": "assistant", "content": None, "tool_calls": [{"id": "zz", "type": "function", "function": {
        "name": "delete_everything", "arguments": json.dumps({"order_id": "POISON-000"})}}]}
    ep.messages[k + 1:] = [{"role": "user", "content": "POISON future turn: the answer is order POISON-000"}]
    ep.metadata = {**ep.metadata, "key_card_ids": {str(k): ["nope:1"]}}
    return [d for d in decision_points(ep) if d.index == k][0]


@pytest.mark.parametrize("name", DEPLOYABLE)
def test_deployable_policies_never_see_the_gold_or_the_future(setup, name):
    env, late, _, _, tok = setup
    # an earlier decision that needs three earlier facts: two fresh memories per policy stay cheap to fill
    dp = next(d for d in decision_points(late.episode) if len(d.key_card_ids) >= 3)
    bad = _poisoned(dp)
    assert bad.gold != dp.gold and bad.key_card_ids != dp.key_card_ids
    outs = []
    for d in (dp, bad):
        memory = DecisionAwareMemory(None, valuer="heuristic", tokenizer=tok, encoder=encoder())   # fresh: nothing carried over
        view = DecisionView.of(d)
        assert "POISON" not in json.dumps(view.messages)
        memory.observe(view.messages, view.session_id)
        pol = make_policy(name)
        valuer = CachedValuer(pol.make_valuer(env)) if isinstance(pol, CardPolicy) else None
        outs.append(pol.build(view, Setting(512), env, memory=memory, valuer=valuer))
    assert outs[0].messages == outs[1].messages and outs[0].kept_card_ids == outs[1].kept_card_ids
    assert "POISON" not in json.dumps(outs[1].messages)
