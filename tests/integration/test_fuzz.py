"""Hostile and random input: only documented error types, each naming the offending field; huge inputs bounded.

Documented errors: `EpisodeFormatError` (episodes, messages, tool-call arguments; `.field` names the field),
`BFCLCallParseError` (Python-call strings, parsed with `ast` only). Template compression and action parsing
never raise. Huge inputs (10 MB tool result, 100k messages, deep JSON, invalid UTF-8, lone surrogates) are
handled within the time and memory stated in each test; oversized card text is cut and the cut recorded in
`card.meta["truncated"]`.
"""

from __future__ import annotations

import json
import time
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from damc.cards import Card, parse_result
from damc.data.bfcl_replay import BFCLCallParseError, parse_call, parse_calls
from damc.episodes import Episode, EpisodeFormatError, load_episodes
from damc.facts import parse_action
from damc.runtime.ingest import MAX_CARD_CHARS
from damc.runtime.memory import DecisionAwareMemory
from damc.templates import template_compress

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
text = st.text(max_size=40)
scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | text
json_like = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
                         max_leaves=12)
roles = st.sampled_from(["system", "user", "assistant", "tool", "wizard", None, 3])
calls = st.fixed_dictionaries({"id": st.one_of(text, st.integers(), st.none()), "type": st.just("function"),
                               "function": st.one_of(json_like, st.fixed_dictionaries({
                                   "name": st.one_of(text, st.integers()),
                                   "arguments": st.one_of(text, json_like.map(json.dumps), json_like)}))})
messages = st.one_of(json_like, st.fixed_dictionaries({"role": roles}, optional={
    "content": st.one_of(text, st.none(), st.integers(), st.lists(st.one_of(text, json_like), max_size=3)),
    "tool_calls": st.one_of(st.lists(calls, max_size=2), json_like),
    "tool_call_id": st.one_of(text, st.integers(), st.sampled_from(["c", "0"])),
    "timestamp": st.one_of(text, st.integers())}))


def _names_a_field(e: EpisodeFormatError, prefix: str = "") -> None:
    assert e.field and e.field.startswith(prefix) and e.field in str(e), str(e)


@FUZZ
@given(st.one_of(json_like, st.fixed_dictionaries({"episode_id": st.one_of(text, st.integers()),
                                                   "messages": st.lists(messages, max_size=5)},
                                                  optional={"tools": json_like, "distractors": json_like})))
def test_episode_loader_raises_only_format_errors_naming_the_field(d):
    try:
        Episode.from_dict(d)
    except EpisodeFormatError as e:
        _names_a_field(e)


@FUZZ
@given(st.lists(messages, min_size=1, max_size=6))
def test_message_validation_and_card_encoding(msgs):
    mem = DecisionAwareMemory(None, tokenizer=None, encoder=None)
    try:
        ids = mem.add_messages(msgs, session_id="s")
    except EpisodeFormatError as e:
        _names_a_field(e, "messages[")
        assert mem.store.count() == 0                      # nothing of a failed batch is written
        return
    for cid in ids:
        assert isinstance(template_compress(mem.expand(cid)), str)


@FUZZ
@given(st.text(max_size=80) | st.builds(lambda n, a: f"{n}({a})", st.from_regex(r"[A-Za-z_]\w{0,8}", fullmatch=True),
                                        st.text(max_size=40)))
def test_python_call_strings_parse_with_ast_only(s):
    try:
        calls = parse_calls(s)
    except BFCLCallParseError:
        return
    assert all(isinstance(c.kwargs, dict) for c in calls)
    parse_action(s)                                        # the metrics parser never raises either


def test_python_call_strings_are_never_evaluated(tmp_path):
    marker = tmp_path / "pwned"
    for s in [f"f(x=open({str(marker)!r}, 'w'))", "__import__('os').system('true')", "f(g())", "f(*a)", "f(**k)",
              "f(x=lambda: 1)", "f(" * 50_000 + ")" * 50_000, "f(x='\x00')"]:
        with pytest.raises(BFCLCallParseError):
            parse_call(s)
    assert not marker.exists()


@FUZZ
@given(st.builds(Card, card_id=text, episode_id=text, position=st.integers(0, 10**6),
                 role=st.sampled_from(["user", "assistant", "tool"]),
                 kind=st.sampled_from(["tool_result", "tool_error", "user", "assistant"]), raw_text=text,
                 tool_name=st.none() | text, arguments=st.none() | st.dictionaries(text, json_like, max_size=3),
                 result=json_like, status=st.sampled_from([None, "ok", "error"]),
                 error=st.none() | st.dictionaries(text, json_like, max_size=2)))
def test_template_compression_never_raises(card):
    assert isinstance(template_compress(card), str)


