"""Valuers: how much each candidate card matters for the next decision.

A valuer maps `(decision query, cards)` to one value per card, higher = keep. All valuers here return
values in [0, 1] so selectors can mix and threshold them:

* `HeuristicValuer` — the cold-start prior: errors, recent tool results, user constraints / changed
  requirements, and identifiers shared with the query. No model.
* `ScorerValuer` — the distilled student (`damc.scorer.CardScorer`), squashed with a sigmoid.
* `KNNValuer` — the teacher's non-parametric aggregation over similar past decisions
  (`damc.runtime.knn.KNNValue`).
* `LLMJudgeValuer` — the seed article's prompt ("how important is this fragment ... rate 0 to 10")
  with any chat model; the expected rating under the model's next-token distribution over "0".."10"
  (deterministic, one forward pass per card), or a parsed completion from any text-only chat API.
* `HybridValuer(prior, learned, weight)` and `CachedValuer(inner, ttl_s)` compose the others.

Every valuer works standalone on a list of `Card`s, so evaluation policies reuse them.

Example:
    >>> v = HybridValuer(HeuristicValuer(), ScorerValuer(CardScorer.from_pretrained("artifacts/scorer")), 0.8)
    >>> values = CachedValuer(v, ttl_s=60).value(query, cards)
"""

from __future__ import annotations

import hashlib
import logging
import math
import re
import threading
import time
from abc import ABC, abstractmethod
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from damc.cards import Card, critical_atoms
from damc.query import render_card

logger = logging.getLogger(__name__)


class Valuer(ABC):
    """Values candidate cards for a decision. Subclasses implement `value`."""

    name: str = "valuer"

    @abstractmethod
    def value(self, query: str, cards: Sequence[Card], now: float | None = None) -> np.ndarray:
        """One value in [0, 1] per card (float32, shape (len(cards),)).

        Args:
            query: the decision query (`damc.query.render_decision_query`).
            cards: candidate cards.
            now: epoch seconds of the decision (defaults to the current time where it matters).
        """

    def __call__(self, query: str, cards: Sequence[Card], now: float | None = None) -> np.ndarray:
        return self.value(query, cards, now)


