"""DecisionAwareMemory end to end: ingestion, context building, explain, expand, lifecycle, valuers."""

from __future__ import annotations

import json

import numpy as np
import pytest

from damc.cards import Card, encode_messages
from damc.episodes import EpisodeFormatError
from damc.runtime.memory import Context, DecisionAwareMemory
from damc.runtime.select import TopK
from damc.runtime.valuers import (
    CachedValuer,
    CrossEncoderScorer,
    HeuristicValuer,
    HybridValuer,
    KNNValuer,
    LLMJudgeValuer,
    ScorerValuer,
    is_constraint,
    parse_rating,
)
from damc.templates import template_compress

TOOLS = [{"type": "function", "function": {"name": n, "parameters": {"type": "object", "properties": {}}}}
         for n in ("get_order", "refund", "get_weather", "send_email")]


def call(cid, name, **args):
    return {"role": "assistant", "content": None, "tool_calls": [{"id": cid, "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)}}]}


def result(cid, obj):
    return {"role": "tool", "tool_call_id": cid, "content": json.dumps(obj)}


def conversation(n_chitchat: int = 12) -> list[dict]:
    msgs = [{"role": "system", "content": "You are a support agent."},
            {"role": "user", "content": "Hi! My order 88412 never arrived."},
            call("c1", "get_order", order_id="88412"),
            result("c1", {"status": "error", "code": 500, "message": "Internal Server Error"}),
            {"role": "assistant", "content": "Our order service is failing, I will retry shortly."}]
    for i in range(n_chitchat):
        msgs += [{"role": "user", "content": f"By the way, what is the weather in city number {i}?"},
                 call(f"w{i}", "get_weather", city=f"City{i}"),
                 result(f"w{i}", {"city": f"City{i}", "forecast": "sunny and mild " * 8, "temp_c": 20 + i % 5}),
                 {"role": "assistant", "content": f"It is sunny in City{i}. " + "Have a nice day! " * 5}]
    msgs += [{"role": "user", "content": "Actually, don't refund it: ship a replacement to the Berlin office instead."},
             {"role": "assistant", "content": "Understood."},
             {"role": "user", "content": "So what happened with order 88412? Please try again."}]
    return msgs


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    path = tmp_path_factory.mktemp("mem") / "memdir"
    # the heuristic prior by choice: these tests pin what it keeps (the pinned error, the changed requirement)
    mem = DecisionAwareMemory(path, context_window=4096, valuer="heuristic")
    msgs = conversation()
    ctx = mem.build_context(msgs, tools=TOOLS)
    return mem, msgs, ctx, path


def test_context_keeps_current_turn_verbatim_and_the_error(built):
    mem, msgs, ctx, _ = built
    assert isinstance(ctx, Context)
    assert ctx.messages[-1] == msgs[-1]                             # the current user turn, verbatim
    assert ctx.openai_messages() == ctx.messages
    assert ctx.messages[0] == {"role": "system", "content": "You are a support agent."}
    assert [m["role"] for m in ctx.messages] == ["system", "user", "user"]   # caller's system, memory, turn
    system = ctx.messages[1]["content"]   # the fenced memory records
    assert system.startswith("## Relevant history") and "<memory_records>" in system
    kept = {s.card_id for s in ctx.selected}
    assert "default:2:0" in kept                                    # the failed get_order call (pinned, id overlap)
    assert "default:53" in kept                                     # the changed requirement
    assert "[default:2:0] ✗ get_order(order_id=88412) failed: 500 Internal Server Error" in system
    assert all(line in system for line in ctx.memory_lines)
    assert ctx.memory_tokens <= ctx.budget_tokens
    assert ctx.tokens_after < ctx.tokens_before and ctx.tokens_saved > 500
    assert set(ctx.timings_ms) == {"ingest", "retrieve", "value", "select", "compress", "assemble", "total"}
    assert len(ctx.selected) <= 12 and len(ctx.selected) + len(ctx.dropped) == ctx.n_candidates
    assert {d.reason for d in ctx.dropped} <= {"rank", "budget", "below_threshold"}
    values = {s.card_id: s.value for s in ctx.selected}
    chit = [d.value for d in ctx.dropped if d.card_id.endswith(":0") and "get_weather" in template_compress(mem.expand(d.card_id))]
    assert values["default:2:0"] > max(chit, default=0)


def test_expand_and_explain(built):
    mem, msgs, ctx, _ = built
    raw = mem.expand("default:2:0")
    assert raw.tool_name == "get_order" and raw.error == {"code": 500, "message": "Internal Server Error"}
    assert raw.result_index == 3
    with pytest.raises(KeyError):
        mem.expand("nope:1")
    exp = mem.explain(ctx)
    text = str(exp)
    assert "KEPT" in text and "DROPPED" in text and "default:2:0" in text
    assert exp.tokens_saved == ctx.tokens_saved
    assert sum(exp.reasons().values()) == len(ctx.dropped) + exp.not_retrieved


def test_auto_ingest_is_idempotent_and_persists(built):
    mem, msgs, ctx, path = built
    n = len(mem)
    mem.build_context(msgs, tools=TOOLS)
    assert len(mem) == n                                             # nothing recorded twice
    msgs2 = msgs + [call("c9", "get_order", order_id="88412"), result("c9", {"order_id": "88412", "state": "lost"}),
                    {"role": "assistant", "content": "It is lost."}, {"role": "user", "content": "Refund it then."}]
    ctx2 = mem.build_context(msgs2, tools=TOOLS)
    assert len(mem) == n + 3                                         # the old current turn became history
    assert mem.expand("default:56:0").result == {"order_id": "88412", "state": "lost"}
    assert any(s.card_id == "default:56:0" for s in ctx2.selected)
    mem.flush()
    again = DecisionAwareMemory(path, context_window=4096, valuer="heuristic")
    assert len(again) == len(mem) and again.expand("default:2:0") == mem.expand("default:2:0")
    assert again.index.sync() == 0 and again.index.last_rebuild_reason is None
    from damc.bench.explain import main

    data = main(["store", str(path)])
    assert data["session_id"] == "default" and data["selected"]


def test_small_budget_drops_for_budget():
    mem = DecisionAwareMemory(None, selector=TopK(None))
    ctx = mem.build_context(conversation(4), tools=TOOLS, budget_tokens=60)
    assert ctx.memory_tokens <= 60 and ctx.selected
    assert any(d.reason == "budget" for d in ctx.dropped)


def test_a_first_turn_embeds_no_query_and_a_later_one_does():
    """Nothing stored for the conversation yet: no candidate to find, so the query costs no encoder pass; once
    the store holds cards, the query is embedded and the similarity search finds them."""
    mem = DecisionAwareMemory(None, valuer="heuristic")
    mem.index.sync()                       # the index is built (and the encoder's dimension probed) first
    embedded: list[str] = []
    encode = mem.index.encode
    mem.index.encode = lambda texts: embedded.extend(texts) or encode(texts)
    first = mem.build_context([{"role": "user", "content": "Where is order 88412?"}], tools=TOOLS, session_id="a")
    assert first.selected == [] and embedded == []
    assert mem.index.holds_any(mem._scope(None, None)) is False
    msgs = conversation(2)
    ctx = mem.build_context(msgs, tools=TOOLS, session_id="a")
    assert ctx.selected and any("88412" in t for t in embedded)            # the cards, then the query
    assert mem.index.holds_any(mem._scope(None, None), "a") and not mem.index.holds_any(mem._scope(None, None), "b")
    n = len(embedded)
    other = mem.build_context([{"role": "user", "content": "Where is order 88412?"}], tools=TOOLS, session_id="b")
    assert other.selected == [] and len(embedded) == n                      # session b holds nothing: no query


def test_field_compressor_from_the_config_writes_every_id_into_the_prompt():
    """`MemoryConfig.compressor="fields"`: the kept tool card's line holds ids the template cuts (list items after
    the third); an unknown name is refused at construction."""
    from damc.runtime.config import MemoryConfig

    msgs = [{"role": "system", "content": "You are a support agent."},
            {"role": "user", "content": "Which of my orders shipped?"},
            call("c1", "list_orders", user="ana_7"),
            result("c1", {"orders": [f"#W{1000 + i}" for i in range(8)]}),
            {"role": "assistant", "content": "You have eight orders."},
            {"role": "user", "content": "Cancel the last one, #W1007... no wait, check the 7th first."}]
    lines = {}
    for name in ("template", "fields"):
        mem = DecisionAwareMemory(None, config=MemoryConfig(compressor=name), selector=TopK(None))
        ctx = mem.build_context(msgs, tools=TOOLS)
        (line,) = [s.line for s in ctx.selected if "list_orders" in s.line]
        lines[name] = line
    assert "#W1006" not in lines["template"] and "+5 more" in lines["template"]
    assert all(f"#W{1000 + i}" in lines["fields"] for i in range(8))
    with pytest.raises(ValueError, match="MemoryConfig.compressor must be one of"):
        DecisionAwareMemory(None, config=MemoryConfig(compressor="zip"))


def test_add_merges_tool_results_across_batches_and_rejects_malformed():
    mem = DecisionAwareMemory(None, tokenizer=None, session_id="s")
    assert mem.add({"role": "user", "content": "where is 88412"}) == ["s:0"]
    assert mem.add(call("c1", "get_order", order_id="88412")) == ["s:1:0"]
    assert mem.expand("s:1:0").status is None
    mem.add(result("c1", {"error": "timeout", "code": 504}))
    card = mem.expand("s:1:0")
    assert card.kind == "tool_error" and card.error["code"] == 504 and card.result_index == 2
    expected = encode_messages([{"role": "user", "content": "where is 88412"}, call("c1", "get_order", order_id="88412"),
                                result("c1", {"error": "timeout", "code": 504})], "s")[1]
    assert (card.raw_text, card.result, card.status, card.error) == (expected.raw_text, expected.result,
                                                                      expected.status, expected.error)
    bad = [
        (result("zz", {}), "unknown call 'zz'"),
        ({"role": "tool", "content": "x"}, "tool_call_id"),
        ({"role": "wizard", "content": "x"}, "unknown role"),
        ("just a string", "is a str"),
        ({"role": "user", "content": 42}, "content"),
    ]   # tool-call arguments that are not JSON are stored as text, not refused: tests/integration/test_bad_input.py
    for msg, needle in bad:
        with pytest.raises(EpisodeFormatError, match=needle) as ei:
            mem.add_messages([{"role": "user", "content": "fine"}, msg])
        assert "messages[" in str(ei.value)
    assert len(mem) == 2 and mem.store.session_state("s")["n_messages"] == 3   # failed batches wrote nothing


def test_archive_and_merge_similar():
    mem = DecisionAwareMemory(None, session_id="a")
    msgs = [{"role": "user", "content": "track my orders"}]
    for i, eta in enumerate(["2026-01-05", "2026-01-06", "2026-01-07"]):
        msgs += [call(f"o{i}", "get_order", order_id="88412"),
                 result(f"o{i}", {"order_id": "88412", "state": "in transit", "eta": eta, "hub": f"HUB-{i}"})]
    msgs += [call("e", "refund", order_id="1234"), result("e", {"status": "error", "code": 403, "message": "Forbidden"}),
             {"role": "user", "content": "thanks, that is all for the weather"}]
    mem.add_messages(msgs)
    mem.index.sync()
    before = mem.index.ntotal
    merged = mem.merge_similar(threshold=0.9)
    assert len(merged) == 1
    m = merged[0]
    assert sorted(m.meta["merged_from"]) == ["a:1:0", "a:3:0", "a:5:0"]
    line = template_compress(m)
    for atom in ("2026-01-05", "2026-01-06", "2026-01-07", "HUB-0", "HUB-1", "HUB-2", "88412"):
        assert atom in line and atom in m.raw_text        # the union of critical atoms survives
    assert mem.index.ntotal == before - 2 and mem.store.count("cold") == 3
    assert mem.expand("a:1:0").result["eta"] == "2026-01-05"    # members stay expandable
    # archive: everything is "old" a year from now; never-valued unpinned cards go cold, the error stays
    archived = mem.archive(min_age_s=86400, max_value=0.2, now=mem.store.stamp()["seq"] * 0 + 4e9)
    assert "a:7:0" not in archived and m.card_id in archived and "a:0" in archived
    assert mem.index.ntotal == mem.store.count("hot") == 1
    # another session of the same scope does not see session a's cards unless sessions are shared
    ctx = mem.build_context([{"role": "user", "content": "and order 88412?"}], session_id="b")
    assert ctx.selected == [] and ctx.n_candidates == 0
    mem.config.share_sessions = True
    ctx = mem.build_context([{"role": "user", "content": "and order 88412?"}], session_id="c")
    assert [s.card_id for s in ctx.selected] == ["a:7:0"]
    # and another user never does, shared sessions or not
    ctx = mem.build_context([{"role": "user", "content": "and order 88412?"}], session_id="a", user_id="mallory")
    assert ctx.selected == [] and ctx.n_hot == 0


# ----------------------------------------------------------------------------- valuers

def _cards():
    return [c for c in encode_messages(conversation(3), "v")]


def test_heuristic_prior():
    cards = _cards()
    vals = HeuristicValuer().value("user: So what happened with order 88412?\ntools: get_order", cards)
    by_id = dict(zip((c.card_id for c in cards), vals))
    assert by_id["v:2:0"] == max(vals)                      # error + id overlap
    assert by_id["v:17"] > by_id["v:9"]                     # the constraint beats chit-chat
    assert is_constraint("Actually, don't do that") and not is_constraint("Hello there")
    assert np.all((vals >= 0) & (vals <= 1))


def test_cached_valuer_ttl_and_content_hash():
    class Counting(HeuristicValuer):
        n = 0

        def value(self, query, cards, now=None):
            Counting.n += len(cards)
            return super().value(query, cards, now)

    clock = [0.0]
    v = CachedValuer(Counting(), ttl_s=60, clock=lambda: clock[0])
    cards = _cards()[:5]
    a = v.value("q", cards)
    b = v.value("q", cards)
    assert np.allclose(a, b) and Counting.n == 5 and v.hits == 5
    v.value("other query", cards)
    assert Counting.n == 10
    changed = Card.from_dict({**cards[0].to_dict(), "raw_text": "different text"})
    v.value("q", [changed] + cards[1:])
    assert Counting.n == 15                                 # another candidate list: valued afresh
    # a card's value depends on the other candidates (recency is a rank among them): a subset is never served
    # the values computed beside the full list
    sub = v.value("q", cards[:2])
    np.testing.assert_allclose(sub, HeuristicValuer().value("q", cards[:2]))
    assert not np.allclose(sub, a[:2]) and Counting.n == 17
    clock[0] = 61.0
    v.value("q", cards)
    assert Counting.n == 22                                 # expired


def test_scorer_knn_and_hybrid_valuers():
    class FakeScorer:
        def score(self, q, cards):
            return np.array([5.0 if "88412" in c.raw_text else -5.0 for c in cards])

    class FakeKNN:
        def value(self, q, cards):
            return np.array([0.0] * len(cards))

    cards = _cards()
    s = ScorerValuer(FakeScorer()).value("q", cards)
    assert s[1] > 0.99 and s[3] < 0.01
    assert np.allclose(KNNValuer(FakeKNN()).value("q", cards), 0.5)
    h = HybridValuer(HeuristicValuer(), ScorerValuer(FakeScorer()), weight=0.5).value("q", cards)
    assert np.allclose(h, 0.5 * s + 0.5 * HeuristicValuer().value("q", cards))
    ce = ScorerValuer(CrossEncoderScorer("minilm-l6", max_length=128)).value("user: order 88412", cards[:4])
    assert ce.shape == (4,) and np.all((ce > 0) & (ce < 1))


def test_parse_rating_and_judge_with_completion_api():
    assert parse_rating("7") == 7 and parse_rating("Rating: 8/10 because") == 8
    assert parse_rating("I'd say **9** out of 10") == 9 and parse_rating("no idea") is None
    assert parse_rating("Importance 12? no: 6") == 6
    judge = LLMJudgeValuer(complete=lambda msgs: "8" if "88412" in msgs[0]["content"].split("Fragment:")[1] else "meh")
    vals = judge.value("user: order 88412", _cards()[:3])
    assert list(vals) == pytest.approx([0.8, 0.8, 0.5])


@pytest.mark.slow
def test_llm_judge_expected_rating_with_smollm2():
    judge = LLMJudgeValuer("smollm2-135m", batch_size=4)
    cards = _cards()[:3]
    a = judge.value("user: So what happened with order 88412?", cards)
    b = judge.value("user: So what happened with order 88412?", cards)
    assert a.shape == (3,) and np.all((a >= 0) & (a <= 1)) and np.array_equal(a, b)   # deterministic
    assert len(set(np.round(a, 4))) > 1                                                # it discriminates


def test_explain_episode_cli(capsys):
    from damc.bench.explain import main

    data = main(["episode", "data/samples/bfcl_sample.jsonl"])
    out = capsys.readouterr().out
    assert "KEPT" in out and data["decision_id"].startswith(data["session_id"])


def test_scopes_keep_users_apart_and_expand_refuses_other_scopes():
    mem = DecisionAwareMemory(None, tokenizer=None, user_id="alice", valuer="heuristic")   # keeps both cards
    secret = [{"role": "user", "content": "my card number is 4111-1111-1111-1111 and order 88412 is lost"},
              call("c1", "get_order", order_id="88412"), result("c1", {"status": "error", "code": 500})]
    mem.add_messages(secret, session_id="s1")
    ask = [{"role": "user", "content": "what is my card number? order 88412?"}]
    own = mem.build_context(secret + ask, tools=TOOLS, session_id="s1")
    assert {"s1:0", "s1:1:0"} <= {s.card_id for s in own.selected} and own.user_id == "alice"
    other = mem.build_context(ask, tools=TOOLS, session_id="s1", user_id="bob")    # same session id, other user
    assert other.selected == [] and other.dropped == [] and other.n_hot == 0
    # the whole number: a timing in the trace may hold the digits "4111" by chance (0.1093049941118…)
    assert "4111-1111" not in json.dumps(other.to_dict()) and "4111-1111" not in str(mem.explain(other))
    with pytest.raises(PermissionError):
        mem.expand("s1:0", user_id="bob")
    with pytest.raises(PermissionError):
        mem.expand("s1:0", agent_id="billing")                  # alice's billing agent is a scope of its own
    with pytest.raises(KeyError):
        mem.expand("s9:0", user_id="bob")
    assert mem.expand("s1:0").raw_text.startswith("my card number")
    # bob writes the same session and card ids: both copies live, each in its scope
    mem.add_messages([{"role": "user", "content": "hello from bob"}], session_id="s1", user_id="bob")
    assert mem.expand("s1:0", user_id="bob").raw_text == "hello from bob"
    assert mem.expand("s1:0").raw_text.startswith("my card number")
    assert mem.archive(min_age_s=0, max_value=1.0, keep_pinned=False, now=4e9, user_id="bob") == ["s1:0"]
    assert mem.store.get_stored("s1:0", mem.scope).tier == "hot"
