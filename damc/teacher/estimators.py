"""Counterfactual value estimators: how much each candidate card moves the gold action's log-probability.

`delta_i = logp(action | all cards) − logp(action | all cards but i)`, in nats (signed; positive when the
card helps the teacher predict what was actually done).

* `LeaveOneOut` — one forward per card. With `reuse_prefix` (default) the full context runs once with a
  KV cache and each "without card i" variant reuses the cache of everything before card i, running only
  the suffix (later cards, current turn, action); `reuse_prefix=False` is the naive reference (same
  tokenization, so both agree to float precision).
* `GroupedLeaveOneOut` — removes card i together with every card that repeats one of its critical atoms
  (`damc.cards.critical_atoms`; atoms found in too many cards, such as a session id, are ignored), so a
  fact copied into several cards is not undervalued by redundancy. Each card gets its group's delta.
* `AblationLasso` — `n_samples` random keep-masks (each card kept with `keep_prob`, seeded per decision)
  and a Lasso surrogate `logp ≈ b + Σ w_i·keep_i` (scikit-learn); `w_i` is the value. The number of
  forward passes does not depend on the number of cards, and copies of one fact share its credit
  (masks that drop every copy show the loss).

Every estimator returns an `EstimateResult` aligned with the cards it was given (NaN for a card left out
by `max_cards` or the context window, listed in `extra["dropped"]`).

Example:
    >>> est = LeaveOneOut()
    >>> res = est.estimate(teacher, dp, candidate_cards(dp))
    >>> res.deltas.argmax()
"""

from __future__ import annotations

import logging
import zlib
from abc import ABC, abstractmethod
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from damc.cards import Card, critical_atoms
from damc.data.episodes import DecisionPoint
from damc.teacher.context import ContextConfig, DecisionContext, build_context

logger = logging.getLogger(__name__)


@dataclass
class EstimateResult:
    """Values of the candidate cards of one decision.

    Attributes:
        deltas: (n_cards,) logp_full − logp_without, nats; NaN for cards left out of the context.
        logp_full: total log-prob of the action with every card.
        logp_without: (n_cards,) total log-prob without each card (surrogate prediction for ablation).
        n_forward: sequences the teacher evaluated.
        n_forward_tokens: tokens run through the teacher.
        n_action_tokens: tokens of the gold action.
        extra: estimator-specific details (naive token cost, dropped/truncated cards, groups, fit R²).
    """

    deltas: np.ndarray
    logp_full: float
    logp_without: np.ndarray
    n_forward: int
    n_forward_tokens: int
    n_action_tokens: int
    extra: dict[str, Any] = field(default_factory=dict)


class Estimator(ABC):
    """Base class: builds the decision context, then values its cards (`estimate_context`)."""

    name: str = "base"

    def __init__(self, max_cards: int | None = None, max_card_tokens: int = 512,
                 max_context_tokens: int | None = None):
        self.context_cfg = ContextConfig(max_cards, max_card_tokens, max_context_tokens)

    def estimate(self, teacher: Any, decision_point: DecisionPoint, cards: Sequence[Card]) -> EstimateResult:
        """Values of `cards` (usually `candidate_cards(dp)`) for the decision's gold action."""
        ctx = build_context(teacher, decision_point, list(cards), self.context_cfg)
        res = self.estimate_context(teacher, ctx)
        # realign with the input cards (cards dropped for max_cards / the window get NaN)
        pos = {c.card_id: i for i, c in enumerate(ctx.cards)}
        deltas = np.full(len(cards), np.nan)
        without = np.full(len(cards), np.nan)
        for j, c in enumerate(cards):
            if c.card_id in pos:
                deltas[j], without[j] = res.deltas[pos[c.card_id]], res.logp_without[pos[c.card_id]]
        res.deltas, res.logp_without = deltas, without
        return res

    @abstractmethod
    def estimate_context(self, teacher: Any, ctx: DecisionContext) -> EstimateResult:
        """Values of `ctx.cards`, aligned with them."""

    def _result(self, ctx: DecisionContext, logps: list[np.ndarray], stats: Any, without: np.ndarray,
                **extra: Any) -> EstimateResult:
        full = float(logps[0].sum())
        without = np.asarray(without, dtype=np.float64)
        extra = {"naive_tokens": stats.n_naive_tokens, "dropped": ctx.dropped, "truncated": ctx.truncated, **extra}
        return EstimateResult(full - without, full, without, stats.n_forward, stats.n_forward_tokens,
                              int(len(logps[0])), extra)


