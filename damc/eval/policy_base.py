"""The policy interface of the A/B harness: what a policy sees (`DecisionView`, `GoldView`), how it selects
(`Setting`), what it may use (`PolicyEnv`) and what it returns (`PolicyOutput`). The policies themselves are in
`damc.eval.policies`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable

from damc.episodes import DecisionPoint
from damc.runtime.compress import COMPRESSORS
from damc.runtime.store import parse_time
from damc.runtime.valuers import Valuer

MESSAGE_OVERHEAD_TOKENS = 4   # chat-template tokens around each history message (role markers, separators)
RENDERS = tuple(COMPRESSORS)   # template | fields | raw: the runtime's compressors


# ----------------------------------------------------------------------------- what a policy sees

@dataclass(frozen=True)
class DecisionView:
    """Everything a deployable policy may see at a decision: the conversation before it and the tools.

    Attributes:
        session_id: the conversation (the episode id in the harness; card ids are `{session_id}:{index}...`).
        messages: every message before the decision (OpenAI format), the current user turn included.
        tools: the tool schemas available at the decision.
    """

    session_id: str
    messages: tuple[dict[str, Any], ...]
    tools: tuple[dict[str, Any], ...] = ()

    @classmethod
    def of(cls, dp: DecisionPoint) -> "DecisionView":
        """The gold-free view of a decision point: `messages[:k]` and the tools, nothing after."""
        return cls(dp.episode.episode_id, tuple(dp.context), tuple(dp.episode.tools or ()))

    @property
    def now(self) -> float | None:
        """Epoch seconds of the newest message that carries a timestamp (None when none does)."""
        for m in reversed(self.messages):
            t = parse_time(m.get("timestamp"))
            if t is not None:
                return t
        return None


@dataclass(frozen=True)
class GoldView:
    """What only the reference policies receive: the decision point (gold and future included) and its key cards."""

    decision: DecisionPoint
    key_card_ids: tuple[str, ...] = ()

    @classmethod
    def of(cls, dp: DecisionPoint) -> "GoldView":
        return cls(dp, tuple(dp.key_card_ids))


@dataclass(frozen=True)
class Setting:
    """How a policy selects at one evaluation point.

    Attributes:
        budget: history tokens (memory lines or kept messages) the prompt may spend.
        top_k: keep at most this many cards (card policies; None: as many as fit).
        threshold: keep only cards whose value is at least this (card policies; valuers return [0, 1]).
        render: "template" (the runtime's compressed lines) or "raw" (each kept card's raw text).
    """

    budget: int
    top_k: int | None = None
    threshold: float | None = None
    render: str = "template"

    @property
    def key(self) -> str:
        """`1024`, `1024/k4`, `1024/t0.5`, `1024/raw`, … — results are keyed `policy@key`."""
        parts = [str(self.budget)]
        if self.top_k is not None:
            parts.append(f"k{self.top_k}")
        if self.threshold is not None:
            parts.append(f"t{self.threshold:g}")
        if self.render != "template":
            parts.append(self.render)
        return "/".join(parts)

    @property
    def is_sweep(self) -> bool:
        return self.top_k is not None or self.threshold is not None


@dataclass
class PolicyEnv:
    """Resources shared by every policy of a run.

    Attributes:
        count_tokens: `str -> int` under the decision LLM's tokenizer (budgets are in these tokens).
        llm: the decision LLM backend (`log_prob_many`), used by `damc_teacher` and a shared `llm_judge`.
        window_tokens: the decision LLM's context window; `full` drops its oldest messages beyond it.
        memory: the runtime's `MemoryConfig` (the valuers the runtime builds itself, `damc` and `heuristic`,
            take their settings from it, as `DecisionAwareMemory(config=...)` does); None: the defaults.
    """

    count_tokens: Callable[[str], int]
    llm: Any = None
    window_tokens: int | None = None
    memory: Any = None


@dataclass
class PolicyOutput:
    """What a policy built for one decision.

    Attributes:
        messages: the decision context (plain chat messages).
        kept_card_ids: cards whose content made it into the prompt (masked ones included).
        candidate_ids: cards the policy chose from (card policies: the runtime's candidate set).
        history_tokens: tokens of the history part (memory lines or kept messages).
        timings_ms: per-stage wall time (card policies: the runtime's `Context.timings_ms`).
        values: the valuer's value per kept card.
        truncated: message policies: whether history messages were dropped (`full`: the oldest, only when the
            whole history would not fit the decision LLM's window); None for card policies.
    """

    messages: list[dict[str, str]]
    kept_card_ids: list[str]
    candidate_ids: list[str]
    history_tokens: int
    timings_ms: dict[str, float] = field(default_factory=dict)
    values: dict[str, float] = field(default_factory=dict)
    truncated: bool | None = None


class Policy(ABC):
    """A memory policy: builds the decision context for a `DecisionView` under a `Setting`.

    Attributes:
        name: registry name.
        kind: "card" (a valuer in the runtime) or "message".
        budgeted: False when the policy ignores the budget (run once per decision, reported at every budget).
        needs_gold: True only for reference policies (they get a `GoldView`).
        needs_llm: True when the policy values cards with the decision LLM (refused by `score=false`); optional
            for a policy registered without subclassing `Policy` (read with a False default).
    """

    name: str = "policy"
    kind: str = "message"
    budgeted: bool = True
    needs_gold: bool = False
    needs_llm: bool = False

    @abstractmethod
    def build(self, view: DecisionView, setting: Setting, env: PolicyEnv, *, memory: Any = None,
              valuer: Valuer | None = None) -> PolicyOutput:
        """The decision context this policy gives the decision LLM."""


# ----------------------------------------------------------------------------- message policies

