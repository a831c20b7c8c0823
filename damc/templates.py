"""Card templates: one short, faithful line per card — what the runtime puts in the prompt and the scorer reads.

    ✓ get_weather(city=Beijing, date="2023-10-28") → weather=sunny, temp_max=22
    ✗ get_order(order_id=88412) failed: 500 Internal Server Error
    user: Actually ship it to the Berlin office instead.

A template always keeps the tool name, the (short) arguments, the status, the error code and message,
and every identifier-like field of a JSON result (keys such as `id`, `*_id`, `code`, `name`, `path`,
`email`, `status`); other short fields follow while room lasts, long strings are truncated with "…",
lists show their first items and "+N more". `required_atoms(card)` is what any compression of a card must
keep (the LLM compressor's fidelity guard checks it).

This is core: the runtime's compressors (`damc.runtime.compress`), the scorer's card rendering
(`damc.query.render_card`) and the teacher's context all use these lines.

Example:
    >>> template_compress(card)
    '✗ get_order(order_id=88412) failed: 500 Internal Server Error'
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Callable

from damc.cards import Card, critical_atoms


@dataclass
class TemplateConfig:
    """Template limits (characters).

    Attributes:
        arg_chars: longest argument value kept verbatim (longer ones are truncated with "…").
        field_chars: longest result string value kept verbatim.
        result_chars: soft limit of the result summary (identifier fields are kept beyond it).
        list_items: items shown per list before "+N more".
        depth: nesting depth the summariser descends into.
        error_chars: longest error message kept.
        user_chars: longest user message kept (missing atoms are appended after a cut).
        assistant_chars: longest assistant message kept (same rule).
    """

    arg_chars: int = 60
    field_chars: int = 40
    result_chars: int = 160
    list_items: int = 3
    depth: int = 3
    error_chars: int = 200
    user_chars: int = 300
    assistant_chars: int = 200


OK_MARK, ERR_MARK, PENDING_MARK = "✓", "✗", "…"
_ID_KEY = re.compile(r"(?:^|_|-)(?:id|ids|uuid|guid|key|code|no|num|number|ref|sku|name|path|file|filename|dir|"
                     r"email|url|status|error|account|user|username|order|ticket)$|[a-z]Id$|ID$", re.I)
_OK_STATUS = {"ok", "success", "succeeded", "done", "true", "completed", "200"}
_SIMPLE = re.compile(r"^[\w.@:/+#%°-]+$")


def clip(s: str, n: int) -> str:
    """Whitespace collapsed, cut to `n` characters with "…" when longer."""
    s = " ".join(str(s).split())
    return s if len(s) <= n else s[: max(1, n - 1)] + "…"


def _fmt(v: Any, n: int) -> str:
    """A value as short text: simple strings unquoted, others JSON; long strings clipped."""
    if isinstance(v, str):
        s = clip(v, n)
        return s if _SIMPLE.match(s) else json.dumps(s, ensure_ascii=False)
    if isinstance(v, (dict, list)):
        return clip(json.dumps(v, ensure_ascii=False), n)
    return json.dumps(v, ensure_ascii=False)


def render_args(args: dict[str, Any] | None, cfg: TemplateConfig | None = None) -> str:
    cfg = cfg or TemplateConfig()
    return ", ".join(f"{k}={_fmt(v, cfg.arg_chars)}" for k, v in (args or {}).items())


def _walk(obj: Any, cfg: TemplateConfig, prefix: str = "", depth: int = 0) -> list[tuple[str, str, bool]]:
    """Flatten a JSON result into `(path, text, is_id)` items (lists cut at `list_items`)."""
    items: list[tuple[str, str, bool]] = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            path = f"{prefix}.{k}" if prefix else str(k)
            if isinstance(v, (dict, list)) and depth + 1 < cfg.depth and v:
                items += _walk(v, cfg, path, depth + 1)
            else:
                is_id = bool(_ID_KEY.search(str(k))) and not isinstance(v, (dict, list))
                text = _fmt(v, cfg.field_chars if not is_id else max(cfg.field_chars, cfg.arg_chars))
                items.append((path, text, is_id))
    elif isinstance(obj, list):
        for j, v in enumerate(obj[: cfg.list_items]):
            items += _walk(v, cfg, f"{prefix}[{j}]", depth + 1) if isinstance(v, (dict, list)) and \
                depth + 1 < cfg.depth else [(f"{prefix}[{j}]", _fmt(v, cfg.field_chars), False)]
        if len(obj) > cfg.list_items:
            items.append((f"{prefix}[+]", f"+{len(obj) - cfg.list_items} more", False))
    else:
        items.append((prefix, _fmt(obj, cfg.result_chars), False))
    return items


def summarize_result(result: Any, cfg: TemplateConfig | None = None) -> tuple[str, list[str]]:
    """A key=value summary of a tool result and the id texts it must keep.

    Returns:
        (summary, id_texts): identifier fields first (always kept), then other short fields while
        `result_chars` allows, then "+N fields" for what was left out.
    """
    cfg = cfg or TemplateConfig()
    if result is None:
        return "", []
    if isinstance(result, str):
        return clip(result, cfg.result_chars), []
    if not isinstance(result, (dict, list)):
        return _fmt(result, cfg.result_chars), []
    items = _walk(result, cfg)
    # an "ok" status adds nothing to the ✓ mark
    items = [it for it in items if not (it[0] in ("status", "success") and it[1].lower() in _OK_STATUS)]
    # identifier fields are always kept (in place); other fields while `result_chars` allows
    id_chars = sum(len(p) + len(t) + 3 for p, t, is_id in items if is_id)
    parts: list[str] = []
    used, skipped = 0, 0
    for p, t, is_id in items:
        s = t if not p or p.endswith("[+]") or re.fullmatch(r"\[\d+\]", p) else f"{p}={t}"
        if not is_id and used + id_chars + len(s) + 2 > cfg.result_chars and parts:
            skipped += 1
            continue
        parts.append(s)
        used += len(s) + 2
        if is_id:
            id_chars -= len(p) + len(t) + 3
    if skipped:
        parts.append(f"+{skipped} fields")
    ids = [it for it in items if it[2]]
    return ", ".join(parts), [t for _, t, _ in ids]


def _error_text(card: Card, cfg: TemplateConfig) -> str:
    err = card.error or {}
    code, msg = err.get("code"), err.get("message")
    parts = [str(code)] if code not in (None, "") else []
    if msg not in (None, ""):
        m = clip(str(msg), cfg.error_chars)
        if not parts or not m.startswith(parts[0]):
            parts.append(m)
        else:
            parts = [m]
    return " ".join(parts) or "error"


def _text_with_atoms(text: str, n: int) -> tuple[str, list[str]]:
    """Clip text to n chars; atoms cut off are appended in parentheses so none is lost."""
    full = " ".join(str(text).split())
    clipped = clip(full, n)
    if clipped == full:
        return full, []
    missing = sorted(a for a in critical_atoms(full) if a not in clipped)
    return (clipped + (" (" + ", ".join(missing) + ")" if missing else "")), missing


def template_compress(card: Card, cfg: TemplateConfig | None = None,
                      summarize: Callable[[Any], str] | None = None) -> str:
    """One faithful line for a card (no `[card_id]` tag; see `Compressed.line`). `summarize`: how a successful
    tool result is written (default: `summarize_result`'s summary; `field_compress` passes `summarize_fields`)."""
    cfg = cfg or TemplateConfig()
    line = _template_line(card, cfg, summarize or (lambda result: summarize_result(result, cfg)[0]))
    extra = [a for a in card.meta.get("atoms", []) if a not in line] if card.meta else []
    # a merged card (`DecisionAwareMemory.merge_similar`) keeps every atom of the cards it replaced
    return line + (" (also: " + ", ".join(extra) + ")" if extra else "")


def _template_line(card: Card, cfg: TemplateConfig, summarize: Callable[[Any], str]) -> str:
    if card.tool_name:
        call = f"{card.tool_name}({render_args(card.arguments, cfg)})"
        if card.status is None and card.result is None:
            return f"{PENDING_MARK} {call} → (no result yet)"
        if card.is_error:
            return f"{ERR_MARK} {call} failed: {_error_text(card, cfg)}"
        summary = summarize(card.result)
        return f"{OK_MARK} {call} → {summary}" if summary else f"{OK_MARK} {call}"
    limit = cfg.user_chars if card.kind == "user" else cfg.assistant_chars
    text, _ = _text_with_atoms(card.raw_text, limit)
    return f"{card.role}: {text}"


def required_atoms(card: Card, cfg: TemplateConfig | None = None) -> set[str]:
    """What any compression of this card must keep: the tool name, and `critical_atoms` of the
    arguments, the error code/message, identifier fields of the result, or of a text card's text."""
    cfg = cfg or TemplateConfig()
    atoms: set[str] = set()
    if card.tool_name:
        atoms.add(card.tool_name)
        for k, v in (card.arguments or {}).items():
            atoms |= critical_atoms(f"{k}={_fmt(v, cfg.arg_chars)}")
        if card.is_error:
            atoms |= critical_atoms(_error_text(card, cfg))
        elif card.result is not None:
            _, ids = summarize_result(card.result, cfg)
            for t in ids:
                atoms |= critical_atoms(t)
    else:
        atoms |= critical_atoms(card.raw_text)
    atoms |= set(card.meta.get("atoms", [])) if card.meta else set()
    return {a for a in atoms if a and "…" not in a}


def missing_atoms(card: Card, text: str, cfg: TemplateConfig | None = None) -> list[str]:
    """Required atoms of `card` that `text` lacks (case-insensitive substring check)."""
    low = " ".join(text.split()).lower()
    return sorted(a for a in required_atoms(card, cfg) if " ".join(a.split()).lower() not in low)


# ----------------------------------------------------------------------------- field-level, query-aware lines

@dataclass
class FieldConfig:
    """Limits of the field-level line (`field_compress`).

    Attributes:
        result_chars: soft limit of the non-identifier fields of a result (identifiers are kept beyond it).
        max_ids: most identifier values kept per result (in order of relevance to the query, then position).
        field_chars: longest result string value kept verbatim.
        depth: nesting depth the renderer descends into (deeper structures are shown as clipped JSON).
        focus: when the decision query names some records of a collection more closely than their siblings (the
            order line, the variant), the siblings are dropped whole, ids included — their values are the
            look-alikes a decision confuses with the one it needs. On the dev splits this removes 5–16 points of
            confuser values for 1–3 points of the gold's values (docs/runtime.md); False keeps every id.
        template: limits for everything that is not a JSON tool result (text cards, errors, arguments).
    """

    result_chars: int = 240
    max_ids: int = 40
    field_chars: int = 40
    depth: int = 6
    focus: bool = True
    template: TemplateConfig | None = None


_STOPWORDS = frozenset("the a an and or of to in on for with from by at is are was were be been it its this that my me "
                       "i you your we our us he she they them can could would will please want need just also have has "
                       "had do does did not no yes ok user assistant tool result what which who how when there here "
                       "so if as but about get".split())
_WORD = re.compile(r"[A-Za-z0-9]+")


def query_terms(text: str | None) -> set[str]:
    """Lower-cased word and number tokens of a decision query (≥ 2 characters, common words dropped)."""
    return {w for w in (t.lower() for t in _WORD.findall(text or "")) if len(w) >= 2 and w not in _STOPWORDS}


def id_shaped(value: Any) -> bool:
    """Whether a scalar looks like an identifier whatever its key: one token of 3–48 characters that holds a
    digit (`#W2378156`, `6992792935`, `credit_card_95`, `4OG6T3`, `2024-05-01`), is upper-case letters
    (`SDZQKO`, `JFK`), or holds `_` / `@` (`yusuf_rossi`, e-mail addresses). Numbers are values, not ids."""
    if not isinstance(value, str):
        return False
    s = value.strip()
    if not 3 <= len(s) <= 48 or any(ch.isspace() for ch in s):
        return False
    return bool(re.search(r"\d", s) or re.fullmatch(r"[A-Z]{3,8}", s) or "_" in s or "@" in s)


def _leaves(obj: Any, depth: int, path: tuple = ()) -> list[tuple[tuple, Any]]:
    """Every scalar of a JSON value with its path (dict keys and list indices); structures below `depth` are
    one leaf (their JSON)."""
    if isinstance(obj, dict) and obj and len(path) < depth:
        return [leaf for k, v in obj.items() for leaf in _leaves(v, depth, path + (str(k),))]
    if isinstance(obj, list) and obj and len(path) < depth:
        return [leaf for j, v in enumerate(obj) for leaf in _leaves(v, depth, path + (j,))]
    return [(path, obj)]


def _record_of(path: tuple, obj: Any) -> tuple:
    """The path of the record a leaf belongs to: its deepest ancestor that is one element of a collection (a
    list item, or a dict value that is itself a dict beside other dicts — `variants.{item_id}`, `payment_methods.{id}`)."""
    node, rec = obj, ()
    for i, step in enumerate(path[:-1]):
        parent = node
        node = parent[step] if isinstance(parent, list) else parent.get(step) if isinstance(parent, dict) else None
        if isinstance(parent, list) or (isinstance(parent, dict) and isinstance(node, dict)
                                        and sum(isinstance(v, dict) for v in parent.values()) >= 2):
            rec = path[: i + 1]
    return rec


def _render_pruned(obj: Any, keep: set[tuple], cfg: FieldConfig, path: tuple = ()) -> str | None:
    """Compact text of the kept leaves of `obj` (None when nothing under `path` is kept): `k=v`, `k{…}`,
    `k[…]`; a dict element keyed by its own id (`credit_card_7{id=credit_card_7}`) is written once."""
    if isinstance(obj, dict) and obj and len(path) < cfg.depth:
        parts = []
        for k, v in obj.items():
            if isinstance(v, dict) and v and len(path) + 1 < cfg.depth:
                # an element keyed by its own id (`variants{123{item_id=123, …}}`): the id is said once, as the key
                own = {path + (str(k), str(kk)) for kk, vv in v.items() if str(vv) == str(k)}
                sub = _render_pruned(v, keep - own, cfg, path + (str(k),))
                if sub is None and own & keep:
                    parts.append(_fmt(k, cfg.field_chars))
                elif sub is not None:
                    parts.append(f"{_fmt(k, cfg.field_chars)}{sub}")
                continue
            sub = _render_pruned(v, keep, cfg, path + (str(k),))
            if sub is None:
                continue
            parts.append(f"{k}{sub}" if isinstance(v, list) and v and len(path) + 1 < cfg.depth else f"{k}={sub}")
        if not parts:
            return None
        return "{" + ", ".join(parts) + "}" if path else ", ".join(parts)
    if isinstance(obj, list) and obj and len(path) < cfg.depth:
        parts = [s for j, v in enumerate(obj) if (s := _render_pruned(v, keep, cfg, path + (j,))) is not None]
        if not parts:
            return None
        parts = [p[1:-1] if p.startswith("{") and len(parts) == 1 else p for p in parts]
        more = len(obj) - len(parts)
        return "[" + ", ".join(parts + ([f"+{more} more"] if more else [])) + "]"
    return _fmt(obj, cfg.field_chars) if path in keep else None


def summarize_fields(result: Any, query: str | None = None, cfg: FieldConfig | None = None) -> str:
    """A field-level summary of a tool result that keeps what a decision can need.

    Every identifier-like value is kept wherever it sits — in an `*_id` field, in a list (`orders`,
    `reservations`), as a dict key's own id — up to `max_ids`; the other fields follow in order of their
    overlap with the decision `query` (the field's key and value, then the record it belongs to: the matching
    order line, the variant whose options the user named), shallow before deep, while `result_chars` lasts.
    With `focus`, records the query names less closely than a sibling are left out whole. Without a query the
    order is by depth and position and nothing is focused. "+N fields" says what was left out.
    """
    cfg = cfg or FieldConfig()
    if result is None:
        return ""
    if not isinstance(result, (dict, list)):
        return _fmt(result, cfg.result_chars) if not isinstance(result, str) else clip(result, cfg.result_chars)
    # empty values (null, "", [], {}) say nothing a decision can use
    leaves = [(p, v) for p, v in _leaves(result, cfg.depth) if p and v not in (None, "") and v != [] and v != {}]
    terms = query_terms(query)
    rec = {p: _record_of(p, result) for p, _ in leaves}
    rec_text: dict[tuple, set[str]] = {}
    if terms:
        for p, v in leaves:
            rec_text.setdefault(rec[p], set()).update(
                query_terms(" ".join(str(x) for x in p if isinstance(x, str)) + " " + str(v)))

    def relevance(p: tuple, v: Any) -> tuple[int, int]:
        if not terms:
            return 0, 0
        own = query_terms(f"{p[-1] if isinstance(p[-1], str) else ''} {v}")
        return len(terms & own), len(terms & rec_text.get(rec[p], set()))

    def is_id(p: tuple, v: Any) -> bool:
        key = next((x for x in reversed(p) if isinstance(x, str)), "")
        return (not isinstance(v, (dict, list)) and v not in (None, "")
                and (id_shaped(v) if not isinstance(v, (int, float)) else bool(_ID_KEY.search(key)))
                or (isinstance(v, str) and bool(_ID_KEY.search(key)) and len(v) <= cfg.field_chars))

    n_off = 0
    if cfg.focus and terms:
        # records beside one the query names more closely (the other order lines, the other variants) are dropped
        # whole, ids included: their values are the look-alikes a decision confuses with the one it needs
        score = {r: len(terms & t) for r, t in rec_text.items() if r}
        best: dict[tuple, int] = {}
        for r, sc in score.items():
            best[r[:-1]] = max(best.get(r[:-1], 0), sc)
        off = {r for r, sc in score.items() if best[r[:-1]] > sc}   # a sibling scores higher: ≥ 2 records there
        n_off = sum(1 for p, _ in leaves if rec[p] in off)
        leaves = [(p, v) for p, v in leaves if rec[p] not in off]
    order = {p: i for i, (p, _) in enumerate(leaves)}
    ranked = sorted(leaves, key=lambda pv: (tuple(-x for x in relevance(*pv)), len(pv[0]), order[pv[0]]))
    keep: set[tuple] = set()
    ids = [pv for pv in ranked if is_id(*pv)]
    keep.update(p for p, _ in ids[: cfg.max_ids])
    used, skipped = 0, len(ids[cfg.max_ids:]) + n_off
    for p, v in ranked:
        if p in keep or is_id(p, v):
            continue
        if isinstance(v, str) and v.lower() in _OK_STATUS and p[-1] in ("status", "success"):
            continue  # an "ok" status adds nothing to the ✓ mark
        cost = len(str(p[-1])) + len(_fmt(v, cfg.field_chars)) + 3
        if used + cost > cfg.result_chars:
            skipped += 1
            continue
        keep.add(p)
        used += cost
    text = _render_pruned(result, keep, cfg) or ""
    if skipped:
        text = f"{text}, +{skipped} fields" if text else f"+{skipped} fields"
    return text


def field_compress(card: Card, query: str | None = None, cfg: FieldConfig | None = None) -> str:
    """The field-level line of a card: like `template_compress`, but a successful tool result is summarised by
    `summarize_fields` (every id kept, other fields chosen by the decision query). Other cards: the template."""
    cfg = cfg or FieldConfig()
    return template_compress(card, cfg.template, summarize=lambda result: summarize_fields(result, query, cfg))
