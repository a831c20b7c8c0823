"""Compression: one short, faithful line per selected card, tagged with its `[card_id]`.

Templates come first (deterministic, no model):

    ✓ get_weather(city=Beijing, date="2023-10-28") → weather=sunny, temp_max=22
    ✗ get_order(order_id=88412) failed: 500 Internal Server Error
    user: Actually ship it to the Berlin office instead.

A template always keeps the tool name, the (short) arguments, the status, the error code and message,
and every identifier-like field of a JSON result (keys such as `id`, `*_id`, `code`, `name`, `path`,
`email`, `status`); other short fields follow while room lasts, long strings are truncated with "…",
lists show their first items and "+N more".

`LLMCompressor` asks a chat model for the seed's decision-focused one-liner and **rejects** it —
falling back to the template — when it drops any of the card's required atoms (`required_atoms`: the
tool name plus `damc.cards.critical_atoms` of what the template keeps: arguments, error code/message,
ids) or is not shorter than the template.

Example:
    >>> template_compress(card)
    '✗ get_order(order_id=88412) failed: 500 Internal Server Error'
    >>> [c.line for c in TemplateCompressor().compress(cards)]
    ['[ep1:2:0] ✗ get_order(order_id=88412) failed: 500 Internal Server Error']
"""

from __future__ import annotations

import json
import logging
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from damc.cards import Card, critical_atoms

logger = logging.getLogger(__name__)


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


def _clip(s: str, n: int) -> str:
    s = " ".join(str(s).split())
    return s if len(s) <= n else s[: max(1, n - 1)] + "…"


def _fmt(v: Any, n: int) -> str:
    """A value as short text: simple strings unquoted, others JSON; long strings clipped."""
    if isinstance(v, str):
        s = _clip(v, n)
        return s if _SIMPLE.match(s) else json.dumps(s, ensure_ascii=False)
    if isinstance(v, (dict, list)):
        return _clip(json.dumps(v, ensure_ascii=False), n)
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
        return _clip(result, cfg.result_chars), []
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
        m = _clip(str(msg), cfg.error_chars)
        if not parts or not m.startswith(parts[0]):
            parts.append(m)
        else:
            parts = [m]
    return " ".join(parts) or "error"


def _text_with_atoms(text: str, n: int) -> tuple[str, list[str]]:
    """Clip text to n chars; atoms cut off are appended in parentheses so none is lost."""
    full = " ".join(str(text).split())
    clipped = _clip(full, n)
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


@dataclass
class Compressed:
    """One compressed card.

    Attributes:
        card_id: the card.
        text: the compressed text (one line, no tag).
        source: "template", "llm" or "raw".
        rejected: why an LLM output was rejected (None when accepted or not tried).
        missing: the required atoms a rejected output dropped.
    """

    card_id: str
    text: str
    source: str = "template"
    rejected: str | None = None
    missing: list[str] = field(default_factory=list)

    @property
    def line(self) -> str:
        """`[card_id] text` — the line that goes into the "Relevant history" section."""
        return f"[{self.card_id}] {self.text}"


class Compressor(ABC):
    """Compresses cards into tagged lines. Subclasses implement `compress` (and `preview` when their lines
    are not the templates)."""

    name: str = "compressor"

    @abstractmethod
    def compress(self, cards: Sequence[Card], query: str | None = None) -> list[Compressed]:
        """One `Compressed` per card, in order."""

    def preview(self, cards: Sequence[Card]) -> list[str]:
        """The text each card will take in the prompt (or an upper bound), cheaply: what the selector's token
        costs are counted on before anything is compressed. Default: the template."""
        return [template_compress(c) for c in cards]


class TemplateCompressor(Compressor):
    """Per-kind templates (see module docstring)."""

    name = "template"

    def __init__(self, config: TemplateConfig | None = None):
        self.config = config or TemplateConfig()

    def compress(self, cards: Sequence[Card], query: str | None = None) -> list[Compressed]:
        return [Compressed(c.card_id, text) for c, text in zip(cards, self.preview(cards))]

    def preview(self, cards: Sequence[Card]) -> list[str]:
        return [template_compress(c, self.config) for c in cards]


class RawCompressor(Compressor):
    """No compression: each kept card goes into the prompt as its raw text (the call and its full result, or
    the message), on one `[card_id]` line — the `render=raw` arm of the A/B harness.

    Args:
        max_chars: clip each line to this many characters (None: never).
    """

    name = "raw"

    def __init__(self, max_chars: int | None = None):
        self.max_chars = max_chars

    def compress(self, cards: Sequence[Card], query: str | None = None) -> list[Compressed]:
        return [Compressed(c.card_id, text, "raw") for c, text in zip(cards, self.preview(cards))]

    def preview(self, cards: Sequence[Card]) -> list[str]:
        texts = [" ".join(c.raw_text.split()) for c in cards]
        return [_clip(t, self.max_chars) for t in texts] if self.max_chars else texts


