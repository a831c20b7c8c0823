"""scripts/confuser_sources.py: where a policy's prompt look-alikes come from, decision by decision."""

import importlib.util
import json
from pathlib import Path
from types import SimpleNamespace

from damc.cards import encode_messages

SPEC = importlib.util.spec_from_file_location("confuser_sources",
                                              Path(__file__).parents[2] / "scripts" / "confuser_sources.py")
cs = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(cs)


def _call(i, name, args, result):
    return [{"role": "assistant", "content": None, "tool_calls": [{"id": f"c{i}", "type": "function",
             "function": {"name": name, "arguments": json.dumps(args)}}]},
            {"role": "tool", "tool_call_id": f"c{i}", "content": json.dumps(result)}]


MESSAGES = ([{"role": "user", "content": "Where is my order?"}]
            + _call(0, "list_orders", {"user": "ana"}, {"order_ids": ["#W111", "#W222"]})   # key card, holds the rival
            + _call(1, "get_order", {"order_id": "#W222"}, {"order_id": "#W222", "status": "shipped"})  # rival only
            + _call(2, "get_weather", {"city": "Lyon"}, {"temp": 12}))                                 # neutral
CARDS = encode_messages(MESSAGES, "ep")
KEY, RIVAL, NEUTRAL = CARDS[1].card_id, CARDS[2].card_id, CARDS[3].card_id


def _decision(i):
    return SimpleNamespace(decision_id=f"d{i}", history_key_ids=[KEY], cards=CARDS, turn_text='"cancel it"',
                           confuser_values=lambda: ["#W222"])


def _rec(policy, i, kept, confuser):
    return {"policy": policy, "setting": "1024/k4", "decision_id": f"d{i}", "failed": False, "kept_card_ids": kept,
            "prompt_confuser": confuser}


def test_look_alikes_are_traced_to_key_cards_or_to_other_cards():
    recs = [_rec("damc", 0, [KEY, NEUTRAL], True), _rec("rrf", 0, [NEUTRAL], False),     # only in the key card
            _rec("damc", 1, [KEY, RIVAL], True), _rec("rrf", 1, [KEY], False),           # a rival card too
            _rec("damc", 2, [NEUTRAL], False), _rec("rrf", 2, [RIVAL], True),            # the baseline's
            _rec("damc", 3, [KEY], True), _rec("rrf", 3, [KEY], True)]                   # both
    out = cs.sources(recs, [_decision(i) for i in range(4)], "damc", "rrf", "1024/k4")
    assert out == {"decisions": 4, "damc": 3, "rrf": 2, "policy_only": 2, "baseline_only": 1, "in_a_key_card": 2,
                   "only_in_key_cards": 1, "baseline_missed_key": 1}
    assert cs.sources(recs, [_decision(0)], "damc", "rrf", "1024/k8") == {}            # another setting: none
