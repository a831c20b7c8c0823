"""BFCL multi-turn replay: real backends, safe parsing, valid episodes, scenario-disjoint splits."""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from damc.cards import encode_episode
from damc.data import bfcl
from damc.data.bfcl import (
    BFCLBackends,
    BFCLCallParseError,
    build_bfcl_episodes,
    build_bfcl_splits,
    parse_call,
    parse_calls,
)
from damc.episodes import current_turn_start, load_episodes, write_episodes

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "samples" / "bfcl_sample.jsonl"


@pytest.fixture(scope="module")
def base_eps():
    return build_bfcl_episodes("base")


@pytest.fixture(scope="module")
def long_eps():
    return build_bfcl_episodes("long_context")


def _tool_chars(ep) -> int:
    return sum(len(m["content"]) for m in ep.messages if m["role"] == "tool")


# ----------------------------------------------------------------------------- replay

@pytest.mark.parametrize("fixture", ["base_eps", "long_eps"])
def test_every_ground_truth_call_replays_without_error(fixture, request):
    eps = request.getfixturevalue(fixture)
    assert len(eps) == 200
    errors = [(ep.episode_id, e) for ep in eps for e in ep.metadata["call_errors"]]
    assert errors == []
    n_calls = sum(ep.metadata["n_calls"] for ep in eps)
    n_tool_msgs = sum(1 for ep in eps for m in ep.messages if m["role"] == "tool")
    assert n_calls == n_tool_msgs > 1000
    for ep in eps:  # no tool message carries an error payload either
        for m in ep.messages:
            if m["role"] == "tool":
                res = json.loads(m["content"])
                assert not (isinstance(res, dict) and "error" in res), (ep.episode_id, m)


def test_episode_shape_follows_bfcl_turns(base_eps):
    ep = base_eps[0]
    entry = bfcl.load_bfcl_entries("base", limit=1)[0]
    assert ep.episode_id == "multi_turn_base_0" and ep.metadata["scenario"] == 0
    assert ep.domain == "bfcl/TwitterAPI+GorillaFileSystem"
    assert ep.messages[0]["role"] == "system"
    users = [m["content"] for m in ep.messages if m["role"] == "user"]
    assert users == [t[0]["content"] for t in entry["question"]]
    calls = [c for m in ep.messages for c in m.get("tool_calls") or []]
    assert len(calls) == sum(len(t) for t in entry["ground_truth"])
    assert calls[0]["id"] == "call_0_0_0" and calls[0]["function"]["name"] == "cd"
    assert json.loads(calls[0]["function"]["arguments"]) == {"folder": "document"}
    # positional ground truth `sort('final_report.pdf')` is named from the method signature
    sort = next(c for c in calls if c["function"]["name"] == "sort")
    assert json.loads(sort["function"]["arguments"]) == {"file_name": "final_report.pdf"}
    # each call is answered by the next tool message with the backend's real output
    i = next(i for i, m in enumerate(ep.messages) if (m.get("tool_calls") or [{}])[0].get("id") == sort["id"])
    assert ep.messages[i + 1]["tool_call_id"] == sort["id"]
    assert "budget analysis" in json.loads(ep.messages[i + 1]["content"])["sorted_content"]
    names = {t["function"]["name"] for t in ep.tools}
    assert {"cd", "mv", "grep", "post_tweet"} <= names
    assert all(t["function"]["parameters"]["type"] == "object" for t in ep.tools)


def test_long_context_outputs_are_much_longer(base_eps, long_eps):
    ratios = [_tool_chars(lc) / max(_tool_chars(b), 1) for b, lc in zip(base_eps, long_eps)]
    assert [b.metadata["scenario"] for b in base_eps] == [lc.metadata["scenario"] for lc in long_eps]
    assert statistics.median(ratios) > 5
    assert sum(map(_tool_chars, long_eps)) > 5 * sum(map(_tool_chars, base_eps))


def test_replay_is_deterministic():
    a = [ep.to_dict() for ep in build_bfcl_episodes("long_context", limit=5)]
    b = [ep.to_dict() for ep in build_bfcl_episodes("long_context", limit=5)]
    assert json.dumps(a) == json.dumps(b)


