"""A teacher ensemble from label sets: average several teachers' counterfactual labels card by card.

Two small teachers agree only moderately on which card matters (docs/teacher.md: SmolLM2-135M vs
Gemma-3-270M, per-decision Spearman 0.52); part of each one's deltas is its own noise. The ensemble
teacher scores an action by the mean of the members' log-probs (a product of experts: the geometric
mean of their probabilities), so its leave-one-out delta is exactly the mean of the members' deltas.
`merge_labels` writes those rows as an ordinary label directory that `scripts/train.py` trains on.

Only (decision, card) pairs every member labelled are kept; the members must agree on the estimator
and on the rendered decision/card texts (same data, `per_episode`, `sample_seed`, `max_cards`,
`max_card_tokens` and render version), which is checked.

Example:
    >>> merge_labels(["labels/smollm2", "labels/gemma"], "labels/ensemble")["rows"]
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Sequence

MEAN_COLUMNS = ("logp_full", "logp_without", "delta")


def _normalized_weights(n_inputs: int, weights: Sequence[float] | None) -> list[float]:
    """One weight per input, summing to 1 (equal weights when `weights` is None)."""
    w = [1.0] * n_inputs if weights is None else [float(x) for x in weights]
    if len(w) != n_inputs or any(x < 0 for x in w) or sum(w) <= 0:
        raise ValueError(f"weights must be {n_inputs} non-negative numbers with a positive sum, got {weights}")
    return [x / sum(w) for x in w]


def _load_rows(path: str | os.PathLike) -> dict[tuple[str, str], dict[str, Any]]:
    """The rows of one label set by `(decision_id, card_id)`; a pair labelled twice is an error."""
    from damc.labels import load_labels

    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for r in load_labels(path).to_list():
        key = (r["decision_id"], r["card_id"])
        if key in rows:
            raise ValueError(f"{path}: card {key[1]!r} of decision {key[0]!r} is labelled twice")
        rows[key] = r
    return rows


def _merge_row(key: tuple[str, str], members: list[dict[str, Any]], inputs: Sequence[str | os.PathLike],
               w: list[float], teacher: str) -> dict[str, Any]:
    """One ensemble row: the first member's row with the weighted means of `MEAN_COLUMNS` (texts must agree)."""
    first = members[0]
    for p, m in zip(inputs[1:], members[1:]):
        for col in ("decision_text", "card_text"):
            if m[col] != first[col]:
                raise ValueError(f"{p}: {col} of card {key[1]!r} in decision {key[0]!r} differs from "
                                 f"{inputs[0]}'s (different rendering or truncation: relabel with the same "
                                 f"max_card_tokens and render version)")
    row = dict(first)
    for col in MEAN_COLUMNS:
        row[col] = float(sum(wi * m[col] for wi, m in zip(w, members)))
    row["teacher"] = teacher
    row["n_action_tokens"] = int(round(sum(m["n_action_tokens"] for m in members) / len(members)))
    return row


def merge_labels(inputs: Sequence[str | os.PathLike], out_dir: str | os.PathLike,
                 weights: Sequence[float] | None = None, overwrite: bool = False) -> dict[str, Any]:
    """Average the label sets `inputs` into a new label directory `out_dir` (the ensemble teacher).

    Args:
        inputs: two or more label sets (label directories, parquet or JSONL files).
        out_dir: where `shards/part-00000.parquet` and `summary.json` go (written atomically).
        weights: one non-negative weight per input (default: equal); normalised to sum 1.
        overwrite: replace an existing label set at `out_dir` (otherwise an error).

    Returns:
        The summary written to `out_dir/summary.json`: inputs, weights, teacher, decisions, rows and the
        rows of each input left out because another member did not label them.

    Raises:
        ValueError: fewer than two inputs, bad weights, an input with a duplicate (decision, card) row,
            members that disagree on the estimator or on a rendered text, or no common row at all.
        FileExistsError: `out_dir` already holds labels and `overwrite` is false.
    """
    from damc.episodes import atomic_write_text
    from damc.labels import write_shard

    if len(inputs) < 2:
        raise ValueError(f"an ensemble needs at least two label sets, got {len(inputs)}")
    w = _normalized_weights(len(inputs), weights)
    out = Path(out_dir)
    shard_dir = out / "shards"
    if shard_dir.is_dir() and any(shard_dir.glob("*.parquet")) and not overwrite:
        raise FileExistsError(f"{out} already holds labels; pass overwrite=True (--overwrite) to replace them")

    tables = [_load_rows(p) for p in inputs]
    estimators = [sorted({r["estimator"] for r in t.values()}) for t in tables]
    if any(e != estimators[0] for e in estimators):
        raise ValueError("the label sets use different estimators: "
                         + "; ".join(f"{p}: {', '.join(e)}" for p, e in zip(inputs, estimators))
                         + " (their deltas measure different things; ensemble labels of one estimator)")
    common = [k for k in tables[0] if all(k in t for t in tables[1:])]
    if not common:
        raise ValueError(f"the label sets share no labelled (decision, card): label the same episodes with the "
                         f"same per_episode/sample_seed/max_cards settings ({', '.join(map(str, inputs))})")
    teachers = [sorted({r["teacher"] for r in t.values()}) for t in tables]
    teacher = "ensemble(" + "+".join("/".join(t) for t in teachers) + ")"
    merged = [_merge_row(key, [t[key] for t in tables], inputs, w, teacher) for key in common]

    shard_dir.mkdir(parents=True, exist_ok=True)
    new = write_shard(shard_dir, "part-00000.parquet", merged)  # atomic: replaces an old part-00000 in one step
    for old in shard_dir.glob("*.parquet"):
        if old != new:
            old.unlink()  # other shards of the label set being overwritten
    summary = {"out_dir": str(out), "inputs": [str(p) for p in inputs], "weights": w, "teacher": teacher,
               "estimator": estimators[0][0] if len(estimators[0]) == 1 else estimators[0],
               "decisions": len({k[0] for k in common}), "rows": len(merged),
               "left_out_rows": {str(p): len(t) - len(common) for p, t in zip(inputs, tables)}}
    atomic_write_text(out / "summary.json", json.dumps(summary, indent=2))
    return summary
