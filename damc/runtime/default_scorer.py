"""The scorer `DecisionAwareMemory` values cards with when it is given none: the one shipped in the package.

`load_default_scorer()` loads `damc/assets/scorer/` (`damc.assets.shipped_dir`; `$DAMC_SCORER_DIR` points elsewhere)
as a `CardScorer` on onnxruntime — no torch — once per process: every later memory shares the same ONNX session
and tokenizer (a session is safe to run from several threads), so constructing a memory stays cheap. When the
directory is missing or unreadable it returns None and logs one warning per process naming the cause; the memory
then falls back to the heuristic prior (`damc.runtime.memory.default_valuer`).

Example:
    >>> scorer = load_default_scorer()          # None (one warning) when the package ships no scorer
    >>> scorer.metadata.evaluation["dev"]       # the dev figures it was chosen on (docs/scorer.md)
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

_LOCK = threading.Lock()
_LOADED: dict[str, Any] = {}     # resolved directory -> CardScorer (or the reason it could not be loaded)
_WARNED: set[str] = set()


def default_scorer_dir() -> Path | None:
    """The shipped scorer directory when it holds a scorer (`damc_scorer.json`), else None."""
    from damc.assets import shipped_dir
    from damc.runtime.scorer_metadata import META_FILE

    root = shipped_dir()
    return root if root is not None and (root / META_FILE).is_file() else None


def load_default_scorer() -> Any:
    """The shipped `CardScorer` (int8 ONNX, loaded once per process and shared), or None with one warning."""
    from damc.assets import ENV_VAR, shipped_dir

    root = shipped_dir()
    key = str(root.resolve()) if root is not None else ""
    with _LOCK:
        if key not in _LOADED:
            _LOADED[key] = _load(root)
        got = _LOADED[key]
        if isinstance(got, str):
            if key not in _WARNED:
                _WARNED.add(key)
                logger.warning("no default scorer: %s; DecisionAwareMemory values cards with the heuristic prior "
                               "(pass valuer=\"heuristic\" to choose it and silence this, or scorer=PATH; %s "
                               "points at another scorer directory)", got, ENV_VAR)
            return None
        return got


def _load(root: Path | None) -> Any:
    """A `CardScorer`, or a string saying why there is none."""
    from damc.runtime.scorer import CardScorer
    from damc.runtime.scorer_metadata import META_FILE

    if root is None:
        return "$DAMC_SCORER_DIR is empty (no shipped scorer)"
    if not (root / META_FILE).is_file():
        return f"the package ships none ({root / META_FILE} is missing)"
    try:
        return CardScorer.from_pretrained(root, backend="onnx", onnx_file="model_int8.onnx")
    except Exception as e:  # noqa: BLE001 - any unreadable directory falls back, with the cause in the warning
        return f"{root} could not be loaded ({type(e).__name__}: {e})"


def clear_cache() -> None:
    """Forget the loaded scorer and the warnings given (tests; a process that replaced the directory)."""
    with _LOCK:
        _LOADED.clear()
        _WARNED.clear()