def _sigmoid(x: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    return (1.0 / (1.0 + np.exp(-np.asarray(x, dtype=np.float64) / temperature))).astype(np.float32)


# ----------------------------------------------------------------------------- heuristics

# Domain-agnostic cues that a user message sets or changes a requirement ("actually, make it 3",
# "don't ...", "only ...", "must ..."). Word-boundary regexes, case-insensitive.
CONSTRAINT_PATTERNS: tuple[str, ...] = (
    r"\bactually\b", r"\binstead\b", r"\bdon'?t\b", r"\bdo not\b", r"\bnever\b", r"\bmust(?:n'?t)?\b",
    r"\bonly\b", r"\bchang(?:e|ed|ing)\b", r"\bnot\b", r"\bno longer\b", r"\bwithout\b", r"\bavoid\b",
    r"\bmake sure\b", r"\bplease ensure\b", r"\brather\b", r"\bcancel\b", r"\bupdate\b", r"\bswitch\b",
    r"\bprefer\b", r"\bat least\b", r"\bat most\b", r"\bno more than\b", r"\bexcept\b", r"\bwrong\b",
    r"\bmistake\b", r"\bcorrect(?:ion)?\b", r"\bremember\b", r"\balways\b", r"\bshould(?:n'?t)?\b",
)
_CONSTRAINT_RE = re.compile("|".join(CONSTRAINT_PATTERNS), re.I)


def is_constraint(text: str) -> bool:
    """True when a (user) message looks like it sets or changes a requirement."""
    return bool(_CONSTRAINT_RE.search(text or ""))


def is_pinned(card: Card) -> bool:
    """Pinned candidates: tool errors and user constraints / changed requirements."""
    return card.is_error or (card.kind == "user" and is_constraint(card.raw_text))


def _query_body(query: str) -> str:
    """The query without its trailing tool list (every card's tool is in it, so it says nothing)."""
    return "\n".join(line for line in query.splitlines() if not line.startswith("tools: "))


@dataclass
class HeuristicWeights:
    """Weights of the cold-start prior (the sum is clipped to [0, 1]).

    Attributes:
        error: a failed tool call (the agent must not repeat it blindly).
        constraint: a user message that sets or changes a requirement.
        tool_result: any tool card (facts the agent fetched).
        user: any other user message.
        assistant: an assistant text message.
        recency: times exp(-rank / recency_scale), rank 0 = the newest candidate.
        recency_scale: candidates over which recency decays by 1/e.
        overlap: identifiers (numbers, ids, names) shared with the query, saturating at `overlap_sat`.
        overlap_sat: shared atoms that give the full overlap weight.
    """

    error: float = 0.45
    constraint: float = 0.35
    tool_result: float = 0.15
    user: float = 0.10
    assistant: float = 0.05
    recency: float = 0.20
    recency_scale: float = 8.0
    overlap: float = 0.30
    overlap_sat: int = 2


class HeuristicValuer(Valuer):
    """Cold-start prior: errors, recent tool results, user constraints, ids shared with the query."""

    name = "heuristic"

    def __init__(self, weights: HeuristicWeights | None = None):
        self.w = weights or HeuristicWeights()

    def value(self, query: str, cards: Sequence[Card], now: float | None = None) -> np.ndarray:
        w = self.w
        q_atoms = {a.lower() for a in critical_atoms(_query_body(query))}
        # newest first by (timestamp, position); cards without timestamps fall back to position
        order = sorted(range(len(cards)), key=lambda i: (cards[i].timestamp or "", cards[i].position), reverse=True)
        rank = np.empty(len(cards))
        rank[order] = np.arange(len(cards))
        out = np.zeros(len(cards), dtype=np.float32)
        for i, c in enumerate(cards):
            v = {"tool_result": w.tool_result, "tool_error": w.tool_result, "user": w.user,
                 "assistant": w.assistant}.get(c.kind, 0.0)
            if c.is_error:
                v += w.error
            if c.kind == "user" and is_constraint(c.raw_text):
                v += w.constraint
            v += w.recency * math.exp(-rank[i] / w.recency_scale)
            if q_atoms:
                shared = len(q_atoms & {a.lower() for a in critical_atoms(c.raw_text)})
                v += w.overlap * min(1.0, shared / w.overlap_sat)
            out[i] = min(1.0, v)
        return out


# ----------------------------------------------------------------------------- learned valuers

class ScorerValuer(Valuer):
    """The distilled student scorer (`CardScorer.score(query, cards)`), squashed to [0, 1].

    Args:
        scorer: a `damc.scorer.CardScorer` (or any object with `.score(query, cards) -> array`).
        temperature: sigmoid temperature applied to the raw scores.
    """

    name = "scorer"

    def __init__(self, scorer: Any, temperature: float = 1.0):
        self.scorer, self.temperature = scorer, temperature

    @classmethod
    def from_pretrained(cls, path: str, dtype: str = "auto", backend: str = "auto", temperature: float = 1.0,
                        **scorer_kwargs: Any) -> "ScorerValuer":
        """Load an exported scorer for the runtime: the int8 ONNX file when the directory has one (fastest on
        CPU, `export.py int8=true`), else torch in bf16 where the CPU/GPU runs it natively (2-3x fp32).

        Args:
            path: scorer directory.
            dtype / backend: see `CardScorer.from_pretrained` ("auto" by default).
            temperature: sigmoid temperature.
            scorer_kwargs: other `CardScorer.from_pretrained` arguments (device, max_batch_tokens, ...).
        """
        from damc.models import pick_device
        from damc.scorer import CardScorer

        scorer_kwargs.setdefault("device", pick_device())
        return cls(CardScorer.from_pretrained(path, dtype=dtype, backend=backend, **scorer_kwargs), temperature)

    def value(self, query: str, cards: Sequence[Card], now: float | None = None) -> np.ndarray:
        if not cards:
            return np.zeros(0, dtype=np.float32)
        return _sigmoid(np.asarray(self.scorer.score(query, list(cards))), self.temperature)


class CrossEncoderScorer:
    """A `CardScorer` stand-in over a sentence-transformers `CrossEncoder` (e.g. one initialised from
    `minilm-l6` before a student is trained). Scores `(query, render_card(card))` pairs."""

    def __init__(self, model: str = "minilm-l6", max_length: int = 256, device: str = "cpu"):
        from sentence_transformers import CrossEncoder

        from damc.models import resolve_model

        self.model = CrossEncoder(resolve_model(model), num_labels=1, max_length=max_length, device=device)

    def score(self, decision_query: str, cards: Sequence[Card | str]) -> np.ndarray:
        texts = [c if isinstance(c, str) else render_card(c) for c in cards]
        return np.asarray(self.model.predict([(decision_query, t) for t in texts], batch_size=64,
                                             show_progress_bar=False), dtype=np.float32).reshape(-1)


class KNNValuer(Valuer):
    """The teacher's non-parametric value (`KNNValue.value(decision_text, cards)`), squashed to [0, 1].

    Args:
        knn: a fitted `damc.runtime.knn.KNNValue` (or anything with that `value` method).
        temperature: sigmoid temperature (the aggregated deltas are in nats).
    """

    name = "knn"

    def __init__(self, knn: Any, temperature: float = 1.0):
        self.knn, self.temperature = knn, temperature

    def value(self, query: str, cards: Sequence[Card], now: float | None = None) -> np.ndarray:
        if not cards:
            return np.zeros(0, dtype=np.float32)
        return _sigmoid(np.asarray(self.knn.value(query, list(cards)), dtype=np.float64), self.temperature)


# ----------------------------------------------------------------------------- LLM judge

JUDGE_PROMPT = ("Given the current task:\n{query}\n\nHow important is the following history fragment for making "
                "the right decision? Rate it from 0 to 10 (0 = irrelevant, 10 = essential).\n\n"
                "Fragment:\n{card}\n\nAnswer with a single number.")


def parse_rating(text: str) -> float | None:
    """The first 0–10 rating in a completion ("7", "Rating: 8/10", "**9** out of 10"), None when absent."""
    if not text:
        return None
    m = re.search(r"(?<![\d.])(\d+(?:\.\d+)?)\s*(?:/|out of)\s*10\b", text)
    if m and 0 <= float(m.group(1)) <= 10:
        return float(m.group(1))
    for m in re.finditer(r"(?<![\d.])(\d+(?:\.\d+)?)(?![\d])", text):
        x = float(m.group(1))
        if 0 <= x <= 10:
            return x
    return None


class LLMJudgeValuer(Valuer):
    """The seed's 0–10 importance rating with a chat model, as an expected rating / 10.

    Args:
        model: registry name / HF id / path of a chat causal LM (loaded with `load_causal_lm`), used
            in "logits" mode.
        complete: alternatively, any `messages -> str` chat function (e.g. an API client); its reply
            is parsed with `parse_rating` ("generate" mode). Unparseable replies get `default`.
        batch_size: prompts per forward pass.
        max_card_chars: card rendering length in the prompt.
        default: value for unparseable ratings (in [0, 1]).
    """

    name = "llm_judge"

    def __init__(self, model: str | tuple[Any, Any] = "smollm2-135m", complete: Callable[[list[dict]], str] | None = None,
                 batch_size: int = 8, max_card_chars: int = 400, default: float = 0.5, dtype: str = "auto"):
        self.model_spec, self.complete = model, complete
        self.batch_size, self.max_card_chars, self.default, self.dtype = batch_size, max_card_chars, default, dtype
        self._model: Any = None
        self._tok: Any = None

    def messages(self, query: str, card: Card) -> list[dict[str, str]]:
        return [{"role": "user", "content": JUDGE_PROMPT.format(query=query, card=render_card(card, self.max_card_chars))}]

    def _load(self) -> None:
        if self._model is None:
            if isinstance(self.model_spec, tuple):
                self._model, self._tok = self.model_spec
            else:
                from damc.models import load_causal_lm

                self._model, self._tok = load_causal_lm(self.model_spec, dtype=self.dtype, device="cpu")

    def _rating_tokens(self) -> list[list[int]]:
        return [self._tok.encode(str(r), add_special_tokens=False) for r in range(11)]

    def expected_ratings(self, query: str, cards: Sequence[Card]) -> np.ndarray:
        """E[rating] in [0, 10] per card from the next-token distribution over "0".."10".

        Single-token ratings read the first-step probabilities; a multi-token rating such as "10"
        (two tokens in most tokenizers) costs one more position: P("10") = P("1")·P("0" | "1"), and
        P("1") is reduced by the same mass.
        """
        import torch

        from damc.prompting import format_prompt

        self._load()
        tok, model = self._tok, self._model
        seqs = self._rating_tokens()
        multi = [s for s in seqs if len(s) > 1]
        if any(len(s) > 2 for s in multi):
            raise ValueError("ratings longer than two tokens are not supported by this tokenizer")
        # prefixes needing a second step: the first token of each two-token rating
        prefixes = sorted({s[0] for s in multi})
        out = np.zeros(len(cards), dtype=np.float32)
        device = next(model.parameters()).device
        for b in range(0, len(cards), self.batch_size):
            chunk = cards[b:b + self.batch_size]
            base = [tok.encode(format_prompt(tok, self.messages(query, c)), add_special_tokens=False) for c in chunk]
            rows = [ids for ids in base] + [ids + [p] for ids in base for p in prefixes]
            width = max(len(r) for r in rows)
            pad = tok.pad_token_id if tok.pad_token_id is not None else 0
            input_ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows], device=device)
            attn = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], device=device)
            pos = (attn.cumsum(-1) - 1).clamp(min=0)
            with torch.no_grad():
                logits = model(input_ids=input_ids, attention_mask=attn, position_ids=pos).logits[:, -1, :]
            logp = torch.log_softmax(logits.float(), dim=-1).cpu().numpy()
            n = len(chunk)
            for i in range(n):
                probs = np.zeros(11)
                for r, s in enumerate(seqs):
                    p = math.exp(logp[i, s[0]])
                    if len(s) == 2:
                        k = prefixes.index(s[0])
                        p *= math.exp(logp[n + i * len(prefixes) + k, s[1]])
                    probs[r] = p
                # a single-token rating that is also the prefix of a longer one ("1" vs "10"): remove the continuation mass
                for r, s in enumerate(seqs):
                    if len(s) == 1 and s[0] in prefixes:
                        k = prefixes.index(s[0])
                        cont = sum(math.exp(logp[n + i * len(prefixes) + k, t[1]]) for t in multi if t[0] == s[0])
                        probs[r] *= max(0.0, 1.0 - cont)
                total = probs.sum()
                out[b + i] = float((probs * np.arange(11)).sum() / total) if total > 0 else self.default * 10
        return out

    def value(self, query: str, cards: Sequence[Card], now: float | None = None) -> np.ndarray:
        if not cards:
            return np.zeros(0, dtype=np.float32)
        if self.complete is not None:
            vals = []
            for c in cards:
                r = parse_rating(self.complete(self.messages(query, c)))
                vals.append(self.default if r is None else r / 10.0)
            return np.asarray(vals, dtype=np.float32)
        return np.clip(self.expected_ratings(query, cards) / 10.0, 0.0, 1.0).astype(np.float32)


