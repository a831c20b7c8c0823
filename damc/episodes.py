"""Episodes: the JSONL interchange format of DAMC (OpenAI chat messages, one episode a line).

An episode is what a tool-calling agent logged: `tools` (OpenAI function schemas) and `messages`
(`system`, `user`, `assistant` with optional `tool_calls`, `tool` results with `tool_call_id`).
Every assistant message is a *decision point*; the message itself is the *gold action*.

This module loads and validates episodes (reporting file, line, field and what was expected), writes
them atomically, extracts decision points, renders gold actions canonically, generates
multiple-choice distractors and splits episodes into train/dev/test (`split_episodes`). It is the ground
floor's episode contract: it imports nothing from the package, and every layer above reads episodes through it.

Example:
    >>> eps = load_episodes("data/samples/synthetic_sample.jsonl")
    >>> dp = decision_points(eps[0], tool_calls_only=True)[0]
    >>> render_action(dp.gold)          # e.g. 'lookup_customer(email="...")'
    >>> make_distractors(dp.episode, dp.index, n=3)
"""

from __future__ import annotations

import json
import logging
import os
import random
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

logger = logging.getLogger(__name__)

ROLES = ("system", "developer", "user", "assistant", "tool")   # "developer": OpenAI's newer system
SPLITS = ("train", "dev", "test")  # the three episode files a source is cut into


class EpisodeFormatError(ValueError):
    """A malformed episode: says where (file, line, field) and what was expected."""

    def __init__(self, message: str, *, path: str | os.PathLike | None = None, line: int | None = None,
                 field: str | None = None, expected: str | None = None):
        self.path, self.line, self.field, self.expected = (str(path) if path else None), line, field, expected
        where = ":".join(str(x) for x in (path, line) if x is not None)
        parts = [f"{where}: " if where else "", message]
        if field:
            parts.append(f" (field {field!r}")
            parts.append(f"; expected {expected})" if expected else ")")
        elif expected:
            parts.append(f" (expected {expected})")
        super().__init__("".join(parts))


@dataclass
class Episode:
    """One logged agent episode.

    Attributes:
        episode_id: unique id, used to build card ids.
        domain: free-form domain tag (e.g. "support", "bfcl/GorillaFileSystem").
        tools: OpenAI tool schemas available to the agent.
        messages: OpenAI chat messages in order.
        distractors: optional alternative actions per decision message index (as str).
        metadata: anything else (e.g. `key_card_ids` for evaluation only).
    """

    episode_id: str
    messages: list[dict[str, Any]]
    domain: str = ""
    tools: list[dict[str, Any]] = field(default_factory=list)
    distractors: dict[str, list[str]] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"episode_id": self.episode_id, "domain": self.domain, "tools": self.tools,
                             "messages": self.messages}
        if self.distractors:
            d["distractors"] = self.distractors
        if self.metadata:
            d["metadata"] = self.metadata
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any], *, path: str | None = None, line: int | None = None) -> "Episode":
        """Validate a decoded JSON object and build an Episode (raises EpisodeFormatError)."""
        validate_episode_dict(d, path=path, line=line)
        return cls(episode_id=str(d["episode_id"]), domain=d.get("domain") or "", tools=d.get("tools") or [],
                   messages=d["messages"], distractors={str(k): v for k, v in (d.get("distractors") or {}).items()},
                   metadata=d.get("metadata") or {})


def malformed_arguments(args: Any) -> str | None:
    """Why tool-call arguments are not a JSON object (or a string encoding one); None when they are."""
    parsed = args
    if isinstance(args, str):
        try:
            parsed = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as e:
            return f"not valid JSON ({e.msg})"
        except RecursionError:
            return "not valid JSON (nested too deeply)"
    if parsed is not None and not isinstance(parsed, dict):
        return f"a JSON {type(parsed).__name__}, not an object"
    return None


