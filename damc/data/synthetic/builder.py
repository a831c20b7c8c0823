"""The episode builder: message emission, fact tracking and key-card bookkeeping.

`_Episode` appends OpenAI-style messages (user, assistant text, assistant tool calls with their tool
results, transient tool failures with retries) with timestamps from a running clock, and records where
each tracked fact (an id, a code, an address) appears. When a reply or call `needs` facts, `_decide`
writes the candidate cards holding them as that decision's `key_card_ids` (see `damc.data.synthetic`).
"""

from __future__ import annotations

import json
import random
import re
import string
from datetime import datetime, timedelta, timezone
from typing import Any, Callable

from damc.cards import card_id
from damc.data.synthetic.config import SyntheticConfig
from damc.data.synthetic.phrasings import _SAY_HICCUP, _SMALL_USER
from damc.data.synthetic.vocab import _TOOL_SPECS, _alnum, _casual, _fact_re, _iso, _pick


class _Facts:
    """Where each tracked fact appears: fact -> [(card position, card_id)], in order of appearance."""

    def __init__(self) -> None:
        self.auto: dict[str, re.Pattern[str]] = {}  # facts found by scanning card text (ids, codes, emails)
        self.holders: dict[str, list[tuple[int, str]]] = {}

    def track(self, fact: str) -> None:
        if fact not in self.auto:
            self.auto[fact] = _fact_re(fact)
            self.holders.setdefault(fact, [])

    def note(self, fact: str, pos: int, cid: str) -> None:
        lst = self.holders.setdefault(fact, [])
        if (pos, cid) not in lst:
            lst.append((pos, cid))

    def scan(self, text: str, pos: int, cid: str) -> None:
        for fact, pat in self.auto.items():
            if pat.search(text):
                self.note(fact, pos, cid)


