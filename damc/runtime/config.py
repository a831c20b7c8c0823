"""`MemoryConfig`: the settings of a `DecisionAwareMemory` (`damc.runtime.memory`) and the one home of their
defaults: `damc.configs` registers it (plus the retrieval `encoder`) as the Hydra schema of the labels' and the A/B
harness's `memory:` node, whose YAML (configs/memory/default.yaml) holds only overrides. No Hydra here."""

from __future__ import annotations

from dataclasses import dataclass

from damc.runtime.ingest import MAX_CARD_CHARS
from damc.runtime.scope import DEFAULT_USER


@dataclass
class MemoryConfig:
    """Runtime settings (defaults follow the seed article).

    Attributes:
        session_id: session the messages belong to (card ids are `{session_id}:{message index}...`, the index
            counted by the store). A message list that does not continue it is another conversation: see
            `on_mismatch`.
        on_mismatch: what a message list that does not continue its session gets: "new_session" (a session
            derived from its first messages, `{session_id}~{hash}`, found again when the conversation is sent
            again) or "error" (`ConversationMismatchError` naming the first differing message). A trimmed or
            compacted history re-syncs either way (`damc.runtime.identity`).
        context_window: the decision LLM's context window (tokens).
        budget_fraction: share of the window left after system, tools and current turn given to memory.
        top_n: FAISS candidates by similarity to the decision query.
        recent: most recent cards always considered.
        pinned: most recent pinned cards (errors, user constraints) always considered.
        max_candidates: cap on the union (the valuer scores at most this many).
        max_scored: with a scorer, cross-encode at most this many candidates per decision (0: all), the best by
            reciprocal-rank fusion of BM25 and cosine: a two-stage cascade (`ScorerValuer`); the others rank below
            every cross-encoded card.
        k_min: the floor of a scorer's threshold selector: the best `k_min` cards that fit the budget are kept
            whatever τ says (None: the scorer's dev-chosen `k_min` from `damc_scorer.json`; 0: no floor).
        value_ttl_s: value cache lifetime (seconds).
        stamp_time: give messages without a `timestamp` the ingest time (enables decay in hours).
        record: keep per-card value statistics (for `archive`) and the last context per session (for the CLI).
        encoder_backend: how the retrieval encoder runs: "onnx" (onnxruntime: the scorer's exported `encoder/`,
            else the packaged int8 all-MiniLM-L6-v2), "torch" (sentence-transformers: opt-in, needs the `[train]`
            extra) or "auto" (onnx whenever the encoder has an ONNX form, in a light and a full install alike;
            torch only for a model without one).
        user_id: default scope's user (Mem0 `user_id`); every card belongs to one scope.
        agent_id: default scope's agent (None: the user's memory without an agent; scopes match exactly).
        share_sessions: other sessions of the same scope are candidates too (off: a session sees its own cards).
        max_card_chars: a card's text beyond this many characters is cut (recorded in `meta["truncated"]`).
        placement: where the fenced memory lines go: "message" (their own message after the system prompt; the
            system message keeps only the agent's instructions) or "system" (inside the system message).
        compressor: how kept cards are written when no `Compressor` is passed: "template" (one short line per
            card), "fields" (field-level: every id of a tool result kept, other fields by the decision query;
            `FieldCompressor`) or "raw" (the card's full text).
    """

    session_id: str = "default"
    on_mismatch: str = "new_session"   # "new_session" | "error": another conversation under this session id
    context_window: int = 8192
    budget_fraction: float = 0.65
    # retrieve: the candidate set (the teacher labels the same one: configs/memory/default.yaml)
    top_n: int = 32
    recent: int = 10
    pinned: int = 10
    max_candidates: int = 48   # chosen on dev splits (candidate recall, key hit): docs/runtime.md "Overhead (measured)"
    # value
    max_scored: int = 8        # chosen on dev splits (key hit) and bench_memory (p50): docs/runtime.md
    k_min: int | None = None   # None: the scorer's dev-chosen floor (docs/runtime.md "The floor")
    value_ttl_s: float = 60.0
    # store and scopes
    stamp_time: bool = True
    record: bool = True
    encoder_backend: str = "auto"
    user_id: str = DEFAULT_USER
    agent_id: str | None = None
    share_sessions: bool = False
    max_card_chars: int = MAX_CARD_CHARS
    placement: str = "message"
    compressor: str = "template"
