"""Okapi BM25 over a decision's candidate cards, in numpy (the Lucene variant, as `bm25s` scores it by default).

The runtime needs BM25 in two places — the `BM25Valuer` competitor and a feature of the student's learned
combiner — and a runtime-only install carries only numpy, faiss, onnxruntime and tokenizers, so this is the
one small piece written by hand. Candidate sets are small (≤ a few hundred cards), so a dense term-count
matrix is the fastest form. tests/unit/test_lexical.py checks every score against `bm25s` on real cards.

    idf(t)      = ln(1 + (N − df(t) + 0.5) / (df(t) + 0.5))
    score(q, d) = Σ_{t ∈ q} idf(t) · tf(t, d) / (tf(t, d) + k1 · (1 − b + b · |d| / avgdl))   (one term per query token)

Example:
    >>> bm25_scores([["order", "88412"], ["weather", "paris"]], ["order", "88412"])
    array([0.554..., 0.   ])
"""

from __future__ import annotations

import re
from typing import Sequence

import numpy as np

_TOKEN_RE = re.compile(r"[A-Za-z]+|\d+")


def bm25_tokens(text: str) -> list[str]:
    """Lower-cased words and digit runs (identifiers split on punctuation and underscores)."""
    return [t.lower() for t in _TOKEN_RE.findall(text)]


def bm25_scores(docs: Sequence[Sequence[str]], query: Sequence[str], k1: float = 1.5, b: float = 0.75) -> np.ndarray:
    """BM25 score of each tokenised document for a tokenised query (a repeated query token counts each time).

    Returns:
        float64 array `(len(docs),)`; zeros when the query shares no term with any document.
    """
    if not docs:
        return np.zeros(0, dtype=np.float64)
    terms = sorted(set(query))
    if not terms:
        return np.zeros(len(docs), dtype=np.float64)
    col = {t: j for j, t in enumerate(terms)}
    tf = np.zeros((len(docs), len(terms)), dtype=np.float64)  # (n_docs, n_query_terms)
    for i, d in enumerate(docs):
        for tok in d:
            j = col.get(tok)
            if j is not None:
                tf[i, j] += 1.0
    dl = np.array([len(d) for d in docs], dtype=np.float64)  # (n_docs,)
    avgdl = max(dl.mean(), 1e-9)
    df = (tf > 0).sum(axis=0)  # (n_query_terms,)
    idf = np.log(1.0 + (len(docs) - df + 0.5) / (df + 0.5))
    denom = tf + k1 * (1.0 - b + b * dl[:, None] / avgdl)
    qcount = np.array([list(query).count(t) for t in terms], dtype=np.float64)  # (n_query_terms,)
    return (qcount[None, :] * idf[None, :] * tf / denom).sum(axis=1)
