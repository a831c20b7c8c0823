"""Batched embedding for labelling runs: `CachedEncoder` (exact-text memo in front of the real int8 encoder),
`DecisionAwareMemory.retrieve` (the ingest + retrieval stages of `build_context`, nothing packed), and
`RuntimeCandidates.prefetch` — the same candidates, ages and features as before, with the episode's texts
embedded in one call."""

from pathlib import Path

import numpy as np
import pytest
from conftest import small_episode

from damc.episodes import decision_points
from damc.runtime.encoder import CachedEncoder
from damc.teacher.candidates import RuntimeCandidates, shared_encoder

ROOT = Path(__file__).resolve().parents[2]


class Counting:
    """The real encoder, counting the texts it is asked to embed."""

    def __init__(self, inner):
        self.inner, self.name, self.texts, self.calls = inner, inner.name, 0, 0

    def get_sentence_embedding_dimension(self):
        return self.inner.get_sentence_embedding_dimension()

    def encode(self, texts, **kw):
        self.calls += 1
        self.texts += 1 if isinstance(texts, str) else len(texts)
        return self.inner.encode(texts, **kw)


@pytest.fixture(scope="module")
def onnx():
    return shared_encoder({}).inner   # the runtime's own int8 ONNX MiniLM


def test_cached_encoder_returns_the_inner_vectors_and_embeds_each_text_once(onnx):
    texts = ["get_order(order_id=88412) -> delivered", "user: my desk stopped working", "ok", "ok"]
    ref = onnx.encode(texts)
    enc = CachedEncoder(Counting(onnx))
    assert enc.prefetch(texts) == 3                        # unique texts only
    assert enc.inner.texts == 3 and enc.inner.calls == 1
    got = enc.encode(texts)
    np.testing.assert_allclose(got, ref, atol=1e-5)        # batched vs one call: float rounding at most
    assert enc.inner.calls == 1 and enc.hits == 4 and enc.misses == 0
    assert enc.prefetch(texts) == 0                        # nothing new to embed
    one = enc.encode("a text never seen")
    assert one.shape == (ref.shape[1],) and enc.misses == 1 and enc.inner.calls == 2
    np.testing.assert_allclose(np.linalg.norm(enc.encode(texts + ["x"]), axis=1), 1.0, atol=1e-5)
    raw = enc.encode(texts[:1], normalize_embeddings=False)   # not memoised: straight to the inner encoder
    assert enc.inner.calls == 4 and raw.shape == (1, ref.shape[1])


def test_cached_encoder_memo_is_bounded_and_answers_past_evictions(onnx):
    enc = CachedEncoder(Counting(onnx), max_items=2)
    texts = [f"card number {i}" for i in range(5)]
    out = enc.encode(texts)                                # more texts than the memo holds: still all answered
    np.testing.assert_allclose(out, onnx.encode(texts), atol=1e-5)
    assert len(enc._memo) == 2 and set(enc._memo) == set(texts[-2:])
    with pytest.raises(ValueError, match="max_items"):
        CachedEncoder(onnx, max_items=0)


def test_retrieve_is_build_contexts_candidate_set(onnx):
    """`retrieve` = the candidates `build_context` values, oldest first, same ages; nothing recorded."""
    from damc.runtime.memory import DecisionAwareMemory
    from damc.runtime.select import TopK
    from damc.runtime.valuers.heuristic import RecencyValuer

    ep = small_episode(40)
    dps = [dp for dp in decision_points(ep) if dp.is_tool_call]
    assert len(dps) >= 3
    a = DecisionAwareMemory(None, valuer="heuristic", encoder=onnx, session_id=ep.episode_id)
    b = DecisionAwareMemory(None, valuer="heuristic", encoder=onnx, session_id=ep.episode_id)
    seen = 0
    for dp in dps:
        ctx = a.build_context(dp.context, ep.tools, budget_tokens=10**9, valuer=RecencyValuer(), selector=TopK(None))
        query, cards, why = b.retrieve(dp.context, ep.tools)
        assert query == ctx.decision_query
        assert [c.card_id for c in cards] == [s.card_id for s in ctx.selected]
        assert [c.meta.get("age") for c in cards] == [s.card.meta.get("age") for s in ctx.selected]
        assert {c.card_id: why[c.card_id] for c in cards} == {s.card_id: s.retrieved_by for s in ctx.selected}
        seen += len(cards)
    assert seen > 0 and b.store.last_context(ep.episode_id) is None   # retrieval records no context
    assert a.store.last_context(ep.episode_id) is not None
    a.close(), b.close()


def test_prefetched_runtime_candidates_embed_nothing_more_and_match_the_unprefetched(onnx):
    ep = small_episode(60)
    dps = [dp for dp in decision_points(ep) if dp.is_tool_call]
    counting = Counting(onnx)
    enc = CachedEncoder(counting)
    rc = RuntimeCandidates(ep, memory={}, encoder=enc)
    n = rc.prefetch(dps)
    assert n > len(dps) and counting.calls == 1
    plain = RuntimeCandidates(ep, memory={}, encoder=onnx)
    for dp in dps:
        got, ref = rc.at(dp), plain.at(dp)
        assert [c.card_id for c in got] == [c.card_id for c in ref]
        for cid, f in plain.features.items():
            assert rc.features[cid]["bm25"] == pytest.approx(f["bm25"])
            assert rc.features[cid]["cosine"] == pytest.approx(f["cosine"], abs=1e-5)
    # everything the memory embedded came from the one prefetch call, except the index's dimension probe
    assert counting.calls <= 2 and enc.misses <= 1
    rc.close(), plain.close()
    assert RuntimeCandidates(ep, memory={}, encoder=onnx).prefetch(dps) == 0   # a plain encoder: nothing to fill


