"""Memory policies compared by the A/B harness: what history goes into the prompt for one decision.

Every policy answers one question through one interface:

    out = policy.build(dp, cards, budget, ctx)   # -> PolicyOutput(messages, kept_card_ids, ...)

`dp` is the `DecisionPoint`, `cards` its candidate cards (built from the messages before the current
user turn, see docs/ARCHITECTURE.md), `budget` the token cap of the *history part* of the prompt (the
system prompt, the tools and the current turn are always kept verbatim and never count against it),
and `ctx` the shared `PolicyContext` (decision-LLM token counter, the decision LLM itself). The
messages always come from `damc.prompting.build_decision_messages`, so every policy is scored on the
same rendering.

Policies (names as in `POLICIES`):

| name                | keeps                                                                          |
| ------------------- | ------------------------------------------------------------------------------ |
| `full`              | the whole history (ignores the budget: the "no memory management" reference)  |
| `window`            | the last N history messages (`langchain_core.messages.trim_messages`), ≤ budget |
| `recency`           | newest cards until the budget is full                                          |
| `similarity`        | cards by MiniLM cosine to the decision query                                   |
| `bm25`              | cards by BM25 (rank-bm25) against the decision query                           |
| `llm_judge`         | cards by the runtime's LLM judge (the article's 0–10 rating prompt)            |
| `generative_agents` | recency + importance + relevance, each min-max normalised (Park et al. 2023)   |
| `obs_mask`          | every message, old tool outputs replaced by a placeholder, oldest trimmed      |
| `damc_knn`          | cards by the non-parametric value (KNN over labelled decisions)                |
| `damc_student`      | cards by the exported `CardScorer`                                             |
| `damc_teacher`      | cards by leave-one-out deltas of the decision LLM (peeks at the gold: reference) |
| `oracle`            | cards holding the gold's facts (`key_card_ids`, else the gold's argument values) |

All card-scoring policies share one selection rule (`greedy_budget`: best score first, a card that
does not fit is skipped, kept cards go back in chronological order), so they differ only in how they
value cards. `damc_*` policies put their cards through the runtime's templates into the "Relevant
history" section (`compress=False` puts the raw cards in as chat messages instead).

Example:
    >>> ctx = PolicyContext(count_tokens=token_counter(tokenizer))
    >>> pol = make_policy("bm25")
    >>> out = pol.build(dp, cards, 1024, ctx)
    >>> out.kept_card_ids[:2], out.history_tokens
"""

from __future__ import annotations

import functools
import logging
import re
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from damc.cards import Card
from damc.runtime.compress import TemplateCompressor
from damc.data.episodes import DecisionPoint, call_arguments, iter_scalars
from damc.prompting import build_decision_messages, card_to_messages, message_to_chat
from damc.query import render_card, render_decision_query

logger = logging.getLogger(__name__)

MESSAGE_OVERHEAD_TOKENS = 4   # chat-template tokens around each history message (role markers, separators)
LINE_OVERHEAD_TOKENS = 1      # newline between memory lines


@dataclass
class PolicyContext:
    """Resources shared by every policy of a run.

    Attributes:
        count_tokens: `str -> int` under the decision LLM's tokenizer (budgets are in these tokens).
        llm: the decision LLM backend (`log_prob`/`log_prob_many`), used by `damc_teacher`.
        window_tokens: the decision LLM's context window; `full` drops its oldest messages beyond it.
    """

    count_tokens: Callable[[str], int]
    llm: Any = None
    window_tokens: int | None = None


@dataclass
class PolicyOutput:
    """What a policy built for one decision.

    Attributes:
        messages: the decision context (plain chat messages from `build_decision_messages`).
        kept_card_ids: candidate cards whose content made it into the prompt (masked ones included).
        history_tokens: tokens of the history part (kept messages or memory lines) under the budget.
        overhead_ms: wall time of the policy (score + select + compress + assemble).
        scores: the policy's value per kept card id, where it scores cards.
        prompt_tokens: filled in by the harness (decision-LLM tokenizer over the templated prompt).
    """

    messages: list[dict[str, str]]
    kept_card_ids: list[str]
    history_tokens: int
    overhead_ms: float = 0.0
    scores: dict[str, float] = field(default_factory=dict)
    prompt_tokens: int = 0


@dataclass
class Selection:
    """The history a policy chose: chat messages and/or compressed memory lines."""

    history: list[dict[str, Any]]
    kept_card_ids: list[str]
    history_tokens: int
    memory_lines: list[str] | None = None
    scores: dict[str, float] = field(default_factory=dict)
    reused_ms: float = 0.0   # scoring time of reused scores (`CardPolicy.reuse_scores`), counted as overhead