def check_message(m: Any, i: int, *, strict: bool = False, path: str | os.PathLike | None = None,
                  line: int | None = None) -> None:
    """The one shape check of an OpenAI chat message, shared by the episode contract and the live runtime.

    Both read a message the same way: a JSON object with a known `role`; `content` a string, a list of text parts
    or null; `tool_calls` a list of `{"function": {"name": str, "arguments": str | object}}` with an optional
    string `id`; a `tool` message's `tool_call_id` a non-empty string. `strict=True` is the episode contract of a
    logged dataset (`validate_episode_dict`), which must replay exactly: an assistant message says something, every
    call carries an id and arguments that are a JSON object. The runtime (`damc.runtime.ingest`) checks without
    `strict`: a live agent's malformed arguments are kept as text on the card rather than refused (a conversation
    is never blocked by one bad call), and a call without an id gets one. Whether a `tool` message answers an
    earlier call is a check of the sequence, made by the callers.

    Raises:
        EpisodeFormatError: names `messages[i]` and the field at fault (with `path` and `line` when given).
    """
    def err(msg: str, fld: str, expected: str) -> EpisodeFormatError:
        return EpisodeFormatError(msg, path=path, line=line, field=fld, expected=expected)

    f = f"messages[{i}]"
    if not isinstance(m, dict):
        raise err(f"message {i} is a {type(m).__name__}", f, "an OpenAI chat message (a JSON object with 'role')")
    role = m.get("role")
    if role is None:
        raise err(f"message {i} has no role", f"{f}.role", "|".join(ROLES))
    if role not in ROLES:
        raise err(f"message {i} has an unknown role {role!r}", f"{f}.role", "one of " + "|".join(ROLES))
    c = m.get("content")
    if c is not None and not isinstance(c, (str, list)):
        raise err(f"message {i} content is a {type(c).__name__}", f"{f}.content",
                  "a string, a list of content parts or null")
    for j, part in enumerate(c if isinstance(c, list) else []):
        if not isinstance(part, (str, dict)) or (isinstance(part, dict) and not isinstance(part.get("text", ""), str)):
            raise err(f"message {i} content part {j} is not text", f"{f}.content[{j}]",
                      'a string or {"type": "text", "text": "..."}')
    calls = m.get("tool_calls")
    if calls is not None and not isinstance(calls, list):
        raise err(f"message {i} tool_calls is a {type(calls).__name__}", f"{f}.tool_calls", "a list of tool calls")
    if strict and role == "assistant" and not calls and c in (None, ""):
        raise err(f"message {i}: an assistant message with neither content nor tool calls", f"{f}.content",
                  "text or tool_calls")
    for j, call in enumerate(calls or []):
        cf = f"{f}.tool_calls[{j}]"
        if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
            raise err("tool call without a function object", cf,
                      '{"id": ..., "type": "function", "function": {"name", "arguments"}}')
        fn = call["function"]
        if not isinstance(fn.get("name"), str) or not fn["name"]:
            raise err("tool call without a function name", f"{cf}.function.name", "a non-empty string")
        args = fn.get("arguments", "{}")
        if args is not None and not isinstance(args, (str, dict)):
            raise err(f"arguments are a {type(args).__name__}", f"{cf}.function.arguments",
                      "a JSON object encoded as a string")
        why = malformed_arguments(args) if strict else None
        if why is not None:
            raise err(f"arguments are {why}", f"{cf}.function.arguments", "a JSON object encoded as a string")
        cid = call.get("id")
        if cid is not None and not isinstance(cid, str):
            raise err("tool call id is not a string", f"{cf}.id", "a string id matched by a tool message")
        if strict and not cid:   # the runtime gives an id-less (or empty-id) call one of its own
            raise err("tool call without an id", f"{cf}.id", "a string id matched by a tool message")
    tcid = m.get("tool_call_id")
    if role == "tool" and (not isinstance(tcid, str) or not tcid):
        raise err("tool message without tool_call_id" if tcid is None else f"tool_call_id is a {type(tcid).__name__}",
                  f"{f}.tool_call_id", "the id (a string) of an earlier assistant tool call")


