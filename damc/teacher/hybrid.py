"""Hybrid labels: the teacher's counterfactual delta where it exists plus λ × the grounded target, row by row.

The grounded target (`damc.teacher.grounded`) sees which card holds a value the logged call used; the teacher sees
what no value match can (an error that changes the next call, a user constraint). `hybrid_frame` joins a teacher
label set and a grounded one on `(decision_id, card_id)`:

* a card both label: `delta = teacher delta + λ · grounded target` (the teacher's row otherwise);
* a decision the grounded labels lack — a text reply (no call, no grounded target) or one the grounded run
  skipped: the teacher's rows unchanged;
* a card or decision only the grounded labels hold (the teacher labelled a `per_episode` sample, or left a card out
  for its window): `delta = λ · grounded target` (no teacher value to add to); `grounded_only=False` drops them.

`estimator` of a summed row is "<teacher estimator>+grounded"; the log-prob columns stay the teacher's (NaN on
grounded-only rows). Both sets must come from the same episodes and runtime settings (`label_config.json`:
`data`, `memory`, `render_version`, `render`), which is checked, and a card both label must read the same.

**λ on dev** (`choose_lambda`): the honest criterion is the student's dev metric (train one student per λ, keep
the best); that takes a training run per λ. The default criterion is a cheap proxy over the dev decisions of the
scorer's own episode split (`damc.labels.split_by_episode`, `dev_fraction` 0.2, seed 0 — the training defaults):
for each λ of the grid, `S(λ)` the mean per-decision Spearman of the hybrid target against the teacher's delta
(1 at λ = 0) and `K(λ)` the mean key-card NDCG@4 of the hybrid target divided by the grounded target's own;
the chosen λ maximises `min(S, K)` — the λ at which the hybrid keeps the largest common share of both signals'
dev rankings. It says nothing about which student is better; pass `criterion=` to use the student's dev metric.

Example:
    >>> lam, table = choose_lambda(teacher_df, grounded_df)
    >>> hybrid, counts = hybrid_frame(teacher_df, grounded_df, lam)
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

DEFAULT_GRID = (0.0, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0)
KEY = ["decision_id", "card_id"]
MATCHED_SETTINGS = ("data", "memory", "render_version", "render")


def _frame(labels: Any) -> Any:
    """A pandas frame of label rows (a `datasets.Dataset`, a frame, or a label path); duplicates are an error."""
    import pandas as pd

    from damc.labels import load_labels

    if isinstance(labels, (str, os.PathLike)):
        labels = load_labels(labels)
    df = labels if isinstance(labels, pd.DataFrame) else labels.to_pandas()
    dup = df.duplicated(KEY)
    if dup.any():
        d = df[dup].iloc[0]
        raise ValueError(f"card {d.card_id!r} of decision {d.decision_id!r} is labelled twice")
    return df.reset_index(drop=True)


def hybrid_frame(teacher: Any, grounded: Any, lam: float, grounded_only: bool = True) -> tuple[Any, dict[str, int]]:
    """The hybrid label rows (module docstring) and counts of each kind of row.

    Args:
        teacher / grounded: label rows (`datasets.Dataset`, DataFrame, or a label directory).
        lam: the weight of the grounded target (≥ 0).
        grounded_only: keep the rows only the grounded labels hold (`delta = λ · target`).

    Raises:
        ValueError: λ negative, a duplicated row, or a card both label whose texts differ.
    """
    import pandas as pd

    if not lam >= 0:
        raise ValueError(f"hybrid: lam must be >= 0, got {lam}")
    t, g = _frame(teacher), _frame(grounded)
    both = t.merge(g[KEY + ["delta", "card_text", "decision_text"]], on=KEY, how="left", suffixes=("", "_g"),
                   indicator=True)
    matched = both["_merge"] == "both"
    bad = matched & ((both["card_text"] != both["card_text_g"]) | (both["decision_text"] != both["decision_text_g"]))
    if bad.any():
        r = both[bad].iloc[0]
        raise ValueError(f"card {r.card_id!r} of decision {r.decision_id!r} reads differently in the teacher and "
                         f"the grounded labels (other rendering or episodes): label both with the same settings")
    g_decisions = set(g["decision_id"])
    in_g = both["decision_id"].isin(g_decisions)
    out = both[t.columns].copy()
    out.loc[matched, "delta"] = both.loc[matched, "delta"] + lam * both.loc[matched, "delta_g"]
    out.loc[matched, "estimator"] = both.loc[matched, "estimator"].astype(str) + "+grounded"
    counts = {"summed_rows": int(matched.sum()), "teacher_only_rows": int((~in_g).sum()),
              "teacher_rows_without_grounded_card": int((in_g & ~matched).sum()),
              "teacher_only_decisions": int(both.loc[~in_g, "decision_id"].nunique())}
    only_g = g[~g.set_index(KEY).index.isin(t.set_index(KEY).index)]
    counts["grounded_only_rows"] = int(len(only_g)) if grounded_only else 0
    counts["grounded_only_rows_dropped"] = 0 if grounded_only else int(len(only_g))
    if grounded_only and len(only_g):
        extra = only_g.copy()
        extra["delta"] = lam * extra["delta"]
        out = pd.concat([out, extra[[c for c in out.columns if c in extra.columns]]], ignore_index=True)
    counts["rows"] = int(len(out))
    counts["decisions"] = int(out["decision_id"].nunique())
    return out, counts


def _dev_decisions(df: Any, dev_fraction: float, split_seed: int, min_cards: int) -> set[str]:
    """The decision ids on the dev side of the scorer's episode split of these rows."""
    from damc.labels import split_by_episode

    class _D:  # what split_by_episode reads of a decision
        def __init__(self, decision_id: str, episode_id: str):
            self.decision_id, self.episode_id = decision_id, episode_id

    sizes = df.groupby("decision_id").agg(n=("card_id", "size"), episode_id=("episode_id", "first"))
    decs = [_D(str(d), str(r.episode_id)) for d, r in sizes.iterrows() if r.n >= min_cards]
    return {d.decision_id for d in split_by_episode(decs, dev_fraction, split_seed)[1]}


