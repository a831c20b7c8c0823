"""Issue 32 item 7 through `DecisionAwareMemory`: a scorer whose every value falls below its exported threshold τ
(a domain it was not calibrated on) still gets a context holding its best `k_min` cards, within the budget, and
`explain()` says the floor kept them. The valuer is a stand-in with the scorer's shape (metadata + combiner), so
the memory's own default selector (`default_selector`) is what is tested; the encoder and tokenizer are real."""

from __future__ import annotations

import numpy as np
import pytest

from damc.runtime.config import MemoryConfig
from damc.runtime.explain import Explanation
from damc.runtime.memory import DecisionAwareMemory
from damc.runtime.scorer_metadata import Normalization, ScorerMetadata
from damc.runtime.select import Threshold
from damc.runtime.valuers import Valuer
from tests.integration.test_memory import TOOLS, conversation

TAU, K_MIN = 0.5, 3


class OutOfDomainScorer(Valuer):
    """Values every card below τ, all distinct: cards naming order 88412 first, the Berlin constraint next, then
    the rest (newer above older within each group)."""

    name = "scorer"
    combiner = object()   # what `default_selector` looks for: a scorer with a learned combiner and a threshold

    class scorer:  # noqa: N801 - the attribute ScorerValuer carries
        metadata = ScorerMetadata("x", Normalization(), 96, threshold=TAU, k_min=K_MIN)

    def value(self, query, cards, now=None):
        return np.array([(0.3 if "88412" in c.raw_text else 0.2 if "Berlin" in c.raw_text else 0.0)
                         + 0.001 * c.position for c in cards], dtype=np.float32)


def _memory(**config):
    return DecisionAwareMemory(None, valuer=OutOfDomainScorer(), config=MemoryConfig(**config))


def test_a_scorer_below_its_threshold_still_gets_its_best_k_min_cards_and_explain_says_floor():
    mem = _memory()
    assert isinstance(mem.selector, Threshold) and (mem.selector.min_value, mem.selector.k_min) == (TAU, K_MIN)
    ctx = mem.build_context(conversation(6), tools=TOOLS)
    cands = [(s.card_id, s.value) for s in ctx.selected] + [(d.card_id, d.value) for d in ctx.dropped]
    assert len(cands) > K_MIN and max(v for _, v in cands) < TAU          # every value below τ
    assert len({v for _, v in cands}) == len(cands)                        # distinct: "the best" is one set
    best = [c for c, _ in sorted(cands, key=lambda cv: -cv[1])][:K_MIN]
    assert sorted(ctx.floor_ids) == sorted(s.card_id for s in ctx.selected) == sorted(best)
    assert any("88412" in s.text for s in ctx.selected) and ctx.memory_tokens <= ctx.budget_tokens
    assert all(d.reason == "below_threshold" for d in ctx.dropped)
    exp = mem.explain(ctx)
    text = str(exp)
    assert sorted(exp.floor) == sorted(best) and text.count("  [floor]") == K_MIN   # each kept card marked
    assert exp.floor_reason() == f"floor: below threshold τ={TAU:g}, kept as one of the best k_min={K_MIN}"
    assert f"{K_MIN} of {K_MIN} kept cards marked [floor]: below threshold τ={TAU:g}, kept as one of the best" in text
    assert f"selector threshold (τ={TAU:g}, floor k_min={K_MIN})" in text
    assert Explanation.from_context(ctx.to_dict()).floor == exp.floor      # the stored form says it too


def test_the_floor_respects_the_budget_and_k_min_0_restores_the_threshold_alone():
    ctx = _memory().build_context(conversation(6), tools=TOOLS, budget_tokens=40)
    assert 0 < len(ctx.selected) < K_MIN and ctx.memory_tokens <= 40          # the floor never overruns
    assert any(d.reason == "budget" for d in ctx.dropped)
    starved = _memory(k_min=0).build_context(conversation(6), tools=TOOLS)
    assert starved.selected == [] and starved.memory_tokens == 0 and starved.k_min == 0
    assert all(d.reason == "below_threshold" for d in starved.dropped)
    assert "[floor]" not in str(Explanation.from_context(starved))
    for bad in (-2, 1.5):
        with pytest.raises(ValueError, match=r"MemoryConfig.k_min must be a whole number of cards"):
            _memory(k_min=bad)
