"""Conversation identity: which stored session a message list belongs to, and what of it is new.

A caller hands `DecisionAwareMemory.build_context` the whole conversation on every call, often without a
`session_id`. The store therefore keeps, per session, a **hash chain** of the messages it has ingested
(`message_digest` of each message's canonical JSON, `chain_next` linking it to the previous one) and the
caller's latest **view** of them (the store indices of the caller's list, in the caller's order; None while it
is simply the stored order). `align` compares an incoming list with that record:

* **extends** — the list starts with the stored messages (or is an earlier state of them): the messages
  after the stored prefix are new;
* **re-sync** — the caller trimmed its history (dropped a prefix) or compacted it (old messages replaced by a
  summary): the end of its previous list (at least `MIN_OVERLAP` consecutive messages ending with the last one
  it sent) appears in the incoming list; messages the store already holds are skipped, the others (a summary,
  an edited message, the messages after the overlap) are new, numbered after the stored ones;
* **mismatch** — anything else: another conversation. `DecisionAwareMemory` then derives a session id from
  the conversation's opening (`derive_session_id`) or raises `ConversationMismatchError`
  (`MemoryConfig.on_mismatch`).

Card ids are `{session_id}:{store message index}...`: the store's own counter numbers messages, so ids stay
stable and unique whatever the caller trimmed.

Example:
    >>> memo = TextMemo()
    >>> digests = [message_digest(m, memo) for m in messages]
    >>> al = align(digests, u, n_stored, view=None, rows=store_rows)
    >>> al.ok, al.new, al.turn_position
    (True, [4, 5, 6], 4)
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from damc.runtime.ingest import clean_text

ON_MISMATCH = ("new_session", "error")   # MemoryConfig.on_mismatch values
MIN_OVERLAP = 2      # consecutive messages of the caller's previous list a trimmed/compacted list must still hold
BIG_TEXT = 65_536    # strings at least this long are hashed once per object (`TextMemo`), then by their digest
_ESCAPED_SURROGATE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_KEYS = ("role", "name", "content", "tool_calls", "tool_call_id", "function_call")  # what identifies a message


class ConversationMismatchError(ValueError):
    """The messages do not continue the session they were sent under (`MemoryConfig.on_mismatch="error"`).

    Attributes:
        session_id: the session the messages were sent under.
        index: index (in the caller's list) of the first message that differs from the stored conversation.
    """

    def __init__(self, session_id: str, index: int, detail: str = "") -> None:
        self.session_id, self.index = session_id, index
        super().__init__(
            f"messages[{index}] does not continue session {session_id!r}: the store holds another message at that "
            f"point{detail}. This is another conversation: pass its own session_id, or set "
            f"MemoryConfig(on_mismatch='new_session') to give it a session derived from its first messages.")


def _digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


class TextMemo:
    """Cleaned text and digest of large strings, remembered per string object.

    An agent loop passes the same message objects on every call; a 10 MB tool result would otherwise be
    re-encoded and re-hashed on each one. Entries hold the string itself, so an `id()` is never reused while
    cached; at most `max_chars` characters are held (least recently used first out). Thread-safe.
    """

    def __init__(self, max_chars: int = 64_000_000) -> None:
        self.max_chars = max_chars
        self._held = 0
        self._items: OrderedDict[int, tuple[str, str, str]] = OrderedDict()   # id -> (original, cleaned, digest)
        self._lock = threading.Lock()

    def _get(self, s: str) -> tuple[str, str]:
        with self._lock:
            hit = self._items.get(id(s))
            if hit is not None and hit[0] is s:
                self._items.move_to_end(id(s))
                return hit[1], hit[2]
        try:
            cleaned, data = s, s.encode("utf-8")
        except UnicodeEncodeError:   # a lone surrogate
            cleaned = clean_text(s)
            data = cleaned.encode("utf-8")
        digest = _digest(data)
        with self._lock:
            self._items[id(s)] = (s, cleaned, digest)
            self._held += len(s)
            while self._held > self.max_chars and len(self._items) > 1:
                _, (old, _, _) = self._items.popitem(last=False)
                self._held -= len(old)
        return cleaned, digest

    def clean(self, s: str) -> str:
        """`s` with lone surrogates replaced (`damc.runtime.ingest.clean_text`); the same object when clean."""
        if len(s) < BIG_TEXT:
            return s if s.isascii() else clean_text(s)
        return self._get(s)[0]

    def digest(self, s: str) -> str:
        """Digest of the cleaned text of a large string."""
        return self._get(s)[1]


def _clean_arguments(args: str) -> str:
    """Tool-call arguments whose JSON escapes decode to a lone surrogate (`"\\ud800"`), re-encoded cleaned: the
    prompt renders parsed arguments, and a tokenizer refuses the surrogate."""
    if not _ESCAPED_SURROGATE.search(args):
        return args
    try:
        parsed = json.loads(args)
    except (ValueError, RecursionError):
        return args
    cleaned = clean_text(parsed)
    return args if cleaned == parsed else json.dumps(cleaned, ensure_ascii=False)


class DigestCache:
    """Values remembered per message digest (e.g. the tokens a message adds to a prompt); thread-safe, the least
    recently used forgotten beyond `max_items`."""

    def __init__(self, max_items: int) -> None:
        self.max_items = max_items
        self._items: OrderedDict[str, int] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> int | None:
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def put(self, key: str, value: int) -> None:
        with self._lock:
            self._items[key] = value
            while len(self._items) > self.max_items:
                self._items.popitem(last=False)


def clean_messages(messages: Sequence[Any], memo: TextMemo) -> list[Any]:
    """The messages with every string cleaned of lone surrogates (raw, or JSON-escaped in tool-call arguments),
    before anything is written or tokenized.

    Unchanged values keep their identity (a message without a surrogate is the caller's own dict), so the
    `TextMemo` of a later call still recognises its strings.
    """
    def clean(v: Any) -> Any:
        if isinstance(v, str):
            return memo.clean(v)
        if isinstance(v, dict):
            out = {clean(k): clean(x) for k, x in v.items()}
            if isinstance(out.get("arguments"), str):
                out["arguments"] = _clean_arguments(out["arguments"])
            return v if all(a is b for a, b in zip(out.values(), v.values())) and list(out) == list(v) else out
        if isinstance(v, list):
            out_l = [clean(x) for x in v]
            return v if all(a is b for a, b in zip(out_l, v)) else out_l
        return v

    return [clean(m) for m in messages]


def _canonical(v: Any, memo: TextMemo) -> Any:
    if isinstance(v, str):
        return {"$blake2b": memo.digest(v)} if len(v) >= BIG_TEXT else v
    if isinstance(v, dict):
        return {str(k): _canonical(x, memo) for k, x in v.items() if x is not None}
    if isinstance(v, (list, tuple)):
        return [_canonical(x, memo) for x in v]
    return v


def _arguments(args: Any) -> Any:
    """Tool-call arguments in one spelling: a JSON object string parsed (key order and spacing do not matter)."""
    if isinstance(args, str) and len(args) < BIG_TEXT:
        try:
            return json.loads(args) if args.strip() else {}
        except (ValueError, RecursionError):
            return args
    return args


def canonical_message(m: Any, memo: TextMemo) -> Any:
    """What identifies a message: role, name, content, tool calls (id, name, parsed arguments), tool_call_id.

    Timestamps, provider extras (`refusal`, `annotations`, `audio`...) and empty values are left out, so the same
    message re-serialised by another client or process hashes the same.
    """
    if not isinstance(m, dict):
        return _canonical(m, memo)
    out = {k: m[k] for k in _KEYS if m.get(k) not in (None, "", [])}
    if isinstance(out.get("tool_calls"), list):
        out["tool_calls"] = [_canonical_call(c) for c in out["tool_calls"]]
    return _canonical(out, memo)


def _canonical_call(c: Any) -> Any:
    fn = c.get("function") if isinstance(c, dict) else None
    if not isinstance(fn, dict):
        return c
    return {"id": c.get("id"), "name": fn.get("name"), "arguments": _arguments(fn.get("arguments"))}


def message_digest(m: Any, memo: TextMemo) -> str:
    """Hex digest (128-bit BLAKE2b) of a message's canonical JSON (`canonical_message`)."""
    text = json.dumps(canonical_message(m, memo), ensure_ascii=False, sort_keys=True, separators=(",", ":"),
                      default=str)
    return _digest(text.encode("utf-8", "surrogatepass"))


def chain_next(prev: str | None, digest: str) -> str:
    """The chain value after a message: the digest of the previous chain value and the message's digest."""
    return _digest(f"{prev or ''}{digest}".encode())


def chain_of(digests: Sequence[str]) -> list[str]:
    """Chain values of a message list from its start."""
    out, prev = [], None
    for d in digests:
        prev = chain_next(prev, d)
        out.append(prev)
    return out


def opening_length(messages: Sequence[Any]) -> int:
    """How many leading messages identify a conversation: up to and including its first user message."""
    for i, m in enumerate(messages):
        if isinstance(m, dict) and m.get("role") == "user":
            return i + 1
    return min(1, len(messages))


def derive_session_id(base: str, digests: Sequence[str]) -> str:
    """`{base}~{12 hex}`: a session id derived from a conversation's leading messages (stable across processes)."""
    return f"{base}~{_digest(''.join(digests).encode())[:12]}"


@dataclass
class Alignment:
    """How an incoming message list relates to a stored session.

    Attributes:
        ok: the list is this session's conversation (it extends it, is an earlier state of it, or re-syncs).
        new: indices (in the incoming list, before the current turn) of the messages to ingest, in order; they
            get the store indices `n, n + 1, ...`.
        view: the caller's list as store indices after ingestion (None: the stored order itself).
        turn_position: store index of the current turn's first message (where retrieval stops and ages count
            from).
        resynced: the list was trimmed or compacted (`summaries`: incoming indices of the new messages found
            before the overlap — a summary, an edited message).
        first_diff: on a mismatch, the first incoming index that differs from the caller's previous list.
        backfill: store index -> digest for stored messages that had no chain row yet (stores from before
            chains existed), taken from the incoming list.
    """

    ok: bool
    new: list[int] = field(default_factory=list)
    view: list[int] | None = None
    turn_position: int = 0
    resynced: bool = False
    summaries: list[int] = field(default_factory=list)
    first_diff: int | None = None
    backfill: dict[int, str] = field(default_factory=dict)


def _first_diff(incoming: Sequence[str], previous: Sequence[str | None]) -> int | None:
    for k, (a, b) in enumerate(zip(incoming, previous)):
        if b is not None and a != b:
            return k
    return None


def align(incoming: Sequence[str], u: int, n: int, view: Sequence[int] | None,
          rows: Callable[[Sequence[int] | None], Mapping[int, tuple[str, str]]], *,
          need_diff: bool = False) -> Alignment:
    """Align an incoming list (message digests; `u`: index of its current turn) with a stored session.

    Args:
        incoming: digests of the caller's whole list, current turn included.
        u: index of the current turn (messages before it are history and get ingested).
        n: messages the session has stored (its message counter).
        view: the caller's previous list as store indices (None: the stored order `0..n-1`).
        rows: `rows(indices or None) -> {index: (digest, chain)}` reads the session's stored chain (None: all
            rows). Stores written before chains existed lack rows: those messages match anything, and
            `Alignment.backfill` gives their digests from the incoming list.
        need_diff: on a mismatch, always fill `first_diff` (it may need every stored row).
    """
    L = len(incoming)
    prev_pos = list(range(n)) if view is None else list(view)
    m = len(prev_pos)
    if m == 0 or L == 0:
        return _extend(n, prev_pos, u)
    if view is None:                       # one row tells whether the list starts with the stored chain
        q = min(m, L) - 1
        row = rows([q]).get(q)
        if row is not None and row[1] == chain_of(incoming[:q + 1])[q]:
            return _extend(n, prev_pos, u)
        last = rows([m - 1]).get(m - 1)    # not a prefix: only a list holding our last message can re-sync
        if last is not None and last[0] not in set(incoming):
            diff = _first_diff(incoming, _hashes(rows(None), prev_pos)) if need_diff else None
            return Alignment(False, first_diff=diff)
    stored = rows(None)
    previous = _hashes(stored, prev_pos)
    diff = _first_diff(incoming, previous)
    if diff is None:
        al = _extend(n, prev_pos, u)
        al.backfill = {p: incoming[k] for k, p in enumerate(prev_pos[:L]) if previous[k] is None}
        return al
    return _resync(incoming, u, n, prev_pos, previous, stored) or Alignment(False, first_diff=diff)


def _hashes(stored: Mapping[int, tuple[str, str]], positions: Sequence[int]) -> list[str | None]:
    return [stored[p][0] if p in stored else None for p in positions]


def _extend(n: int, prev_pos: list[int], u: int) -> Alignment:
    """The incoming list starts with the caller's previous list (or is an earlier state of it)."""
    m = len(prev_pos)
    new = list(range(m, u))
    full = prev_pos + list(range(n, n + len(new)))
    turn = prev_pos[u] if u < m else n + len(new)
    return Alignment(True, new, None if full == list(range(n + len(new))) else full, turn)


def _resync(incoming: Sequence[str], u: int, n: int, prev_pos: list[int], previous: list[str | None],
            stored: Mapping[int, tuple[str, str]]) -> Alignment | None:
    """A trimmed or compacted list: the end of the caller's previous list (≥ `MIN_OVERLAP` consecutive messages,
    ending with the last one) appears in the incoming list, after its current turn starts at the latest. None
    when it does not."""
    m, last = len(previous), previous[-1]
    if last is None:
        return None
    best: tuple[int, int] | None = None     # (end index in incoming, overlap length)
    for p in range(len(incoming) - 1, -1, -1):
        if incoming[p] != last:
            continue
        r = 1
        while r <= p and r < m and previous[m - 1 - r] is not None and incoming[p - r] == previous[m - 1 - r]:
            r += 1
        if r >= MIN_OVERLAP and p - r + 1 <= u and (best is None or r > best[1]):
            best = (p, r)
    if best is None:
        return None
    p, r = best
    a = p - r + 1
    known = {d: idx for idx, (d, _) in sorted(stored.items())}
    positions: list[int | None] = []
    new: list[int] = []
    summaries: list[int] = []
    for k in range(a):                      # before the overlap: kept messages (the system prompt) or a summary
        if incoming[k] in known:
            positions.append(known[incoming[k]])
        else:
            positions.append(None)
            new.append(k)
            summaries.append(k)
    positions += prev_pos[m - r:]
    for k in range(p + 1, u):               # after the overlap: the messages the caller added since
        positions.append(None)
        new.append(k)
    fill = iter(range(n, n + len(new)))
    view = [x if x is not None else next(fill) for x in positions]
    turn = view[u] if u < len(view) else n + len(new)
    return Alignment(True, new, view, turn, resynced=True, summaries=summaries)


def history_tokens(history: Sequence[Any], prompt_tokens: Callable[[list[dict[str, Any]]], int],
                   cache: DigestCache, memo: TextMemo) -> int:
    """Tokens the raw history adds to a prompt (`Context.tokens_before`: what sending it verbatim would cost).

    Each message is counted once — the prompt with it after a one-line system message, less that system message
    alone — and remembered by its digest: a 10 MB tool result is tokenized on the turn it arrives, not again on
    every later turn. Exact for chat templates that render messages independently (ChatML).
    """
    anchor_msgs = [{"role": "system", "content": "."}]
    anchor = cache.get("anchor")
    if anchor is None:
        anchor = prompt_tokens(anchor_msgs)
        cache.put("anchor", anchor)
    total = 0
    for m in history:
        key = message_digest(m, memo)
        n = cache.get(key)
        if n is None:
            n = prompt_tokens(anchor_msgs + [m]) - anchor
            cache.put(key, n)
        total += n
    return total