def proxy_criterion(k: int = 4) -> Callable[[Any, Any, Any], dict[str, float]]:
    """The default dev criterion (module docstring): `f(hybrid_rows, teacher_rows, grounded_rows)` → `{"spearman":
    S, "key_ndcg": mean key-card NDCG@k of the hybrid target}` over the dev decisions with teacher labels."""
    from damc.ranking import ndcg_at_k, spearman

    def f(hyb: Any, teacher: Any, grounded: Any) -> dict[str, float]:
        m = hyb.merge(teacher[KEY + ["delta"]], on=KEY, suffixes=("", "_t"))
        sp, nd = [], []
        for _, x in m.groupby("decision_id"):
            if len(x) < 2:
                continue
            sp.append(spearman(x["delta"], x["delta_t"]))
            if "is_key" in x and x["is_key"].fillna(False).astype(bool).any():
                nd.append(ndcg_at_k(x["delta"], x["is_key"].fillna(False).astype(float), k))
        return {"spearman": float(np.nanmean(sp)) if np.isfinite(sp).any() else float("nan"),
                "key_ndcg": float(np.nanmean(nd)) if nd else float("nan"), "decisions": len(sp)}

    return f


def choose_lambda(teacher: Any, grounded: Any, grid: Sequence[float] = DEFAULT_GRID, dev_fraction: float = 0.2,
                  split_seed: int = 0, min_cards: int = 2, criterion: Callable[..., Any] | None = None,
                  k: int = 4, grounded_only: bool = True) -> tuple[float, list[dict[str, Any]]]:
    """λ from `grid` by a dev criterion; returns `(λ, one row per λ of the table)`.

    `criterion=None`: the proxy of the module docstring (`proxy_criterion`), choosing `argmax min(S, K)`. Else a
    callable `criterion(hybrid_rows_of_dev, lam) -> float` (higher is better), e.g. a student's dev metric. The dev
    episodes are those the scorer would hold out of the hybrid set (`grounded_only` as `hybrid_frame`'s).

    Raises:
        ValueError: an empty or negative grid, or no dev decision with teacher labels.
    """
    if not grid or any(not x >= 0 for x in grid):
        raise ValueError(f"hybrid: the λ grid must be non-empty and non-negative, got {list(grid)}")
    t, g = _frame(teacher), _frame(grounded)
    full, _ = hybrid_frame(t, g, 0.0, grounded_only)
    dev = _dev_decisions(full, dev_fraction, split_seed, min_cards)
    t_dev, g_dev = t[t.decision_id.isin(dev)], g[g.decision_id.isin(dev)]
    if t_dev.empty:
        raise ValueError("hybrid: no dev decision has teacher labels (too few episodes to split?)")
    table: list[dict[str, Any]] = []
    if criterion is not None:
        for lam in grid:
            table.append({"lam": float(lam),
                          "score": float(criterion(hybrid_frame(t_dev, g_dev, lam, grounded_only)[0], lam))})
        best = max(table, key=lambda r: (r["score"] if math.isfinite(r["score"]) else -math.inf, -r["lam"]))
        return best["lam"], table
    f = proxy_criterion(k)
    g_only = f(g_dev[g_dev.decision_id.isin(set(t_dev.decision_id))], t_dev, g_dev)   # the grounded target alone
    for lam in grid:
        r = f(hybrid_frame(t_dev, g_dev, lam, grounded_only=False)[0], t_dev, g_dev)
        rel = r["key_ndcg"] / g_only["key_ndcg"] if g_only["key_ndcg"] > 0 else float("nan")
        table.append({"lam": float(lam), "spearman_vs_teacher": r["spearman"], "key_ndcg": r["key_ndcg"],
                      "key_ndcg_share_of_grounded": rel, "score": min(r["spearman"], rel),
                      "dev_decisions": r["decisions"]})
    table.append({"lam": math.inf, "spearman_vs_teacher": f(g_dev, t_dev, g_dev)["spearman"],
                  "key_ndcg": g_only["key_ndcg"], "key_ndcg_share_of_grounded": 1.0, "score": None,
                  "note": "the grounded target alone (reference, not a choice)"})
    scored = [r for r in table if r["score"] is not None and math.isfinite(r["score"])]
    if not scored:
        raise ValueError("hybrid: the dev criterion is undefined (no dev decision with a key card or a varied "
                         "teacher delta)")
    best = max(scored, key=lambda r: (r["score"], -r["lam"]))
    return best["lam"], table


