"""`SyntheticConfig`: the hyperparameters of the synthetic support-episode generator."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class SyntheticConfig:
    """Hyperparameters of the synthetic support-episode generator."""

    min_messages: int = 40  # hard lower bound on messages per episode (system message included)
    max_messages: int = 150  # hard upper bound on messages per episode
    min_threads: int = 2  # customer issues (refund, delivery, contact change) per episode, at least
    max_threads: int = 3  # ... and at most
    min_fillers: int = 2  # filler turns (small talk, KB questions, other orders) between thread steps, at least
    max_fillers: int = 4  # ... and at most (also capped by the message budget)
    p_tool_error: float = 0.12  # chance that a tool call fails transiently (500/503/429/timeout) and is retried
    p_repeat_key: float = 0.25  # chance the assistant restates an id/value in a reply (redundant copy of a fact)
    p_parallel: float = 0.3  # chance a question about two other orders is answered with two parallel calls
    p_change_method: float = 0.7  # chance the customer changes the refund method after first asking for one
    min_kb_articles: int = 3  # knowledge-base results per search, at least
    max_kb_articles: int = 6  # ... and at most
    domain: str = "support"  # Episode.domain
    id_prefix: str = "sup"  # episode ids are f"{id_prefix}-{seed}-{i:05d}"
