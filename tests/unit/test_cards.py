"""Memory cards: encoding, status/error detection, critical atoms, token counts, stable ids."""

import json

import pytest
from test_episodes import make_episode

from damc.cards import (
    Card,
    card_id,
    cards_before,
    critical_atoms,
    detect_status,
    encode_episode,
    encode_messages,
    fact_cards,
    parse_result,
    token_counter,
)
from damc.episodes import EpisodeFormatError


def test_encode_episode_merges_calls_with_results():
    ep = make_episode()
    cards = encode_episode(ep)
    assert [c.card_id for c in cards] == ["sup-1:1", "sup-1:2:0", "sup-1:4:0", "sup-1:6", "sup-1:7", "sup-1:8:0"]
    order = cards[1]
    assert order.kind == "tool_result" and order.status == "ok" and order.tool_name == "get_order"
    assert order.arguments == {"order_id": "88412"} and order.result == {"order_id": "88412", "status": "shipped"}
    assert order.result_index == 3 and order.position == 2
    assert order.raw_text.startswith('get_order(order_id="88412") -> {')
    err = cards[2]
    assert err.kind == "tool_error" and err.error == {"code": 500, "message": "Internal Server Error"}
    pending = cards[-1]
    assert pending.status is None and pending.result is None  # call whose result never came
    assert encode_episode(ep)[1].to_dict() == order.to_dict()  # stable
    assert Card.from_dict(order.to_dict()) == order


def test_cards_before_excludes_unfinished_calls():
    cards = encode_episode(make_episode())
    assert [c.card_id for c in cards_before(cards, 4)] == ["sup-1:1", "sup-1:2:0"]
    assert card_id("e", 3) == "e:3" and card_id("e", 3, 1) == "e:3:1"


@pytest.mark.parametrize("raw, code", [
    ('{"error": "No such file or directory: notes.txt"}', None),
    ('{"status": "error", "code": 404, "message": "order not found"}', 404),
    ('{"status_code": 429}', 429),
    ('{"error": {"code": "E_PERM", "message": "denied"}}', "E_PERM"),
    ('{"exit_code": 2, "stderr": "boom"}', 2),
    ("HTTP 503 Service Unavailable", 503),
    ("KeyError: 'user_id'", "KeyError"),
    ("Traceback (most recent call last):\n  File x\nValueError: bad", "ValueError"),
    ("Error: permission denied", None),
])
def test_detect_errors(raw, code):
    status, err = detect_status(parse_result(raw))
    assert status == "error" and err["code"] == code


@pytest.mark.parametrize("raw", ['{"status": "shipped", "code": 200}', '{"exit_code": 0}', "All 3 files copied",
                                 '{"results": [{"error_rate": 0.1}]}', "[1, 2, 3]"])
def test_detect_ok(raw):
    assert detect_status(parse_result(raw)) == ("ok", None)


def test_critical_atoms():
    atoms = critical_atoms('✗ read_file(path="notes/report.txt") failed: KeyError user U-77aB, '
                           'refund 42.50 on 2023-10-28 to a.b@x.com, code 500')
    assert {"notes/report.txt", "KeyError", "U-77aB", "42.50", "2023-10-28", "a.b@x.com", "500"} <= atoms
    assert "x.com" not in atoms and "read_file" not in atoms


def test_token_counts_with_real_tokenizer():
    from damc.models import load_tokenizer

    tok = load_tokenizer("minilm-l6")
    cards = encode_episode(make_episode(), count_tokens=token_counter(tok))
    for c in cards:
        assert c.n_tokens == len(tok.encode(c.raw_text, add_special_tokens=False)) > 0


def test_bad_streams():
    with pytest.raises(EpisodeFormatError, match="unknown call 'c9'"):
        encode_messages([{"role": "tool", "tool_call_id": "c9", "content": "{}"}], "e")
    with pytest.raises(EpisodeFormatError, match="unknown role 'bot'"):
        encode_messages([{"role": "bot", "content": "x"}], "e")
    with pytest.raises(EpisodeFormatError, match="not valid JSON"):
        encode_messages([{"role": "assistant", "tool_calls": [
            {"id": "c", "function": {"name": "f", "arguments": "{"}}]}], "e")
    assert json.loads(json.dumps([c.to_dict() for c in encode_messages([{"role": "user", "content": "hi"}], "e")]))


def test_fact_cards_are_the_converters_searchable_cards():
    """One entry per message: user turns by content, tool results by their JSON leaves under the call's card id
    (None for a result of no call), anything else empty; both converters' key cards read it (`[:k]`)."""
    from damc.data.tau2_user import key_card_ids

    call = {"id": "c1", "type": "function", "function": {"name": "get_order", "arguments": '{"order_id": "W123"}'}}
    msgs = [{"role": "system", "content": "be nice"}, {"role": "user", "content": "order #W123 please"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": '{"order": {"id": "W123", "total": 348.0}}'},
            {"role": "tool", "tool_call_id": "nope", "content": "orphan W123"},
            {"role": "assistant", "content": "done"}]
    assert fact_cards("e", msgs) == [(None, ""), ("e:1", "order #W123 please"), (None, ""),
                                     ("e:2:0", "order\nid\nW123\ntotal\n348.0"), (None, "orphan W123"), (None, "")]
    assert key_card_ids("e", msgs, {2: ["#W123"], 5: [348, "zz"], 9: ["W123"]}) == (
        {"2": ["e:1"], "5": ["e:2:0"]}, {"2": ["#W123"], "5": [348]})


def test_to_json_is_the_json_of_to_dict_byte_for_byte():
    """The stores write `Card.to_json()`; it must be exactly `json.dumps(to_dict())` (compact, unicode kept) on every
    shipped sample's cards — nested payloads, errors, None fields, non-ASCII text — and round-trip."""
    from pathlib import Path

    from damc.episodes import load_episodes

    samples = sorted((Path(__file__).resolve().parents[2] / "data" / "samples").glob("*_sample.jsonl"))
    cards = [c for p in samples if "labels" not in p.name for ep in load_episodes(p) for c in encode_episode(ep)]
    cards.append(Card("u:1", "u", 1, "user", "user", "café ✓ \u2028 \"q\"", meta={"a": [1, {"b": None}]}))
    assert len(cards) > 50 and any(c.error for c in cards) and any(isinstance(c.result, dict) for c in cards)
    for c in cards:
        assert c.to_json() == json.dumps(c.to_dict(), ensure_ascii=False, separators=(",", ":"))
        assert Card.from_dict(json.loads(c.to_json())) == c
