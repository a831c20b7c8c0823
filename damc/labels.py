"""The label schema: one module for the teacher's counterfactual labels — columns, writer, reader.

The teacher (`scripts/label.py`) writes `OUT_DIR/shards/part-*.parquet` (one file per batch of decisions,
written atomically by `write_shard`). `load_labels(OUT_DIR)` concatenates them into one in-memory
`datasets.Dataset` (no HF cache involved); `datasets.load_dataset("parquet", data_files="OUT_DIR/shards/*.parquet")`
reads the same files. A directory made by `Dataset.save_to_disk`, a single parquet file, or JSONL / parquet
files anywhere under a directory load too. `group_decisions` turns rows into `LabeledDecision`s (one query,
its candidate cards and their deltas) — the unit the scorer trains on and the agreement / fidelity tools compare.

Teacher, scorer training, the label ensemble and label agreement all read and write through this module,
so there is one schema and one error type (`LabelFormatError`).

Columns (DESIGN.md "Label row" plus extras): the fields of `LabelRow`, `LABEL_COLUMNS` (required) and
`EXTRA_COLUMNS` (optional).
`delta = (logp_full − logp_without) / n_action_tokens` in **nats per action token** (signed), where `logp_full` is
the action's total log-prob in the estimator's context *with* the card (leave-one-out: every candidate;
leave-one-in: the card alone) and `logp_without` the total *without* it. `card_text` is what the student reads
(`damc.query.render_card`: the template line with kind and age, or the `fields` line when `card_render` is
"fields" — labels made with `render=fields`; absent/null means "template"), `teacher_text` the line the teacher saw, and
`feat_*` the runtime's signals at that decision (the learned combiner's inputs besides the student).

Example:
    >>> ds = load_labels("labels/")
    >>> decisions = group_decisions(ds)
    >>> decisions[0].query, decisions[0].deltas[:3]
"""

from __future__ import annotations

import math
import os
import random
import tempfile
from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from typing import Any, Sequence


@dataclass
class LabelRow:
    """One label row: the teacher's delta for one card at one decision. The one spelling of the columns: the
    required ones have no default (`LABEL_COLUMNS`), the optional ones default to None (`EXTRA_COLUMNS`), and the
    parquet schema follows the field types (`label_schema`)."""

    decision_id: str  # "{episode_id}@{k}"
    episode_id: str  # the episode the decision belongs to
    card_id: str  # `damc.cards.card_id` of the card
    decision_text: str  # what the student reads of the decision (`damc.query.query_body`)
    card_text: str  # what the student reads of the card (`damc.query.render_card`: kind, age, line)
    logp_full: float  # gold action's total log-prob with the card (nats)
    logp_without: float  # ... without it (nats)
    delta: float  # (logp_full - logp_without) / n_action_tokens: nats per action token, signed
    estimator: str  # loo | loi | loi_margin | loo_loi | grouped_loo | ablation
    teacher: str  # the teacher model's id
    n_action_tokens: int  # tokens of the gold action
    decision_index: int | None = None  # message index k of the decision
    card_position: int | None = None  # the card's position in the episode (orders a decision's cards)
    card_kind: str | None = None  # user | assistant | tool_call | ...
    is_key: bool | None = None  # the card is one of the decision's key cards (analysis only, never a feature)
    render_version: str | None = None  # `damc.query.RENDER_VERSION` the card_text was written with
    teacher_text: str | None = None  # the memory line the teacher saw
    card_age: int | None = None  # messages between the card and the current turn
    feat_bm25: float | None = None  # the runtime's BM25 signal (a combiner input)
    feat_cosine: float | None = None  # the runtime's cosine signal (a combiner input)
    feat_pinned: float | None = None  # 1.0 when the card is pinned (a combiner input)
    card_render: str | None = None  # template | fields (null: template)

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


LABEL_COLUMNS = tuple(f.name for f in fields(LabelRow) if f.default is MISSING)
EXTRA_COLUMNS = tuple(f.name for f in fields(LabelRow) if f.default is not MISSING)


class LabelFormatError(ValueError):
    """A label file or dataset that cannot be used (missing columns, no label data, too few decisions)."""


def label_schema() -> Any:
    """The pyarrow schema of label rows (fixed, so empty and partial shards concatenate)."""
    from damc.extras import requires

    with requires("label shards (parquet)"):
        import pyarrow as pa

    arrow = {"str": pa.string(), "float": pa.float64(), "int": pa.int64(), "bool": pa.bool_()}
    return pa.schema([(f.name, arrow[str(f.type).split("|")[0].strip()]) for f in fields(LabelRow)])


def validate_columns(columns: Any, where: str = "labels") -> None:
    """Raise `LabelFormatError` naming every required column that is missing."""
    have = list(columns)
    missing = [c for c in LABEL_COLUMNS if c not in set(have)]
    if missing:
        raise LabelFormatError(f"{where} is missing required label column(s) {', '.join(missing)}; has "
                               f"{', '.join(have) or 'none'}. Expected the label contract: {', '.join(LABEL_COLUMNS)}")


# ----------------------------------------------------------------------------- writing