class Policy(ABC):
    """A memory policy. Subclasses implement `select`; `build` times it and assembles the prompt.

    Attributes:
        name: registry name (results are keyed `name@budget`).
        budgeted: False when the policy ignores the budget (the harness then runs it once per decision).
    """

    name: str = "policy"
    budgeted: bool = True

    def build(self, dp: DecisionPoint, cards: list[Card], budget: int, ctx: PolicyContext) -> PolicyOutput:
        """The decision context this policy gives the decision LLM at `dp` under `budget` history tokens."""
        t0 = time.perf_counter()
        sel = self.select(dp, cards, budget, ctx)
        messages = build_decision_messages(dp.system, dp.episode.tools, sel.history, dp.current_turn,
                                           memory_lines=sel.memory_lines)
        ms = (time.perf_counter() - t0) * 1000.0 + sel.reused_ms
        return PolicyOutput(messages, sel.kept_card_ids, sel.history_tokens, ms, sel.scores)

    @abstractmethod
    def select(self, dp: DecisionPoint, cards: list[Card], budget: int, ctx: PolicyContext) -> Selection:
        """Choose the history for `dp` within `budget` tokens."""


# ----------------------------------------------------------------------------- message-window policies

def _message_tokens(m: dict[str, Any], ctx: PolicyContext) -> int:
    return ctx.count_tokens(message_to_chat(m)["content"]) + MESSAGE_OVERHEAD_TOKENS


def _cards_of_messages(cards: Sequence[Card], indices: set[int]) -> list[str]:
    """Cards whose call or result (or text) message is among `indices`."""
    return [c.card_id for c in cards if c.position in indices or c.result_index in indices]


def trim_history(history: Sequence[dict[str, Any]], ctx: PolicyContext, *, max_messages: int | None,
                 budget: int | None) -> list[int]:
    """Indices of the history messages a LangChain `trim_messages` window keeps.

    The window keeps the last `max_messages` messages, then the last ones within `budget` tokens, never
    starting on an orphan tool result (`start_on` human or ai) — the trimming people use in LangChain agents.
    """
    from langchain_core.messages import convert_to_messages, trim_messages

    lc = convert_to_messages([_lc_ready(m) for m in history if m.get("role") != "system"])
    kept_src = [i for i, m in enumerate(history) if m.get("role") != "system"]
    for msg, i in zip(lc, kept_src):
        msg.id = str(i)
    if max_messages is not None:
        lc = trim_messages(lc, max_tokens=max_messages, token_counter=len, strategy="last",
                           start_on=("human", "ai"))
    if budget is not None:
        def count(msgs: list[Any]) -> int:
            return sum(_message_tokens(history[int(m.id)], ctx) for m in msgs)
        lc = trim_messages(lc, max_tokens=budget, token_counter=count, strategy="last", start_on=("human", "ai"))
    return [int(m.id) for m in lc]


