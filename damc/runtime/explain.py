"""Explanations of a built context: which cards were kept or dropped, their scores, tokens saved, and why.

`Explanation` reads a `Context` (or the dict a store keeps for a session's last context) and renders a
plain-text report; `main(...)` behind `scripts/explain.py` explains either a stored session's last
context or one decision of an episode file (rebuilt in an in-memory `DecisionAwareMemory`).

Example:
    >>> print(memory.explain(ctx))
    context for session 'default': 14 candidates of 230 hot cards, 5 kept, 9 dropped
    tokens: 3,412 -> 611 (saved 2,801, 82 %); memory 143 / budget 4,894
    ...
"""

from __future__ import annotations

import argparse
import json
import logging
from dataclasses import dataclass
from typing import Any, Sequence

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

    def __str__(self) -> str:
        d = self.data
        before, after = d["tokens_before"], d["tokens_after"]
        pct = 100.0 * self.tokens_saved / before if before else 0.0
        lines = [
            f"context for session {d['session_id']!r} of {d.get('user_id', 'default')}"
            f"{'/' + d['agent_id'] if d.get('agent_id') else ''}: {d['n_candidates']} candidates of {d['n_hot']} "
            f"hot cards, "
            f"{len(self.kept)} kept, {len(self.dropped)} dropped",
            f"tokens: {before:,} -> {after:,} (saved {self.tokens_saved:,}, {pct:.0f} %); memory "
            f"{d['memory_tokens']:,} / budget {d['budget_tokens']:,}",
            "timings (ms): " + ", ".join(f"{k} {v:.1f}" for k, v in d["timings_ms"].items()),
            f"valuer {d.get('valuer', '?')}, selector {d.get('selector', '?')}",
        ]
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
    return "  [nce]" if card.get("note") == NOT_CROSS_ENCODED else ""


def explain_episode(path: str, index: int | None = None, episode_id: str | None = None, *,
                    memory_kwargs: dict[str, Any] | None = None) -> Explanation:
    """Explain the context DAMC would build for one decision of an episode file.

    Args:
        path: episode JSONL.
        index: message index of the decision (an assistant message; default: the last one).
        episode_id: which episode (default: the first).
        memory_kwargs: extra `DecisionAwareMemory` arguments (e.g. `scorer=...`).
    """
    from damc.data.episodes import decision_points, load_episodes
    from damc.runtime.memory import DecisionAwareMemory

    eps = load_episodes(path)
    ep = next((e for e in eps if e.episode_id == episode_id), None) if episode_id else eps[0]
    if ep is None:
        raise KeyError(f"no episode {episode_id!r} in {path}")
    dps = decision_points(ep)
    if not dps:
        raise ValueError(f"episode {ep.episode_id!r} has no decision points")
    dp = dps[-1] if index is None else next((d for d in dps if d.index == index), None)
    if dp is None:
        raise ValueError(f"message {index} of {ep.episode_id!r} is not a decision point; "
                         f"decisions: {[d.index for d in dps]}")
    with DecisionAwareMemory(None, session_id=ep.episode_id, **(memory_kwargs or {})) as mem:
        ctx = mem.build_context(dp.context, tools=ep.tools)
    exp = Explanation.from_context(ctx)
    exp.data["decision_id"] = dp.decision_id
    exp.data["key_card_ids"] = dp.key_card_ids
    return exp


def explain_store(path: str, session_id: str | None = None, user_id: str = "default",
                  agent_id: str | None = None) -> Explanation:
    """The last context a memory at `path` built for a scope's session (the scope's most recent one when None);
    another scope's contexts are never read."""
    from damc.runtime.scope import Scope
    from damc.runtime.storage import open_store

    scope = Scope(user_id, agent_id)
    with open_store(path) as store:   # a memory directory, a .db file or a postgresql:// URL
        data = store.last_context(session_id, scope)
    if data is None:
        raise LookupError(f"{getattr(store, 'where', None) or getattr(store, 'path', path)} has no recorded context "
                          f"for scope {scope}" +
                          (f" and session {session_id!r}" if session_id else ""))
    return Explanation(data)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """CLI: `explain.py store PATH [--session S]` or `explain.py episode FILE [--index K] [--episode ID]`."""
    ap = argparse.ArgumentParser(prog="explain.py", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    s = sub.add_parser("store", help="the last context of a stored session")
    s.add_argument("path", help="memory directory, .db file or postgresql:// URL")
    s.add_argument("--session", default=None)
    s.add_argument("--user", default="default", help="scope: user_id (default: 'default')")
    s.add_argument("--agent", default=None, help="scope: agent_id (default: none)")
    e = sub.add_parser("episode", help="a decision of an episode file")
    e.add_argument("path", help="episode JSONL")
    e.add_argument("--index", type=int, default=None, help="assistant message index (default: last)")
    e.add_argument("--episode", default=None, help="episode id (default: first)")
    e.add_argument("--scorer", default=None, help="exported scorer directory (default: heuristic prior)")
    e.add_argument("--context-window", type=int, default=8192)
    ap.add_argument("--json", action="store_true", help="print JSON instead of text")
    args = ap.parse_args(argv)
    if args.what == "store":
        exp = explain_store(args.path, args.session, args.user, args.agent)
    else:
        kw: dict[str, Any] = {"context_window": args.context_window}
        if args.scorer:
            kw["scorer"] = args.scorer
        exp = explain_episode(args.path, args.index, args.episode, memory_kwargs=kw)
    print(json.dumps(exp.data, indent=2, ensure_ascii=False) if args.json else exp)
    if exp.data.get("key_card_ids"):
        kept = {s["card_id"] for s in exp.kept}
        print("\nkey cards (evaluation metadata): " + ", ".join(
            f"{k} {'kept' if k in kept else 'NOT kept'}" for k in exp.data["key_card_ids"]))
    return exp.data
