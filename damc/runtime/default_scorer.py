"""The scorer `DecisionAwareMemory` values cards with when it is given none: the one shipped in the package.

`load_default_scorer()` loads `damc/assets/scorer/` (`damc.assets.shipped_dir`; `$DAMC_SCORER_DIR` points elsewhere)
as a `CardScorer` on onnxruntime — no torch — once per process: every later memory shares the same ONNX session
and tokenizer (a session is safe to run from several threads), so constructing a memory stays cheap. When the
directory is missing or unreadable it returns None and logs one warning per process naming the cause; the memory
then falls back to the heuristic prior (`damc.runtime.memory.default_valuer`).

**The dev gate.** The shipped student becomes `DecisionAwareMemory`'s default valuer only when its own dev figures
(`damc_scorer.json` "evaluation", written by `make reproduce PROFILE=default_scorer`) show it at or above the best
retrieval baseline without learning (`bm25`, `similarity`, `rrf`) in key hit at the operating point on *every* dev
split (`dev_gate_failure`); otherwise the memory keeps the heuristic prior and says why once (INFO), and
`valuer="shipped"` still chooses the student by name. A rebuilt student that passes becomes the default with no
code change.

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


BASELINES = ("bm25", "similarity", "rrf")   # retrieval without learning: what a shipped student must match on dev
_GATED: dict[str, str | None] = {}   # directory -> why its student is not the default (None: it passes), read once


def dev_gate_failure(evaluation: dict[str, Any] | None, metric: str = "key_hit") -> str | None:
    """None when the student (`damc`) is at or above max(`BASELINES`) in `metric` on every dev split of
    `evaluation` (`ScorerMetadata.evaluation`: {"dev": {split: {policy: figures}}}), else the reason, naming the
    split and the figures. A scorer with no dev figures fails (nothing shows it is better)."""
    dev = (evaluation or {}).get("dev") or {}
    if not dev:
        return "its metadata records no dev evaluation"
    for split, pols in dev.items():
        base = {b: pols[b][metric] for b in BASELINES if b in pols and pols[b].get(metric) is not None}
        got = (pols.get("damc") or {}).get(metric)
        if got is None or not base:
            return f"its dev split {split!r} records no {metric} for damc and the baselines"
        best = max(base, key=base.get)
        if got < base[best]:
            return f"on dev split {split!r} its {metric} {got:.3f} is below {best}'s {base[best]:.3f}"
    return None


def gated_default_scorer() -> Any:
    """The shipped `CardScorer` when it passes the dev gate (`dev_gate_failure`), else None: the memory's default
    valuer is then the heuristic prior (one INFO line per process says why; a missing scorer warns instead)."""
    from damc.runtime.scorer_metadata import ScorerMetadata

    root = default_scorer_dir()
    if root is not None:
        with _LOCK:
            if str(root) not in _GATED:
                try:
                    why = dev_gate_failure(ScorerMetadata.load(root).evaluation)
                except Exception:  # noqa: BLE001 - an unreadable one: load_default_scorer names the cause
                    why = None
                _GATED[str(root)] = why
                if why is not None:
                    logger.info("the shipped scorer is not the default valuer: %s; DecisionAwareMemory values "
                                "cards with the heuristic prior (valuer=\"shipped\" chooses the student anyway)", why)
            if _GATED[str(root)] is not None:
                return None
    return load_default_scorer()


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
        _GATED.clear()
