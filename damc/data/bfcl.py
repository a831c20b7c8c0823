"""BFCL multi-turn replay: real agent trajectories with real tool outputs.

The Berkeley Function Calling Leaderboard package (`bfcl-eval`, Apache-2.0) ships multi-turn test
entries (user turns + the classes involved + their initial state), the ground-truth call strings of
every turn, the function docs, and executable Python backends (file system, messaging, trading,
travel, vehicle, tickets, math, posting). This module replays the ground truth through *fresh*
backend instances, one set per episode, and writes what happened as a DAMC `Episode` in the OpenAI
chat format: system prompt, then per BFCL turn the user message, one assistant message per
ground-truth step with its `tool_calls`, and one `tool` message per call with the backend's result.

Call strings are parsed with `ast` (a single `name(arg, key=literal, ...)` call, literals only) and
dispatched to public methods of the involved backend instances; nothing is ever `eval`-ed. That part
lives in `damc.data.bfcl_replay`; its public names (`parse_call`, `parse_calls`, `ParsedCall`,
`BFCLCallParseError`, `BFCLBackends`, `bfcl_package_dir`) are re-exported here.

Scenario ids are shared across categories (`multi_turn_base_12` and `multi_turn_long_context_12` are
the same scenario), so splits hash the scenario number: a scenario lands in the same split whatever
the category.

Example:
    >>> eps = build_bfcl_episodes("base", limit=2)
    >>> eps[0].episode_id, eps[0].metadata["scenario"]
    ('multi_turn_base_0', 0)
    >>> splits = build_bfcl_splits("long_context", seed=0)
    >>> sorted(splits)
    ['dev', 'test', 'train']
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from damc.cards import fact_cards
from damc.data.bfcl_replay import (
    BFCLBackends,
    BFCLCallParseError,
    ParsedCall,
    _backend_config,
    _import_bfcl,
    bfcl_package_dir,
    parse_call,
    parse_calls,
)
from damc.episodes import SPLITS, Episode, iter_scalars
from damc.facts import first_holder, value_pattern

__all__ = ["ASK_MISSING_PARAM_TEXT", "BFCLBackends", "BFCLCallParseError", "CATEGORIES", "MISSING_FUNCTION_TEXT",
           "NO_ACTION_TEXT", "ParsedCall", "SAMPLE_IDS", "SPLITS", "SYSTEM_PROMPT", "bfcl_package_dir",
           "build_bfcl_episodes", "build_bfcl_splits", "build_episode", "key_card_ids", "load_bfcl_entries",
           "load_func_docs", "parse_call", "parse_calls", "sample_episodes", "scenario_of", "scenario_split",
           "to_openai_tool"]

logger = logging.getLogger(__name__)

CATEGORIES = ("base", "long_context", "miss_param", "miss_func")

SYSTEM_PROMPT = (
    "You are an assistant that completes the user's requests by calling the available tools. "
    "Work step by step and use the results of earlier calls. If a request lacks information you "
    "need, ask the user for it; if no available tool can do it, say so."
)
# Assistant replies for BFCL turns whose ground truth is empty (BFCL gives no text; these are neutral).
ASK_MISSING_PARAM_TEXT = "I need a bit more information to do that. Could you provide the missing details?"
MISSING_FUNCTION_TEXT = "I can't do that with the tools I currently have available."
NO_ACTION_TEXT = "I can't complete that request with the tools and information available."
# BFCL's own user text for a turn that only makes withheld functions available (miss_func); used when
# `bfcl_eval.constants.default_prompts` cannot be imported.
_ADDITIONAL_FUNCTION_FALLBACK = "I have updated some more functions you can choose from. What about now?"

# Gorilla type names -> JSON Schema types (as in bfcl_eval.constants.type_mappings.GORILLA_TO_OPENAPI).
_TYPE_MAP = {
    "integer": "integer", "int": "integer", "number": "number", "float": "number", "double": "number",
    "string": "string", "str": "string", "boolean": "boolean", "bool": "boolean", "array": "array",
    "list": "array", "tuple": "array", "dict": "object", "object": "object", "any": "string",
}


# ----------------------------------------------------------------------------- entries and tool docs

def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def scenario_of(bfcl_id: str) -> int:
    """The scenario number of a BFCL id (`multi_turn_long_context_12` -> 12)."""
    m = re.search(r"_(\d+)$", bfcl_id)
    if not m:
        raise ValueError(f"not a BFCL multi-turn id: {bfcl_id!r}")
    return int(m.group(1))


def load_bfcl_entries(category: str, limit: int | None = None) -> list[dict[str, Any]]:
    """BFCL multi-turn test entries of a category with their `ground_truth`, ordered by scenario.

    Args:
        category: one of `CATEGORIES`.
        limit: keep only the first `limit` scenarios (None: all).
    """
    if category not in CATEGORIES:
        raise ValueError(f"unknown BFCL category {category!r}; expected one of {', '.join(CATEGORIES)}")
    data = bfcl_package_dir() / "data"
    entries = _read_jsonl(data / f"BFCL_v4_multi_turn_{category}.json")
    answers = {a["id"]: a["ground_truth"] for a in _read_jsonl(data / "possible_answer" /
                                                                  f"BFCL_v4_multi_turn_{category}.json")}
    out = []
    for e in sorted(entries, key=lambda e: scenario_of(e["id"])):
        if e["id"] not in answers:
            raise ValueError(f"no ground truth for {e['id']}")
        if len(answers[e["id"]]) != len(e["question"]):
            raise ValueError(f"{e['id']}: {len(e['question'])} turns but {len(answers[e['id']])} ground-truth turns")
        out.append({**e, "ground_truth": answers[e["id"]]})
    return out[:limit] if limit is not None else out


def load_func_docs(class_name: str) -> list[dict[str, Any]]:
    """The BFCL function docs (Gorilla schema) of one backend class."""
    mapping = _backend_config().MULTI_TURN_FUNC_DOC_FILE_MAPPING
    return _read_jsonl(bfcl_package_dir() / "data" / "multi_turn_func_doc" / mapping[class_name])


def _convert_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A Gorilla parameter schema as JSON Schema (types mapped, recursively; `response` dropped)."""
    out: dict[str, Any] = {"type": _TYPE_MAP.get(str(schema.get("type", "string")), "string")}
    if "description" in schema:
        out["description"] = schema["description"]
    if "properties" in schema:
        out["properties"] = {k: _convert_schema(v) for k, v in schema["properties"].items()}
    if "items" in schema:
        out["items"] = _convert_schema(schema["items"])
    out.update({k: copy.deepcopy(v) for k, v in schema.items() if k not in out and k not in ("type", "response")})
    return out