def _lc_ready(m: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI message LangChain accepts (no extra keys such as timestamps)."""
    keep = {"role", "content", "tool_calls", "tool_call_id", "name"}
    out = {k: v for k, v in m.items() if k in keep}
    if out.get("content") is None:
        out["content"] = ""
    return out


class FullPolicy(Policy):
    """The whole history, verbatim (no memory management; ignores the budget).

    Only the decision LLM's window limits it: when system prompt + tools + history + current turn +
    `reserve` tokens would not fit, the oldest history messages go (what any chat client does).
    """

    name = "full"
    budgeted = False

    def __init__(self, reserve: int = 256):
        self.reserve = reserve

    def select(self, dp, cards, budget, ctx):
        hist = dp.history
        limit = None
        if ctx.window_tokens:
            fixed = build_decision_messages(dp.system, dp.episode.tools, [], dp.current_turn)
            fixed_tokens = sum(ctx.count_tokens(m["content"]) + MESSAGE_OVERHEAD_TOKENS for m in fixed)
            limit = max(ctx.window_tokens - fixed_tokens - self.reserve, 0)
        idx = trim_history(hist, ctx, max_messages=None, budget=limit)
        msgs = [hist[i] for i in idx]
        return Selection(msgs, _cards_of_messages(cards, set(idx)), sum(_message_tokens(m, ctx) for m in msgs))


class WindowPolicy(Policy):
    """The last `n_messages` history messages (sliding window), trimmed to the budget with LangChain."""

    name = "window"

    def __init__(self, n_messages: int = 10):
        self.n_messages = n_messages

    def select(self, dp, cards, budget, ctx):
        hist = dp.history
        idx = trim_history(hist, ctx, max_messages=self.n_messages, budget=budget)
        msgs = [hist[i] for i in idx]
        return Selection(msgs, _cards_of_messages(cards, set(idx)), sum(_message_tokens(m, ctx) for m in msgs))


class ObservationMaskPolicy(Policy):
    """Every history message, with tool outputs older than the last `keep_last` replaced by a placeholder.

    Observation masking (as in SWE-agent-style agents): the calls stay, old observations go. When the
    masked history still exceeds the budget, the oldest messages are trimmed.
    """

    name = "obs_mask"

    def __init__(self, keep_last: int = 3, placeholder: str = "[old tool output omitted]"):
        self.keep_last = keep_last
        self.placeholder = placeholder

    def select(self, dp, cards, budget, ctx):
        hist = [dict(m) for m in dp.history]
        tool_idx = [i for i, m in enumerate(hist) if m.get("role") == "tool"]
        for i in tool_idx[: max(len(tool_idx) - self.keep_last, 0)]:
            hist[i]["content"] = self.placeholder
        idx = trim_history(hist, ctx, max_messages=None, budget=budget)
        msgs = [hist[i] for i in idx]
        return Selection(msgs, _cards_of_messages(cards, set(idx)), sum(_message_tokens(m, ctx) for m in msgs))


# ----------------------------------------------------------------------------- card-scoring policies

def best_first(scores: Sequence[float], indices: Iterable[int]) -> list[int]:
    """`indices` by descending score; ties go to the later card (newer history first)."""
    return sorted(indices, key=lambda i: (-float(scores[i]), -i))


def greedy_budget(costs: Sequence[int], scores: Sequence[float], budget: int) -> list[int]:
    """Indices kept by best-score-first packing under `budget` (a card that does not fit is skipped).

    Ties go to the later card (newer history first). The result is in the original (chronological) order.
    """
    kept, used = [], 0
    for i in best_first(scores, range(len(scores))):
        if used + costs[i] <= budget:
            kept.append(i)
            used += costs[i]
    return sorted(kept)


class CardPolicy(Policy):
    """A policy that values each candidate card, packs the best under the budget and renders them.

    Subclasses implement `score`. With `compress`, kept cards become "Relevant history" lines through the
    runtime's templates (`damc.runtime.compress.template_compress`), each tagged `[card_id]`; otherwise they go in
    as chat messages in chronological order. `top_k` / `min_score` (set through `make_policy`) restrict the
    cards the packing may use, so a capped policy can stay below its budget.
    """

    compress: bool = False
    top_k: int | None = None        # keep at most this many cards, even when more would fit the budget
    min_score: float | None = None  # keep only cards scoring at least this (in the policy's own score units)
    #: reuse the last decision's scores when the same decision comes again with the same cards (the A/B
    #: harness turns it on: scores do not depend on the budget, so each decision is scored once for all
    #: budgets). The reused scoring time still counts in `overhead_ms`, as if scored afresh.
    reuse_scores: bool = False
    _last_scores: tuple[Any, np.ndarray, float] | None = None

    @abstractmethod
    def score(self, dp: DecisionPoint, cards: list[Card], ctx: PolicyContext) -> np.ndarray:
        """One value per card (higher = keep first)."""

    def eligible(self, scores: np.ndarray) -> np.ndarray:
        """Indices the budget packing may use: `min_score` and `top_k` applied (best first, newest on ties)."""
        idx = np.arange(len(scores))
        if self.min_score is not None:
            idx = idx[scores[idx] >= self.min_score]
        if self.top_k is not None and len(idx) > self.top_k:
            idx = np.array(sorted(best_first(scores, idx.tolist())[: self.top_k]), dtype=int)
        return idx

    def select(self, dp, cards, budget, ctx):
        if not cards:
            return Selection([], [], 0, None)
        scores, reused_ms = self._scores(dp, cards, ctx)  # (n_cards,)
        if self.top_k is not None or self.min_score is not None:
            idx = self.eligible(scores)
            if len(idx) == 0:
                return Selection([], [], 0, None)
            cards = [cards[i] for i in idx]
            scores = scores[idx]
        if self.compress:
            lines = [c.line for c in TemplateCompressor().compress(cards)]
            costs = [ctx.count_tokens(s) + LINE_OVERHEAD_TOKENS for s in lines]
        else:
            costs = [sum(ctx.count_tokens(m["content"]) + MESSAGE_OVERHEAD_TOKENS for m in card_to_messages(c))
                     for c in cards]
        kept = greedy_budget(costs, scores, budget)
        ids = [cards[i].card_id for i in kept]
        used = sum(costs[i] for i in kept)
        sc = {cards[i].card_id: float(scores[i]) for i in kept}
        if self.compress:
            return Selection([], ids, used, [lines[i] for i in kept], sc, reused_ms)
        hist = [m for i in kept for m in card_to_messages(cards[i])]
        return Selection(hist, ids, used, None, sc, reused_ms)

    def _scores(self, dp: DecisionPoint, cards: list[Card], ctx: PolicyContext) -> tuple[np.ndarray, float]:
        """`score(...)` as floats, and the milliseconds of scoring this call did not spend (reused scores)."""
        key = (dp.episode.episode_id, dp.index, tuple((c.card_id, c.raw_text) for c in cards))
        if self.reuse_scores and self._last_scores is not None and self._last_scores[0] == key:
            return self._last_scores[1], self._last_scores[2]
        t0 = time.perf_counter()
        scores = np.asarray(self.score(dp, cards, ctx), dtype=float)
        if self.reuse_scores:
            self._last_scores = (key, scores, (time.perf_counter() - t0) * 1000.0)
        return scores, 0.0


def query_of(dp: DecisionPoint) -> str:
    """The decision query every scoring policy uses (never sees the gold)."""
    return render_decision_query(dp.context, dp.episode.tools)


class RecencyPolicy(CardPolicy):
    """Newest cards first until the budget is full."""

    name = "recency"

    def score(self, dp, cards, ctx):
        return np.arange(len(cards), dtype=float)


class SimilarityPolicy(CardPolicy):
    """Cards by embedding cosine to the decision query (sentence encoder, MiniLM-L6 by default)."""

    name = "similarity"

    def __init__(self, encoder: str = "minilm-l6", compress: bool = False):
        self.encoder_name = encoder
        self.compress = compress
        self._cache: dict[str, np.ndarray] = {}

    @functools.cached_property
    def encoder(self) -> Any:
        from damc.models import load_sentence_encoder

        return load_sentence_encoder(self.encoder_name)

    def embed_cards(self, cards: list[Card]) -> np.ndarray:
        """Unit card embeddings `(n, dim)`, each card encoded once (as a runtime index does at ingest)."""
        new = [c for c in cards if c.card_id not in self._cache]
        if new:
            vecs = self.encoder.encode([render_card(c) for c in new], normalize_embeddings=True, show_progress_bar=False)
            self._cache.update(zip((c.card_id for c in new), vecs))
        return np.stack([self._cache[c.card_id] for c in cards])

    def score(self, dp, cards, ctx):
        q = self.encoder.encode([query_of(dp)], normalize_embeddings=True, show_progress_bar=False)  # (1, dim)
        return (self.embed_cards(cards) @ q[0]).astype(float)  # (n,)


_TOKEN_RE = re.compile(r"[A-Za-z]+|\d+")


def bm25_tokens(text: str) -> list[str]:
    """Lower-cased words and digit runs (identifiers split on punctuation and underscores)."""
    return [t.lower() for t in _TOKEN_RE.findall(text)]


class BM25Policy(CardPolicy):
    """Cards by Okapi BM25 (rank-bm25) of the decision query over the candidate cards."""

    name = "bm25"

    def __init__(self, compress: bool = False):
        self.compress = compress

    def score(self, dp, cards, ctx):
        from rank_bm25 import BM25Okapi

        docs = [bm25_tokens(render_card(c)) or ["_"] for c in cards]
        return np.asarray(BM25Okapi(docs).get_scores(bm25_tokens(query_of(dp))), dtype=float)


class LLMJudgePolicy(CardPolicy):
    """Cards by the runtime's LLM judge (`damc.runtime.valuers.LLMJudgeValuer`: the article's 0–10 rating prompt).

    Only the `max_cards` newest cards are judged (one LLM pass each); older ones rank below them. When
    the judge model is the decision LLM's, its loaded weights are shared.
    """

    name = "llm_judge"

    def __init__(self, model: str = "smollm2-135m", max_cards: int = 40, compress: bool = False,
                 **judge_kwargs: Any):
        self.model, self.max_cards, self.compress, self.judge_kwargs = model, max_cards, compress, judge_kwargs
        self._valuer: Any = None

    def valuer(self, ctx: PolicyContext) -> Any:
        if self._valuer is None:
            from damc.runtime.valuers import LLMJudgeValuer

            llm = ctx.llm
            same = llm is not None and getattr(llm, "model_id", None) == self.model and hasattr(llm, "model")
            self._valuer = LLMJudgeValuer(model=(llm.model, llm.tokenizer) if same else self.model,
                                          **self.judge_kwargs)
        return self._valuer

    def score(self, dp, cards, ctx):
        recent = cards[-self.max_cards:]
        vals = _value(self.valuer(ctx), query_of(dp), recent)
        return np.concatenate([np.full(len(cards) - len(recent), -1.0), vals])


def _value(valuer: Any, query: str, cards: list[Card]) -> np.ndarray:
    """Call a runtime valuer (`value(query, cards)` or `score(query, cards)`)."""
    fn = getattr(valuer, "value", None) or getattr(valuer, "score")
    out = fn(query, cards)
    return np.asarray(getattr(out, "values", out), dtype=float)


class GenerativeAgentsPolicy(CardPolicy):
    """Park et al. (2023) retrieval: α·recency + β·importance + γ·relevance, each min-max normalised.

    recency = `decay ** (messages since the card)` (message distance stands in for game hours);
    importance = the runtime's heuristic prior (errors, user constraints, fresh tool results) instead of an
    LLM's 1–10 poignancy rating, which would cost one LLM call per card; relevance = embedding cosine.
    """

    name = "generative_agents"

    def __init__(self, decay: float = 0.99, weights: Sequence[float] = (1.0, 1.0, 1.0), encoder: str = "minilm-l6",
                 compress: bool = False):
        self.decay, self.weights, self.compress = decay, tuple(weights), compress
        self._sim = SimilarityPolicy(encoder)

    @functools.cached_property
    def importance(self) -> Any:
        from damc.runtime.valuers import HeuristicValuer

        return HeuristicValuer()

    def score(self, dp, cards, ctx):
        last = np.array([c.result_index if c.result_index is not None else c.position for c in cards], dtype=float)
        recency = self.decay ** (dp.index - last)
        importance = _value(self.importance, query_of(dp), cards)
        relevance = self._sim.score(dp, cards, ctx)
        a, b, g = self.weights
        return a * _minmax(recency) + b * _minmax(importance) + g * _minmax(relevance)


def _minmax(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=float)
    span = x.max() - x.min() if x.size else 0.0
    return (x - x.min()) / span if span > 0 else np.zeros_like(x)


class DAMCStudentPolicy(CardPolicy):
    """Cards by the exported student scorer (`CardScorer.from_pretrained(scorer)`), compressed by default.

    Loaded like the runtime loads it (`dtype="auto"`, `backend="auto"`: int8 ONNX when exported, else bf16
    where native), so its overhead is the deployable one; pass `dtype=float32, backend=torch` for exact scores.
    """

    name = "damc_student"

    def __init__(self, scorer: str | None = None, compress: bool = True, **load_kwargs: Any):
        if not scorer:
            raise ValueError("damc_student needs `scorer=` (an exported scorer directory)")
        load_kwargs.setdefault("dtype", "auto")
        load_kwargs.setdefault("backend", "auto")
        self.path, self.compress, self.load_kwargs = scorer, compress, load_kwargs

    @functools.cached_property
    def scorer(self) -> Any:
        from damc.scorer import CardScorer

        return CardScorer.from_pretrained(self.path, **self.load_kwargs)

    def score(self, dp, cards, ctx):
        return np.asarray(self.scorer.score(query_of(dp), cards), dtype=float)


class DAMCKNNPolicy(CardPolicy):
    """Cards by the non-parametric value: deltas of similar labelled decisions (`KNNValue` fitted on labels)."""

    name = "damc_knn"

    def __init__(self, labels: str | None = None, compress: bool = True, **knn_kwargs: Any):
        if not labels:
            raise ValueError("damc_knn needs `labels=` (a labels dataset directory)")
        self.labels, self.compress, self.knn_kwargs = labels, compress, knn_kwargs

    @functools.cached_property
    def knn(self) -> Any:
        from damc.runtime.knn import KNNValue
        from damc.labels import load_labels

        return KNNValue(**self.knn_kwargs).fit(load_labels(self.labels))

    def score(self, dp, cards, ctx):
        return np.asarray(self.knn.value(query_of(dp), cards), dtype=float)


class DAMCTeacherPolicy(CardPolicy):
    """Cards by leave-one-out deltas of the decision LLM for the *gold* action, computed at decision time.

    It peeks at the gold action, so like `oracle` it is a reference (what the student imitates), not a
    deployable policy; it costs one LLM pass per card.
    """

    name = "damc_teacher"

    def __init__(self, compress: bool = True, max_cards: int = 60):
        self.compress, self.max_cards = compress, max_cards

    def score(self, dp, cards, ctx):
        from damc.teacher.estimators import LeaveOneOut

        if ctx.llm is None:
            raise ValueError("damc_teacher needs the decision LLM (a teacher backend) in the PolicyContext")
        res = LeaveOneOut(max_cards=self.max_cards).estimate(ctx.llm, dp, cards)
        return np.nan_to_num(np.asarray(res.deltas, dtype=float), nan=-1e9)  # cards left out of LOO: last


class OraclePolicy(CardPolicy):
    """Cards that hold the gold action's facts: `key_card_ids` where recorded, else cards containing
    the gold's argument values. The upper bound that shows the headroom (peeks at the gold)."""

    name = "oracle"

    def __init__(self, compress: bool = False):
        self.compress = compress

    def key_cards(self, dp: DecisionPoint, cards: list[Card]) -> list[Card]:
        keys = set(dp.key_card_ids)
        if keys:
            return [c for c in cards if c.card_id in keys]
        values = gold_values(dp.gold)
        return [c for c in cards if _holds_any(c, values)]

    def select(self, dp, cards, budget, ctx):
        # only the key cards are candidates; newest first when they do not all fit
        return super().select(dp, self.key_cards(dp, cards), budget, ctx)

    def score(self, dp, cards, ctx):
        return np.arange(len(cards), dtype=float)