def write_shard(shard_dir: str | os.PathLike, name: str, rows: list[dict[str, Any]]) -> Path:
    """Write label rows as one parquet shard, atomically (temp file in the same dir, fsync, rename).

    Returns:
        The path of the shard.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    shard_dir = Path(shard_dir)
    table = pa.Table.from_pylist(rows, schema=label_schema())
    fd, tmp = tempfile.mkstemp(dir=shard_dir, prefix=f".{name}.", suffix=".tmp")
    os.close(fd)
    try:
        pq.write_table(table, tmp)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        final = shard_dir / name
        os.replace(tmp, final)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return final


def labelled_decision_ids(shard_dir: str | os.PathLike) -> set[str]:
    """Decision ids present in a shard directory (a resumed labelling run skips them)."""
    import pyarrow.parquet as pq

    done: set[str] = set()
    for f in sorted(Path(shard_dir).glob("part-*.parquet")):
        done.update(pq.read_table(f, columns=["decision_id"]).column(0).to_pylist())
    return done


# ----------------------------------------------------------------------------- reading

def shard_files(path: str | os.PathLike) -> list[Path]:
    """The parquet shards of a label directory (sorted), or the file itself when it is a parquet file."""
    p = Path(path)
    if p.is_file():
        return [p] if p.suffix == ".parquet" else []
    d = p / "shards" if (p / "shards").is_dir() else p
    return sorted(f for f in d.glob("*.parquet") if not f.name.startswith("."))


def load_labels(path: str | os.PathLike) -> Any:
    """Labels as a `datasets.Dataset`, checked against the label contract.

    Reads a label directory (`shards/part-*.parquet`), a parquet or JSONL file, a `save_to_disk` directory,
    or a directory holding parquet / JSONL files.

    Raises:
        FileNotFoundError: nothing at `path`.
        LabelFormatError: no label data, or required columns missing (all of them are named).
    """
    from damc.extras import requires

    with requires("reading label datasets"):
        import datasets

    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"label path not found: {p} (write labels with scripts/label.py)")
    if p.is_dir() and ((p / "dataset_info.json").exists() or (p / "state.json").exists()):
        ds = datasets.load_from_disk(str(p))
        validate_columns(ds.column_names, str(p))
        return ds
    files = shard_files(p)
    if files:
        return _read_parquet(files)
    jsonl = [p] if p.is_file() else sorted(f for f in p.rglob("*.jsonl"))
    nested = [] if p.is_file() else sorted(f for f in p.rglob("*.parquet") if not f.name.startswith("."))
    if nested:
        return _read_parquet(nested)
    if not jsonl:
        raise LabelFormatError(f"{p} holds no label data (expected {p}/shards/part-*.parquet, parquet or JSONL files)")
    ds = datasets.Dataset.from_json([str(f) for f in jsonl])
    validate_columns(ds.column_names, str(p))
    return ds


def _read_parquet(files: Sequence[Path]) -> Any:
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq

    tables = []
    for f in files:
        t = pq.read_table(f)
        validate_columns(t.column_names, str(f))
        tables.append(t)
    return datasets.Dataset(pa.concat_tables(tables, promote_options="default"))


# ----------------------------------------------------------------------------- decisions

@dataclass
class LabeledDecision:
    """One labelled decision: the query, its candidate cards and their teacher deltas.

    Attributes:
        decision_id: `"{episode_id}@{message index}"`.
        episode_id: the episode (splits are by episode).
        query: the decision text the scorer reads.
        docs: the card text per card.
        card_ids: the card ids, in episode order.
        deltas: the teacher's delta per card (nats per action token).
        positions: card positions in the episode (the recency baseline).
        is_key: per card, whether it holds the decision's key fact (None when the labels do not say).
    """

    decision_id: str
    episode_id: str
    query: str
    docs: list[str]
    card_ids: list[str]
    deltas: list[float]
    positions: list[int]
    is_key: list[bool] | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"query": self.query, "docs": self.docs, "deltas": self.deltas, "positions": self.positions}


def group_decisions(ds: Any, min_cards: int = 2) -> list[LabeledDecision]:
    """Group label rows into decisions (cards in episode order); drop decisions with < `min_cards` cards."""
    cols = ["decision_id", "episode_id", "card_id", "decision_text", "card_text", "delta"]
    extra = [c for c in ("card_position", "is_key") if c in ds.column_names]
    df = ds.select_columns(cols + extra).to_pandas()
    df = df.drop_duplicates(["decision_id", "card_id"])
    if "card_position" not in extra:
        df["card_position"] = df.groupby("decision_id").cumcount()
    out = []
    for did, g in df.groupby("decision_id", sort=True):
        if len(g) < min_cards:
            continue
        g = g.sort_values("card_position", kind="stable")
        out.append(LabeledDecision(str(did), str(g["episode_id"].iloc[0]), str(g["decision_text"].iloc[0]),
                                   g["card_text"].astype(str).tolist(), g["card_id"].astype(str).tolist(),
                                   g["delta"].astype(float).tolist(), g["card_position"].astype(int).tolist(),
                                   g["is_key"].fillna(False).astype(bool).tolist() if "is_key" in extra else None))
    return out


def split_by_episode(decisions: Sequence[LabeledDecision], dev_fraction: float, seed: int
                     ) -> tuple[list[LabeledDecision], list[LabeledDecision]]:
    """Seeded episode-level split `(train, dev)`: every decision of an episode lands on the same side (the scorer's
    split, `damc.scorer.train`; the hybrid labels choose their λ on its dev side)."""
    episodes = sorted({d.episode_id for d in decisions})
    random.Random(seed).shuffle(episodes)
    n_dev = min(len(episodes) - 1, max(1, math.ceil(dev_fraction * len(episodes)))) if dev_fraction > 0 else 0
    dev_eps = set(episodes[:n_dev])
    return [d for d in decisions if d.episode_id not in dev_eps], [d for d in decisions if d.episode_id in dev_eps]
