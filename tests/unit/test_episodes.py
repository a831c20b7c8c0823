"""Episode format: loading, validation errors, writing, decision points, actions, distractors."""

import json

import pytest

from damc.episodes import (
    Episode,
    EpisodeFormatError,
    action_json,
    decision_points,
    load_episodes,
    make_distractors,
    render_action,
    write_episodes,
)


def _call(cid, name, **args):
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def make_episode(eid="sup-1"):
    msgs = [
        {"role": "system", "content": "You are a support agent."},
        {"role": "user", "content": "My order 88412 never arrived", "timestamp": "2026-01-03T10:00:00Z"},
        {"role": "assistant", "content": None, "tool_calls": [_call("c1", "get_order", order_id="88412")]},
        {"role": "tool", "tool_call_id": "c1", "content": json.dumps({"order_id": "88412", "status": "shipped"})},
        {"role": "assistant", "content": None, "tool_calls": [_call("c2", "get_order", order_id="77001")]},
        {"role": "tool", "tool_call_id": "c2", "content": json.dumps({"status": "error", "code": 500})},
        {"role": "assistant", "content": "Your order 88412 has shipped."},
        {"role": "user", "content": "Please refund it instead."},
        {"role": "assistant", "content": None,
         "tool_calls": [_call("c3", "issue_refund", order_id="88412", method="card")]},
    ]
    tools = [{"type": "function", "function": {"name": n, "parameters": {}}} for n in
             ("get_order", "issue_refund", "search_kb")]
    return Episode(eid, msgs, domain="support", tools=tools)


def write_lines(tmp_path, lines):
    p = tmp_path / "eps.jsonl"
    p.write_text("\n".join(lines) + "\n")
    return p


def test_round_trip_and_decisions(tmp_path):
    ep = make_episode()
    p = tmp_path / "out" / "eps.jsonl"
    assert write_episodes(p, [ep, make_episode("sup-2")]) == 2
    back = load_episodes(p)
    assert [e.episode_id for e in back] == ["sup-1", "sup-2"]
    assert back[0].messages == ep.messages and back[0].tools == ep.tools
    dps = decision_points(back[0])
    assert [d.index for d in dps] == [2, 4, 6, 8]
    last = dps[-1]
    assert last.current_turn_start == 7 and last.decision_id == "sup-1@8"
    assert [m["role"] for m in last.history] == ["system", "user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert len(decision_points(back[0], tool_calls_only=True)) == 3
    assert not list(tmp_path.glob("out/.*tmp"))  # atomic write left no temp file


def test_render_action_canonical():
    ep = make_episode()
    assert render_action(ep.messages[8]) == 'issue_refund(order_id="88412", method="card")'
    assert render_action(ep.messages[6]) == "Your order 88412 has shipped."
    assert json.loads(action_json(ep.messages[8])) == [
        {"name": "issue_refund", "arguments": {"order_id": "88412", "method": "card"}}]


def test_distractors_never_gold_and_use_episode_values():
    ep = make_episode()
    gold = render_action(ep.messages[8])
    ds = make_distractors(ep, 8, n=3)
    assert len(ds) == 3 and gold not in ds and len(set(ds)) == 3
    # same tool with another order id seen in the episode
    assert 'issue_refund(order_id="77001", method="card")' in ds
    # another tool appears too
    assert any(d.startswith(("get_order(", "search_kb(")) for d in ds)
    assert make_distractors(ep, 8, n=3) == ds  # deterministic
    text = make_distractors(ep, 6, n=2)
    assert "Your order 88412 has shipped." not in text


def test_distractor_values_follow_the_episode_asked_and_its_growth():
    """The episode's values are kept for the episode asked last: another episode, or the same one grown by a
    message, gets its own values (an order id seen only in the new tool result becomes a rival)."""
    ep, other = make_episode(), make_episode("sup-2")
    before = make_distractors(ep, 8, n=8)
    assert not any("55555" in d for d in before)
    other.messages[5] = {"role": "tool", "tool_call_id": "c2", "content": json.dumps({"order_id": "55555"})}
    assert any("55555" in d for d in make_distractors(other, 8, n=8))
    assert make_distractors(ep, 8, n=8) == before                  # back to the first: its own values
    ep.messages.append({"role": "tool", "tool_call_id": "c3", "content": json.dumps({"order_id": "55555"})})
    assert any("55555" in d for d in make_distractors(ep, 8, n=8))


def test_given_distractors_are_used():
    ep = make_episode()
    ep.distractors = {"8": ['issue_refund(order_id="1", method="card")', render_action(ep.messages[8])]}
    assert make_distractors(ep, 8) == ['issue_refund(order_id="1", method="card")']


@pytest.mark.parametrize("mutate, field, needle", [
    (lambda d: d["messages"].append({"role": "robot", "content": "x"}), "messages[9].role", "unknown role"),
    (lambda d: d["messages"][3].pop("tool_call_id"), "messages[3].tool_call_id", "without tool_call_id"),
    (lambda d: d["messages"].insert(1, {"role": "tool", "tool_call_id": "zz", "content": "{}"}),
     "messages[1].tool_call_id", "unknown call"),
    (lambda d: d["messages"][2]["tool_calls"][0]["function"].update(arguments="{bad"),
     "messages[2].tool_calls[0].function.arguments", "not valid JSON"),
    (lambda d: d.pop("episode_id"), "episode_id", "missing episode id"),
    (lambda d: d["messages"].append({"role": "assistant", "content": None}), "messages[9].content", "neither"),
])
def test_bad_episodes_name_line_and_field(tmp_path, mutate, field, needle):
    good = make_episode("ok-1").to_dict()
    bad = make_episode("bad-1").to_dict()
    mutate(bad)
    p = write_lines(tmp_path, [json.dumps(good), json.dumps(bad)])
    with pytest.raises(EpisodeFormatError) as ei:
        load_episodes(p)
    err = ei.value
    assert err.line == 2 and err.field == field and needle in str(err)
    assert str(p) in str(err) and ":2:" in str(err)


def test_malformed_json_line(tmp_path):
    p = write_lines(tmp_path, [json.dumps(make_episode().to_dict()), "", '{"episode_id": "x", "messages": ['])
    with pytest.raises(EpisodeFormatError, match=r"eps.jsonl:3: malformed JSON"):
        load_episodes(p)


def test_duplicate_ids_and_missing_file(tmp_path):
    line = json.dumps(make_episode().to_dict())
    with pytest.raises(EpisodeFormatError, match="duplicate episode_id"):
        load_episodes(write_lines(tmp_path, [line, line]))
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        load_episodes(tmp_path / "nope.jsonl")


# --- one message check for the dataset contract, the card encoder and the live runtime --------------------------

_SHAPE_FAULTS = [   # (message, field at fault) — wrong for every reader of a message
    ("just a string", "messages[1]"),
    ({"content": "no role"}, "messages[1].role"),
    ({"role": "bot", "content": "hi"}, "messages[1].role"),
    ({"role": "user", "content": 42}, "messages[1].content"),
    ({"role": "user", "content": [{"type": "text", "text": 5}]}, "messages[1].content[0]"),
    ({"role": "assistant", "content": None, "tool_calls": {"id": "c"}}, "messages[1].tool_calls"),
    ({"role": "assistant", "content": None, "tool_calls": ["get_order"]}, "messages[1].tool_calls[0]"),
    ({"role": "assistant", "content": None, "tool_calls": [{"id": "c", "function": {"arguments": "{}"}}]},
     "messages[1].tool_calls[0].function.name"),
    ({"role": "assistant", "content": None, "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": 3}}]},
     "messages[1].tool_calls[0].function.arguments"),
    ({"role": "assistant", "content": None, "tool_calls": [{"id": 7, "function": {"name": "f"}}]},
     "messages[1].tool_calls[0].id"),
    ({"role": "tool", "content": "x"}, "messages[1].tool_call_id"),
    ({"role": "tool", "tool_call_id": 9, "content": "x"}, "messages[1].tool_call_id"),
]