def validate_episode_dict(d: Any, *, path: str | None = None, line: int | None = None) -> None:
    """Check an episode object against the contract; raise EpisodeFormatError at the first problem.

    Every message goes through the one message check (`check_message(strict=True)`); this adds what only a
    whole episode can say: ids and tools present, every tool result answers an earlier call, distractors keyed
    by assistant messages."""

    def err(msg: str, fld: str | None = None, expected: str | None = None) -> EpisodeFormatError:
        return EpisodeFormatError(msg, path=path, line=line, field=fld, expected=expected)

    if not isinstance(d, dict):
        raise err(f"episode is a {type(d).__name__}", "episode", "a JSON object")
    if not d.get("episode_id") and d.get("episode_id") != 0:
        raise err("missing episode id", "episode_id", "a non-empty string")
    msgs = d.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise err("no messages", "messages", "a non-empty list of chat messages")
    tools = d.get("tools", [])
    if tools is not None and not isinstance(tools, list):
        raise err("tools is not a list", "tools", "a list of OpenAI tool schemas")
    for j, t in enumerate(tools or []):
        fn = t.get("function", t) if isinstance(t, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise err("tool without a name", f"tools[{j}].function.name", "a string")
    open_calls: set[str] = set()
    for i, m in enumerate(msgs):
        check_message(m, i, strict=True, path=path, line=line)
        if m["role"] == "assistant":
            open_calls.update(c["id"] for c in m.get("tool_calls") or [])
        elif m["role"] == "tool":
            cid = m["tool_call_id"]
            if cid not in open_calls:
                raise err(f"tool result for unknown call {cid!r}", f"messages[{i}].tool_call_id",
                          "the id of an earlier assistant tool call")
            open_calls.discard(cid)
    dist = d.get("distractors")
    if dist is not None:
        if not isinstance(dist, dict):
            raise err("distractors is not an object", "distractors", "{message_index: [action, ...]}")
        for k, v in dist.items():
            if not (str(k).isascii() and str(k).isdigit()) or int(k) >= len(msgs) or \
                    msgs[int(k)].get("role") != "assistant":
                raise err(f"distractors key {k!r} is not an assistant message index", f"distractors.{k}",
                          "the index of an assistant message")
            if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
                raise err("distractors must be strings", f"distractors.{k}", "a list of action strings")


def iter_episodes(path: str | os.PathLike) -> Iterator[Episode]:
    """Yield validated episodes from a JSONL file; blank lines are skipped.

    Raises:
        EpisodeFormatError: on the first bad line, naming file, line, field and what was expected.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"episode file not found: {path}")
    with path.open("rb") as fh:
        for ln, blob in enumerate(fh, start=1):
            try:
                raw = blob.decode("utf-8")
            except UnicodeDecodeError as e:
                raise EpisodeFormatError(f"invalid UTF-8 at byte {e.start}", path=path, line=ln, field="line",
                                         expected="UTF-8 text") from None
            if not raw.strip():
                continue
            try:
                d = json.loads(raw)
            except json.JSONDecodeError as e:
                raise EpisodeFormatError(f"malformed JSON ({e.msg} at column {e.colno})", path=path, line=ln,
                                         field="line", expected="one JSON object per line") from None
            except RecursionError:
                raise EpisodeFormatError("JSON nested too deeply", path=path, line=ln, field="line",
                                         expected="one JSON object per line") from None
            yield Episode.from_dict(d, path=str(path), line=ln)


def load_episodes(path: str | os.PathLike) -> list[Episode]:
    """Load and validate every episode of a JSONL file (ids must be unique)."""
    eps, seen = [], {}
    for ln, ep in enumerate(iter_episodes(path), start=1):
        if ep.episode_id in seen:
            raise EpisodeFormatError(f"duplicate episode_id {ep.episode_id!r}", path=path, field="episode_id",
                                     expected="unique ids")
        seen[ep.episode_id] = ln
        eps.append(ep)
    return eps


def default_file_mode() -> int:
    """The mode `open()` would give a new file: 0o666 less the process umask (0o644 under the usual 022).

    `tempfile.mkstemp` creates 0600 files; atomic writers chmod their temp file to this before the rename, so a
    file written atomically gets the same permissions as one SQLite or `open()` creates beside it. The umask is
    read from /proc where it is available (setting it to read it back is not thread-safe).
    """
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    umask = os.umask(0o022)
    os.umask(umask)
    return 0o666 & ~umask


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write a file atomically (temp file in the same directory, fsync, rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, default_file_mode())  # mkstemp creates 0600; give the file normal permissions
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_episodes(path: str | os.PathLike, episodes: Iterable[Episode]) -> int:
    """Write episodes as JSONL atomically (all or nothing). Returns the number written."""
    lines = [json.dumps(ep.to_dict(), ensure_ascii=False, sort_keys=False) for ep in episodes]
    atomic_write_text(path, "".join(line + "\n" for line in lines))
    return len(lines)


# ----------------------------------------------------------------------------- decision points

@dataclass
class DecisionPoint:
    """An assistant message of an episode, seen from just before it was produced.

    Attributes:
        episode: the episode it belongs to.
        index: message index of the gold assistant message.
        current_turn_start: index of the last user message before `index` (0 when none).
    """

    episode: Episode = field(repr=False)
    index: int
    current_turn_start: int

    def __repr__(self) -> str:
        return f"DecisionPoint({self.decision_id!r}, current_turn_start={self.current_turn_start})"

    @property
    def decision_id(self) -> str:
        return f"{self.episode.episode_id}@{self.index}"

    @property
    def gold(self) -> dict[str, Any]:
        return self.episode.messages[self.index]

    @property
    def context(self) -> list[dict[str, Any]]:
        """All messages before the decision."""
        return self.episode.messages[: self.index]

    @property
    def history(self) -> list[dict[str, Any]]:
        """Messages before the current user turn (where candidate cards come from)."""
        return self.episode.messages[: self.current_turn_start]

    @property
    def has_history(self) -> bool:
        """Whether a message other than the system prompt precedes the current user turn (else no card to value)."""
        return any(m.get("role") != "system" for m in self.history)

    @property
    def current_turn(self) -> list[dict[str, Any]]:
        """The current user turn and everything after it, up to the decision (kept verbatim)."""
        return self.episode.messages[self.current_turn_start: self.index]

    @property
    def system(self) -> str | None:
        m = self.episode.messages[0]
        return message_text(m) if m.get("role") == "system" else None

    @property
    def is_tool_call(self) -> bool:
        return bool(self.gold.get("tool_calls"))

    @property
    def key_card_ids(self) -> list[str]:
        return list((self.episode.metadata.get("key_card_ids") or {}).get(str(self.index), []))

    @property
    def key_facts(self) -> list[str]:
        """The gold's values found in the history (`metadata["key_facts"]`, evaluation only), as strings."""
        return [str(v) for v in (self.episode.metadata.get("key_facts") or {}).get(str(self.index), [])]


def current_turn_start(messages: list[dict[str, Any]], index: int) -> int:
    """Index of the last user message before `index` (0 if there is none)."""
    for i in range(index - 1, -1, -1):
        if messages[i].get("role") == "user":
            return i
    return 0


def decision_points(episode: Episode, *, tool_calls_only: bool = False) -> list[DecisionPoint]:
    """Every assistant message of the episode as a DecisionPoint (optionally tool-call ones only)."""
    out = []
    for i, m in enumerate(episode.messages):
        if m.get("role") != "assistant":
            continue
        dp = DecisionPoint(episode, i, current_turn_start(episode.messages, i))
        if tool_calls_only and not dp.is_tool_call:
            continue
        out.append(dp)
    return out


# ----------------------------------------------------------------------------- actions

def message_text(m: dict[str, Any]) -> str:
    """The text content of a message (list-of-parts content is joined)."""
    c = m.get("content")
    if c is None:
        return ""
    if isinstance(c, list):
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in c)
    return str(c)


