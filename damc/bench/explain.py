"""Explanations of a built context (kept and dropped cards, scores, tokens saved, why): a stored session's last one,
or the one DAMC builds for a decision of an episode file (`scripts/explain.py`; `damc inspect STORE` adds the cards).

The report itself is `damc.runtime.explain.Explanation`; this module finds what to explain (a store on disk, or
an episode file replayed into an in-memory `DecisionAwareMemory`) and is the command line around it.

Example:
    $ python scripts/explain.py episode data/samples/bfcl_sample.jsonl --index 5
    $ python scripts/explain.py store runs/memory --session s1
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Sequence

from damc.runtime.explain import Explanation


def explain_episode(path: str, index: int | None = None, episode_id: str | None = None, *,
                    memory_kwargs: dict[str, Any] | None = None) -> Explanation:
    """Explain the context DAMC would build for one decision of an episode file.

    Args:
        path: episode JSONL.
        index: message index of the decision (an assistant message; default: the last one).
        episode_id: which episode (default: the first).
        memory_kwargs: extra `DecisionAwareMemory` arguments (e.g. `scorer=...`).
    """
    from damc.episodes import decision_points, load_episodes
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
    ap = argparse.ArgumentParser(prog="explain.py", description=" ".join(__doc__.split("\n\n")[0].split()))
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


def inspect_store(argv: Sequence[str]) -> int:
    """`damc inspect STORE`: counts per scope and session, the newest cards, the last context's explanation."""
    import json
    from collections import Counter
    from pathlib import Path

    from damc.cli import INSPECT_SUMMARY
    from damc.runtime.scope import Scope
    from damc.runtime.store import CardStore

    ap = argparse.ArgumentParser(prog="damc inspect", description=INSPECT_SUMMARY)
    ap.add_argument("store", metavar="STORE", help="memory directory (cards.db inside) or a .db file")
    ap.add_argument("--user", default=None, help="scope's user_id (default: the only scope, else 'default')")
    ap.add_argument("--agent", default=None, help="scope's agent_id (default: none)")
    ap.add_argument("--session", default=None, help="session of the context to explain (default: the latest)")
    ap.add_argument("--cards", type=int, default=10, help="newest cards listed (default: 10)")
    ap.add_argument("--json", action="store_true", help="print JSON instead of text")
    a = ap.parse_args(argv)
    path = Path(a.store)
    db = path if path.suffix in (".db", ".sqlite", ".sqlite3") else path / "cards.db"
    if not db.exists():
        print(f"damc inspect: no DAMC store at {db} (a directory written by DecisionAwareMemory(path))",
              file=sys.stderr)
        return 2
    with CardStore(db) as store:
        cards = store.all_cards(tier=None)
    scopes = Counter((c.scope.user_id, c.scope.agent_id) for c in cards)
    sessions = Counter((c.scope.user_id, c.scope.agent_id, c.session_id) for c in cards)
    if a.user is None and len(scopes) == 1:
        scope = Scope(*next(iter(scopes)))
    else:
        scope = Scope(a.user or "default", a.agent)
    try:
        explanation: Any = explain_store(str(db), a.session, scope.user_id, scope.agent_id)
    except LookupError as e:
        explanation = None
        why = str(e)
    newest = cards[::-1][: a.cards]
    if a.json:
        print(json.dumps({"store": str(db), "cards": len(cards), "tiers": dict(Counter(c.tier for c in cards)),
                          "scopes": [{"user_id": u, "agent_id": g, "cards": n} for (u, g), n in scopes.items()],
                          "sessions": [{"user_id": u, "agent_id": g, "session_id": s, "cards": n}
                                       for (u, g, s), n in sessions.items()],
                          "newest": [{"card_id": c.card.card_id, "session_id": c.session_id, "kind": c.card.kind,
                                      "tier": c.tier, "text": c.card.raw_text} for c in newest],
                          "last_context": explanation.data if explanation is not None else None},
                         indent=2, ensure_ascii=False, default=str))
        return 0
    tiers = Counter(c.tier for c in cards)
    print(f"{db}: {len(cards)} cards ({', '.join(f'{n} {t}' for t, n in sorted(tiers.items())) or 'none'}), "
          f"{len(scopes)} scope(s), {len(sessions)} session(s)")
    for (u, g), n in sorted(scopes.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")):
        per = ", ".join(f"{s} ({m})" for (su, sg, s), m in sessions.items() if (su, sg) == (u, g))
        print(f"  user={u} agent={g or '-'}: {n} cards; sessions: {per}")
    if newest:
        print(f"\nnewest cards ({len(newest)} of {len(cards)}):")
        for c in newest:
            text = " ".join(c.card.raw_text.split())
            print(f"  {c.card.card_id:<24} {c.session_id:<12} {c.card.kind:<11} {c.tier:<4} "
                  f"{text[:70] + ('…' if len(text) > 70 else '')}")
    print(f"\nlast context (user={scope.user_id} agent={scope.agent_id or '-'}):")
    print(explanation if explanation is not None else f"  none recorded: {why}")
    return 0
