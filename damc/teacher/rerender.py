"""Carry a label set across a change of the student's **query** rendering without re-running the teacher.

The teacher's deltas depend on the teacher's prompt (`teacher_text`, the runtime's memory lines), never on the
text the student reads for the decision (`decision_text`: `query_body(render_decision_query(...))`). So when only the
query rendering changes (every version since `damc.query.CARD_RENDER_SINCE`), a label set is migrated by re-rendering each row's
query from its episode — `episode.messages[:decision_index]` and the episode's tools, exactly what the labeller
passes — and stamping the current `RENDER_VERSION`. Card renderings are kept; a label set made before the last
change of the card rendering is refused (relabel it instead).

    python scripts/rerender_labels.py LABELS EPISODES OUT

`OUT` is a new label directory (`OUT/shards/part-000000.parquet`, plus `label_config.json` with the new render
version when `LABELS` had one, so a resumed labelling run with the same settings appends to it) or a `.jsonl`
file. Nothing is written unless every row re-renders; `OUT` must not exist yet.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from damc.labels import LabelFormatError


def rerender_rows(rows: list[dict[str, Any]], episodes: dict[str, Any], where: str = "labels") -> int:
    """Re-render `decision_text` of every row in place; returns how many rows changed.

    Raises:
        LabelFormatError: a row without `decision_index` / `episode_id`, an episode missing from `episodes`, an
            index past the episode's end, or a `render_version` whose card rendering differs from today's.
    """
    from damc.query import CARD_RENDER_SINCE, RENDER_VERSION, query_body, render_decision_query

    cache: dict[tuple[str, int], str] = {}
    changed = 0
    for i, r in enumerate(rows, start=1):
        rv = str(r.get("render_version") or "")
        if not rv or not rv.isdigit() or int(rv) < int(CARD_RENDER_SINCE):
            raise LabelFormatError(
                f"{where}: row {i} (decision {r.get('decision_id')!r}) has render_version {rv or 'none'!r}; cards "
                f"have been rendered differently since version {CARD_RENDER_SINCE}, so only the query can be "
                f"re-rendered for labels made at version ≥ {CARD_RENDER_SINCE}: relabel with scripts/label.py")
        ep_id, idx = r.get("episode_id"), r.get("decision_index")
        if idx is None or ep_id is None:
            raise LabelFormatError(f"{where}: row {i} (decision {r.get('decision_id')!r}) lacks "
                                   f"{'decision_index' if idx is None else 'episode_id'}: cannot find its context")
        ep = episodes.get(str(ep_id))
        if ep is None:
            raise LabelFormatError(f"{where}: row {i}: episode {ep_id!r} is not in the episodes file (pass the "
                                   f"file the labels were made from)")
        if not 0 < int(idx) <= len(ep.messages):
            raise LabelFormatError(f"{where}: row {i}: decision_index {idx} is outside episode {ep_id!r} "
                                   f"({len(ep.messages)} messages): is this the file the labels were made from?")
        key = (str(ep_id), int(idx))
        if key not in cache:
            cache[key] = query_body(render_decision_query(ep.messages[: int(idx)], ep.tools))
        changed += r["decision_text"] != cache[key]
        r["decision_text"], r["render_version"] = cache[key], RENDER_VERSION
    return changed


def rerender_labels(labels: str | os.PathLike, episodes: str | os.PathLike, out: str | os.PathLike) -> dict[str, Any]:
    """Re-render the decision queries of the label set `labels` (made from `episodes`) into `out`.

    Returns:
        `{"rows", "decisions", "changed_rows", "from_versions", "render_version", "out"}`.

    Raises:
        FileExistsError: `out` already exists (nothing is overwritten).
        LabelFormatError: see `rerender_rows`.
    """
    from damc.episodes import atomic_write_text, load_episodes
    from damc.labels import load_labels, write_shard
    from damc.query import RENDER_VERSION

    out, src = Path(out), Path(labels)
    if out.exists():
        raise FileExistsError(f"{out} already exists: choose a new output path (labels are never overwritten)")
    rows = load_labels(src).to_list()
    versions = sorted({str(r.get("render_version")) for r in rows})
    eps = {e.episode_id: e for e in load_episodes(episodes)}
    changed = rerender_rows(rows, eps, where=str(src))
    if out.suffix == ".jsonl":
        atomic_write_text(out, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    else:
        import shutil

        (out / "shards").mkdir(parents=True)
        try:
            write_shard(out / "shards", "part-000000.parquet", rows)
            cfg = src / "label_config.json"
            if cfg.is_file():
                fp = json.loads(cfg.read_text())
                fp["render_version"] = RENDER_VERSION
                atomic_write_text(out / "label_config.json", json.dumps(fp, indent=2))
        except BaseException:
            shutil.rmtree(out, ignore_errors=True)   # no half-made label set
            raise
    return {"rows": len(rows), "decisions": len({r["decision_id"] for r in rows}), "changed_rows": changed,
            "from_versions": versions, "render_version": RENDER_VERSION, "out": str(out)}
