"""The cards the runtime chooses from, at a past decision: what the teacher labels.

`RuntimeCandidates(episode)` feeds the episode, message by message in order, to a fresh in-memory
`DecisionAwareMemory` (the same class and settings the agent and the A/B harness use), and `at(dp)` asks it for
its candidate set at decision `dp` — similarity top-N ∪ recent ∪ pinned, capped — with each card's age set as
the runtime sets it (`DecisionAwareMemory.retrieve`: the ingest and retrieval stages of `build_context`, nothing
valued, packed or recorded). Nothing is selected away, so the teacher values exactly the set any valuer would
choose from, in the order the prompt shows it.

A labelling run knows every card and decision query of an episode before it starts: `shared_encoder` returns the
encoder behind a `damc.runtime.encoder.CachedEncoder`, and `RuntimeCandidates.prefetch` embeds the episode's card
documents and its decisions' queries in one batched call (texts repeated across episodes once), so the memory's
own incremental embedding finds them done. Same encoder, same vectors up to float rounding, same candidates.

Example:
    >>> rc = RuntimeCandidates(episode, tokenizer)
    >>> for dp in decision_points(episode):
    ...     cards = rc.at(dp)         # the runtime's candidates, oldest first
"""

from __future__ import annotations

from typing import Any, Sequence

from damc.cards import Card
from damc.episodes import DecisionPoint, Episode
from damc.models import DEFAULT_ENCODER


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
        if dp.episode.episode_id != self.episode.episode_id:
            raise ValueError(f"decision {dp.decision_id} is not of episode {self.episode.episode_id}")
        if dp.index < self.last_index:
            raise ValueError(f"decisions must come in order: {dp.index} after {self.last_index}")
        self.last_index = dp.index
        from damc.runtime.combiner import FEATURES, candidate_features

        query, cards, _ = self.memory.retrieve(dp.context, list(dp.episode.tools or []) or None)
        x = candidate_features(query, cards, memory=self.memory)
        self.features = {c.card_id: {n: float(x[i, j]) for j, n in enumerate(FEATURES) if n in ("bm25", "cosine", "pinned")}
                         for i, c in enumerate(cards)}
        return cards

    def prefetch(self, decisions: Sequence[DecisionPoint] = ()) -> int:
        """Embed this episode's card documents and the decision queries of `decisions` in one batched call when
        the memory's encoder is a `CachedEncoder` (`shared_encoder`); returns how many texts were embedded (0
        otherwise). Texts the runtime then writes differently are simply embedded when it asks for them."""
        enc = self.memory.index.encoder
        if not hasattr(enc, "prefetch"):
            return 0
        return enc.prefetch(prefetch_texts(self.episode, decisions), batch_size=self.memory.index.config.encode_batch)

    def close(self) -> None:
        self.memory.close()


def prefetch_texts(episode: Episode, decisions: Sequence[DecisionPoint] = ()) -> list[str]:
    """What a runtime memory fed `episode` will embed: its card documents, and the decision query of each of
    `decisions` that has a history (one without has no candidate to find: the runtime embeds no query there)."""
    from damc.query import episode_documents, render_decision_query

    tools = list(episode.tools or []) or None
    return episode_documents(episode) + [render_decision_query(dp.context, tools) for dp in decisions
                                         if dp.has_history]


def shared_encoder(memory: dict[str, Any] | None = None) -> Any:
    """The encoder `memory["encoder"]` names, loaded once (as the runtime memory would load it, `encoder_backend`
    included) behind a `CachedEncoder`, to pass to every `RuntimeCandidates` of a run (`prefetch` fills it)."""
    from damc.runtime.encoder import cached_encoder

    cfg = dict(memory or {})
    return cached_encoder(cfg.get("encoder", DEFAULT_ENCODER), cfg.get("encoder_backend", "auto"))