def call_arguments(call: dict[str, Any]) -> dict[str, Any]:
    """The parsed arguments of an OpenAI tool call (JSON string or object)."""
    args = call.get("function", {}).get("arguments", "{}")
    if isinstance(args, str):
        return json.loads(args) if args.strip() else {}
    return dict(args or {})


def render_call(name: str, args: dict[str, Any]) -> str:
    """Canonical `name(arg=value, ...)` with JSON-encoded values, arguments in given order."""
    inner = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in args.items())
    return f"{name}({inner})"


def render_action(message: dict[str, Any]) -> str:
    """Canonical text of an assistant action: tool calls joined by '; ', else the reply text."""
    calls = message.get("tool_calls") or []
    if calls:
        try:
            return "; ".join(render_call(c["function"]["name"], {**call_arguments(c)}) for c in calls)
        except (ValueError, TypeError, RecursionError):   # arguments a model cut short: written as they came
            return "; ".join(f"{c['function']['name']}({c['function'].get('arguments')})" for c in calls)
    return message_text(message).strip()


def action_json(message: dict[str, Any]) -> str:
    """JSON form of an action: a list of {"name", "arguments"} or {"content"}."""
    calls = message.get("tool_calls") or []
    if calls:
        return json.dumps([{"name": c["function"]["name"], "arguments": call_arguments(c)} for c in calls],
                          ensure_ascii=False)
    return json.dumps({"content": message_text(message)}, ensure_ascii=False)


