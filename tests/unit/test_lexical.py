"""The runtime's numpy BM25 (`damc.runtime.lexical`) scores exactly as the `bm25s` library does, on real cards."""

import numpy as np
import pytest

from damc.cards import encode_episode
from damc.data.synthetic import generate_episodes
from damc.episodes import decision_points
from damc.query import card_document, render_decision_query
from damc.runtime.lexical import bm25_scores, bm25_tokens
from damc.runtime.valuers import BM25Valuer


@pytest.mark.parametrize("k1,b", [(1.5, 0.75), (1.2, 0.3)])
def test_bm25_equals_bm25s_on_real_cards(k1, b):
    bm25s = pytest.importorskip("bm25s")
    ep = generate_episodes(1, seed=3)[0]
    cards = encode_episode(ep)
    docs = [bm25_tokens(card_document(c)) for c in cards]
    checked = 0
    for dp in decision_points(ep)[5::7]:
        q = bm25_tokens(render_decision_query(dp.context, ep.tools)) + ["order", "order"]  # repeated tokens count
        ref = bm25s.BM25(k1=k1, b=b)
        ref.index([d or ["_"] for d in docs], show_progress=False)
        want = ref.get_scores([t for t in q if t in ref.vocab_dict])
        got = bm25_scores(docs, q, k1, b)
        assert np.allclose(got, want, atol=1e-5) and got.max() > 0
        checked += 1
    assert checked >= 3


def test_bm25_valuer_is_relative_to_the_best_match_and_handles_empty_input():
    ep = generate_episodes(1, seed=3)[0]
    cards = encode_episode(ep)[:20]
    v = BM25Valuer().value("user: " + cards[3].raw_text, cards)
    assert v.max() == pytest.approx(1.0) and v.min() >= 0 and int(np.argmax(v)) == 3
    assert BM25Valuer().value("zzzz qqqq", cards).max() == 0.0
    assert BM25Valuer().value("q", []).shape == (0,)
    assert bm25_scores([], ["a"]).shape == (0,) and bm25_scores([["a"]], []).tolist() == [0.0]