def to_openai_tool(doc: dict[str, Any]) -> dict[str, Any]:
    """One BFCL function doc as an OpenAI tool schema (name, description, parameters)."""
    params = _convert_schema({**(doc.get("parameters") or {}), "type": "dict"})
    params.setdefault("properties", {})
    return {"type": "function", "function": {"name": doc["name"], "description": doc.get("description", ""),
                                             "parameters": params}}


# ----------------------------------------------------------------------------- episodes

def _additional_function_prompt() -> str:
    try:
        return _import_bfcl("bfcl_eval.constants.default_prompts").DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC
    except (ImportError, AttributeError):
        return _ADDITIONAL_FUNCTION_FALLBACK


def key_card_ids(episode_id: str, messages: list[dict[str, Any]], tool_names: set[str]) -> dict[str, list[str]]:
    """Cards each tool-call decision depends on: where its gold literals first appeared.

    For every assistant message `k` with tool calls, each literal argument value (string or number,
    at least 3 characters, not a tool name) is looked up in the candidate cards of `k` — user messages
    and tool results in `messages[1:u]`, `u` the last user message before `k`. The earliest card that
    contains it as a whole token is a key card, unless the value also occurs in the current turn
    (`messages[u:k]`, always kept verbatim), which makes history unnecessary for it.

    Returns:
        `{str(k): [card_id, ...]}` for decisions with at least one key card.
    """
    texts = fact_cards(episode_id, messages)  # per message: (card id, searchable text) of user turns and results
    out: dict[str, list[str]] = {}
    for k, m in enumerate(messages):
        if m.get("role") != "assistant" or not m.get("tool_calls"):
            continue
        u = next((i for i in range(k - 1, -1, -1) if messages[i].get("role") == "user"), 0)
        keys: list[str] = []
        for c in m["tool_calls"]:
            for value in iter_scalars(json.loads(c["function"]["arguments"] or "{}")):
                if isinstance(value, str) and value.strip() in tool_names:
                    continue
                pat = value_pattern(value)
                if pat is None or any(pat.search(t) for _, t in texts[u:k]):
                    continue
                hit = first_holder(pat, texts[1:u])
                if hit is not None and hit not in keys:
                    keys.append(hit)
        if keys:
            out[str(k)] = keys
    return out


def _empty_turn_kind(category: str, turn: int, ground_truth: list[list[str]], missed: dict[str, Any]) -> str:
    """Why a BFCL turn has no ground-truth calls: ask_missing_param | missing_function | no_action."""
    if category == "miss_func" and str(turn + 1) in missed:
        return "missing_function"
    # miss_param removes a needed value from one turn and supplies it in the next; the few empty turns
    # inherited from base (nothing left to do) are trailing.
    if category == "miss_param" and any(ground_truth[turn + 1:]):
        return "ask_missing_param"
    return "no_action"


