"""DAMC — Decision-Aware Memory Cards.

Keep only the history that matters for a tool-calling agent's next decision: cards are valued by a
small cross-encoder distilled from counterfactual (leave-one-out) labels of a large LLM, selected under
a token budget, compressed with templates, and assembled into the prompt.

Public objects are imported lazily so `import damc` stays cheap:
`Card`, `Episode`, `CardScorer`, `DecisionAwareMemory`, `MemoryConfig`.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "Card": "damc.cards",
    "encode_messages": "damc.cards",
    "encode_episode": "damc.cards",
    "Episode": "damc.episodes",
    "load_episodes": "damc.episodes",
    "write_episodes": "damc.episodes",
    "decision_points": "damc.episodes",
    "CardScorer": "damc.runtime.scorer",
    "DecisionAwareMemory": "damc.runtime.memory",
    "MemoryConfig": "damc.runtime.config",
    "ConversationMismatchError": "damc.runtime.identity",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'damc' has no attribute {name!r}")
