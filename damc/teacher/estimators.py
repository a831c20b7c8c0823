"""Counterfactual value estimators: how much each candidate card moves the gold action's log-probability.

Every delta is **per action token** (nats/token: the log-prob difference divided by the gold action's token
count), so a long action does not outweigh a short one in training or thresholds; it is signed — a card whose
removal *raises* the gold's log-prob is harmful and keeps its negative value.

* `LeaveOneOut` (`loo`, necessity) — `logp(a | all) − logp(a | all but i)`. With `reuse_prefix` the full context
  runs once with a KV cache and each variant reuses everything before card i (only the suffix runs).
* `LeaveOneIn` (`loi`, sufficiency) — `logp(a | card i alone) − logp(a | no card)`: short contexts that share the
  system/tools prefix, batched; a fact repeated in three cards gets credit in each (leave-one-out gives none).
* `LeaveOneInMargin` (`loi_margin`, sufficiency for the *choice*) — how much card i alone raises the gold action
  over its look-alike rivals: `m(card i alone) − m(no card)` with `m = ℓ(gold) − log Σ_d exp ℓ(d)`, ℓ the mean
  per-token log-prob of an action and d the decision's distractors (`damc.episodes.make_distractors`: the same
  tool with another value the trace holds — the harness's multiple-choice rivals). A card that raises a rival as
  much as the gold (a sibling order, a look-alike id) gets ~0; one that raises a rival more is negative.
* `LooLoi` (`loo_loi`) — the mean of the two: the two ends of a Shapley permutation (card added first, last).
* `GroupedLeaveOneOut` (`grouped_loo`) — card i leaves with every card repeating one of its critical atoms.
* `AblationLasso` (`ablation`) — random keep-masks and a Lasso surrogate; cost independent of the card count.

Each estimator values the cards of a `DecisionContext` (the runtime's prompt over the runtime's candidates,
`damc.teacher.context`) and returns an `EstimateResult` aligned with the cards it was given (NaN for a card
left out for the window, listed in `extra["dropped"]`). `logp_with` / `logp_without` are the two totals whose
difference (per token) is the delta.

Example:
    >>> res = LeaveOneIn().estimate(teacher, dp, cards)
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
from damc.episodes import DecisionPoint
from damc.teacher.context import ContextConfig, DecisionContext, build_context

logger = logging.getLogger(__name__)


@dataclass
class EstimateResult:
    """Values of the candidate cards of one decision.

    Attributes:
        deltas: (n_cards,) (logp_with − logp_without) / n_action_tokens, nats per token; NaN for cards left out.
        logp_with: (n_cards,) total log-prob of the action in the context *with* each card (loo: the full
            context, the same for every card; loi: the card alone).
        logp_without: (n_cards,) total log-prob *without* it (loo: all but the card; loi: no card; ablation: the
            surrogate's prediction).
        n_forward: sequences the teacher evaluated.
        n_forward_tokens: tokens run through the teacher.
        n_action_tokens: tokens of the gold action.
        extra: estimator-specific details (naive token cost, dropped cards, groups, fit R²).
    """

    deltas: np.ndarray
    logp_with: np.ndarray
    logp_without: np.ndarray
    n_forward: int
    n_forward_tokens: int
    n_action_tokens: int
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def logp_full(self) -> float:
        """Total log-prob of the action with every card (loo-style estimators; NaN when not computed)."""
        return float(self.extra.get("logp_full", float("nan")))


def _realign(res: EstimateResult, ctx: DecisionContext, cards: Sequence[Card]) -> EstimateResult:
    """Results aligned with `cards` (the caller's order); cards the context left out get NaN."""
    pos = {c.card_id: i for i, c in enumerate(ctx.cards)}
    out = {k: np.full(len(cards), np.nan) for k in ("deltas", "logp_with", "logp_without")}
    for j, c in enumerate(cards):
        if c.card_id in pos:
            for k in out:
                out[k][j] = getattr(res, k)[pos[c.card_id]]
    res.deltas, res.logp_with, res.logp_without = out["deltas"], out["logp_with"], out["logp_without"]
    return res


class Estimator(ABC):
    """Base class: builds the decision context (runtime rendering), then values its cards (`estimate_context`).

    Args:
        max_context_tokens: context + action limit (None: the teacher's window); oldest lines dropped beyond it.
        render: how the teacher reads each card, as the runtime compressor of that name writes it: "template"
            (default, `MemoryConfig.compressor`'s default) or "fields" (`damc.teacher.context.TEACHER_RENDERS`).
    """

    name: str = "base"

    def __init__(self, max_context_tokens: int | None = None, render: str = "template"):
        from damc.teacher.context import check_render

        self.context_cfg = ContextConfig(max_context_tokens, check_render(render))

    def estimate(self, teacher: Any, decision_point: DecisionPoint, cards: Sequence[Card]) -> EstimateResult:
        """Values of `cards` (the runtime's candidates, or `candidate_cards(dp)`) for the decision's gold action."""
        ctx = build_context(teacher, decision_point, list(cards), self.context_cfg)
        return _realign(self.estimate_context(teacher, ctx), ctx, cards)

    @abstractmethod
    def estimate_context(self, teacher: Any, ctx: DecisionContext) -> EstimateResult:
        """Values of `ctx.cards`, aligned with them."""

    def _result(self, ctx: DecisionContext, logps: list[np.ndarray], stats: Any, with_: np.ndarray,
                without: np.ndarray, **extra: Any) -> EstimateResult:
        n_act = int(len(logps[0]))
        with_, without = np.asarray(with_, dtype=np.float64), np.asarray(without, dtype=np.float64)
        extra = {"naive_tokens": stats.n_naive_tokens, "dropped": ctx.dropped, **extra}
        return EstimateResult((with_ - without) / max(n_act, 1), with_, without, stats.n_forward,
                              stats.n_forward_tokens, n_act, extra)


class LeaveOneOut(Estimator):
    """Leave-one-out (necessity), with KV-cache prefix reuse (`reuse_prefix`) or naive.

    Args:
        reuse_prefix: reuse the KV cache of the prefix before each card (False: naive reference).
        max_context_tokens: see `Estimator`.
    """

    name = "loo"

    def __init__(self, reuse_prefix: bool = True, **limits: Any):
        super().__init__(**limits)
        self.reuse_prefix = reuse_prefix

    def estimate_context(self, teacher: Any, ctx: DecisionContext) -> EstimateResult:
        n = len(ctx.cards)
        variants = [ctx.segments()] + [ctx.segments(exclude={i}) for i in range(n)]
        logps, stats = teacher.score_segment_variants(variants, ctx.action, reuse=self.reuse_prefix)
        full = float(logps[0].sum())
        return self._result(ctx, logps, stats, np.full(n, full), [lp.sum() for lp in logps[1:]], logp_full=full)


class LeaveOneIn(Estimator):
    """Leave-one-in (sufficiency): each card alone against no card. Every variant shares the prefix before the
    memory lines (system prompt, policy), which runs once; the short rest is batched.

    Args:
        max_context_tokens: see `Estimator`.
    """

    name = "loi"

    def estimate_context(self, teacher: Any, ctx: DecisionContext) -> EstimateResult:
        n = len(ctx.cards)
        variants = [ctx.segments(keep=[])] + [ctx.segments(keep=[i]) for i in range(n)]
        logps, stats = teacher.score_segment_variants(variants, ctx.action, reuse=True)
        none = float(logps[0].sum())
        return self._result(ctx, logps, stats, [lp.sum() for lp in logps[1:]], np.full(n, none), logp_none=none)


class LeaveOneInMargin(Estimator):
    """Leave-one-in on the gold's margin over its rivals: each card alone against no card, scored on
    `m = ℓ(gold) − log Σ_d exp ℓ(d)` (ℓ: mean per-token log-prob; d: the decision's distractors), so the delta is
    in nats per token like `loi`'s and `loi`'s own delta is `extra["loi"]`. A card valued by `loi` because it
    holds *an* id of the right kind — the caller's other order, a look-alike flight — raises the distractor that
    uses that id as well, and loses that credit here; a card that raises a rival more than the gold is harmful
    (negative). Each short context runs once and every action after it (`Teacher.score_variant_actions`), so a
    rival costs its own tokens; `HFTeacher` reuses whole 256-token blocks between contexts where `loi` reuses the
    exact shared prefix, so the cost is 1–2× `loi`'s (1.0–1.5× measured, docs/teacher.md).

    The rivals are built from the decision's own trace (`make_distractors`: the episode's recorded distractors
    when it has them, else the same tool with another value of the same kind seen in the episode, then other
    tools), so any logged trajectory can be labelled this way; the A/B harness scores decisions against rivals
    built the same way. A decision without any rival falls back to `loi` (`extra["distractors"]` is empty).

    Args:
        n_distractors: rivals per decision (the harness's default, 3).
        seed: `make_distractors`' seed (the harness's default, 0).
        max_context_tokens, render: see `Estimator`.
    """

    name = "loi_margin"

    def __init__(self, n_distractors: int = 3, seed: int = 0, **limits: Any):
        super().__init__(**limits)
        self.n_distractors, self.seed = int(n_distractors), int(seed)

    def distractors(self, decision_point: DecisionPoint) -> list[str]:
        """The rival actions of a decision (rendered like the gold's action text)."""
        from damc.episodes import make_distractors

        return make_distractors(decision_point.episode, decision_point.index, n=self.n_distractors, seed=self.seed)

    def estimate_context(self, teacher: Any, ctx: DecisionContext) -> EstimateResult:
        n = len(ctx.cards)
        variants = [ctx.segments(keep=[])] + [ctx.segments(keep=[i]) for i in range(n)]
        limit = getattr(teacher, "max_context_tokens", None)
        longest = max(sum(teacher.count_tokens(seg) for seg in v) for v in variants)
        rivals: list[str] = []
        for d in self.distractors(ctx.decision):
            if not d.strip() or d == ctx.action or d in rivals:
                continue
            if limit and longest + teacher.count_tokens(d) > limit:   # said, not silently skipped
                logger.warning("loi_margin: rival %r of %s left out: longer than the teacher window allows",
                               d[:60], ctx.decision.decision_id)
                continue
            rivals.append(d)
        lps, stats = teacher.score_variant_actions(variants, [ctx.action, *rivals])
        means = np.array([[float(np.mean(lp)) for lp in per_action] for per_action in lps])  # (1 + rivals, n + 1)
        gold = means[0]   # no card, then each card alone
        rival = np.logaddexp.reduce(means[1:], axis=0) if rivals else np.zeros(n + 1)
        margin = gold - rival
        n_act = int(len(lps[0][0]))
        deltas = margin[1:] - margin[0]
        with_ = np.array([float(lp.sum()) for lp in lps[0][1:]])
        return EstimateResult(deltas, with_, with_ - deltas * n_act, stats.n_forward, stats.n_forward_tokens, n_act,
                              {"naive_tokens": stats.n_naive_tokens, "dropped": ctx.dropped,
                               "loi": (gold[1:] - gold[0]).tolist(), "rival_shift": (rival[1:] - rival[0]).tolist(),
                               "distractors": rivals, "margin_none": float(margin[0])})


class LooLoi(Estimator):
    """The mean of the per-token `loo` and `loi` deltas: a card's marginal value added last and added first (the two
    ends of a Shapley permutation). Costs both.

    Args:
        reuse_prefix: KV-cache prefix reuse for the leave-one-out half.
        max_context_tokens: see `Estimator`.
    """

    name = "loo_loi"

    def __init__(self, reuse_prefix: bool = True, **limits: Any):
        super().__init__(**limits)
        self.loo, self.loi = LeaveOneOut(reuse_prefix, **limits), LeaveOneIn(**limits)

    def estimate_context(self, teacher: Any, ctx: DecisionContext) -> EstimateResult:
        a, b = self.loo.estimate_context(teacher, ctx), self.loi.estimate_context(teacher, ctx)
        extra = {"naive_tokens": a.extra["naive_tokens"] + b.extra["naive_tokens"], "dropped": ctx.dropped,
                 "loo": a.deltas.tolist(), "loi": b.deltas.tolist(), "logp_full": a.logp_full}
        # with/without: the loo pair shifted by the loi pair's mean, so (with − without) / n = the mean delta
        deltas = (a.deltas + b.deltas) / 2.0
        return EstimateResult(deltas, a.logp_with, a.logp_with - deltas * a.n_action_tokens, a.n_forward + b.n_forward,
                              a.n_forward_tokens + b.n_forward_tokens, a.n_action_tokens, extra)


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
        full = float(logps[0].sum())
        return self._result(ctx, logps, stats, np.full(len(groups), full), [by_group[g] for g in groups],
                            logp_full=full, groups=[sorted(ctx.cards[j].card_id for j in g) for g in groups])


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
        return self._result(ctx, logps, stats, np.full(n, full), full - w, logp_full=full,
                            r2=float(fit.score(x, y)), intercept=float(fit.intercept_))


ESTIMATORS = {"loo": LeaveOneOut, "loi": LeaveOneIn, "loi_margin": LeaveOneInMargin, "loo_loi": LooLoi, "grouped_loo": GroupedLeaveOneOut,
              "ablation": AblationLasso}