class _Episode:
    """Builds one episode: message emission, fact tracking and key-card bookkeeping."""

    def __init__(self, rng: random.Random, cfg: SyntheticConfig, episode_id: str):
        self.rng, self.cfg, self.eid = rng, cfg, episode_id
        self.messages: list[dict[str, Any]] = []
        self.facts = _Facts()
        self.turn_start = 0
        self.key_card_ids: dict[str, list[str]] = {}
        self.key_facts: dict[str, list[str]] = {}
        self.repeated: list[int] = []
        self.clock = datetime(2024, 1, 1, tzinfo=timezone.utc) + timedelta(
            days=rng.randint(0, 700), hours=rng.randint(7, 20), minutes=rng.randint(0, 59),
            seconds=rng.randint(0, 59))
        self.names = {k: rng.choice(v[0]) for k, v in _TOOL_SPECS.items()}
        self.compact_json = rng.random() < 0.6  # some backends emit compact JSON, some spaced
        self._used: set[str] = set()
        self._ncall = 0

    # ---------------------------------------------------------------- ids
    def unique(self, make: Callable[[random.Random], str]) -> str:
        while True:
            v = make(self.rng)
            if v not in self._used and not any(v in u or u in v for u in self._used):
                self._used.add(v)
                return v

    # ---------------------------------------------------------------- time
    def tick(self, lo: float, hi: float) -> str:
        self.clock += timedelta(seconds=self.rng.uniform(lo, hi))
        return _iso(self.clock)

    # ---------------------------------------------------------------- emission
    def system(self, text: str) -> None:
        self.messages.append({"role": "system", "content": text})

    def user(self, text: str, holds: tuple[str, ...] = (), gap: tuple[float, float] = (15, 240),
             chatty: float = 0.0) -> None:
        """A user message; `holds` are explicit facts it carries; `chatty` = chance of a small-talk preamble."""
        i = len(self.messages)
        if chatty and self.rng.random() < chatty:
            joiner = self.rng.choice(["Anyway,", "So,", "Right —", "OK.", ""])
            if joiner.endswith((",", "—")):
                text = text[0].lower() + text[1:]
            text = " ".join(x for x in (self.rng.choice(_SMALL_USER), joiner, text) if x)
        text = _casual(self.rng, text)
        self.messages.append({"role": "user", "content": text, "timestamp": self.tick(*gap)})
        self.turn_start = i
        cid = card_id(self.eid, i)
        self.facts.scan(text, i, cid)
        for f in holds:
            assert f in text, (f, text)
            self.facts.note(f, i, cid)

    def say(self, text: str, needs: tuple[str, ...] = (), holds: tuple[str, ...] = ()) -> None:
        """An assistant text reply (a decision); `needs` are facts the reply depends on."""
        k = len(self.messages)
        self._decide(k, needs)
        for f in needs:
            assert f in text, (f, text)
        self.messages.append({"role": "assistant", "content": text, "timestamp": self.tick(2, 12)})
        cid = card_id(self.eid, k)
        self.facts.scan(text, k, cid)
        for f in holds:
            self.facts.note(f, k, cid)

    def calls(self, calls: list[tuple[str, dict[str, Any], Any]], needs: tuple[str, ...] = (),
              holds: tuple[str, ...] = ()) -> None:
        """One assistant message with parallel tool calls `(tool, args, result)` and their tool messages."""
        k = len(self.messages)
        self._decide(k, needs)
        arg_text = json.dumps([c[1] for c in calls], ensure_ascii=False)
        for f in needs:
            assert f in arg_text, (f, arg_text)
        sep = (",", ":") if self.compact_json else (", ", ": ")
        tcs = []
        for _ in calls:
            self._ncall += 1
            tcs.append({"id": "call_" + _alnum(self.rng, 24, string.ascii_letters + string.digits),
                        "type": "function", "function": {"name": "", "arguments": ""}})
        for tc, (tool, args, _) in zip(tcs, calls):
            tc["function"] = {"name": self.names[tool], "arguments": json.dumps(args, ensure_ascii=False)}
        self.messages.append({"role": "assistant", "content": None, "tool_calls": tcs,
                              "timestamp": self.tick(1, 6)})
        for j, (tc, (tool, args, result)) in enumerate(zip(tcs, calls)):
            content = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False, separators=sep)
            self.messages.append({"role": "tool", "tool_call_id": tc["id"], "content": content,
                                  "timestamp": self.tick(0.3, 4)})
            cid = card_id(self.eid, k, j)
            if tool != "kb":  # KB articles are generic text; never count them as holding a customer's fact
                self.facts.scan(tc["function"]["arguments"] + " " + content, k, cid)
            for f in holds:
                if f in tc["function"]["arguments"]:
                    self.facts.note(f, k, cid)

    def call(self, tool: str, args: dict[str, Any], result: Any, needs: tuple[str, ...] = (),
             holds: tuple[str, ...] = ()) -> None:
        self.calls([(tool, args, result)], needs, holds)

    def call_retrying(self, tool: str, args: dict[str, Any], result: Any, needs: tuple[str, ...] = (),
                      holds: tuple[str, ...] = ()) -> None:
        """A call that may fail transiently first; the agent retries with the same arguments."""
        n_fail = 0
        while self.rng.random() < self.cfg.p_tool_error and n_fail < 2:
            self.call(tool, args, self.transient_error(), needs, holds)
            n_fail += 1
            if self.rng.random() < 0.15:
                self.say(_pick(self.rng, _SAY_HICCUP))
        self.call(tool, args, result, needs, holds)

    def transient_error(self) -> Any:
        r = self.rng
        kind = r.randrange(7)
        if kind == 0:
            return {"error": {"code": 500, "message": "Internal Server Error"}}
        if kind == 1:
            return {"status": "error", "code": 503, "message": "Service Unavailable: upstream dependency timed out"}
        if kind == 2:
            return {"error": "RateLimitError: too many requests", "code": 429, "retry_after": r.randint(1, 30)}
        if kind == 3:
            return "HTTP 502 Bad Gateway"
        if kind == 4:
            return {"error": {"type": "TimeoutError", "message": f"upstream did not respond within {r.choice([10, 15, 30])}s"}}
        if kind == 5:
            return "ConnectionResetError: [Errno 104] Connection reset by peer"
        return {"ok": False, "error": {"code": 504, "message": "Gateway Timeout", "request_id": _alnum(r, 12)}}

    # ---------------------------------------------------------------- key bookkeeping
    def _decide(self, k: int, needs: tuple[str, ...]) -> None:
        u = self.turn_start
        keep_facts, cards, repeated = [], [], False
        for f in needs:
            hs = self.facts.holders.get(f, [])
            if any(u <= pos < k for pos, _ in hs):
                continue  # visible in the current turn: not a memory decision for this fact
            before = [cid for pos, cid in hs if pos < u]
            assert before, f"{self.eid}@{k}: fact {f!r} needed but never seen"
            keep_facts.append(f)
            repeated |= len(before) > 1
            cards += [c for c in before if c not in cards]
        if keep_facts:
            self.key_card_ids[str(k)] = cards
            self.key_facts[str(k)] = keep_facts
            if repeated:
                self.repeated.append(k)

    def maybe_repeat(self) -> bool:
        return self.rng.random() < self.cfg.p_repeat_key

    # ---------------------------------------------------------------- output
    def tools(self) -> list[dict[str, Any]]:
        out = []
        for key, (_, desc, props, req) in _TOOL_SPECS.items():
            out.append({"type": "function", "function": {
                "name": self.names[key], "description": desc,
                "parameters": {"type": "object", "properties": props, "required": req}}})
        return out
