"""Synthetic support episodes: reproducible, valid, long enough, and with honest key cards."""

import json
import re

import pytest

from damc.cards import encode_episode
from damc.data.synthetic import SyntheticConfig, generate_episodes
from damc.episodes import call_arguments, decision_points, load_episodes, message_text, write_episodes

N = 24


@pytest.fixture(scope="module")
def episodes():
    return generate_episodes(N, seed=0, progress=False)


def test_same_seed_byte_identical_and_other_seed_differs(tmp_path):
    a, b, c = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "c.jsonl"
    write_episodes(a, generate_episodes(5, seed=3, progress=False))
    write_episodes(b, generate_episodes(5, seed=3, progress=False))
    write_episodes(c, generate_episodes(5, seed=4, progress=False))
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes() != c.read_bytes()


def test_episodes_validate_after_writing(tmp_path, episodes):
    path = tmp_path / "eps.jsonl"
    write_episodes(path, episodes)
    loaded = load_episodes(path)
    assert [e.episode_id for e in loaded] == [e.episode_id for e in episodes]
    assert loaded[0].metadata["key_card_ids"] == episodes[0].metadata["key_card_ids"]


def test_lengths_roles_and_format(episodes):
    cfg = SyntheticConfig()
    for ep in episodes:
        assert cfg.min_messages <= len(ep.messages) <= cfg.max_messages
        assert ep.messages[0]["role"] == "system"
        assert sum(m["role"] == "user" for m in ep.messages) >= 5  # several user turns
        for m in ep.messages[1:]:
            assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", m["timestamp"])
            for c in m.get("tool_calls") or []:
                assert isinstance(c["function"]["arguments"], str)
                assert isinstance(json.loads(c["function"]["arguments"]), dict)
        stamps = [m["timestamp"] for m in ep.messages[1:]]
        assert stamps == sorted(stamps)
        names = {t["function"]["name"] for t in ep.tools}
        assert len(names) >= 8
        assert all(t["function"]["parameters"]["type"] == "object" for t in ep.tools)


def test_noise_is_present(episodes):
    text = "\n".join(message_text(m) for ep in episodes for m in ep.messages if m["role"] == "tool")
    for code in ("500", "404", "429"):
        assert code in text
    assert '"error"' in text


def test_many_decisions_need_a_fact_from_10_or_more_messages_back(episodes):
    n_dec = n_far = 0
    for ep in episodes:
        keys = ep.metadata["key_card_ids"]
        pos = {c.card_id: c.position for c in encode_episode(ep)}
        for dp in decision_points(ep):
            n_dec += 1
            ks = keys.get(str(dp.index))
            if ks and dp.index - max(pos[k] for k in ks) >= 10:  # even the *nearest* holder is 10+ back
                n_far += 1
    assert n_far / n_dec >= 0.30, (n_far, n_dec)


def test_key_cards_exist_precede_the_turn_and_hold_the_fact(episodes):
    n_checked = 0
    for ep in episodes:
        cards = {c.card_id: c for c in encode_episode(ep)}
        keys, facts = ep.metadata["key_card_ids"], ep.metadata["key_facts"]
        assert set(keys) == set(facts)
        for dp in decision_points(ep):
            ks = keys.get(str(dp.index))
            if not ks:
                continue
            n_checked += 1
            fs = facts[str(dp.index)]
            assert ks and fs
            for k in ks:
                assert k in cards, k
                assert cards[k].position < dp.current_turn_start, (k, dp.index)
                assert any(f in cards[k].raw_text for f in fs), (k, fs)
            if dp.is_tool_call:
                gold = json.dumps([call_arguments(c) for c in dp.gold["tool_calls"]], ensure_ascii=False)
            else:
                gold = message_text(dp.gold)
            current = json.dumps(dp.current_turn, ensure_ascii=False)
            user_now = message_text(ep.messages[dp.current_turn_start])
            for f in fs:
                assert f in gold, (f, gold)
                assert any(f in cards[k].raw_text for k in ks)
                assert f not in user_now  # never restated by the customer in the current turn
                assert f not in current  # nor anywhere else in the current turn
    assert n_checked > 100


def test_confusers_and_variety(episodes):
    # several order ids per episode, varied tools behind key cards, repeated keys marked
    tools_behind_keys, id_shapes, wordings = set(), set(), set()
    n_repeated = 0
    for ep in episodes:
        cards = {c.card_id: c for c in encode_episode(ep)}
        for ks in ep.metadata["key_card_ids"].values():
            for k in ks:
                tools_behind_keys.add(cards[k].tool_name or cards[k].kind)
        n_repeated += len(ep.metadata["repeated_key"])
        for k in ep.metadata["repeated_key"]:
            assert len(ep.metadata["key_card_ids"][str(k)]) >= 2
        orders = re.findall(r'"order_id": ?"([^"]+)"', "".join(message_text(m) for m in ep.messages))
        assert len(set(orders)) >= 4
        id_shapes.add(re.sub(r"\d", "9", re.sub(r"[a-zA-Z]", "a", orders[0])))
        wordings.add(message_text(ep.messages[1])[:20])
    assert len(tools_behind_keys) >= 6
    assert len(id_shapes) >= 4
    assert len(wordings) >= N // 2
    assert n_repeated > 0