def _readers(msg):
    """The three readers of a chat message, each fed [a user message, msg]."""
    from damc.cards import encode_messages
    from damc.episodes import validate_episode_dict
    from damc.runtime.ingest import ingest_batch

    msgs = [{"role": "user", "content": "fine"}, msg]
    return {
        "episode contract": lambda: validate_episode_dict({"episode_id": "e", "messages": msgs}),
        "card encoder": lambda: encode_messages(msgs, "e"),
        "runtime ingest": lambda: ingest_batch(msgs, "s", {"n_messages": 0, "pending": {}}, lambda _: None,
                                               is_pinned=lambda _: False),
    }


@pytest.mark.parametrize("msg,field", _SHAPE_FAULTS, ids=[f for _, f in _SHAPE_FAULTS])
def test_one_message_check_names_the_same_field_for_every_reader(msg, field):
    for reader, run in _readers(msg).items():
        with pytest.raises(EpisodeFormatError) as ei:
            run()
        assert ei.value.field == field, (reader, str(ei.value))
        assert ei.value.expected, reader


def test_the_contract_is_stricter_than_the_runtime_only_where_documented():
    """A logged dataset must replay exactly (call ids, JSON-object arguments, an assistant message says
    something); a live agent's slip is kept, not refused (docs/runtime.md "Bad input")."""
    slips = [
        ({"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "f", "arguments": "{}"}}]},
         "messages[1].tool_calls[0].id"),
        ({"role": "assistant", "content": None,
          "tool_calls": [{"id": "", "function": {"name": "f", "arguments": "{}"}}]},
         "messages[1].tool_calls[0].id"),
        ({"role": "assistant", "content": None,
          "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": '{"a": '}}]},
         "messages[1].tool_calls[0].function.arguments"),
        ({"role": "assistant", "content": None,
          "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "[1, 2]"}}]},
         "messages[1].tool_calls[0].function.arguments"),
    ]
    for msg, field in slips:
        readers = _readers(msg)
        with pytest.raises(EpisodeFormatError) as ei:
            readers["episode contract"]()
        assert ei.value.field == field
        cards, _, _, ids = readers["runtime ingest"]()
        assert ids == ["s:0", "s:1:0"] and cards[1].tool_name == "f"
    empty = {"role": "assistant", "content": ""}
    with pytest.raises(EpisodeFormatError, match="neither content nor tool calls"):
        _readers(empty)["episode contract"]()
    assert _readers(empty)["runtime ingest"]()[3] == ["s:0"]