_EMPTY_TURN_TEXT = {"ask_missing_param": ASK_MISSING_PARAM_TEXT, "missing_function": MISSING_FUNCTION_TEXT,
                    "no_action": NO_ACTION_TEXT}


@dataclass
class _Replay:
    """The messages of one replayed entry and the bookkeeping its metadata reports."""

    messages: list[dict[str, Any]]  # OpenAI chat format, system message first
    turn_starts: list[int] = field(default_factory=list)  # index of each BFCL turn's first message
    empty_turns: dict[str, str] = field(default_factory=dict)  # str(assistant message index) -> why it has no call
    withheld: dict[str, dict[str, int]] = field(default_factory=dict)  # function -> turn and message it came back at
    call_errors: list[dict[str, Any]] = field(default_factory=list)  # unparsable or raising ground-truth strings
    n_calls: int = 0  # calls executed
    n_error_results: int = 0  # calls that returned (not raised) an {"error": ...} result


def _replay_step(rep: _Replay, backends: BFCLBackends, ep_id: str, t: int, step: int, text: str) -> None:
    """One ground-truth string of turn `t`: an assistant message with its call(s), then one tool message per call."""
    try:
        calls = parse_calls(text)
    except BFCLCallParseError as e:
        rep.call_errors.append({"turn": t, "step": step, "call": text, "error": str(e)})
        logger.warning("%s turn %d: skipping unparsable ground truth: %s", ep_id, t, e)
        return
    results = []
    tool_calls = []
    for j, call in enumerate(calls):
        args, result, err = backends.call(call)
        rep.n_calls += 1
        if err is not None:
            rep.call_errors.append({"turn": t, "step": step, "call": text, "error": err})
            logger.warning("%s turn %d: %s raised %s", ep_id, t, text, err)
        elif isinstance(result, dict) and result.get("error"):
            rep.n_error_results += 1
        cid = f"call_{t}_{step}_{j}"
        tool_calls.append({"id": cid, "type": "function",
                           "function": {"name": call.name,
                                        "arguments": json.dumps(args, ensure_ascii=False, default=str)}})
        results.append({"role": "tool", "tool_call_id": cid,
                        "content": json.dumps(result, ensure_ascii=False)})
    rep.messages.append({"role": "assistant", "content": None, "tool_calls": tool_calls})
    rep.messages.extend(results)


def _replay_turns(entry: dict[str, Any], category: str, backends: BFCLBackends, missed: dict[str, list[str]]
                  ) -> _Replay:
    """Every turn of `entry`: its user message(s), then its ground-truth steps or a fixed empty-turn reply."""
    system_extra = [m["content"] for turn in entry["question"] for m in turn if m.get("role") == "system"]
    rep = _Replay([{"role": "system", "content": "\n\n".join([SYSTEM_PROMPT, *system_extra])}])
    for t, (turn, gt) in enumerate(zip(entry["question"], entry["ground_truth"])):
        rep.turn_starts.append(len(rep.messages))
        user_msgs = [m for m in turn if m.get("role") != "system"]
        if not user_msgs and str(t) in missed:
            # BFCL's inference loop adds the withheld functions here with this fixed user message.
            user_msgs = [{"role": "user", "content": _additional_function_prompt()}]
            for name in missed[str(t)]:
                rep.withheld[name] = {"turn": t, "message_index": len(rep.messages)}
        for m in user_msgs:
            rep.messages.append({"role": m.get("role", "user"), "content": m.get("content", "")})
        if not gt:
            kind = _empty_turn_kind(category, t, entry["ground_truth"], missed)
            rep.empty_turns[str(len(rep.messages))] = kind
            rep.messages.append({"role": "assistant", "content": _EMPTY_TURN_TEXT[kind]})
            continue
        for step, text in enumerate(gt):
            _replay_step(rep, backends, entry["id"], t, step, text)
    return rep


def _episode_metadata(entry: dict[str, Any], category: str, classes: list[str], rep: _Replay,
                      missed: dict[str, list[str]], tool_names: set[str]) -> dict[str, Any]:
    """`Episode.metadata` of a replayed entry: ids, turn layout, call statistics, key cards, withheld functions."""
    ep_id = entry["id"]
    metadata = {
        "source": "bfcl",
        "bfcl_id": ep_id,
        "scenario": scenario_of(ep_id),
        "category": category,
        "involved_classes": classes,
        "turn_starts": rep.turn_starts,
        "empty_turns": rep.empty_turns,
        "n_calls": rep.n_calls,
        "n_call_errors": len(rep.call_errors),
        "call_errors": rep.call_errors,
        "n_error_results": rep.n_error_results,
        "key_card_ids": key_card_ids(ep_id, rep.messages, tool_names),
    }
    if missed:
        metadata["missed_function"] = missed
        metadata["withheld_functions"] = rep.withheld
    if entry.get("excluded_function"):
        # BFCL v4 lists these but does not remove them from the tool list; neither do we.
        metadata["excluded_function"] = list(entry["excluded_function"])
    return metadata


