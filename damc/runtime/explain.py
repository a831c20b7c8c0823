"""Explanations of a built context: which cards were kept or dropped, their scores, tokens saved, and why.

`Explanation` reads a `Context` (or the dict a store keeps for a session's last context) and renders a
plain-text report. It never imports the memory (the memory imports it); the CLI behind `scripts/explain.py`
(a stored session's last context, or one decision of an episode file) is `damc.bench.explain`.

Example:
    >>> print(memory.explain(ctx))
    context for session 'default' (user 'default'): 14 candidates of 230 hot cards, 5 kept, 9 dropped
    tokens: 3,412 -> 611 (saved 2,801, 82 %); memory 143 / budget 4,894

A card marked `[floor]` was below the selector's threshold τ and kept only because the floor keeps the best
`k_min` cards whatever τ says (`damc.runtime.select.Threshold`): "floor: below threshold τ=0.05, kept as one of
the best k_min=4".

On a short chat the fenced memory message (its header and note included) can be longer than the history it
replaces; the tokens line then says what was added ("added 48, +38 %: ...") instead of a negative saving.
    ...
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from damc.runtime.valuers.base import NOT_CROSS_ENCODED

logger = logging.getLogger(__name__)

REASONS = {
    "budget": "did not fit the token budget",
    "below_threshold": "value below the selector's threshold",
    "rank": "beyond the selector's top-k",
    "not_retrieved": "not among the candidates (not similar, recent or pinned)",
}
NOTES = {   # `SelectedCard.note` / `DroppedCard.note`: how a candidate was valued, when not fully
    NOT_CROSS_ENCODED: "not cross-encoded: below the cascade's `max_scored` by BM25 + cosine, valued from them alone",
}


@dataclass
class Explanation:
    """Kept vs dropped cards of one context (see `from_context`).

    Attributes:
        data: the context as a dict (`Context.to_dict()`).
    """

    data: dict[str, Any]

    @classmethod
    def from_context(cls, context: Any) -> "Explanation":
        return cls(context if isinstance(context, dict) else context.to_dict())

    @property
    def kept(self) -> list[dict[str, Any]]:
        return self.data["selected"]

    @property
    def dropped(self) -> list[dict[str, Any]]:
        return self.data["dropped"]

    @property
    def not_retrieved(self) -> int:
        """Hot cards that were never candidates."""
        return max(0, self.data["n_hot"] - self.data["n_candidates"])

    @property
    def tokens_saved(self) -> int:
        return self.data["tokens_before"] - self.data["tokens_after"]

    @property
    def floor(self) -> list[str]:
        """Kept cards below the selector's threshold τ, kept by its floor as one of the best `k_min`."""
        return [c["card_id"] for c in self.kept if c.get("kept_by") == "floor"]

    def floor_reason(self) -> str:
        """Why the floor's cards were kept, with τ and `k_min` ("floor: below threshold τ=…, kept as one of the
        best k_min=…")."""
        tau, k_min = self.data.get("threshold"), self.data.get("k_min", 0)
        tau_s = "τ" if tau is None else f"τ={tau:.4g}"
        return f"floor: below threshold {tau_s}, kept as one of the best k_min={k_min}"

    @property
    def not_cross_encoded(self) -> list[str]:
        """Candidates (kept or dropped) the scorer never read: a cascade valued them from BM25 + cosine alone."""
        return [c["card_id"] for c in self.kept + self.dropped if c.get("note") == NOT_CROSS_ENCODED]

    def reasons(self) -> dict[str, int]:
        """How many cards were dropped for each reason (including "not_retrieved")."""
        out: dict[str, int] = {}
        for d in self.dropped:
            out[d["reason"]] = out.get(d["reason"], 0) + 1
        if self.not_retrieved:
            out["not_retrieved"] = self.not_retrieved
        return out

    def tokens_line(self) -> str:
        """Tokens before → after, with what was saved — or, when the context grew, what was added and why."""
        d = self.data
        before, after, saved = d["tokens_before"], d["tokens_after"], self.tokens_saved
        pct = 100.0 * abs(saved) / before if before else 0.0
        change = (f"saved {saved:,}, {pct:.0f} %" if saved >= 0 else
                  f"added {-saved:,}, +{pct:.0f} %: the memory message is longer than the history it replaces")
        return (f"tokens: {before:,} -> {after:,} ({change}); memory {d['memory_tokens']:,} / budget "
                f"{d['budget_tokens']:,}")

    def __str__(self) -> str:
        d = self.data
        scope = f"user {d.get('user_id', 'default')!r}" + (f", agent {d['agent_id']!r}" if d.get("agent_id") else "")
        lines = [
            f"context for session {d['session_id']!r} ({scope}): {d['n_candidates']} candidates of {d['n_hot']} "
            f"hot cards, {len(self.kept)} kept, {len(self.dropped)} dropped",
            self.tokens_line(),
            "timings (ms): " + ", ".join(f"{k} {v:.1f}" for k, v in d["timings_ms"].items()),
            f"valuer {d.get('valuer', '?')}, selector {d.get('selector', '?')}" + _selector_params(d),
        ]
        if self.floor:
            lines.append(f"{len(self.floor)} of {len(self.kept)} kept cards marked [floor]: "
                         f"{self.floor_reason().removeprefix('floor: ')}")
        if self.not_cross_encoded:
            lines.append(f"{len(self.not_cross_encoded)} of {d['n_candidates']} candidates marked [nce]: "
                         f"{NOTES[NOT_CROSS_ENCODED]}")
        lines += [
            "",
            "KEPT (prompt order)        value  score  tokens(raw)  via",
        ]
        for s in self.kept:
            lines.append(f"  {s['card_id']:<24} {s['value']:5.2f}  {s['score']:5.2f}  {s['tokens']:>4}({s['raw_tokens']:>4})"
                         f"  {'+'.join(s['retrieved_by'])}{'  [llm]' if s.get('source') == 'llm' else ''}"
                         f"{_mark(s)}")
            lines.append(f"      {s['text']}")
        lines += ["", "DROPPED (best first)       value  score  tokens  why"]
        for x in self.dropped:
            lines.append(f"  {x['card_id']:<24} {x['value']:5.2f}  {x['score']:5.2f}  {x['tokens']:>6}  "
                         f"{REASONS.get(x['reason'], x['reason'])} (via {'+'.join(x['retrieved_by'])}){_mark(x)}")
        if self.not_retrieved:
            lines.append(f"  ... and {self.not_retrieved} hot cards {REASONS['not_retrieved']}")
        return "\n".join(lines)


def _mark(card: dict[str, Any]) -> str:
    return ("  [nce]" if card.get("note") == NOT_CROSS_ENCODED else "") + \
        ("  [floor]" if card.get("kept_by") == "floor" else "")


def _selector_params(d: dict[str, Any]) -> str:
    """" (τ=…, floor k_min=…)" for a threshold selector; "" otherwise (and for contexts stored before)."""
    if d.get("threshold") is None:
        return ""
    return f" (τ={d['threshold']:.4g}, floor k_min={d.get('k_min', 0)})"
