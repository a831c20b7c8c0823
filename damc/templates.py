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
from typing import Any

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


def template_compress(card: Card, cfg: TemplateConfig | None = None) -> str:
    """One faithful line for a card (no `[card_id]` tag; see `Compressed.line`)."""
    cfg = cfg or TemplateConfig()
    line = _template_line(card, cfg)
    extra = [a for a in card.meta.get("atoms", []) if a not in line] if card.meta else []
    # a merged card (`DecisionAwareMemory.merge_similar`) keeps every atom of the cards it replaced
    return line + (" (also: " + ", ".join(extra) + ")" if extra else "")


def _template_line(card: Card, cfg: TemplateConfig) -> str:
    if card.tool_name:
        call = f"{card.tool_name}({render_args(card.arguments, cfg)})"
        if card.status is None and card.result is None:
            return f"{PENDING_MARK} {call} → (no result yet)"
        if card.is_error:
            return f"{ERR_MARK} {call} failed: {_error_text(card, cfg)}"
        summary, _ = summarize_result(card.result, cfg)
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