class LeaveOneOut(Estimator):
    """Leave-one-out deltas, with KV-cache prefix reuse (`reuse_prefix`) or naive.

    Args:
        reuse_prefix: reuse the KV cache of the prefix before each card (False: naive reference).
        max_cards, max_card_tokens, max_context_tokens: context limits (see `ContextConfig`).
    """

    name = "loo"

    def __init__(self, reuse_prefix: bool = True, **limits: Any):
        super().__init__(**limits)
        self.reuse_prefix = reuse_prefix

    def estimate_context(self, teacher: Any, ctx: DecisionContext) -> EstimateResult:
        n = len(ctx.cards)
        variants = [ctx.segments()] + [ctx.segments(exclude={i}) for i in range(n)]
        logps, stats = teacher.score_segment_variants(variants, ctx.action, reuse=self.reuse_prefix)
        without = np.array([lp.sum() for lp in logps[1:]])
        return self._result(ctx, logps, stats, without)


class GroupedLeaveOneOut(Estimator):
    """Leave-one-out where a card leaves together with the cards that repeat its critical atoms.

    Args:
        max_share: an atom shared by more than `max(2, max_share · n_cards)` cards is ignored
            (ids present everywhere, like a session id, would otherwise group everything).
        reuse_prefix: KV-cache prefix reuse, as in `LeaveOneOut`.
    """

    name = "grouped_loo"

    def __init__(self, max_share: float = 0.25, reuse_prefix: bool = True, **limits: Any):
        super().__init__(**limits)
        self.max_share, self.reuse_prefix = max_share, reuse_prefix

    def groups(self, cards: Sequence[Card]) -> list[frozenset[int]]:
        """For each card, the indices of the cards removed with it (itself included)."""
        atoms = [critical_atoms(c.raw_text) for c in cards]
        df = Counter(a for s in atoms for a in s)
        cap = max(2, int(self.max_share * len(cards)))
        rare = [{a for a in s if df[a] <= cap} for s in atoms]
        return [frozenset([i] + [j for j in range(len(cards)) if j != i and rare[i] & rare[j]])
                for i in range(len(cards))]

    def estimate_context(self, teacher: Any, ctx: DecisionContext) -> EstimateResult:
        groups = self.groups(ctx.cards)
        uniq = list(dict.fromkeys(groups))  # one forward per distinct group
        variants = [ctx.segments()] + [ctx.segments(exclude=g) for g in uniq]
        logps, stats = teacher.score_segment_variants(variants, ctx.action, reuse=self.reuse_prefix)
        by_group = {g: float(lp.sum()) for g, lp in zip(uniq, logps[1:])}
        without = np.array([by_group[g] for g in groups])
        return self._result(ctx, logps, stats, without,
                            groups=[sorted(ctx.cards[j].card_id for j in g) for g in groups])


class AblationLasso(Estimator):
    """Random-ablation masks and a Lasso surrogate; cost independent of the number of cards.

    Args:
        n_samples: random masks per decision (forward passes, plus one for the full context).
        keep_prob: probability that a card is kept in a mask.
        alpha: Lasso L1 strength (in nats of log-prob per unit weight; small keeps it close to OLS).
        seed: base seed; each decision's masks are seeded by (seed, decision_id) so runs repeat.
        reuse_prefix: masks reuse the KV cache of the prefix before their first removed card.
    """

    name = "ablation"

    def __init__(self, n_samples: int = 48, keep_prob: float = 0.5, alpha: float = 0.01, seed: int = 0,
                 reuse_prefix: bool = True, **limits: Any):
        super().__init__(**limits)
        self.n_samples, self.keep_prob, self.alpha, self.seed = int(n_samples), float(keep_prob), alpha, seed
        self.reuse_prefix = reuse_prefix

    def masks(self, decision_id: str, n_cards: int) -> np.ndarray:
        """(n_samples, n_cards) boolean keep-masks, reproducible per decision."""
        rng = np.random.default_rng([self.seed, zlib.crc32(decision_id.encode())])
        return rng.random((self.n_samples, n_cards)) < self.keep_prob

    def estimate_context(self, teacher: Any, ctx: DecisionContext) -> EstimateResult:
        from sklearn.linear_model import Lasso

        n = len(ctx.cards)
        masks = self.masks(ctx.decision.decision_id, n)  # (n_samples, n_cards)
        variants = [ctx.segments()] + [ctx.segments(keep=np.flatnonzero(m)) for m in masks]
        logps, stats = teacher.score_segment_variants(variants, ctx.action, reuse=self.reuse_prefix)
        x = np.vstack([np.ones((1, n), dtype=bool), masks]).astype(np.float64)  # (n_samples + 1, n_cards)
        y = np.array([lp.sum() for lp in logps])  # (n_samples + 1,)
        fit = Lasso(alpha=self.alpha, max_iter=10_000).fit(x, y)
        w = fit.coef_  # (n_cards,) nats gained by keeping each card
        full = float(y[0])
        return self._result(ctx, logps, stats, full - w, r2=float(fit.score(x, y)),
                            intercept=float(fit.intercept_))


ESTIMATORS = {"loo": LeaveOneOut, "grouped_loo": GroupedLeaveOneOut, "ablation": AblationLasso}