def build_episode(entry: dict[str, Any], category: str) -> Episode:
    """Replay one BFCL entry (with `ground_truth`) through fresh backends into an Episode.

    Each ground-truth string of a turn is one step (BFCL turns are flat lists of calls that depend on
    each other's effects, e.g. `cd` then `mv`), so it becomes one assistant message whose
    `tool_calls` hold the call(s) it parses to, followed by one `tool` message per call.
    """
    ep_id = entry["id"]
    classes = list(entry["involved_classes"])
    backends = BFCLBackends(classes, entry.get("initial_config") or {}, long_context=(category == "long_context"))
    docs = [d for c in classes for d in load_func_docs(c)]
    tools = [to_openai_tool(d) for d in docs]
    tool_names = {d["name"] for d in docs}
    missed: dict[str, list[str]] = {str(k): list(v) for k, v in (entry.get("missed_function") or {}).items()}
    rep = _replay_turns(entry, category, backends, missed)
    metadata = _episode_metadata(entry, category, classes, rep, missed, tool_names)
    return Episode(episode_id=ep_id, domain="bfcl/" + "+".join(classes), tools=tools, messages=rep.messages,
                   metadata=metadata)


def build_bfcl_episodes(category: str, limit: int | None = None) -> list[Episode]:
    """Replay the ground truth of a BFCL multi-turn category into Episodes.

    Args:
        category: `base`, `long_context`, `miss_param` or `miss_func`.
        limit: only the first `limit` scenarios (None: all 200).

    Returns:
        One Episode per BFCL entry, ordered by scenario number.
    """
    entries = load_bfcl_entries(category, limit)
    episodes = [build_episode(e, category) for e in tqdm(entries, desc=f"bfcl {category}", unit="ep",
                                                          disable=len(entries) < 20)]
    n_err = sum(ep.metadata["n_call_errors"] for ep in episodes)
    logger.info("bfcl %s: %d episodes, %d calls, %d raised errors", category, len(episodes),
                sum(ep.metadata["n_calls"] for ep in episodes), n_err)
    return episodes


def scenario_split(scenario: int, seed: int = 0, fractions: tuple[float, float, float] = (0.8, 0.1, 0.1)) -> str:
    """The split (`train`/`dev`/`test`) of a scenario number: a stable hash, independent of category."""
    h = int(hashlib.sha256(f"damc-bfcl:{seed}:{scenario}".encode()).hexdigest()[:15], 16) / 16 ** 15
    total = sum(fractions)
    if h < fractions[0] / total:
        return "train"
    return "dev" if h < (fractions[0] + fractions[1]) / total else "test"


def build_bfcl_splits(category: str, seed: int = 0, limit: int | None = None,
                      fractions: tuple[float, float, float] = (0.8, 0.1, 0.1)) -> dict[str, list[Episode]]:
    """Build a category and split it by scenario (the same scenario is in one split in every category).

    Args:
        category: `base`, `long_context`, `miss_param` or `miss_func`.
        seed: changes the assignment of scenarios to splits.
        limit: only the first `limit` scenarios.
        fractions: train/dev/test shares (approximate: assignment is by hash).

    Returns:
        `{"train": [...], "dev": [...], "test": [...]}`.
    """
    splits: dict[str, list[Episode]] = {s: [] for s in SPLITS}
    for ep in build_bfcl_episodes(category, limit):
        splits[scenario_split(ep.metadata["scenario"], seed, fractions)].append(ep)
    logger.info("bfcl %s splits: %s", category, {k: len(v) for k, v in splits.items()})
    return splits


# The shipped sample (data/samples/bfcl_sample.jsonl): small episodes covering a tool-result key card
# (a booking id from `book_flight`), an "ask for the missing parameter" turn and a withheld function.
SAMPLE_IDS = ("multi_turn_base_151", "multi_turn_miss_param_0", "multi_turn_miss_func_4")


def sample_episodes(ids: tuple[str, ...] = SAMPLE_IDS) -> list[Episode]:
    """Rebuild the episodes of the shipped BFCL sample (deterministic: same bytes every run)."""
    out = []
    for bfcl_id in ids:
        category = re.sub(r"^multi_turn_|_\d+$", "", bfcl_id)
        entry = next(e for e in load_bfcl_entries(category) if e["id"] == bfcl_id)
        out.append(build_episode(entry, category))
    return out
