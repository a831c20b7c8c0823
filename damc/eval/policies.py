"""Memory policies the A/B harness compares — the product and its competitors, through one code path.

**Card policies are valuers plugged into the runtime.** Per episode the harness feeds one fresh
`DecisionAwareMemory` the conversation in order, and at each decision every card policy calls that memory's
own `build_context` with its valuer: the same candidates (FAISS top-N ∪ recent ∪ pinned, capped), the same
packing rule (`damc.runtime.select`), the same compressor and the same assembly. They differ only in how they
value cards. `damc` is the runtime exactly as `DecisionAwareMemory(path, scorer=...)` runs for a user
(`damc.runtime.memory.default_valuer`); `heuristic` is the runtime with `valuer="heuristic"` (no scorer).

**Message policies** (`full`, `window`, `obs_mask`) keep chat messages instead of cards.

**Gold-free view.** A deployable policy receives a `DecisionView` — the messages before the decision and the
tools — and nothing else: no gold action, no future message, no key-card ids. Only the references `oracle`,
`oracle_fill` and `damc_teacher` receive the gold, through an explicit `GoldView` argument (`needs_gold = True`).

| name | kind | how it values / keeps | sees the gold |
| --- | --- | --- | --- |
| `damc` | card | the runtime's default valuer with the student scorer (`scorer=`) | no |
| `heuristic` | card | the runtime's default valuer without a scorer (the cold-start prior) | no |
| `recency` | card | newest first | no |
| `similarity` | card | embedding cosine (the memory's own encoder and cached embeddings) | no |
| `bm25` | card | Okapi BM25 of the decision query over the candidates (equal to bm25s) | no |
| `rrf` | card | BM25 + cosine by reciprocal-rank fusion: the `damc` cascade's first stage, no student | no |
| `llm_judge` | card | the seed's 0–10 rating prompt with a chat model | no |
| `generative_agents` | card | recency + importance + relevance (Park et al. 2023) | no |
| `damc_knn` | card | the teacher's non-parametric value over labelled decisions (`labels=`) | no |
| `damc_teacher` | card | leave-one-out deltas of the decision LLM for the gold action | yes |
| `oracle` | card | the cards holding the gold's facts (`key_card_ids`, else the gold's values) | yes |
| `oracle_fill` | card | the oracle's cards first, then the others in `rrf`'s order while the budget lasts | yes |
| `full` | message | the whole history (only the LLM's window limits it) | no |
| `window` | message | the last N messages, trimmed to the budget (LangChain `trim_messages`) | no |
| `obs_mask` | message | every message, old tool outputs replaced by a placeholder, trimmed | no |

A `Setting` says how a card policy selects: under a token `budget` alone (as many as fit), with `top_k`
cards at most, or only cards whose value clears `threshold`; and how kept cards are rendered (`template`:
the runtime's compressed lines; `raw`: the raw cards) — the same for every card policy.

Example:
    >>> pol = make_policy("bm25")
    >>> out = pol.build(view, Setting(1024), env, memory=memory, valuer=pol.make_valuer(env))
    >>> out.kept_card_ids, out.history_tokens
"""

from __future__ import annotations

import functools
import time
from abc import abstractmethod
from typing import Any, Sequence

import numpy as np

from damc.cards import encode_messages
from damc.episodes import DecisionPoint
from damc.eval.policy_base import (
    MESSAGE_OVERHEAD_TOKENS,
    RENDERS,
    DecisionView,
    GoldView,
    Policy,
    PolicyEnv,
    PolicyOutput,
    Setting,
)
from damc.facts import gold_values, holds_any
from damc.prompting import build_decision_messages, message_to_chat
from damc.runtime.assemble import split_conversation
from damc.runtime.compress import COMPRESSORS, Compressor
from damc.runtime.select import Selector, Threshold, TopK
from damc.runtime.valuers import (
    BM25Valuer,
    GenerativeAgentsValuer,
    KNNValuer,
    LLMJudgeValuer,
    RecencyValuer,
    RRFValuer,
    SimilarityValuer,
    Valuer,
)


def _message_tokens(m: dict[str, Any], env: PolicyEnv) -> int:
    return env.count_tokens(message_to_chat(m)["content"]) + MESSAGE_OVERHEAD_TOKENS


