"""The runtime an agent calls before every model call: `DecisionAwareMemory` and its pluggable parts.

    store ─► index ─► valuers ─► select ─► compress ─► assemble      (memory wires them; explain reads them)

Modules: `store` (SQLite cards), `index` (FAISS over card embeddings), `encoder` (torch-free ONNX sentence
encoder), `valuers` (how much a card matters), `knn` (the teacher's non-parametric value), `select`
(which cards, under a token budget), `compress` (one `[card_id]` line per card), `assemble` (the prompt),
`memory` (`DecisionAwareMemory`), `verbs` / `store_verbs` (Mem0's verbs: list, search, history, delete, erase),
`explain` (why each card was kept or dropped), `integrations/`
(OpenAI client wrapper, LangChain middleware).

Import rules (checked by tests/test_architecture.py): the runtime never imports the teacher, scorer
training or the evaluation harness, and a runtime-only install (`pip install damc`) never imports torch.
Nothing is imported eagerly here; `ConversationMismatchError` (`damc.runtime.identity`) is imported on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {"ConversationMismatchError": "damc.runtime.identity"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'damc.runtime' has no attribute {name!r}")