# ----------------------------------------------------------------------------- composition

class HybridValuer(Valuer):
    """`weight · learned + (1 − weight) · prior` — the prior carries cold start, the learned value the rest.

    Args:
        prior: usually `HeuristicValuer()`.
        learned: a `ScorerValuer`, `KNNValuer` or `LLMJudgeValuer`.
        weight: share of the learned value in [0, 1].
        rank_normalize: rescale the learned values to their rank within the candidates (robust when
            its scale drifts, e.g. a sigmoid of small deltas all near 0.5).
    """

    name = "hybrid"

    def __init__(self, prior: Valuer, learned: Valuer, weight: float = 0.7, rank_normalize: bool = False):
        if not 0.0 <= weight <= 1.0:
            raise ValueError(f"weight must be in [0, 1], got {weight}")
        self.prior, self.learned, self.weight, self.rank_normalize = prior, learned, weight, rank_normalize

    def value(self, query: str, cards: Sequence[Card], now: float | None = None) -> np.ndarray:
        if not cards:
            return np.zeros(0, dtype=np.float32)
        learned = self.learned.value(query, cards, now)
        if self.rank_normalize and len(cards) > 1:
            learned = np.argsort(np.argsort(learned)).astype(np.float32) / (len(cards) - 1)
        prior = self.prior.value(query, cards, now) if self.weight < 1.0 else np.zeros_like(learned)
        return (self.weight * learned + (1.0 - self.weight) * prior).astype(np.float32)