def _tool_names(episode: Episode) -> list[str]:
    names = []
    for t in episode.tools:
        fn = t.get("function", t)
        if fn.get("name") not in names:
            names.append(fn["name"])
    for m in episode.messages:
        for c in m.get("tool_calls") or []:
            if c["function"]["name"] not in names:
                names.append(c["function"]["name"])
    return names


def iter_scalars(x: Any) -> Iterator[Any]:
    """The str/int/float leaves of a JSON-like value (booleans and nulls skipped), depth first."""
    if isinstance(x, dict):
        for v in x.values():
            yield from iter_scalars(v)
    elif isinstance(x, list):
        for v in x:
            yield from iter_scalars(v)
    elif isinstance(x, (str, int, float)) and not isinstance(x, bool):
        yield x


def _values_seen(episode: Episode, upto: int) -> dict[str, list[Any]]:
    """Argument values by argument name, and scalar values seen in tool results, before `upto`."""
    by_arg: dict[str, list[Any]] = {}
    scalars: list[Any] = []

    def walk(x: Any) -> None:
        for v in iter_scalars(x):
            if (not isinstance(v, str) or 1 <= len(v) <= 64) and v not in scalars:
                scalars.append(v)

    for m in episode.messages[: max(upto, 0)]:
        for c in m.get("tool_calls") or []:
            for k, v in call_arguments(c).items():
                by_arg.setdefault(k, [])
                if v not in by_arg[k]:
                    by_arg[k].append(v)
        if m.get("role") == "tool":
            try:
                walk(json.loads(message_text(m)))
            except (json.JSONDecodeError, TypeError):
                pass
    by_arg["__scalars__"] = scalars
    return by_arg


_LAST_SEEN: list[tuple[Episode, int, dict[str, list[Any]]]] = []   # the last episode's values (read-only)


def _episode_values(episode: Episode) -> dict[str, list[Any]]:
    """`_values_seen` of the whole episode, kept for the episode asked last: every decision of an episode asks
    for the same values, and a run asks its decisions episode by episode (O(messages) once, not per decision)."""
    if _LAST_SEEN and _LAST_SEEN[0][0] is episode and _LAST_SEEN[0][1] == len(episode.messages):
        return _LAST_SEEN[0][2]
    seen = _values_seen(episode, len(episode.messages))
    _LAST_SEEN[:] = [(episode, len(episode.messages), seen)]
    return seen


