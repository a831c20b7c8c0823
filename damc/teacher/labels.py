"""Label datasets: the teacher's counterfactual labels as parquet shards, loaded as a `datasets.Dataset`.

`scripts/label.py` writes `OUT_DIR/shards/part-*.parquet` (one file per batch of decisions, written
atomically). `load_labels(OUT_DIR)` concatenates them into one in-memory `datasets.Dataset` (no HF
cache involved); `datasets.load_dataset("parquet", data_files="OUT_DIR/shards/*.parquet")` reads the
same files. A directory made by `Dataset.save_to_disk` or a single parquet file loads too.

Columns (DESIGN.md "Label row" plus extras): see `LABEL_COLUMNS` and `EXTRA_COLUMNS`.

Example:
    >>> ds = load_labels("labels/")
    >>> ds.filter(lambda r: r["is_key"])["delta"][:3]
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

LABEL_COLUMNS = ("decision_id", "episode_id", "card_id", "decision_text", "card_text", "logp_full",
                 "logp_without", "delta", "estimator", "teacher", "n_action_tokens")
EXTRA_COLUMNS = ("decision_index", "card_position", "card_kind", "is_key", "render_version")


class LabelFormatError(ValueError):
    """A label file or dataset without the required columns."""


def label_schema() -> Any:
    """The pyarrow schema of label rows (fixed, so empty and partial shards concatenate)."""
    import pyarrow as pa

    s, f, i, b = pa.string(), pa.float64(), pa.int64(), pa.bool_()
    types = {"decision_id": s, "episode_id": s, "card_id": s, "decision_text": s, "card_text": s,
             "logp_full": f, "logp_without": f, "delta": f, "estimator": s, "teacher": s, "n_action_tokens": i,
             "decision_index": i, "card_position": i, "card_kind": s, "is_key": b, "render_version": s}
    return pa.schema([(c, types[c]) for c in LABEL_COLUMNS + EXTRA_COLUMNS])


def validate_columns(columns: Any, where: str = "labels") -> None:
    """Raise `LabelFormatError` listing every required column that is missing."""
    missing = [c for c in LABEL_COLUMNS if c not in set(columns)]
    if missing:
        raise LabelFormatError(f"{where} is missing required label columns: {', '.join(missing)} "
                               f"(expected {', '.join(LABEL_COLUMNS)})")


def shard_files(path: str | os.PathLike) -> list[Path]:
    """The parquet shards of a label directory (sorted), or the file itself."""
    p = Path(path)
    if p.is_file():
        return [p]
    d = p / "shards" if (p / "shards").is_dir() else p
    return sorted(f for f in d.glob("*.parquet") if not f.name.startswith("."))


def load_labels(path: str | os.PathLike) -> Any:
    """Labels as a `datasets.Dataset` from a label directory, a parquet file or a `save_to_disk` dir.

    Raises:
        FileNotFoundError: nothing to load at `path`.
        LabelFormatError: required columns are missing (all of them are named).
    """
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq

    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"label path not found: {p}")
    if p.is_dir() and (p / "dataset_info.json").exists():
        ds = datasets.load_from_disk(str(p))
        validate_columns(ds.column_names, str(p))
        return ds
    files = shard_files(p)
    if not files:
        raise FileNotFoundError(f"no parquet label shards in {p} (expected {p}/shards/part-*.parquet)")
    tables = []
    for f in files:
        t = pq.read_table(f)
        validate_columns(t.column_names, str(f))
        tables.append(t)
    table = pa.concat_tables(tables, promote_options="default")
    return datasets.Dataset(table)