def card_hash(card: Card) -> str:
    """Content hash of what a valuer can see of a card (changes when a result arrives or a card is edited)."""
    h = hashlib.blake2b(digest_size=12)
    for part in (card.kind, card.status or "", card.raw_text):
        h.update(part.encode("utf-8", "surrogatepass"))
        h.update(b"\x00")
    return h.hexdigest()


class CachedValuer(Valuer):
    """A TTL cache in front of another valuer, keyed by (query, card_id, card content hash).

    Args:
        inner: the valuer to cache.
        ttl_s: seconds an entry stays valid (the seed suggests about a minute).
        max_entries: LRU bound on the cache size.
        clock: time source (injectable for tests).
    """

    def __init__(self, inner: Valuer, ttl_s: float = 60.0, max_entries: int = 100_000,
                 clock: Callable[[], float] = time.monotonic):
        self.inner, self.ttl_s, self.max_entries, self.clock = inner, ttl_s, max_entries, clock
        self.name = f"cached({inner.name})"
        self._cache: OrderedDict[tuple[str, str, str], tuple[float, float]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def value(self, query: str, cards: Sequence[Card], now: float | None = None) -> np.ndarray:
        t = self.clock()
        keys = [(query, c.card_id, card_hash(c)) for c in cards]
        out = np.zeros(len(cards), dtype=np.float32)
        todo = []
        with self._lock:
            for i, k in enumerate(keys):
                hit = self._cache.get(k)
                if hit is not None and t - hit[1] <= self.ttl_s:
                    out[i] = hit[0]
                    self._cache.move_to_end(k)
                else:
                    todo.append(i)
            self.hits += len(cards) - len(todo)
            self.misses += len(todo)
        if todo:
            vals = self.inner.value(query, [cards[i] for i in todo], now)
            with self._lock:
                for j, i in enumerate(todo):
                    out[i] = vals[j]
                    self._cache[keys[i]] = (float(vals[j]), t)
                while len(self._cache) > self.max_entries:
                    self._cache.popitem(last=False)
        return out

    def clear(self) -> None:
        with self._lock:
            self._cache.clear()