# ----------------------------------------------------------------------------- huge and broken inputs

def _tool_turn(content: str) -> list[dict]:
    return [{"role": "user", "content": "fetch it"},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function",
             "function": {"name": "fetch", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": content}]


@pytest.mark.slow
def test_ten_megabyte_tool_result_is_cut_and_recorded():
    """Stated bound: < 10 s and < 200 MB of Python allocations for a 10 MB result (SmolLM2 tokenizer)."""
    mem = DecisionAwareMemory(None, encoder=None)
    assert mem.tokenizer is not None                            # loaded before the clock starts
    big = json.dumps({"rows": ["x" * 100] * 100_000})           # ~10.3 MB of JSON
    tracemalloc.start()
    t = time.perf_counter()
    mem.add_messages(_tool_turn(big), session_id="s")
    elapsed = time.perf_counter() - t
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    card = mem.expand("s:1:0")
    assert card.meta["truncated"] == {"field": "content", "chars": len(big), "kept": MAX_CARD_CHARS}
    assert len(card.result) <= MAX_CARD_CHARS and len(card.raw_text) <= MAX_CARD_CHARS + 100
    assert elapsed < 10 and peak < 200 * 2**20, (elapsed, peak)


def test_deep_json_and_surrogates(tmp_path):
    deep = "[" * 100_000 + "]" * 100_000
    assert parse_result(deep) == deep                            # too deep to parse: kept as text
    mem = DecisionAwareMemory(None, tokenizer=None, encoder=None)
    mem.add_messages(_tool_turn(deep), session_id="d")
    assert mem.expand("d:1:0").meta["truncated"]["chars"] == 200_000
    bad_args = [{"role": "assistant", "content": None, "tool_calls": [{"id": "c", "type": "function",
                 "function": {"name": "f", "arguments": '{"a": ' + deep + "}"}}]}]
    mem.add_messages(bad_args, session_id="e")                   # too deep to parse: kept as text, not refused
    card = mem.expand("e:0:0")
    assert card.meta["malformed"] is True and len(card.meta["raw_arguments"]) == MAX_CARD_CHARS
    assert card.arguments == {} and card.meta["truncated"]["kept"] == MAX_CARD_CHARS
    # lone surrogates (a str) and JSON \ud800 escapes are stored as U+FFFD, never crash SQLite or the tokenizer
    mem2 = DecisionAwareMemory(None, encoder=None)
    mem2.add_messages([{"role": "user", "content": "bad \udcff bytes"},
                       {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "type": "function",
                        "function": {"name": "f", "arguments": '{"k": "\\ud800"}'}}]}], session_id="u")
    assert mem2.expand("u:0").raw_text == "bad \ufffd bytes" and mem2.expand("u:1:0").arguments == {"k": "\ufffd"}
    # an episode file with invalid UTF-8 or a too-deep line fails with the line named
    for name, blob in [("bad.jsonl", b'{"episode_id": "a", "messages": [{"role": "user", "content": "\xff"}]}\n'),
                       ("deep.jsonl", deep.encode() + b"\n")]:
        (tmp_path / name).write_bytes(blob)
        with pytest.raises(EpisodeFormatError) as ei:
            load_episodes(tmp_path / name)
        assert ei.value.line == 1 and ei.value.field == "line"


@pytest.mark.slow
def test_hundred_thousand_message_conversation():
    """Stated bound: a 100k-message conversation (25k turns) gets its context in < 180 s on 2 cores — ingest, index
    and build in one call — with a hashed stand-in encoder (the real encoder's cost is in docs/runtime.md)."""
    from test_isolation import HashEncoder

    msgs = [{"role": "system", "content": "You are a support agent."}]
    for t in range(25_000):
        msgs += [{"role": "user", "content": f"where is order {t}?"},
                 {"role": "assistant", "content": None, "tool_calls": [{"id": f"c{t}", "type": "function",
                  "function": {"name": "get_order", "arguments": json.dumps({"order_id": str(t)})}}]},
                 {"role": "tool", "tool_call_id": f"c{t}", "content": json.dumps({"order_id": str(t), "state": "ok"})},
                 {"role": "assistant", "content": f"order {t} is ok"}]
    msgs.append({"role": "user", "content": "and order 12345?"})
    assert len(msgs) == 100_002
    mem = DecisionAwareMemory(None, tokenizer=None, encoder=HashEncoder())
    t = time.perf_counter()
    ctx = mem.build_context(msgs)
    elapsed = time.perf_counter() - t
    assert len(mem) == 75_000 and ctx.selected and ctx.tokens_after < ctx.tokens_before / 100
    assert elapsed < 180, elapsed
    print(f"100k messages: {elapsed:.1f} s, {ctx.tokens_before:,} -> {ctx.tokens_after:,} tokens")
