"""Facts: the one value matcher — does this text hold value v? — and the values a decision needs or fears.

A *fact* is a literal argument value of a tool call (an order id, a team, a path, a price). Everything that
asks "which card holds the gold's facts" asks it here: the converters' key cards (`damc.data.bfcl`,
`damc.data.tau2_user`), the oracle policy, the memory metrics (value recall, confuser rate), the estimator
comparison and the label analyses. One module, one set of boundary rules:

* `value_pattern(value)` — a regex finding a typed value (str / int / float) as a whole token. Strings match
  verbatim between non-word characters; a leading "#" (τ²-bench order ids) is optional, since callers say
  "order W2378156" as often as "#W2378156"; numbers match their JSON forms (`348` also matches `348.0`, never
  `348.5` or `1348`). Values shorter than `MIN_VALUE_CHARS` are not facts (None).
* `holds_any(text, values)` — the metrics' question over the *string forms* of values (`gold_values`,
  `confuser_values`: what a rendered action shows), with the same matcher in its verbatim form
  (`value_pattern(s, exact=True)`: no optional "#", no number forms, any Unicode word character is a
  boundary, two characters suffice).

The key-card form is the rule τ²-bench's converter used; BFCL's converter used it without the optional "#"
and without an int's float form, and adopting it moved no key card in any of the 800 BFCL multi-turn
episodes. The metrics keep the verbatim form (`exact=True`) so the memory metrics of every recorded study
reprint identically; nothing else in the package matches values.

**First holder, decided here.** A key card of decision k found by matching is the *first* card (in message
order) that holds one of its gold values: the card where the fact entered the conversation; later repetitions
are not key cards (they are what a good memory may drop once the first is kept). `first_holder` is that rule,
and both converters (BFCL, τ²-bench) call it. The synthetic generator does not match text: it plants each fact
and records *every* card holding it (`metadata["repeated_key"]` lists the decisions with more than one). That
difference is kept, not unified: on the shipped synthetic sample 50 decisions have a repeated key, so first-
holder key cards there would change the demo's memory metrics (key recall, hit@k) rather than reprint them.

Example:
    >>> bool(value_pattern("#W2378156").search("my order W2378156 arrived"))
    True
    >>> bool(value_pattern(348).search('{"price": 348.0}')), bool(value_pattern(348).search("1348"))
    (True, False)
    >>> holds_any("team ops-eu is on call", ["ops-eu"]), holds_any("team ops-europe", ["ops-eu"])
    (True, False)
"""

from __future__ import annotations

import json
import re
from typing import Any, Iterable, Sequence

from damc.episodes import call_arguments, iter_scalars

MIN_VALUE_CHARS = 3  # shortest value (characters) that ties a card to a gold action (key cards)
MIN_METRIC_CHARS = 2  # shortest string form of a value that the metrics look for (`gold_values`)

_ASCII_BEFORE, _ASCII_AFTER = r"(?<![A-Za-z0-9_])", r"(?![A-Za-z0-9_])"
_CALL_RE = re.compile(r"([A-Za-z_][\w.]*)\((.*)\)\s*$", re.S)


def value_pattern(value: Any, *, min_chars: int = MIN_VALUE_CHARS, exact: bool = False) -> re.Pattern[str] | None:
    """A regex finding `value` as a whole token in text, or None for values too short (or not scalars).

    Args:
        value: a str, int or float (bools, None and containers are not facts: None).
        min_chars: shortest value, in characters (a number's sign not counted).
        exact: the verbatim form the metrics use: `str(value)`, unstripped, between Unicode non-word
            characters; no optional "#", no number forms.
    """
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return None
    if exact:
        s = str(value)
        return re.compile(rf"(?<![\w]){re.escape(s)}(?![\w])") if len(s) >= min_chars else None
    if isinstance(value, str):
        s = value.strip()
        hash_ = s.startswith("#")
        core = s[1:] if hash_ else s
        if len(core) < min_chars:
            return None
        start = r"(?<![A-Za-z0-9_#])#?" if hash_ else _ASCII_BEFORE
        return re.compile(start + re.escape(core) + _ASCII_AFTER)
    forms = {json.dumps(value)}
    if isinstance(value, int) or value.is_integer():
        forms |= {str(int(value)), f"{int(value)}.0"}
    forms = {f for f in forms if len(f.lstrip("-")) >= min_chars}
    if not forms:
        return None
    alt = "|".join(re.escape(f) for f in sorted(forms, key=len, reverse=True))
    return re.compile(r"(?<![0-9.])(?:" + alt + r")(?![0-9]|\.[0-9])")


