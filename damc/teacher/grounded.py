"""Grounded labels: the value of each candidate card read off the logged tool call itself — no LLM.

A logged tool call names the values its decision needed. Over the runtime's candidate set at that decision (the
cards the teacher's `loi` labels value, `damc.teacher.candidates.RuntimeCandidates`), each card gets a graded
target (`grounded_targets`), in tiers:

* **holds a history-only value of the gold call** — `target = floor + (1 − floor) · Σ_v u_v · w(card, v)` over the
  history-only values `v` the card holds: `w = 1` when the card is the *latest* candidate holding `v`, `w =
  superseded` (0.5) when a later candidate holds `v` again (the later card supersedes it: the newer record of the
  same value — the order's details after the user's order list, the address after it changed); `u_v` the value's
  share of the decision's history-only values `H` (Σ u_v = 1): `value_weight="idf"` (default) weighs a value by
  1 / (number of candidates holding it), so the user id that every tool result repeats counts less than the order id
  one card holds; `"uniform"`: 1 / |H|. So a card holding more (and rarer) values ranks higher, an earlier copy
  below its successor, and every holder lies in `[floor, 1]` (`floor` 0.5), above every other card.
* **neutral** — 0: holds nothing the call needed nor a rival's value, and is no top retrieval candidate.
* **holds a rival's value** (`confuser`, −1) — a card holding an argument value of one of the decision's rivals that
  the gold does not use (`damc.facts.confuser_values` over `damc.episodes.make_distractors`: the harness's
  confusers, the caller's other order, a look-alike id), and no history-only value.
* **hard negative** (`hard_negative`, −0.5) — among the `hard_k` best candidates by the runtime's BM25 or by its
  cosine (`features`: `RuntimeCandidates.features`, a positive score) and holding *none* of the gold's values
  (not even one the current turn repeats): what retrieval offers and the call did not use.

A *history-only* value is a gold argument value (`damc.facts.gold_values`) that a candidate card holds and the
current user turn up to the decision does not (the turn is in every prompt verbatim, so only memory can bring the
value in) — the harness's `Decision.history_values` rule, over the candidates instead of every history card. Value
matching is `damc.facts.holds_any` (the one matcher, its verbatim form, as the harness's metrics use).

A decision with no history-only value has no positive card (its candidates are neutral or negatives); a text reply
has no call, hence no target (the label run skips it). The targets are unitless (not nats): `delta` of a grounded
label row is the target, `logp_full`/`logp_without` are NaN and `n_action_tokens` 0 (no model reads the action).

Example:
    >>> g = grounded_targets(dp, cards, features)
    >>> g.targets, g.reasons        # [1.0, 0.0, -1.0, ...], ["value", "neutral", "confuser", ...]
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from damc.cards import Card
from damc.episodes import DecisionPoint, make_distractors
from damc.facts import confuser_values, gold_values, holds_any
from damc.teacher.estimators import EstimateResult


@dataclass
class GroundedTargets:
    """Targets of one decision's candidate cards (aligned with them) and why.

    Attributes:
        targets: the graded target per card.
        reasons: per card, "value" (holds a history-only value, newest holder of at least one), "superseded"
            (holds only values a later card holds again), "confuser", "hard_negative" or "neutral".
        history_values: the decision's history-only gold values.
        confusers: the rivals' values the gold does not use.
    """

    targets: list[float]
    reasons: list[str]
    history_values: list[str]
    confusers: list[str] = field(default_factory=list)


def history_values(dp: DecisionPoint, cards: Sequence[Card]) -> list[str]:
    """The gold's argument values that a candidate card holds and the current user turn does not."""
    turn = json.dumps(dp.current_turn, ensure_ascii=False)
    raw = "\n".join(c.raw_text for c in cards)
    return [v for v in gold_values(dp.gold) if holds_any(raw, [v]) and not holds_any(turn, [v])]


def _top(cards: Sequence[Card], features: dict[str, dict[str, float]], name: str, k: int) -> set[str]:
    """Ids of the `k` best candidates by feature `name` (positive scores only; ties by position, newest first)."""
    scored = [(features.get(c.card_id, {}).get(name, 0.0), c.position, c.card_id) for c in cards]
    scored = [s for s in scored if s[0] > 0]
    return {cid for _, _, cid in sorted(scored, reverse=True)[:k]}


