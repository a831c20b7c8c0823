"""`token_batches`: the padding-aware cut the ONNX encoder and the card scorer batch their inputs with."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from damc.runtime.encoder import token_batches


def _cost(lengths, cuts, overhead):
    return sum((s.stop - s.start) * lengths[s.start] + overhead for s in cuts)


def _brute_force(lengths, batch_size, max_tokens, overhead):
    """The cheapest cut over every way to split the sorted inputs into consecutive batches."""
    n, best = len(lengths), float("inf")
    for mask in itertools.product([0, 1], repeat=n - 1):
        bounds = [0] + [i + 1 for i, m in enumerate(mask) if m] + [n]
        cuts = [slice(a, b) for a, b in zip(bounds, bounds[1:])]
        if any(s.stop - s.start > batch_size or (s.stop - s.start > 1 and (s.stop - s.start) * lengths[s.start]
                                                  > max_tokens) for s in cuts):
            continue
        best = min(best, _cost(lengths, cuts, overhead))
    return best


def test_a_short_text_is_not_padded_to_a_long_ones_length():
    assert token_batches([256, 40, 40, 40], 64, 4096) == [slice(0, 1), slice(1, 4)]
    # equal lengths share one pass; the size cap and the token cap still cut
    assert token_batches([50] * 5, 64, 4096) == [slice(0, 5)]
    for cuts in (token_batches([50] * 5, 2, 4096), token_batches([50] * 5, 64, 100)):
        assert sorted(s.stop - s.start for s in cuts) == [1, 2, 2]
    assert token_batches([300], 4, 256) == [slice(0, 1)]      # one input longer than the cap still runs alone
    assert token_batches([], 4, 256) == []


@pytest.mark.parametrize("seed", range(30))
def test_the_cut_is_the_cheapest_one_and_covers_every_input_once(seed):
    rng = random.Random(seed)
    n = rng.randint(1, 9)
    lengths = sorted((rng.choice([4, 16, 40, 41, 100, 255, 256]) for _ in range(n)), reverse=True)
    batch_size, max_tokens, overhead = rng.choice([1, 2, 3, 64]), rng.choice([256, 512, 4096]), rng.choice([0, 16])
    cuts = token_batches(lengths, batch_size, max_tokens, overhead_tokens=overhead)
    assert [i for s in cuts for i in range(s.start, s.stop)] == list(range(n))
    assert all(s.stop - s.start <= batch_size for s in cuts)
    assert all(s.stop - s.start == 1 or (s.stop - s.start) * lengths[s.start] <= max_tokens for s in cuts)
    assert _cost(lengths, cuts, overhead) == _brute_force(lengths, batch_size, max_tokens, overhead)


def test_embeddings_do_not_depend_on_what_a_text_is_batched_with():
    from damc.runtime.encoder import OnnxEncoder

    enc = OnnxEncoder.packaged()
    texts = ["order 88412 never arrived", "refund " * 120, "the user's email is ana@example.com", "ok"]
    together = enc.encode(texts)
    alone = np.stack([enc.encode(t) for t in texts])
    assert np.abs(together - alone).max() < 1e-5
