"""Valuers: how much each candidate card matters for the next decision (one value per card, higher = keep).

| valuer | what it values | module |
| --- | --- | --- |
| `HeuristicValuer` | errors, user constraints, fresh tool results, ids shared with the query (the cold-start prior) | `heuristic` |
| `RecencyValuer` | newest first | `heuristic` |
| `SimilarityValuer` | embedding cosine to the query | `retrieval` |
| `BM25Valuer` | Okapi BM25 of the query over the candidates (`damc.runtime.lexical`) | `retrieval` |
| `GenerativeAgentsValuer` | recency + importance + relevance (Park et al. 2023) | `retrieval` |
| `ScorerValuer` | the distilled student `CardScorer` | `learned` |
| `RRFValuer` | BM25 + cosine by reciprocal-rank fusion: the scorer cascade's first stage, no student | `learned` |
| `KNNValuer` | the teacher's non-parametric value (similar labelled decisions) | `learned` |
| `LLMJudgeValuer` | the seed's 0–10 rating prompt with any chat model | `judge` |
| `HybridValuer`, `CachedValuer` | compose others (weighted mix; TTL cache) | `base` |

Every valuer returns values in [0, 1], so `Threshold(τ)` and mixes compare like with like.

Example:
    >>> v = HybridValuer(HeuristicValuer(), ScorerValuer(CardScorer.from_pretrained("artifacts/scorer")), 0.8)
    >>> values = CachedValuer(v, ttl_s=60).value(query, cards)
"""

from damc.runtime.lexical import bm25_tokens
from damc.runtime.valuers.base import (
                                      NOT_CROSS_ENCODED,
                                      CachedValuer,
                                      HybridValuer,
                                      Valuer,
                                      as_valuer,
                                      card_hash,
                                      sigmoid,
)
from damc.runtime.valuers.heuristic import (
                                      CONSTRAINT_PATTERNS,
                                      HeuristicValuer,
                                      HeuristicWeights,
                                      RecencyValuer,
                                      is_constraint,
                                      is_pinned,
                                      recency_order,
)
from damc.runtime.valuers.judge import JUDGE_PROMPT, LLMJudgeValuer, parse_rating
from damc.runtime.valuers.learned import CrossEncoderScorer, KNNValuer, RRFValuer, ScorerValuer
from damc.runtime.valuers.retrieval import BM25Valuer, GenerativeAgentsValuer, SimilarityValuer

__all__ = ["NOT_CROSS_ENCODED", "as_valuer", "BM25Valuer", "CONSTRAINT_PATTERNS", "CachedValuer", "CrossEncoderScorer", "GenerativeAgentsValuer",
           "HeuristicValuer", "HeuristicWeights", "HybridValuer", "JUDGE_PROMPT", "KNNValuer", "LLMJudgeValuer",
           "RecencyValuer", "RRFValuer", "ScorerValuer", "SimilarityValuer", "Valuer", "bm25_tokens", "card_hash", "is_constraint",
           "is_pinned", "parse_rating", "recency_order", "sigmoid"]