COMPRESS_PROMPT = ("Compress this tool-call record into the most concise statement, highlighting: 1. which tool "
                   "was called, 2. the key inputs and outputs, 3. the result status (success / failure / "
                   "exception), 4. the implication for next steps, if any. Keep every id, number and error code "
                   "exactly. Avoid any other detail. Answer with one line.\n\nRecord:\n{record}")


class LLMCompressor(Compressor):
    """The seed's decision-focused LLM compression, guarded by the card's required atoms.

    Args:
        model: chat causal LM (registry name / HF id / path) used when `generate` is None.
        generate: alternatively, any `list[prompt text] -> list[completion]` function (an API, a fake).
        max_new_tokens: generation length.
        min_chars: cards whose template is shorter than this are not sent to the LLM.
        record_chars: longest raw record shown to the LLM.
        batch_size: prompts per generate call.
        template: the fallback (and length reference).
    """

    name = "llm"

    def __init__(self, model: str = "smollm2-135m", generate: Callable[[list[str]], list[str]] | None = None,
                 max_new_tokens: int = 64, min_chars: int = 0, record_chars: int = 800, batch_size: int = 8,
                 template: TemplateCompressor | None = None, dtype: str = "auto"):
        self.model_spec, self.generate_fn = model, generate
        self.max_new_tokens, self.min_chars, self.record_chars = max_new_tokens, min_chars, record_chars
        self.batch_size, self.dtype = batch_size, dtype
        self.template = template or TemplateCompressor()
        self._model: Any = None
        self._tok: Any = None
        self.stats = {"accepted": 0, "rejected": 0, "skipped": 0}

    def prompt(self, card: Card) -> str:
        return COMPRESS_PROMPT.format(record=_clip(card.raw_text, self.record_chars))

    def _generate(self, prompts: list[str]) -> list[str]:
        if self.generate_fn is not None:
            return list(self.generate_fn(prompts))
        import torch

        from damc.prompting import format_prompt

        if self._model is None:
            from damc.models import load_causal_lm

            self._model, self._tok = load_causal_lm(self.model_spec, dtype=self.dtype, device="cpu")
        tok, model = self._tok, self._model
        outs: list[str] = []
        for b in range(0, len(prompts), self.batch_size):
            texts = [format_prompt(tok, [{"role": "user", "content": p}]) for p in prompts[b:b + self.batch_size]]
            rows = [tok.encode(t, add_special_tokens=False) for t in texts]
            width = max(len(r) for r in rows)
            pad = tok.pad_token_id if tok.pad_token_id is not None else 0
            ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows])
            attn = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
            with torch.no_grad():
                gen = model.generate(input_ids=ids, attention_mask=attn, max_new_tokens=self.max_new_tokens,
                                     do_sample=False, pad_token_id=pad)
            outs += [tok.decode(g[width:], skip_special_tokens=True) for g in gen]
        return outs

    @staticmethod
    def _clean(text: str, card_id: str) -> str:
        lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
        s = lines[0] if lines else ""
        s = s.removeprefix(f"[{card_id}]").strip()
        return " ".join(s.split())

    def preview(self, cards: Sequence[Card]) -> list[str]:
        return self.template.preview(cards)   # an accepted LLM line is shorter than its template

    def compress(self, cards: Sequence[Card], query: str | None = None) -> list[Compressed]:
        base = self.template.compress(cards, query)
        todo = [i for i, c in enumerate(base) if len(c.text) >= self.min_chars]
        self.stats["skipped"] += len(cards) - len(todo)
        if not todo:
            return base
        outs = self._generate([self.prompt(cards[i]) for i in todo])
        for i, raw in zip(todo, outs):
            text = self._clean(raw, cards[i].card_id)
            missing = missing_atoms(cards[i], text, self.template.config)
            if not text:
                reason = "empty output"
            elif missing:
                reason = "dropped critical atoms"
            elif len(text) >= len(base[i].text):
                reason = "not shorter than the template"
            else:
                base[i] = Compressed(cards[i].card_id, text, "llm")
                self.stats["accepted"] += 1
                continue
            self.stats["rejected"] += 1
            logger.debug("LLM compression of %s rejected (%s): %r", cards[i].card_id, reason, text)
            base[i] = Compressed(cards[i].card_id, base[i].text, "template", reason, missing)
        return base