def _records(df: Any) -> list[dict[str, Any]]:
    """Rows of a label frame as dicts of the label schema's types (a column one set lacks: null; pandas' NaN in an
    integer, boolean or text column: null)."""
    import pyarrow as pa

    from damc.labels import label_schema

    schema = label_schema()
    df = df.copy()
    for name in schema.names:
        if name not in df.columns:
            df[name] = None
    return pa.Table.from_pandas(df[schema.names], schema=schema, preserve_index=False, safe=False).to_pylist()


def _label_config(path: Any) -> dict[str, Any] | None:
    p = Path(path) / "label_config.json"
    return json.loads(p.read_text()) if p.is_file() else None


def _same_file(a: Any, b: Any) -> bool:
    """Two episode-file paths naming the same file, or two files with the same bytes (a copied split)."""
    import hashlib

    if a == b:
        return True
    try:
        pa_, pb = Path(str(a)), Path(str(b))
        return pa_.is_file() and pb.is_file() and hashlib.sha256(pa_.read_bytes()).digest() \
            == hashlib.sha256(pb.read_bytes()).digest()
    except OSError:
        return False


def check_same_settings(teacher_dir: Any, grounded_dir: Any) -> None:
    """Both label sets come from the same episodes and runtime settings (`MATCHED_SETTINGS` of their
    `label_config.json`; the episode files may sit at two paths if their bytes are equal; a set without a
    `label_config.json` is not checked).

    Raises:
        ValueError: a setting differs (named, with both values).
    """
    a, b = _label_config(teacher_dir), _label_config(grounded_dir)
    if a is None or b is None:
        return
    for k in MATCHED_SETTINGS:
        if k == "data" and _same_file(a.get(k), b.get(k)):
            continue
        if a.get(k) != b.get(k):
            raise ValueError(f"the teacher labels ({teacher_dir}) and the grounded labels ({grounded_dir}) differ in "
                             f"{k!r}: {a.get(k)!r} vs {b.get(k)!r}; label the same episodes with the same settings")


def write_hybrid(teacher_dir: Any, grounded_dir: Any, out_dir: Any, lam: float | str = "auto",
                 grid: Sequence[float] = DEFAULT_GRID, grounded_only: bool = True, overwrite: bool = False,
                 dev_fraction: float = 0.2, split_seed: int = 0) -> dict[str, Any]:
    """Write the hybrid label set to `out_dir` (`shards/part-000000.parquet`, `label_config.json`,
    `summary.json`: the same layout as `scripts/label.py`'s, so `scripts/train.py data.labels=OUT` trains on it).

    Args:
        lam: a number, or "auto" (`choose_lambda` over `grid` on the dev split `dev_fraction`/`split_seed`).

    Raises:
        FileExistsError: `out_dir` holds labels and `overwrite` is false.
        ValueError: mismatched label sets (`check_same_settings`, `hybrid_frame`) or a bad λ.
    """
    from damc.episodes import atomic_write_text
    from damc.labels import write_shard

    out = Path(out_dir)
    shard_dir = out / "shards"
    if shard_dir.is_dir() and any(shard_dir.glob("*.parquet")) and not overwrite:
        raise FileExistsError(f"{out} already holds labels; pass overwrite=True (--overwrite) to replace them")
    check_same_settings(teacher_dir, grounded_dir)
    t, g = _frame(teacher_dir), _frame(grounded_dir)
    table = None
    if lam == "auto":
        lam, table = choose_lambda(t, g, grid, dev_fraction, split_seed, grounded_only=grounded_only)
    lam = float(lam)
    rows, counts = hybrid_frame(t, g, lam, grounded_only)
    shard_dir.mkdir(parents=True, exist_ok=True)
    new = write_shard(shard_dir, "part-000000.parquet", _records(rows))
    for old in shard_dir.glob("*.parquet"):
        if old != new:
            old.unlink()
    config = {"hybrid": {"lam": lam, "chosen": "dev proxy (damc.teacher.hybrid.choose_lambda)" if table else "given",
                         "grounded_only": grounded_only, "dev_fraction": dev_fraction, "split_seed": split_seed},
              "teacher": _label_config(teacher_dir), "grounded": _label_config(grounded_dir)}
    atomic_write_text(out / "label_config.json", json.dumps(config, indent=2))
    summary = {"out_dir": str(out), "teacher_dir": str(teacher_dir), "grounded_dir": str(grounded_dir), "lam": lam,
               **counts, "total_rows": counts["rows"], "lam_table": table,
               "teacher_delta_std": float(np.nanstd(t["delta"])), "grounded_target_std": float(np.nanstd(g["delta"]))}
    atomic_write_text(out / "summary.json", json.dumps(summary, indent=2, default=str))
    return summary
