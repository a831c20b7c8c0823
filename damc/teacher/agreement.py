"""How much two label sets agree: the noise ceiling of distillation.

A student can only match a teacher as well as the teacher's labels are reproducible. Labelling the
same decisions twice — with the same teacher in another precision (pure numerical noise) or with
another teacher — and comparing the deltas card by card gives that ceiling: per-decision Spearman,
NDCG@5 and top-1 agreement, on the decisions and cards both sets labelled.

Example:
    >>> from damc.teacher.agreement import label_agreement
    >>> label_agreement("artifacts/labels/syn_train", "artifacts/labels/dev12_fp32")["spearman"]["mean"]
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np


def paired_decisions(a: str | os.PathLike, b: str | os.PathLike) -> list[dict[str, Any]]:
    """Decisions labelled in both sets, with the deltas of the cards both labelled, in card order.

    Returns:
        `[{"decision_id", "card_ids", "a", "b"}]` (lists of equal length ≥ 2).

    Raises:
        ValueError: the two sets share no decision with two or more common cards.
    """
    from damc.labels import group_decisions, load_labels

    da = {d.decision_id: d for d in group_decisions(load_labels(a))}
    out = []
    for d in group_decisions(load_labels(b)):
        other = da.get(d.decision_id)
        if other is None:
            continue
        amap = dict(zip(other.card_ids, other.deltas))
        common = [(cid, amap[cid], x) for cid, x in zip(d.card_ids, d.deltas) if cid in amap]
        if len(common) >= 2:
            out.append({"decision_id": d.decision_id, "card_ids": [c[0] for c in common],
                        "a": [c[1] for c in common], "b": [c[2] for c in common]})
    if not out:
        raise ValueError(f"{a} and {b} share no decision with ≥ 2 commonly labelled cards; label the same "
                         f"episodes with the same per_episode/sample_seed/max_cards settings")
    return out


def label_agreement(a: str | os.PathLike, b: str | os.PathLike, seed: int = 0) -> dict[str, Any]:
    """Agreement of label set `b` with label set `a` on their common decisions.

    Returns:
        `{"n_decisions", "spearman", "ndcg@5", "top1"}`, each metric summarised (mean/median with
        bootstrap CIs) as in `damc.ranking.summarize_values`; `top1` = both put the same card first.
    """
    from damc.ranking import ndcg_at_k, spearman
    from damc.ranking import summarize_values as summarize

    pairs = paired_decisions(a, b)
    rho = [spearman(p["b"], p["a"]) for p in pairs]
    ndcg = [ndcg_at_k(p["b"], p["a"]) for p in pairs]
    top1 = [float(int(np.argmax(p["a"])) == int(np.argmax(p["b"]))) for p in pairs]
    return {"n_decisions": len(pairs), "spearman": summarize(rho, seed), "ndcg@5": summarize(ndcg, seed),
            "top1": summarize(top1, seed)}