# ----------------------------------------------------------------------------- parsing safety

def test_parser_reads_literals_only():
    c = parse_call("mv(source='a.txt', destination=\"dir\")")
    assert (c.name, c.args, c.kwargs) == ("mv", (), {"source": "a.txt", "destination": "dir"})
    c = parse_call("f(1, -2.5, x=[1, {'a': (2, 3)}], y=None, z=True)")
    assert c.args == (1, -2.5) and c.kwargs == {"x": [1, {"a": (2, 3)}], "y": None, "z": True}
    assert [p.name for p in parse_calls("[cd(folder='a'), ls(a=True)]")] == ["cd", "ls"]


@pytest.mark.parametrize("text, why", [
    ("__import__('os').system('touch {marker}')", "plain function name"),
    ("os.system('touch {marker}')", "plain function name"),
    ("f(x=__import__('os').system('touch {marker}'))", "not a literal"),
    ("f(open('{marker}', 'w'))", "not a literal"),
    ("__import__('os')", "private or dunder"),
    ("f(**{{'a': 1}})", "**kwargs"),
    ("f(*[1])", "*args"),
    ("(lambda: 1)()", "plain function name"),
    ("import os", "not a Python expression"),
    ("1 + 2", "not a function call"),
])
def test_parser_rejects_code_without_running_it(tmp_path, text, why):
    marker = tmp_path / "pwned"
    with pytest.raises(BFCLCallParseError, match=re.escape(why)):
        parse_call(text.format(marker=marker))
    assert not marker.exists()


def test_dispatch_only_reaches_backend_methods(tmp_path):
    be = BFCLBackends(["MathAPI"], {})
    args, result, err = be.call(parse_call("add(a=2, b=3)"))
    assert args == {"a": 2, "b": 3} and result == {"result": 5} and err is None
    marker = tmp_path / "pwned"
    for text in ("eval('1')", f"system('touch {marker}')", "exec('x=1')"):
        _, result, err = be.call(parse_call(text))
        assert "unknown function" in err and result == {"error": err}
    assert not marker.exists()
    _, result, err = be.call(parse_call("divide(a=1, b=0)"))  # backend-level failures are data, not crashes
    assert result.get("error") or err


# ----------------------------------------------------------------------------- episodes and cards

def test_episodes_round_trip_through_the_jsonl_contract(tmp_path, base_eps, long_eps):
    eps = base_eps[:20] + long_eps[:5] + build_bfcl_episodes("miss_param", limit=10) + \
        build_bfcl_episodes("miss_func", limit=10)
    path = tmp_path / "bfcl.jsonl"
    assert write_episodes(path, eps) == len(eps)
    loaded = load_episodes(path)
    assert [e.to_dict() for e in loaded] == [json.loads(json.dumps(e.to_dict())) for e in eps]


@pytest.mark.parametrize("category", ["base", "miss_param", "miss_func"])
def test_key_cards_are_real_candidate_cards(category):
    eps = build_bfcl_episodes(category, limit=200 if category == "base" else 60)
    n_key = n_tool_key = 0
    for ep in eps:
        cards = {c.card_id: c for c in encode_episode(ep)}
        for k, ids in ep.metadata["key_card_ids"].items():
            k = int(k)
            assert ep.messages[k]["role"] == "assistant" and ep.messages[k].get("tool_calls")
            u = current_turn_start(ep.messages, k)
            for cid in ids:
                assert cid in cards, (ep.episode_id, cid)
                assert 0 < cards[cid].position < u, (ep.episode_id, k, cid)
                n_key += 1
                n_tool_key += cid.count(":") == 2
    assert n_key > 50 and n_tool_key > 10
    if category == "base":  # a booking id only a tool result revealed
        ep = next(e for e in eps if e.episode_id == "multi_turn_base_151")
        assert "multi_turn_base_151:6:0" in ep.metadata["key_card_ids"]["9"]
        assert ep.messages[6]["tool_calls"][0]["function"]["name"] == "book_flight"


