"""Memory cards: the unit DAMC values, selects and compresses.

A card is one past interaction: a tool call merged with its result (`tool_result` / `tool_error`),
or one user / assistant text message (`user` / `assistant`). The encoder turns an episode (or any
stream of OpenAI chat messages) into cards with parsed JSON results, detected status and errors,
token counts under a given tokenizer and stable ids (`card_id`).

Example:
    >>> msgs = [{"role": "user", "content": "Where is order 88412?"},
    ...         {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function",
    ...          "function": {"name": "get_order", "arguments": '{"order_id": "88412"}'}}]},
    ...         {"role": "tool", "tool_call_id": "c1", "content": '{"status": "error", "code": 500}'}]
    >>> [c.kind for c in encode_messages(msgs, "ep1")]
    ['user', 'tool_error']
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterable

from damc.episodes import (
    Episode,
    EpisodeFormatError,
    call_arguments,
    check_message,
    message_text,
    render_call,
)
from damc.facts import card_text

KINDS = ("tool_result", "tool_error", "user", "assistant")

CountTokens = Callable[[str], int]


def card_id(episode_id: str, msg_index: int, call_index: int | None = None) -> str:
    """Stable card id: `ep:msg` for a text message, `ep:msg:call` for a tool call made at message `msg`."""
    return f"{episode_id}:{msg_index}" if call_index is None else f"{episode_id}:{msg_index}:{call_index}"


def fact_cards(episode_id: str, messages: list[dict[str, Any]]) -> list[tuple[str | None, str]]:
    """Per message, `(card id, searchable text)` of the cards a fact can come from, for `damc.facts.first_holder`:
    a user turn's content, a tool result's JSON leaves (`damc.facts.card_text`) under its call's card id (None for
    a result of no earlier call); `(None, "")` for any other message. `[:k]` are the cards before message `k`.

    Example:
        >>> fact_cards("ep", [{"role": "user", "content": "order 88412"}, {"role": "assistant", "content": None,
        ...     "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": "{}"}}]},
        ...     {"role": "tool", "tool_call_id": "c1", "content": '["W7", 3]'}])
        [('ep:0', 'order 88412'), (None, ''), ('ep:1:0', 'W7\\n3')]
    """
    call_card: dict[str, str] = {}
    out: list[tuple[str | None, str]] = []
    for i, m in enumerate(messages):
        for j, c in enumerate(m.get("tool_calls") or []):
            call_card[c["id"]] = card_id(episode_id, i, j)
        if m.get("role") == "user":
            out.append((card_id(episode_id, i), str(m.get("content") or "")))
        elif m.get("role") == "tool":
            out.append((call_card.get(m.get("tool_call_id", "")), card_text(m.get("content"))))
        else:
            out.append((None, ""))
    return out


@dataclass
class Card:
    """One memory card (see DESIGN.md, "Card").

    Attributes:
        card_id: stable id (`card_id(...)`).
        episode_id: episode or session the card belongs to.
        position: index of the message the card starts at (tool cards: the calling assistant message).
        timestamp: ISO 8601 time of the message, if known.
        role: "user" | "assistant" | "tool".
        kind: "tool_result" | "tool_error" | "user" | "assistant".
        tool_name: called function (tool cards only).
        arguments: parsed call arguments (tool cards only).
        result: tool output, parsed JSON where possible, else the string.
        status: "ok" | "error" | None (text cards).
        error: {"code": ..., "message": ...} when status is "error".
        raw_text: the full text of the interaction (call + result, or message text).
        n_tokens: token count of raw_text under the encoder's tokenizer (approximate if none given).
        call_id: the tool call id (tool cards only).
        result_index: message index of the tool result (tool cards only; None if it never came).
    """

    card_id: str
    episode_id: str
    position: int
    role: str
    kind: str
    raw_text: str
    timestamp: str | None = None
    tool_name: str | None = None
    arguments: dict[str, Any] | None = None
    result: Any = None
    status: str | None = None
    error: dict[str, Any] | None = None
    n_tokens: int = 0
    call_id: str | None = None
    result_index: int | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        """The card as compact JSON (what the stores write): `json.dumps(self.to_dict())` byte for byte, without
        `asdict`'s deep copy of every payload (a fifth of a long conversation's ingest time)."""
        return json.dumps({k: getattr(self, k) for k in self.__dataclass_fields__}, ensure_ascii=False,
                          separators=(",", ":"))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Card":
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})

    @property
    def call_text(self) -> str:
        """`name(arg=value, ...)` for tool cards, "" otherwise."""
        return render_call(self.tool_name, self.arguments or {}) if self.tool_name else ""

    @property
    def result_text(self) -> str:
        """The tool result as text (JSON dumped when parsed)."""
        if self.result is None:
            return ""
        return self.result if isinstance(self.result, str) else json.dumps(self.result, ensure_ascii=False)

    @property
    def is_error(self) -> bool:
        return self.status == "error"


# ----------------------------------------------------------------------------- status / errors

_HTTP_RE = re.compile(r"\b(?:HTTP(?:/\d(?:\.\d)?)?\s*|status(?:\s*code)?\s*[:=]?\s*)?([45]\d\d)\b"
                      r"(?:\s+([A-Z][A-Za-z ]{2,40}))?")
_EXC_RE = re.compile(r"\b([A-Z][A-Za-z]*(?:Error|Exception|Timeout|Denied|NotFound))\b(?::\s*([^\n]{0,200}))?")
_ERR_WORD_RE = re.compile(r"^\s*(error|failed|failure|exception|traceback)\b[:\s]*(.*)", re.I | re.S)
_HTTP_NAMES = {400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found", 408: "Request Timeout",
               409: "Conflict", 422: "Unprocessable Entity", 429: "Too Many Requests", 500: "Internal Server Error",
               502: "Bad Gateway", 503: "Service Unavailable", 504: "Gateway Timeout"}
_ERROR_STATUS = {"error", "failed", "failure", "fail", "exception", "denied", "timeout", "not_found"}


def parse_result(content: Any) -> Any:
    """A tool result as a Python object: JSON parsed when it is JSON, else the stripped string."""
    if not isinstance(content, str):
        return content
    s = content.strip()
    if s[:1] in "[{" or s in ("true", "false", "null") or re.fullmatch(r"-?\d+(\.\d+)?", s or "x"):
        try:
            return json.loads(s)
        except (json.JSONDecodeError, RecursionError):  # not JSON, or nested deeper than the parser goes: keep text
            pass
    return s


def _first(d: dict, *keys: str) -> Any:
    for k in keys:
        if k in d and d[k] not in (None, "", [], {}):
            return d[k]
    return None


def detect_status(result: Any) -> tuple[str, dict[str, Any] | None]:
    """Classify a tool result as ("ok", None) or ("error", {"code", "message"}).

    Recognises `"error"` fields, `status: error|failed`, HTTP status codes ≥ 400 (`code`, `status_code`,
    `http_status`, or `HTTP 500` in text), non-zero `exit_code`/`returncode`, exception names
    (`KeyError: ...`, `TimeoutException`) and texts starting with "Error"/"Failed"/"Traceback".
    """
    if isinstance(result, dict):
        err = result.get("error")
        code = _first(result, "code", "status_code", "http_status", "error_code", "statusCode")
        msg = _first(result, "message", "error_message", "detail", "msg", "reason")
        status = str(result.get("status", "")).lower()
        exit_code = _first(result, "exit_code", "returncode", "exitcode")
        if err not in (None, False, "", [], {}):
            if isinstance(err, dict):
                code = _first(err, "code", "status_code", "type") or code
                msg = _first(err, "message", "detail", "msg") or msg or json.dumps(err, ensure_ascii=False)
            else:
                msg = msg or str(err)
                if code is None:
                    m = _HTTP_RE.search(str(err)) or _EXC_RE.search(str(err))
                    code = _coerce_code(m.group(1)) if m else None
            return "error", {"code": code, "message": msg}
        if status in _ERROR_STATUS or (isinstance(code, int) and code >= 400) or \
                (isinstance(code, str) and code.isdigit() and int(code) >= 400):
            code = _coerce_code(code) if code is not None else None
            if msg is None and isinstance(code, int):
                msg = _HTTP_NAMES.get(code)
            return "error", {"code": code, "message": msg}
        if isinstance(result.get("status"), int) and result["status"] >= 400:
            return "error", {"code": result["status"], "message": msg or _HTTP_NAMES.get(result["status"])}
        if exit_code not in (None, 0, "0") and isinstance(exit_code, (int, str)) and str(exit_code).lstrip("-").isdigit():
            return "error", {"code": int(exit_code), "message": msg or _first(result, "stderr")}
        return "ok", None
    if isinstance(result, str):
        s = result.strip()
        m = _ERR_WORD_RE.match(s)
        exc = _EXC_RE.search(s[:400])
        http = _HTTP_RE.search(s[:400])
        if m or (exc and s.startswith(exc.group(1))) or "Traceback (most recent call last)" in s:
            code = exc.group(1) if exc else (_coerce_code(http.group(1)) if http else None)
            return "error", {"code": code, "message": s[:300]}
        if http and re.match(r"^\s*(HTTP\b|[45]\d\d\b)", s):
            code = _coerce_code(http.group(1))
            return "error", {"code": code, "message": (http.group(2) or _HTTP_NAMES.get(code) or s[:200]).strip()}
        return "ok", None
    return "ok", None


def _coerce_code(code: Any) -> Any:
    return int(code) if isinstance(code, str) and code.isdigit() else code


# ----------------------------------------------------------------------------- critical atoms

_ATOM_PATTERNS = [
    re.compile(r"\"([^\"\n]{1,80})\"|'([^'\n]{2,80})'"),                      # quoted strings
    re.compile(r"\b[\w.+-]+@[\w-]+\.[\w.]+\b"),                              # emails
    re.compile(r"(?<![\w/])(?:[\w-]+/)*[\w-]+\.(?:[a-z][a-z0-9]{0,4})\b"),    # file names / paths
    re.compile(r"(?<![\w.-])[A-Za-z0-9_-]*\d[A-Za-z0-9_.:-]*(?<![.:-])"),      # ids, codes, numbers, dates
    re.compile(r"\b[A-Z][a-z]+(?:[A-Z][a-z]+)*(?:Error|Exception)\b"),        # exception names
]
_STOP_NUMERIC = {"0", "1"}


def critical_atoms(text: str) -> set[str]:
    """The atoms a faithful compression must keep: numbers, ids, codes, file names, quoted strings.

    Example:
        >>> sorted(critical_atoms('get_order(order_id="88412") failed: 500 Internal Server Error'))
        ['500', '88412']
    """
    atoms: set[str] = set()
    text = text or ""
    for m in _ATOM_PATTERNS[1].finditer(text):  # emails first, so their parts are not atoms of their own
        atoms.add(m.group(0))
    text = _ATOM_PATTERNS[1].sub(" ", text)
    for pat in _ATOM_PATTERNS:
        for m in pat.finditer(text):
            groups = [g for g in m.groups() if g] if m.groups() else []
            tok = (groups[0] if groups else m.group(0)).strip()
            if not tok or tok in _STOP_NUMERIC:
                continue
            if pat is _ATOM_PATTERNS[0]:
                # a quoted string counts only when it is short and not a key of a JSON object
                end = m.end()
                if text[end:end + 1] == ":" or len(tok) > 60 or " " in tok and len(tok.split()) > 6:
                    continue
            if pat is _ATOM_PATTERNS[3] and "_" in tok and not any(ch.isdigit() for ch in tok.replace("_", "")):
                continue
            atoms.add(tok)
    # a quoted atom may contain an id atom already; keep both (both must survive)
    return atoms


# ----------------------------------------------------------------------------- encoder

def _approx_tokens(text: str) -> int:
    return max(1, (len(text) + 3) // 4) if text else 0


def tool_card_text(name: str, args: dict[str, Any], result: Any) -> str:
    """The raw text of a tool card: the call, then its result."""
    res = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)
    return f"{render_call(name, args)} -> {res}" if result is not None else render_call(name, args)


def encode_messages(messages: Iterable[dict[str, Any]], episode_id: str, *,
                    count_tokens: CountTokens | None = None, start_index: int = 0,
                    include_pending: bool = True) -> list[Card]:
    """Turn OpenAI chat messages into cards (tool calls merged with their results).

    Args:
        messages: chat messages in order; system and developer messages never become cards. A message's `name`
            (OpenAI's participant name) is kept on its cards as `meta["name"]`.
        episode_id: episode or session id used in card ids.
        count_tokens: `str -> int` (e.g. `lambda s: len(tok.encode(s))`); approximate chars/4 if None.
        start_index: index of the first message in the episode (for streaming ingestion).
        include_pending: keep tool calls whose result has not arrived yet (status None).

    Raises:
        EpisodeFormatError: a tool result without a matching call, an unknown role, bad arguments.
    """
    count = count_tokens or _approx_tokens
    cards: list[Card] = []
    pending: dict[str, Card] = {}
    for off, m in enumerate(messages):
        i = start_index + off
        check_message(m, i)   # the one shape check (damc.episodes); the sequence checks are below
        role = m.get("role")
        ts = m.get("timestamp")
        if role in ("system", "developer"):
            continue
        n_before = len(cards)
        if role == "user":
            text = message_text(m)
            cards.append(Card(card_id(episode_id, i), episode_id, i, "user", "user", text, ts, n_tokens=count(text)))
        elif role == "assistant":
            text = message_text(m).strip()
            if text:
                cards.append(Card(card_id(episode_id, i), episode_id, i, "assistant", "assistant", text, ts,
                                  n_tokens=count(text)))
            for j, call in enumerate(m.get("tool_calls") or []):
                fn = call["function"]
                try:
                    args = call_arguments(call)
                except json.JSONDecodeError as e:
                    raise EpisodeFormatError(f"arguments are not valid JSON ({e.msg})",
                                             field=f"messages[{i}].tool_calls[{j}].function.arguments",
                                             expected="a JSON object encoded as a string") from None
                cid = call.get("id") or f"call_{i}_{j}"
                text = render_call(fn["name"], args)
                card = Card(card_id(episode_id, i, j), episode_id, i, "tool", "tool_result", text, ts,
                            tool_name=fn["name"], arguments=args, n_tokens=count(text), call_id=cid)
                pending[cid] = card
                cards.append(card)
        elif role == "tool":
            cid = m["tool_call_id"]
            card = pending.pop(cid, None)
            if card is None:
                raise EpisodeFormatError(f"tool result for unknown call {cid!r}", field=f"messages[{i}].tool_call_id",
                                         expected="the id of an earlier assistant tool call")
            result = parse_result(m.get("content") if isinstance(m.get("content"), str) else message_text(m))
            status, error = detect_status(result)
            card.result, card.status, card.error, card.result_index = result, status, error, i
            card.kind = "tool_error" if status == "error" else "tool_result"
            card.raw_text = tool_card_text(card.tool_name, card.arguments or {}, result)
            card.n_tokens = count(card.raw_text)
        if isinstance(m.get("name"), str) and m["name"]:
            for c in cards[n_before:]:
                c.meta["name"] = m["name"]
    if not include_pending:
        cards = [c for c in cards if c.call_id not in pending]
    return cards


def encode_episode(episode: Episode, *, count_tokens: CountTokens | None = None) -> list[Card]:
    """All cards of an episode, in order."""
    return encode_messages(episode.messages, episode.episode_id, count_tokens=count_tokens)


def cards_before(cards: list[Card], index: int) -> list[Card]:
    """Cards that start before message `index` and (for tool cards) whose result came before it."""
    return [c for c in cards if c.position < index and (c.result_index is None or c.result_index < index)]


def token_counter(tokenizer: Any) -> CountTokens:
    """A `str -> int` counter from a Hugging Face tokenizer (no special tokens)."""
    return lambda s: len(tokenizer.encode(s, add_special_tokens=False)) if s else 0
