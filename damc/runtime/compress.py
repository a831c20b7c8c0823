"""Compression: one `[card_id]`-tagged line per selected card — templates first, an LLM second.

`TemplateCompressor` writes each card with its template (`damc.templates.template_compress`: deterministic,
no model, keeps tool name, arguments, status, error code and ids). `RawCompressor` writes the raw card
instead (the `render=raw` arm of the A/B harness). `FieldCompressor` writes a tool result field by field
(`damc.templates.field_compress`): every identifier-like value kept wherever it sits (the template keeps only
`*_id`-keyed fields and the first items of a list, so an `orders` or `reservations` list loses the very id the
next call needs), other fields chosen by their overlap with the decision query (`render=fields`). `LLMCompressor` asks a chat model for the seed's
decision-focused one-liner and **rejects** it — falling back to the template — when it drops any of the
card's required atoms (`damc.templates.required_atoms`) or is not shorter than the template.

Example:
    >>> [c.line for c in TemplateCompressor().compress(cards)]
    ['[ep1:2:0] ✗ get_order(order_id=88412) failed: 500 Internal Server Error']
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from damc.cards import Card
from damc.templates import FieldConfig, TemplateConfig, clip, field_compress, missing_atoms, template_compress

logger = logging.getLogger(__name__)


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

    def preview(self, cards: Sequence[Card], query: str | None = None) -> list[str]:
        """The text each card will take in the prompt (or an upper bound), cheaply: what the selector's token
        costs are counted on before anything is compressed (`query`: the decision query, for compressors that
        read it). Default: the template."""
        return [template_compress(c) for c in cards]


class TemplateCompressor(Compressor):
    """Per-kind templates (see module docstring)."""

    name = "template"

    def __init__(self, config: TemplateConfig | None = None):
        self.config = config or TemplateConfig()

    def compress(self, cards: Sequence[Card], query: str | None = None) -> list[Compressed]:
        return [Compressed(c.card_id, text) for c, text in zip(cards, self.preview(cards))]

    def preview(self, cards: Sequence[Card], query: str | None = None) -> list[str]:
        return [template_compress(c, self.config) for c in cards]


class FieldCompressor(Compressor):
    """Field-level, query-aware lines (`damc.templates.field_compress`): tool results keep every identifier
    (up to `FieldConfig.max_ids`) and the fields that overlap the decision query, within
    `FieldConfig.result_chars`; with `FieldConfig.focus` (default) the records a decision query names less closely
    than a sibling are left out. Text cards and errors keep their template. Measured against the template
    (longer lines, the gold's values kept, look-alikes): docs/runtime.md, "Field lines"."""

    name = "fields"

    def __init__(self, config: FieldConfig | None = None):
        self.config = config or FieldConfig()

    def compress(self, cards: Sequence[Card], query: str | None = None) -> list[Compressed]:
        return [Compressed(c.card_id, text, "fields") for c, text in zip(cards, self.preview(cards, query))]

    def preview(self, cards: Sequence[Card], query: str | None = None) -> list[str]:
        return [field_compress(c, query, self.config) for c in cards]


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

    def preview(self, cards: Sequence[Card], query: str | None = None) -> list[str]:
        texts = [" ".join(c.raw_text.split()) for c in cards]
        return [clip(t, self.max_chars) for t in texts] if self.max_chars else texts


COMPRESSORS: dict[str, type[Compressor]] = {"template": TemplateCompressor, "fields": FieldCompressor, "raw": RawCompressor}


COMPRESS_PROMPT = ("Compress this tool-call record into the most concise statement, highlighting: 1. which tool "
                   "was called, 2. the key inputs and outputs, 3. the result status (success / failure / "
                   "exception), 4. the implication for next steps, if any. Keep every id, number and error code "
                   "exactly. Avoid any other detail. Answer with one line.\n\nRecord:\n{record}")


class LLMCompressor(Compressor):
    """The seed's decision-focused LLM compression, guarded by the card's required atoms.

    Args:
        model: chat causal LM (registry name / HF id / path) used when `generate` is None; it runs through
            `damc.llm.LocalLLM` (greedy, left-padded batches).
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
        self._llm: Any = None   # damc.llm.LocalLLM, loaded on first use
        self.stats = {"accepted": 0, "rejected": 0, "skipped": 0}

    def prompt(self, card: Card) -> str:
        return COMPRESS_PROMPT.format(record=clip(card.raw_text, self.record_chars))

    def _generate(self, prompts: list[str]) -> list[str]:
        if self.generate_fn is not None:
            return list(self.generate_fn(prompts))
        if self._llm is None:   # the one local backend, loaded once on the CPU
            from damc.extras import requires
            from damc.llm import LocalLLM

            with requires("the LLM compressor's local model (pass generate_fn to use any other LLM)"):
                import torch  # noqa: F401

            self._llm = LocalLLM(self.model_spec, dtype=self.dtype, device="cpu", batch_size=self.batch_size)
        return self._llm.generate_many([[{"role": "user", "content": p}] for p in prompts], self.max_new_tokens)

    @staticmethod
    def _clean(text: str, card_id: str) -> str:
        lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
        s = lines[0] if lines else ""
        s = s.removeprefix(f"[{card_id}]").strip()
        return " ".join(s.split())

    def preview(self, cards: Sequence[Card], query: str | None = None) -> list[str]:
        return self.template.preview(cards, query)   # an accepted LLM line is shorter than its template

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