def trim_history(history: Sequence[dict[str, Any]], env: PolicyEnv, *, max_messages: int | None,
                 budget: int | None) -> list[int]:
    """Indices of the history messages a LangChain `trim_messages` window keeps.

    The window keeps the last `max_messages` messages, then the last ones within `budget` tokens, never
    starting on an orphan tool result (`start_on` human or ai) — the trimming people use in LangChain agents.
    """
    from langchain_core.messages import convert_to_messages, trim_messages

    lc = convert_to_messages([_lc_ready(m) for m in history])
    for i, msg in enumerate(lc):
        msg.id = str(i)
    if max_messages is not None:
        lc = trim_messages(lc, max_tokens=max_messages, token_counter=len, strategy="last", start_on=("human", "ai"))
    if budget is not None:
        def count(msgs: list[Any]) -> int:
            return sum(_message_tokens(history[int(m.id)], env) for m in msgs)
        lc = trim_messages(lc, max_tokens=budget, token_counter=count, strategy="last", start_on=("human", "ai"))
    return [int(m.id) for m in lc]


def _lc_ready(m: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI message LangChain accepts (no extra keys such as timestamps)."""
    out = {k: v for k, v in m.items() if k in {"role", "content", "tool_calls", "tool_call_id", "name"}}
    if out.get("content") is None:
        out["content"] = ""
    return out


class MessagePolicy(Policy):
    """Keeps history messages verbatim. Subclasses implement `keep` (which history messages)."""

    kind = "message"

    @abstractmethod
    def keep(self, history: list[dict[str, Any]], budget: int, env: PolicyEnv, fixed: list[dict[str, str]]
             ) -> tuple[list[dict[str, Any]], list[int]]:
        """(messages to keep — possibly edited copies —, their indices in `history`)."""

    def build(self, view, setting, env, *, memory=None, valuer=None):
        t0 = time.perf_counter()
        msgs = list(view.messages)
        system, _, turn, u = split_conversation(msgs)
        src = [i for i in range(u) if msgs[i].get("role") != "system"]  # history position -> message index
        history = [msgs[i] for i in src]
        fixed = build_decision_messages(system, view.tools, [], turn)
        kept, idx = self.keep(history, setting.budget, env, fixed)
        out = build_decision_messages(system, view.tools, kept, turn)
        cards = encode_messages(msgs[:u], view.session_id)
        in_window = {src[i] for i in idx}
        kept_ids = [c.card_id for c in cards if c.position in in_window or c.result_index in in_window]
        ms = (time.perf_counter() - t0) * 1000.0
        return PolicyOutput(out, kept_ids, [c.card_id for c in cards], sum(_message_tokens(m, env) for m in kept),
                            {"total": ms}, truncated=len(idx) < len(history))


class FullPolicy(MessagePolicy):
    """The whole history, verbatim (no memory management; ignores the budget).

    Only the decision LLM's window limits it: when system prompt + tools + history + current turn +
    `reserve` tokens would not fit, the oldest history messages go (what any chat client does).
    """

    name = "full"
    budgeted = False

    def __init__(self, reserve: int = 256):
        self.reserve = reserve

    def keep(self, history, budget, env, fixed):
        limit = None
        if env.window_tokens:
            fixed_tokens = sum(env.count_tokens(m["content"]) + MESSAGE_OVERHEAD_TOKENS for m in fixed)
            limit = max(env.window_tokens - fixed_tokens - self.reserve, 0)
        idx = trim_history(history, env, max_messages=None, budget=limit)
        return [history[i] for i in idx], idx


class WindowPolicy(MessagePolicy):
    """The last `n_messages` history messages (sliding window), trimmed to the budget with LangChain."""

    name = "window"

    def __init__(self, n_messages: int = 10):
        self.n_messages = n_messages

    def keep(self, history, budget, env, fixed):
        idx = trim_history(history, env, max_messages=self.n_messages, budget=budget)
        return [history[i] for i in idx], idx


class ObservationMaskPolicy(MessagePolicy):
    """Every history message, with tool outputs older than the last `keep_last` replaced by a placeholder.

    Observation masking (as in SWE-agent-style agents): the calls stay, old observations go. When the
    masked history still exceeds the budget, the oldest messages are trimmed.
    """

    name = "obs_mask"

    def __init__(self, keep_last: int = 3, placeholder: str = "[old tool output omitted]"):
        self.keep_last, self.placeholder = keep_last, placeholder

    def keep(self, history, budget, env, fixed):
        hist = [dict(m) for m in history]
        tool_idx = [i for i, m in enumerate(hist) if m.get("role") == "tool"]
        for i in tool_idx[: max(len(tool_idx) - self.keep_last, 0)]:
            hist[i]["content"] = self.placeholder
        idx = trim_history(hist, env, max_messages=None, budget=budget)
        return [hist[i] for i in idx], idx


# ----------------------------------------------------------------------------- card policies

def decision_messages(messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None, context: Any,
                      placement: str = "message") -> list[dict[str, str]]:
    """The runtime's context as the small local decision model reads it.

    `build_context` returns the caller's own chat format (tools stay in the API's `tools` parameter). A local
    model without native tool calling needs them as text and a call syntax: `build_decision_messages` writes
    the system prompt (DAMC's default when the conversation has none, which tells the model to write calls as
    `name(arg=value, ...)`), the fenced memory lines the runtime kept (`context.memory_lines`), the tools, and
    the current turn with calls as canonical text — the same rendering the teacher labels with.
    """
    system, _, turn, _ = split_conversation(list(messages))
    return build_decision_messages(system, tools, [], turn, memory_lines=context.memory_lines or None,
                                   placement=placement)


class CardPolicy(Policy):
    """A valuer plugged into `DecisionAwareMemory.build_context`; subclasses implement `make_valuer`.

    Attributes:
        sweepable: whether `top_k` / `threshold` settings apply (False for references with their own rule).
    """

    kind = "card"
    sweepable = True

    @abstractmethod
    def make_valuer(self, env: PolicyEnv, gold: GoldView | None = None) -> Valuer:
        """The valuer (built once per run; per decision for policies that need the gold)."""

    k_min = 0   # a threshold's floor (the best k_min cards kept whatever τ says); the product's own for `damc`

    def selector(self, setting: Setting) -> Selector:
        """`Threshold(τ)` when the setting has one (with its `top_k` and the policy's floor `k_min`), else
        `TopK(top_k)` (None: all that fit)."""
        if setting.threshold is not None:
            return Threshold(setting.threshold, k=setting.top_k, k_min=self.k_min)
        return TopK(setting.top_k)

    @staticmethod
    def compressor(setting: Setting) -> Compressor:
        if setting.render not in RENDERS:
            raise ValueError(f"render must be one of {RENDERS}, got {setting.render!r}")
        return COMPRESSORS[setting.render]()

    def build(self, view, setting, env, *, memory=None, valuer=None):
        if memory is None or valuer is None:
            raise ValueError(f"{self.name}: a card policy runs inside a DecisionAwareMemory (memory=, valuer=)")
        ctx = memory.build_context(list(view.messages), list(view.tools) or None, budget_tokens=setting.budget,
                                   session_id=view.session_id, now=view.now, valuer=valuer,
                                   selector=self.selector(setting), compressor=self.compressor(setting))
        return PolicyOutput(decision_messages(view.messages, view.tools, ctx, memory.config.placement),
                            [s.card_id for s in ctx.selected], ctx.candidate_ids, ctx.memory_tokens,
                            dict(ctx.timings_ms), {s.card_id: s.value for s in ctx.selected})


class DAMCPolicy(CardPolicy):
    """The product: the runtime's default valuer with the exported student scorer, exactly as
    `DecisionAwareMemory(path, scorer=scorer)` builds it (`default_valuer`)."""

    name = "damc"

    def __init__(self, scorer: str | None = None):
        if not scorer:
            raise ValueError("damc needs `scorer=` (an exported scorer directory, scripts/export.py)")
        self.scorer = scorer

    def make_valuer(self, env, gold=None):
        from damc.runtime.memory import default_valuer

        return default_valuer(self.scorer, getattr(env, "memory", None))

    @functools.cached_property
    def k_min(self) -> int:
        """The product's floor under a swept threshold: the scorer's `k_min` (chosen on dev with τ), as
        `default_selector` builds it in `DecisionAwareMemory`."""
        from damc.runtime.scorer_metadata import ScorerMetadata

        return ScorerMetadata.load(self.scorer).k_min


class HeuristicPolicy(CardPolicy):
    """The runtime without a scorer: `DecisionAwareMemory(valuer="heuristic")`, the heuristic cold-start prior."""

    name = "heuristic"

    def make_valuer(self, env, gold=None):
        from damc.runtime.memory import named_valuer

        return named_valuer("heuristic", None, getattr(env, "memory", None))


class RecencyPolicy(CardPolicy):
    """Newest cards first."""

    name = "recency"

    def make_valuer(self, env, gold=None):
        return RecencyValuer()


class SimilarityPolicy(CardPolicy):
    """Cards by embedding cosine to the decision query (the memory's own encoder and cached embeddings)."""

    name = "similarity"

    def make_valuer(self, env, gold=None):
        return SimilarityValuer()


class BM25Policy(CardPolicy):
    """Cards by Okapi BM25 of the decision query over the candidates."""

    name = "bm25"

    def __init__(self, k1: float = 1.5, b: float = 0.75):
        self.k1, self.b = k1, b

    def make_valuer(self, env, gold=None):
        return BM25Valuer(self.k1, self.b)


class RRFPolicy(CardPolicy):
    """Cards by reciprocal-rank fusion of BM25 and cosine (`RRFValuer`): the order in which the `damc` cascade
    picks the candidates its student reads (`ScorerValuer(max_scored=M)`) — the unlearned baseline every learned
    policy is judged against."""

    name = "rrf"

    def make_valuer(self, env, gold=None):
        return RRFValuer()


class LLMJudgePolicy(CardPolicy):
    """Cards by the runtime's LLM judge (the seed's 0–10 rating prompt). When the judge model is the decision
    LLM, the loaded `damc.llm.LocalLLM` is shared."""

    name = "llm_judge"
    needs_llm = True

    def __init__(self, model: str = "smollm2-135m", **judge_kwargs: Any):
        self.model, self.judge_kwargs = model, judge_kwargs

    def make_valuer(self, env, gold=None):
        from damc.llm import LocalLLM

        same = isinstance(env.llm, LocalLLM) and env.llm.model_id == self.model
        return LLMJudgeValuer(model=env.llm if same else self.model, **self.judge_kwargs)


class GenerativeAgentsPolicy(CardPolicy):
    """Park et al. (2023): recency + importance (the heuristic prior) + relevance, each min-max normalised."""

    name = "generative_agents"

    def __init__(self, decay: float = 0.99, weights: Sequence[float] = (1.0, 1.0, 1.0)):
        self.decay, self.weights = decay, tuple(weights)

    def make_valuer(self, env, gold=None):
        return GenerativeAgentsValuer(self.decay, self.weights)


class DAMCKNNPolicy(CardPolicy):
    """Cards by the teacher's non-parametric value: deltas of similar labelled decisions (no student)."""

    name = "damc_knn"

    def __init__(self, labels: str | None = None, **knn_kwargs: Any):
        if not labels:
            raise ValueError("damc_knn needs `labels=` (a labels dataset directory, scripts/label.py)")
        self.labels, self.knn_kwargs = labels, knn_kwargs

    @functools.cached_property
    def knn(self) -> Any:
        from damc.labels import load_labels
        from damc.runtime.knn import KNNValue

        return KNNValue(**self.knn_kwargs).fit(load_labels(self.labels))

    def make_valuer(self, env, gold=None):
        return KNNValuer(self.knn)


# ----------------------------------------------------------------------------- references (see the gold)

class TeacherValuer(Valuer):
    """Leave-one-out deltas (nats) of the decision LLM for the gold action over the given cards."""

    name = "teacher_loo"

    def __init__(self, llm: Any, decision: DecisionPoint):
        self.llm, self.decision = llm, decision

    def value(self, query, cards, now=None):
        from damc.teacher.estimators import LeaveOneOut

        if not cards:
            return np.zeros(0, dtype=np.float32)
        res = LeaveOneOut().estimate(self.llm, self.decision, list(cards))
        return np.nan_to_num(np.asarray(res.deltas, dtype=np.float64), nan=-1e9).astype(np.float32)


class DAMCTeacherPolicy(CardPolicy):
    """Cards by leave-one-out deltas of the decision LLM for the *gold* action, computed at decision time over
    the runtime's candidates. It peeks at the gold: a reference (what the student imitates), not deployable;
    one LLM pass per candidate (the memory's `max_candidates` bounds the cost)."""

    name = "damc_teacher"
    needs_gold = True
    needs_llm = True
    sweepable = False

    def make_valuer(self, env, gold=None):
        if gold is None or env.llm is None:
            raise ValueError("damc_teacher needs the gold (GoldView) and the decision LLM (PolicyEnv.llm)")
        return TeacherValuer(env.llm, gold.decision)


class OracleValuer(Valuer):
    """1 for the cards holding the gold's facts (`key_card_ids` where recorded, else the gold's argument
    values), 0 otherwise."""

    name = "oracle"

    def __init__(self, gold: GoldView):
        self.keys = set(gold.key_card_ids)
        self.values = [] if self.keys else gold_values(gold.decision.gold)

    def value(self, query, cards, now=None):
        if self.keys:
            return np.array([c.card_id in self.keys for c in cards], dtype=np.float32)
        return np.array([holds_any(c.raw_text, self.values) for c in cards], dtype=np.float32)


class OraclePolicy(CardPolicy):
    """Only the candidates holding the gold's facts (`Threshold(0.5)` over `OracleValuer`), under the budget:
    the upper bound that shows the headroom left by retrieval and valuing (peeks at the gold)."""

    name = "oracle"
    needs_gold = True
    sweepable = False

    def make_valuer(self, env, gold=None):
        if gold is None:
            raise ValueError("oracle needs the gold (GoldView)")
        return OracleValuer(gold)

    def selector(self, setting):
        return Threshold(0.5)


class OracleFillValuer(Valuer):
    """The oracle's cards first, every other candidate after them in `rrf`'s order: `(oracle + rrf) / 2`, so a card
    holding the gold's facts (in (0.5, 1]) always outranks one that does not (in (0, 0.5]), and within each group
    the reciprocal-rank fusion of BM25 and cosine decides."""

    name = "oracle_fill"

    def __init__(self, gold: GoldView):
        self.oracle, self.rrf = OracleValuer(gold), RRFValuer()

    def bind(self, memory: Any) -> None:
        self.rrf.bind(memory)

    def value(self, query, cards, now=None):
        if not cards:
            return np.zeros(0, dtype=np.float32)
        keys, rrf = self.oracle.value(query, cards, now), self.rrf.value(query, cards, now)
        return (0.5 * keys + 0.5 * rrf).astype(np.float32)


class OracleFillPolicy(CardPolicy):
    """The best a valuer can do under the runtime's own selector: the cards holding the gold's facts first, then the
    rest in `rrf`'s order, as many as the setting keeps (all that fit the budget, or `top_k`). `oracle` keeps the key
    cards *only*, so where the budget holds more — the recent turns, the step the conversation is at — it sends less
    than any deployable policy and is no upper bound (τ²-bench telecom: docs/results.md); `oracle_fill` is the
    reference a valuer's headroom is read against. Peeks at the gold."""

    name = "oracle_fill"
    needs_gold = True

    def make_valuer(self, env, gold=None):
        if gold is None:
            raise ValueError("oracle_fill needs the gold (GoldView)")
        return OracleFillValuer(gold)


# ----------------------------------------------------------------------------- registry

POLICIES: dict[str, type[Policy]] = {p.name: p for p in (
    FullPolicy, WindowPolicy, ObservationMaskPolicy, DAMCPolicy, HeuristicPolicy, RecencyPolicy, SimilarityPolicy,
    BM25Policy, RRFPolicy, LLMJudgePolicy, GenerativeAgentsPolicy, DAMCKNNPolicy, DAMCTeacherPolicy, OraclePolicy,
    OracleFillPolicy)}


def make_policy(name: str, **kwargs: Any) -> Policy:
    """A policy by registry name with its keyword options (see each class).

    Raises:
        KeyError: an unknown name (the message lists the known ones).
        TypeError: an option the policy does not take (the message names the policy).
    """
    if name not in POLICIES:
        raise KeyError(f"unknown policy {name!r}; known: {', '.join(POLICIES)}")
    try:
        return POLICIES[name](**kwargs)
    except TypeError as e:
        raise TypeError(f"policy {name!r}: {e}") from None


__all__ = ["CardPolicy", "DecisionView", "GoldView", "MessagePolicy", "OracleFillValuer", "OracleValuer", "POLICIES",
           "Policy", "PolicyEnv", "PolicyOutput", "Setting", "TeacherValuer", "make_policy"]