def gold_values(gold: dict[str, Any]) -> list[str]:
    """String forms of the gold action's argument values (scalars, and scalars inside lists/dicts)."""
    vals: list[str] = []
    for call in gold.get("tool_calls") or []:
        for x in iter_scalars(call_arguments(call)):
            s = str(x).strip()
            if len(s) >= 2 and s not in vals:
                vals.append(s)
    return vals


def _holds_any(card: Card, values: Sequence[str]) -> bool:
    text = card.raw_text
    return any(re.search(rf"(?<![\w]){re.escape(v)}(?![\w])", text) for v in values)


# ----------------------------------------------------------------------------- registry

POLICIES: dict[str, type[Policy]] = {p.name: p for p in (
    FullPolicy, WindowPolicy, RecencyPolicy, SimilarityPolicy, BM25Policy, LLMJudgePolicy, GenerativeAgentsPolicy,
    ObservationMaskPolicy, DAMCKNNPolicy, DAMCStudentPolicy, DAMCTeacherPolicy, OraclePolicy)}


def _takes_caps(cls: type[Policy]) -> bool:
    """A card policy that packs by value with `CardPolicy.select` (oracle selects on its own: no caps)."""
    return issubclass(cls, CardPolicy) and cls.select is CardPolicy.select


def make_policy(name: str, **kwargs: Any) -> Policy:
    """A policy by registry name with its keyword options (see each class).

    Every card-valuing policy (`CardPolicy`) also takes `top_k` (keep at most K cards) and `min_score` (keep
    only cards scoring at least this), applied before the budget packing: they let a policy use less than
    its budget, which is how a value threshold saves prompt tokens.

    Raises:
        KeyError: an unknown name (the message lists the known ones).
    """
    if name not in POLICIES:
        raise KeyError(f"unknown policy {name!r}; known: {', '.join(POLICIES)}")
    caps = {k: v for k in ("top_k", "min_score") if (v := kwargs.pop(k, None)) is not None}
    policy = POLICIES[name](**kwargs)
    if caps and not _takes_caps(type(policy)):
        raise ValueError(f"policy {name!r} does not pack cards by value: `top_k`/`min_score` apply only to "
                         f"{', '.join(n for n, p in POLICIES.items() if _takes_caps(p))}")
    if "top_k" in caps:
        if isinstance(caps["top_k"], bool) or not isinstance(caps["top_k"], int) or caps["top_k"] < 1:
            raise ValueError(f"policy {name!r}: top_k must be a positive integer, got {caps['top_k']!r}")
        policy.top_k = caps["top_k"]
    if "min_score" in caps:
        try:
            policy.min_score = float(caps["min_score"])
        except (TypeError, ValueError):
            raise ValueError(f"policy {name!r}: min_score must be a number, got {caps['min_score']!r}") from None
    return policy
