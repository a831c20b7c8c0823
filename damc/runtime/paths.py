"""Where a `DecisionAwareMemory` keeps its files, and undoing what a failed constructor created."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

logger = logging.getLogger(__name__)

STORE_SUFFIXES = (".db", ".sqlite", ".sqlite3")   # a `path` ending so is the SQLite file itself, else a directory


def created_by_opening(path: str | os.PathLike | None) -> list[Path]:
    """What opening a memory at `path` would create: the first missing directory on the way to it, else the store
    files when the database does not exist yet (never a file another process may already have open)."""
    if path is None:
        return []
    p = Path(path)
    is_file = p.suffix in STORE_SUFFIXES
    folder = p.parent if is_file else p
    missing = None
    for d in (folder, *folder.parents):
        if d.exists():
            break
        missing = d
    if missing is not None:
        return [missing]
    db = p if is_file else p / "cards.db"
    if db.exists():
        return []
    return [db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm"),
            p.with_suffix(".faiss") if is_file else p / "cards.faiss"]


def remove_created(paths: list[Path]) -> None:
    """Undo `created_by_opening` after a constructor failed."""
    for q in paths:
        try:
            if q.is_dir():
                shutil.rmtree(q)
            else:
                q.unlink(missing_ok=True)
        except OSError as e:   # leave it, but say so: the constructor's own error is the one raised
            logger.warning("could not remove %s after a failed construction: %s", q, e)