def holds_any(text: str, values: Sequence[str]) -> bool:
    """True when `text` contains one of `values` as a whole token (not inside a longer word or number)."""
    return any(p.search(text) for v in values if (p := value_pattern(v, min_chars=0, exact=True)) is not None)


def leaves(x: Any) -> list[str]:
    """Keys and scalar leaves of a parsed JSON value, as strings (floats in their JSON form)."""
    if isinstance(x, dict):
        return [t for k, v in x.items() for t in [str(k), *leaves(v)]]
    if isinstance(x, list):
        return [t for v in x for t in leaves(v)]
    return [] if x is None else [json.dumps(x) if isinstance(x, float) else str(x)]


def card_text(content: str | None) -> str:
    """The searchable text of a tool result or user message: JSON leaves and keys one a line, else as is."""
    s = content or ""
    try:
        return "\n".join(leaves(json.loads(s)))
    except (TypeError, ValueError):
        return s


def first_holder(pattern: re.Pattern[str] | None, cards: Iterable[tuple[str | None, str]]) -> str | None:
    """The id of the first card (in the given order) whose text holds `pattern`; None if none does."""
    if pattern is None:
        return None
    return next((cid for cid, text in cards if cid is not None and pattern.search(text)), None)


def _string_forms(values: Iterable[Any], skip: set[str] | None = None) -> list[str]:
    """Distinct stripped string forms of `values`, at least `MIN_METRIC_CHARS` long, not in `skip`."""
    out: list[str] = []
    for x in values:
        s = str(x).strip()
        if len(s) >= MIN_METRIC_CHARS and s not in out and s not in (skip or ()):
            out.append(s)
    return out


def gold_values(gold: dict[str, Any]) -> list[str]:
    """String forms of the gold action's argument values (scalars, and scalars inside lists/dicts), ≥ 2 chars."""
    return _string_forms(x for call in gold.get("tool_calls") or [] for x in iter_scalars(call_arguments(call)))


def confuser_values(gold: dict[str, Any], distractors: Sequence[str]) -> list[str]:
    """Argument values of the `distractors` (rendered actions) that the `gold` action does not use — an id, a
    team, a code: a card holding one of them is a look-alike of what the decision needs."""
    vals = []
    for d in distractors:
        calls = parse_action(d)
        vals += [x for _, args in (calls if isinstance(calls, list) else []) for x in iter_scalars(args)]
    return _string_forms(vals, skip=set(gold_values(gold)))


def parse_action(text: str) -> list[tuple[str, dict[str, Any]]] | str:
    """Parse `name(arg=value, ...); name(...)` (canonical action text) into calls, else the stripped text.

    Values are read as JSON where they are JSON, else kept as strings; unparseable text stays text.
    """
    text = (text or "").strip()
    calls = []
    for part in _split_top(text, ";"):
        m = _CALL_RE.match(part.strip())
        if not m:
            return text
        args: dict[str, Any] = {}
        for kv in _split_top(m.group(2), ","):
            if not kv.strip():
                continue
            if "=" not in kv:
                return text
            k, v = kv.split("=", 1)
            try:
                args[k.strip()] = json.loads(v.strip())
            except (json.JSONDecodeError, RecursionError):
                args[k.strip()] = v.strip().strip("'\"")
        calls.append((m.group(1), args))
    return calls or text


def _split_top(s: str, sep: str) -> list[str]:
    """Split on `sep` outside brackets and quotes."""
    out, depth, quote, cur = [], 0, None, []
    for i, ch in enumerate(s):
        if quote:
            if ch == quote and s[i - 1] != "\\":
                quote = None
        elif ch in "\"'":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == sep and depth == 0:
            out.append("".join(cur))
            cur = []
            continue
        cur.append(ch)
    out.append("".join(cur))
    return out