def grounded_targets(dp: DecisionPoint, cards: Sequence[Card], features: dict[str, dict[str, float]] | None = None,
                     *, floor: float = 0.5, superseded: float = 0.5, confuser: float = -1.0,
                     hard_negative: float = -0.5, hard_k: int = 3, n_distractors: int = 3,
                     value_weight: str = "idf") -> GroundedTargets:
    """The graded targets of `cards` (the runtime's candidates at tool-call decision `dp`; module docstring).

    Args:
        dp: a tool-call decision.
        cards: its candidate cards (any order; "later" is by `card.position`).
        features: per card id, the runtime's signals (`bm25`, `cosine`); None: no hard negatives.
        floor: the target of a card holding the least of the values (the positive tier starts there).
        superseded: the weight of a value a later candidate holds again (1: supersession ignored).
        confuser / hard_negative: the targets of the two negative kinds (a confuser that is also a top
            retrieval candidate gets the lower of the two).
        hard_k: how many of the best BM25 and of the best cosine candidates are hard-negative candidates.
        n_distractors: the decision's rivals (`make_distractors`, as the harness draws them).
        value_weight: "idf" (a value weighs 1 / its number of holders) or "uniform" (every value alike).

    Raises:
        ValueError: `dp` is a text reply (no call: no target), or a setting is out of range.
    """
    if not dp.is_tool_call:
        raise ValueError(f"{dp.decision_id}: a text reply has no tool call, hence no grounded target")
    if not 0 < floor <= 1 or not 0 <= superseded <= 1 or hard_k < 0 or value_weight not in ("idf", "uniform"):
        raise ValueError(f"grounded: need 0 < floor <= 1, 0 <= superseded <= 1, hard_k >= 0, value_weight idf or "
                         f"uniform; got floor={floor}, superseded={superseded}, hard_k={hard_k}, "
                         f"value_weight={value_weight!r}")
    hist = history_values(dp, cards)
    gold = gold_values(dp.gold)
    conf = confuser_values(dp.gold, make_distractors(dp.episode, dp.index, n=n_distractors))
    held = [[v for v in hist if holds_any(c.raw_text, [v])] for c in cards]
    latest: dict[str, int] = {}                 # value -> position of the latest candidate holding it
    n_holders: dict[str, int] = {}
    for c, vs in zip(cards, held):
        for v in vs:
            latest[v] = max(latest.get(v, -1), c.position)
            n_holders[v] = n_holders.get(v, 0) + 1
    raw_u = {v: 1.0 / n_holders[v] if value_weight == "idf" else 1.0 for v in hist}
    u = {v: x / sum(raw_u.values()) for v, x in raw_u.items()}
    top = _top(cards, features or {}, "bm25", hard_k) | _top(cards, features or {}, "cosine", hard_k) \
        if features and hard_k else set()
    targets, reasons = [], []
    for c, vs in zip(cards, held):
        if vs:
            weights = [1.0 if latest[v] == c.position else superseded for v in vs]
            targets.append(floor + (1.0 - floor) * sum(u[v] * w for v, w in zip(vs, weights)))
            reasons.append("value" if max(weights) == 1.0 else "superseded")
            continue
        is_conf = bool(conf) and holds_any(c.raw_text, conf)
        is_hard = c.card_id in top and not holds_any(c.raw_text, gold)
        if is_conf or is_hard:
            targets.append(min([confuser] * is_conf + [hard_negative] * is_hard))
            reasons.append("confuser" if is_conf else "hard_negative")
        else:
            targets.append(0.0)
            reasons.append("neutral")
    return GroundedTargets(targets, reasons, hist, conf)


class Grounded:
    """The `grounded` estimator (configs/estimator/grounded.yaml): `grounded_targets` behind the label run's
    estimator interface, with no teacher (`needs_teacher` False). Settings: `grounded_targets`'s keywords.

    Args:
        render: how `card_text` is rendered (the label run's `render`; no model reads it here).
        max_context_tokens: ignored (no model context); accepted so the label run builds it like any estimator.
    """

    name = "grounded"
    needs_teacher = False

    def __init__(self, floor: float = 0.5, superseded: float = 0.5, confuser: float = -1.0,
                 hard_negative: float = -0.5, hard_k: int = 3, n_distractors: int = 3, value_weight: str = "idf",
                 max_context_tokens: int | None = None, render: str = "template"):
        from damc.teacher.context import ContextConfig, check_render

        self.settings = {"floor": float(floor), "superseded": float(superseded), "confuser": float(confuser),
                         "hard_negative": float(hard_negative), "hard_k": int(hard_k),
                         "n_distractors": int(n_distractors), "value_weight": str(value_weight)}
        self.context_cfg = ContextConfig(None, check_render(render))

    def estimate(self, teacher: Any, dp: DecisionPoint, cards: Sequence[Card],
                 features: dict[str, dict[str, float]] | None = None) -> EstimateResult:
        """The grounded targets as an `EstimateResult` (`deltas` = targets; log-probs NaN, no forward pass);
        `extra` holds the reasons and the decision's history-only values."""
        g = grounded_targets(dp, cards, features, **self.settings)
        n = len(cards)
        return EstimateResult(np.asarray(g.targets, dtype=np.float64), np.full(n, np.nan), np.full(n, np.nan),
                              0, 0, 0, {"reasons": g.reasons, "history_values": g.history_values})