def test_the_harness_memo_answers_prefetched_cards_only_so_queries_cost_what_they_cost_live(onnx):
    """`run_encoder`'s memo holds the episode's card documents (`prefetch_cards`); a decision query is embedded on
    every retrieval (the harness times retrieval per policy)."""
    from damc.eval.harness import prefetch_cards

    ep = small_episode(40)
    counting = Counting(onnx)
    enc = CachedEncoder(counting, remember_misses=False)
    assert prefetch_cards(enc, ep) > 5 and counting.calls == 1
    rc = RuntimeCandidates(ep, memory={}, encoder=enc)
    dp = [dp for dp in decision_points(ep) if dp.is_tool_call][-1]
    rc.at(dp)
    after_first = counting.texts
    again = RuntimeCandidates(ep, memory={}, encoder=enc)   # the next episode's memory, same run encoder
    again.at(dp)
    # the query was embedded again (+ the new index's dimension probe); no card was
    assert counting.texts == after_first + 2
    assert prefetch_cards(onnx, ep) == 0        # a plain encoder: nothing to fill
    rc.close(), again.close()


def _repeated_call_conversation():
    call = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "lookup_order", "arguments": '{"order_id": "88412"}'}}]}
    result = {"role": "tool", "tool_call_id": "c1", "content": '{"order_id": "88412", "status": "shipped"}'}
    again = {**call, "tool_calls": [{**call["tool_calls"][0], "id": "c2"}]}
    return [{"role": "user", "content": "where is order 88412?"}, call, result,
            {"role": "assistant", "content": "It has shipped."}, {"role": "user", "content": "check it again please"},
            again, {**result, "tool_call_id": "c2"}, {"role": "assistant", "content": "Still shipped."},
            {"role": "user", "content": "thanks, and the refund?"}]


@pytest.mark.parametrize("memo", [0, 1024])
def test_the_runtime_does_not_embed_a_card_rewritten_unchanged_again(onnx, memo):
    """A repeated identical tool call writes a card whose text an earlier card holds: neither with the index's text
    memo (`IndexConfig.encode_memo`, default on) nor without it (the store's embedding cache is keyed by content)
    is that document embedded a second time."""
    from damc.runtime.index import IndexConfig
    from damc.runtime.memory import DecisionAwareMemory

    msgs = _repeated_call_conversation()
    counting = Counting(onnx)
    seen = []
    inner_encode = counting.encode
    counting.encode = lambda texts, **kw: (seen.extend([texts] if isinstance(texts, str) else texts),
                                           inner_encode(texts, **kw))[1]
    m = DecisionAwareMemory(None, valuer="heuristic", encoder=counting, index_config=IndexConfig(encode_memo=memo))
    for end in (4, 8, 9):           # the conversation as it grows, one build per user turn
        m.build_context(msgs[:end + 1] if end < 9 else msgs)
    call_docs = [t for t in seen if "lookup_order" in t and not t.startswith("user:")]
    assert call_docs, seen
    assert len(set(call_docs)) == 1                       # one document ...
    assert len(call_docs) == 1, call_docs                 # ... embedded once, with the memo or without
    m.close()


def test_the_embedding_cache_bench_counts_what_the_content_key_saves(tmp_path):
    """`scripts/bench_embed_cache.py` replays a conversation turn by turn with no in-process memo: the repeated
    identical tool call is a card version a row-keyed cache would embed, and the content key does not."""
    import importlib.util
    from types import SimpleNamespace

    from damc.cards import encode_messages
    from damc.query import card_document

    spec = importlib.util.spec_from_file_location("bench_embed_cache", ROOT / "scripts" / "bench_embed_cache.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    msgs = _repeated_call_conversation()
    out = bench.replay([SimpleNamespace(messages=msgs, episode_id="e")], tmp_path)
    texts = {card_document(c) for c in encode_messages(msgs[:8], "e")}
    assert out["embedded"] == len(texts) < out["rows"] == out["cards"], (out, texts)


def test_an_erasure_empties_the_index_text_memo(onnx):
    """The memo maps a card's text to its vector in process memory: erasing a user's memories leaves none of their
    text there (nor in the last query)."""
    from damc.runtime.memory import DecisionAwareMemory

    m = DecisionAwareMemory(None, valuer="heuristic", encoder=onnx)
    m.build_context(_repeated_call_conversation(), user_id="alice")
    assert any("88412" in t for t in m.index.memo._memo)
    m.delete_all(user_id="alice")
    assert not any("88412" in t for t in m.index.memo._memo)
    assert m.index._last_query is None
    m.close()


def test_the_batching_bench_shows_less_padding_and_the_same_outputs():
    """`scripts/bench_batching.py` on a sample: the padding-aware cut pads less than the size cut, in fewer
    padded tokens for the same real ones, and both give the same embeddings and scores up to float rounding."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_batching", ROOT / "scripts" / "bench_batching.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = bench.main(["--episodes", str(ROOT / "data" / "samples" / "tau2_retail_sample.jsonl"), "--rounds", "1",
                      "--cards", "4"])
    for part in ("encoder", "scorer"):
        size, padding = out["cuts"]["size"][part], out["cuts"]["padding"][part]
        assert size["real_tokens"] == padding["real_tokens"] > 0
        assert padding["padded_tokens"] < size["padded_tokens"], part
    # the encoder is weight-only int8 (fp32 activations): a text's vector does not depend on its batch mates; the int8
    # scorer quantises its activations per batch (MatMulInteger), so a pair's score moves a little with them
    assert out["max_abs_diff"]["embedding"] < 1e-4 and out["max_abs_diff"]["score"] < 0.25