def make_distractors(episode: Episode, index: int, n: int = 3, seed: int = 0) -> list[str]:
    """Alternative actions for multiple-choice accuracy at decision `index`.

    Uses the episode's own `distractors` when present; otherwise builds them: the same tool with other
    values of the same type seen in the episode (earlier arguments of that name first, then scalars from
    tool results), then other tools with the gold's arguments where they fit. Never returns the gold or
    a duplicate. Text replies get other assistant replies of the episode.
    """
    gold_msg = episode.messages[index]
    gold = render_action(gold_msg)
    given = [d for d in episode.distractors.get(str(index), []) if d != gold]
    if given:
        return list(dict.fromkeys(given))[:n]
    rng = random.Random(f"{episode.episode_id}@{index}#{seed}")
    out: list[str] = []

    def add(s: str) -> None:
        if s and s != gold and s not in out:
            out.append(s)

    calls = gold_msg.get("tool_calls") or []
    if not calls:
        replies = [message_text(m).strip() for m in episode.messages
                   if m.get("role") == "assistant" and not m.get("tool_calls") and message_text(m).strip()]
        rng.shuffle(replies)
        for r in replies:
            add(r)
        return out[:n]
    call = calls[0]
    name, args = call["function"]["name"], call_arguments(call)
    rest = "; ".join(render_call(c["function"]["name"], call_arguments(c)) for c in calls[1:])
    join = (lambda s: s + "; " + rest) if rest else (lambda s: s)
    seen = _episode_values(episode)
    # 1) same tool, one argument swapped for another value of the same type seen in the episode
    swaps: list[str] = []
    for k, v in args.items():
        pool = [x for x in seen.get(k, []) if x != v and type(x) is type(v)]
        pool += [x for x in seen["__scalars__"] if x != v and type(x) is type(v) and x not in pool
                 and (not isinstance(v, str) or _similar_shape(x, v))]
        for x in pool:
            swaps.append(join(render_call(name, {**args, k: x})))
    rng.shuffle(swaps)
    for s in swaps[: max(n - 1, 1)]:
        add(s)
    # 2) other tools (keep arguments where names coincide)
    others = [t for t in _tool_names(episode) if t != name]
    rng.shuffle(others)
    for t in others:
        if len(out) >= n:
            break
        add(join(render_call(t, args)))
    for s in swaps[max(n - 1, 1):]:
        if len(out) >= n:
            break
        add(s)
    return out[:n]


def _similar_shape(a: Any, b: str) -> bool:
    """Two strings look like the same kind of value (both numeric-ish, or both words)."""
    a = str(a)
    return any(ch.isdigit() for ch in a) == any(ch.isdigit() for ch in b) and abs(len(a) - len(b)) <= max(8, len(b))


def split_episodes(episodes: list[Episode], fractions: dict[str, float], seed: int = 0) -> dict[str, list[Episode]]:
    """Split by episode: shuffle with `random.Random(seed)`, cut by `fractions` (train/dev/test).

    Counts are rounded; test takes the remainder. Order inside a split follows the input order.
    """
    fr = [float(fractions.get(s, 0.0)) for s in SPLITS]
    if any(f < 0 for f in fr) or abs(sum(fr) - 1.0) > 1e-6:
        raise ValueError(f"split fractions must be >= 0 and sum to 1, got {dict(zip(SPLITS, fr))}")
    idx = list(range(len(episodes)))
    random.Random(seed).shuffle(idx)
    n = len(idx)
    n_train = round(n * fr[0])
    n_dev = min(round(n * fr[1]), n - n_train)
    cut = {"train": sorted(idx[:n_train]), "dev": sorted(idx[n_train:n_train + n_dev]),
           "test": sorted(idx[n_train + n_dev:])}
    return {s: [episodes[i] for i in cut[s]] for s in SPLITS}
