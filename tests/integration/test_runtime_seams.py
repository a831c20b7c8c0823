"""Issue 29's runtime seams: a Context built with named fields (nothing patched afterwards), one valuer method for
every valuer (duck-typed ones adapted once), settings on MemoryConfig with the old keywords deprecated, and the two
ages with distinct names."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from damc.runtime.memory import DecisionAwareMemory, MemoryConfig
from damc.runtime.valuers import Valuer, as_valuer

CONVO = [
    {"role": "user", "content": "My order 88412 never arrived."},
    {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {
        "name": "get_order", "arguments": "{\"order_id\": \"88412\"}"}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "{\"status\": \"shipped\"}"},
    {"role": "assistant", "content": "It shipped."},
    {"role": "user", "content": "Check again please."},
]


class Halves:
    """A duck-typed valuer: no Valuer base, no value_with_notes."""

    name = "halves"

    def __init__(self):
        self.bound = None

    def value(self, query, cards, now=None):
        return [0.5] * len(cards)

    def bind(self, memory):
        self.bound = memory


def test_context_carries_who_built_it_from_construction():
    mem = DecisionAwareMemory(None, user_id="alice", tokenizer=None, valuer="heuristic",
                              config=MemoryConfig(agent_id="bot", context_window=4096))
    ctx = mem.build_context(CONVO, session_id="s9")
    assert (ctx.session_id, ctx.user_id, ctx.agent_id) == ("s9", "alice", "bot")
    assert ctx.n_hot == len(mem) and ctx.n_hot >= 3 and ctx.valuer == "cached(heuristic)"
    assert ctx.timings_ms["total"] >= ctx.timings_ms["assemble"] > 0


def test_duck_typed_valuer_is_adapted_once_and_bound():
    duck = Halves()
    adapted = as_valuer(duck)
    assert isinstance(adapted, Valuer) and adapted.name == "halves" and as_valuer(adapted) is adapted
    mem = DecisionAwareMemory(None, tokenizer=None, valuer=duck)
    ctx = mem.build_context(CONVO)
    assert duck.bound is mem and ctx.valuer == "halves"
    assert ctx.selected and all(np.isclose(s.value, 0.5) for s in ctx.selected)
    with pytest.raises(TypeError, match="value\\(query, cards, now\\)"):
        as_valuer(object())


def test_old_keywords_warn_and_still_apply():
    with pytest.warns(DeprecationWarning, match="config=MemoryConfig\\(context_window"):
        mem = DecisionAwareMemory(None, tokenizer=None, context_window=2048)
    assert mem.config.context_window == 2048
    with warnings.catch_warnings():
        warnings.simplefilter("error")            # the new spelling warns about nothing
        mem = DecisionAwareMemory(None, user_id="bob", tokenizer=None,
                                  config=MemoryConfig(context_window=2048, share_sessions=True))
    assert (mem.config.user_id, mem.config.context_window, mem.config.share_sessions) == ("bob", 2048, True)


def test_the_two_ages_have_distinct_names():
    import damc.query as query
    import damc.runtime.select as select

    assert hasattr(query, "age_in_messages") and hasattr(select, "decay_ages")
    assert not hasattr(query, "card_age") and not hasattr(select, "card_age")