def test_miss_param_turns_ask_for_the_missing_value():
    eps = build_bfcl_episodes("miss_param", limit=30)
    for ep in eps:
        kinds = ep.metadata["empty_turns"]
        assert "ask_missing_param" in kinds.values(), ep.episode_id
        for idx, kind in kinds.items():
            m = ep.messages[int(idx)]
            assert m["role"] == "assistant" and not m.get("tool_calls") and m["content"]
            assert ep.messages[int(idx) - 1]["role"] == "user"
            if kind == "ask_missing_param":
                assert m["content"] == bfcl.ASK_MISSING_PARAM_TEXT
                assert any(x["role"] == "user" for x in ep.messages[int(idx) + 1:])


def test_miss_func_withholds_functions_until_announced():
    eps = build_bfcl_episodes("miss_func", limit=40)
    for ep in eps:
        withheld = ep.metadata["withheld_functions"]
        tool_names = {t["function"]["name"] for t in ep.tools}
        assert withheld and set(withheld) <= tool_names  # `tools` holds every function ever available
        for name, where in withheld.items():
            i = where["message_index"]
            assert ep.messages[i]["role"] == "user" and "updated some more functions" in ep.messages[i]["content"]
            assert ep.messages[i - 1]["content"] == bfcl.MISSING_FUNCTION_TEXT
            assert ep.metadata["empty_turns"][str(i - 1)] == "missing_function"
            before = {c["function"]["name"] for m in ep.messages[:i] for c in m.get("tool_calls") or []}
            assert name not in before


# ----------------------------------------------------------------------------- splits

def test_splits_are_scenario_disjoint_across_categories():
    by_cat = {cat: build_bfcl_splits(cat, seed=0) for cat in ("base", "long_context")}
    owner: dict[int, str] = {}
    for cat, splits in by_cat.items():
        assert sorted(splits) == ["dev", "test", "train"]
        assert sum(len(v) for v in splits.values()) == 200
        assert len(splits["train"]) > 120 and splits["dev"] and splits["test"]
        for name, eps in splits.items():
            for ep in eps:
                assert ep.metadata["category"] == cat
                s = ep.metadata["scenario"]
                assert owner.setdefault(s, name) == name, f"scenario {s} in {owner[s]} and {name}"
    other = build_bfcl_splits("base", seed=1)
    assert {e.metadata["scenario"] for e in other["test"]} != \
        {e.metadata["scenario"] for e in by_cat["base"]["test"]}
    assert build_bfcl_splits("miss_func", seed=0, limit=30)["train"][0].metadata["scenario"] in \
        {e.metadata["scenario"] for e in by_cat["base"]["train"]}


# ----------------------------------------------------------------------------- sample and install tree

def test_shipped_sample_is_valid_and_current():
    eps = load_episodes(SAMPLE)
    assert len(eps) <= 3 and SAMPLE.stat().st_size < 300_000
    assert [e.to_dict() for e in eps] == [json.loads(json.dumps(e.to_dict())) for e in bfcl.sample_episodes()]


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")}


def test_build_writes_nothing_into_site_packages(tmp_path):
    pkg = bfcl.bfcl_package_dir()
    site = pkg.parent
    before_pkg, before_site = _tree(pkg), sorted(os.listdir(site))
    env = {k: v for k, v in os.environ.items() if k != "BFCL_PROJECT_ROOT"}
    code = ("import os; from damc.data.bfcl import build_bfcl_episodes, BFCLBackends; "
            "[build_bfcl_episodes(c, limit=3) for c in ('base', 'long_context', 'miss_param', 'miss_func')]; "
            "BFCLBackends(['GorillaFileSystem', 'MathAPI', 'MessageAPI', 'TwitterAPI', 'TicketAPI', 'TradingBot', "
            "'TravelAPI', 'VehicleControlAPI'], {}); print(os.environ['BFCL_PROJECT_ROOT'])")
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True,
                         check=True)
    root = Path(out.stdout.strip().splitlines()[-1])
    assert site not in root.parents and root != site
    assert _tree(pkg) == before_pkg
    assert sorted(os.listdir(site)) == before_site
    assert list(tmp_path.iterdir()) == []
