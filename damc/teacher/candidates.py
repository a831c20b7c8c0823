"""The cards the runtime chooses from, at a past decision: what the teacher labels.

`RuntimeCandidates(episode)` feeds the episode, message by message in order, to a fresh in-memory
`DecisionAwareMemory` (the same class and settings the agent and the A/B harness use), and `at(dp)` asks it for
its candidate set at decision `dp` — similarity top-N ∪ recent ∪ pinned, capped — with each card's age set as
the runtime sets it. Nothing is selected away (every candidate is kept, under an unbounded budget), so the
teacher values exactly the set any valuer would choose from, in the order the prompt shows it.

Example:
    >>> rc = RuntimeCandidates(episode, tokenizer)
    >>> for dp in decision_points(episode):
    ...     cards = rc.at(dp)         # the runtime's candidates, oldest first
"""

from __future__ import annotations

from typing import Any

from damc.cards import Card
from damc.episodes import DecisionPoint, Episode
from damc.models import DEFAULT_ENCODER

UNBOUNDED = 10**9


class RuntimeCandidates:
    """One episode in a fresh runtime memory; its candidate set at any decision (decisions in increasing order).

    Args:
        episode: the episode.
        tokenizer: token counter of the memory (the teacher's tokenizer).
        memory: `MemoryConfig` fields (`top_n`, `recent`, `pinned`, `max_candidates`, ...) plus `encoder`;
            the A/B harness and the labels must use the same ones (configs/memory/default.yaml).
        encoder: the loaded encoder of `memory["encoder"]` (`shared_encoder`), shared by the runtimes of many
            episodes so that each does not load it again (None: the memory loads it by name).
    """

    def __init__(self, episode: Episode, tokenizer: Any = None, memory: dict[str, Any] | None = None,
                 encoder: Any = None):
        from damc.runtime.memory import DecisionAwareMemory, MemoryConfig

        cfg = dict(memory or {})
        name = cfg.pop("encoder", DEFAULT_ENCODER)
        encoder = name if encoder is None else encoder
        self.episode = episode
        # the candidates only (each call brings its own valuer): the memory's own valuer loads no scorer
        self.memory = DecisionAwareMemory(None, valuer="heuristic", encoder=encoder, tokenizer=tokenizer,
                                          session_id=episode.episode_id,
                                          config=MemoryConfig(**cfg))
        self.last_index = -1
        self.features: dict[str, dict[str, float]] = {}

    def at(self, dp: DecisionPoint) -> list[Card]:
        """The runtime's candidate cards at `dp`, oldest first, ages set (`card.meta["age"]`); `self.features`
        then holds each card's runtime signals (`bm25`, `cosine`, `pinned`, the learned combiner's inputs).

        Raises:
            ValueError: `dp` belongs to another episode, or comes before a decision already asked for.
        """
        from damc.runtime.select import TopK
        from damc.runtime.valuers.heuristic import RecencyValuer

        if dp.episode.episode_id != self.episode.episode_id:
            raise ValueError(f"decision {dp.decision_id} is not of episode {self.episode.episode_id}")
        if dp.index < self.last_index:
            raise ValueError(f"decisions must come in order: {dp.index} after {self.last_index}")
        self.last_index = dp.index
        from damc.runtime.combiner import FEATURES, candidate_features

        ctx = self.memory.build_context(dp.context, list(dp.episode.tools or []) or None, budget_tokens=UNBOUNDED,
                                        valuer=RecencyValuer(), selector=TopK(None))
        cards = [s.card for s in ctx.selected]
        x = candidate_features(ctx.decision_query, cards, memory=self.memory)
        self.features = {c.card_id: {n: float(x[i, j]) for j, n in enumerate(FEATURES) if n in ("bm25", "cosine", "pinned")}
                         for i, c in enumerate(cards)}
        return cards

    def close(self) -> None:
        self.memory.close()


def shared_encoder(memory: dict[str, Any] | None = None) -> Any:
    """The encoder `memory["encoder"]` names, loaded once (as the runtime memory would load it, `encoder_backend`
    included), to pass to every `RuntimeCandidates` of a run."""
    from damc.runtime.encoder import choose_encoder, load_encoder

    cfg = dict(memory or {})
    return load_encoder(choose_encoder(cfg.get("encoder", DEFAULT_ENCODER), cfg.get("encoder_backend", "auto"), None))
