"""Memory lifecycle: archive long-low-value cards to the cold tier, merge near-duplicate cards.

Both work on a `DecisionAwareMemory` (its store and FAISS index) and are exposed as its methods
`memory.archive(...)` and `memory.merge_similar(...)`. Cold cards stay expandable (`memory.expand`) but are
never retrieved; a merged card keeps every id, number and error code of the cards it replaces.
Both act on one scope (`damc.runtime.scope.Scope`) and never read or merge another's cards; merging stays
within a session unless the memory shares sessions (a merged card must not carry one conversation into another).

Example:
    >>> memory.archive(min_age_s=7 * 86400, max_value=0.2)
    >>> memory.merge_similar(threshold=0.92)
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from damc.cards import Card, critical_atoms
from damc.runtime.scope import DEFAULT_SCOPE, Scope
from damc.templates import required_atoms

logger = logging.getLogger(__name__)


def archive(memory: Any, min_age_s: float = 7 * 86400, max_value: float = 0.2, *, keep_pinned: bool = True,
            now: float | None = None, scope: Scope = DEFAULT_SCOPE) -> list[str]:
    """Move a scope's cards older than `min_age_s` whose best value so far is ≤ `max_value` (never valued counts
    as 0) to the cold tier and out of the FAISS index. Returns the archived card ids."""
    now = time.time() if now is None else now
    ids = [cid for cid, t, vmax, pinned in memory.store.lifecycle_rows("hot", scope)
           if now - t >= min_age_s and (vmax or 0.0) <= max_value and not (keep_pinned and pinned)]
    memory.store.set_tier(ids, "cold", now, scope=scope, event="archive",
                          detail={"min_age_s": min_age_s, "max_value": max_value})
    if ids and memory.index.ntotal:
        memory.index.sync()
    logger.info("archived %d cards", len(ids))
    return ids


def merge_similar(memory: Any, threshold: float = 0.92, *, neighbors: int = 16, scope: Scope = DEFAULT_SCOPE,
                  share_sessions: bool = False) -> list[Card]:
    """Merge a scope's near-duplicate hot cards (cosine ≥ `threshold`, same kind and tool; same session unless
    `share_sessions`) into one card each.

    The merged card is the newest member with `meta["merged_from"]` and `meta["atoms"]` (the union
    of every member's `critical_atoms` and required atoms; its raw text and template line carry them all); the members
    move to the cold tier. Returns the new cards.
    """
    memory.index.sync()
    hot = memory.store.all_cards("hot", scope)
    if len(hot) < 2:
        return []
    by_row = {sc.rowid: sc for sc in hot}
    rowids = [sc.rowid for sc in hot]
    vecs = memory.index.vectors_for([(sc.rowid, sc.seq) for sc in hot])
    parent = {r: r for r in rowids}

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for i, r in enumerate(rowids):
        ids, sims = memory.index.search(vecs[i], neighbors, scope, None if share_sessions else by_row[r].session_id)
        a = by_row[r].card
        for r2, s in zip(ids, sims):
            r2 = int(r2)
            if r2 == r or s < threshold or r2 not in by_row:  # by_row holds this scope's hot cards only
                continue
            b = by_row[r2].card
            if a.kind == b.kind and a.tool_name == b.tool_name:
                parent[find(r)] = find(r2)
    clusters: dict[int, list[int]] = {}
    for r in rowids:
        clusters.setdefault(find(r), []).append(r)
    merged: list[Card] = []
    for members in clusters.values():
        if len(members) < 2:
            continue
        scs = sorted((by_row[r] for r in members), key=lambda sc: (sc.t, sc.rowid))
        newest = scs[-1]
        atoms: set[str] = set()
        sources: list[str] = []
        for sc in scs:
            atoms |= required_atoms(sc.card) | critical_atoms(sc.card.raw_text)
            sources += sc.card.meta.get("merged_from", [sc.card.card_id]) if sc.card.meta else [sc.card.card_id]
        base = Card.from_dict(json.loads(json.dumps(newest.card.to_dict())))
        missing = sorted(a for a in atoms if a not in base.raw_text)
        base.card_id = f"{newest.card.card_id}+merged{len(scs)}"
        if missing:
            base.raw_text += f" [merged with {len(scs) - 1} similar: also " + ", ".join(missing) + "]"
        base.meta = {**(base.meta or {}), "merged_from": sources, "atoms": sorted(atoms)}
        base.n_tokens = memory.count_tokens(base.raw_text)
        memory.store.merge_cards(base, newest.session_id, any(sc.pinned for sc in scs),
                                 [sc.card.card_id for sc in scs], scope=scope)  # one transaction, with history events
        merged.append(base)
    if merged:
        memory.index.sync()
    logger.info("merged %d clusters", len(merged))
    return merged
