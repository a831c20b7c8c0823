"""The student scorer: a cross-encoder distilled from the teacher's counterfactual card labels.

* `CardScorer` (`damc.runtime.scorer`) — load an exported scorer, score / rank cards for a decision.
* `damc.scorer.train.main(cfg)` — Hydra training entry point (`scripts/train.py`).
* `damc.scorer.export.main(cfg)` — export a run to a self-contained directory (`scripts/export.py`).
* `damc.scorer.metrics` — teacher-fidelity metrics (Spearman, NDCG@5, recall) and baselines.

Heavy imports (torch, transformers) happen only when these are used.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CardScorer", "IncompatibleScorerError", "ScorerFormatError"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from damc.runtime import scorer

        return getattr(scorer, name)
    raise AttributeError(f"module 'damc.scorer' has no attribute {name!r}")
