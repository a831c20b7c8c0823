"""Non-parametric card values for a new decision, from teacher labels of similar past decisions.

`KNNValue.fit(labels)` embeds every distinct `decision_text` once (MiniLM-L6 via
`damc.runtime.index.load_card_encoder`, L2-normalised) into a FAISS inner-product index (= cosine), and
every distinct `card_text` into a second one. `value(decision_text, cards, k)` then gives, per card:

1. **seen card** (its `card_text` was labeled in some of the k most similar past decisions): the
   similarity-weighted average of its deltas there, weights = max(cosine, 0) of the decisions;
2. **new card** (e.g. a new episode): the weighted average delta of the `k_cards` labeled cards most
   similar to it by card-text embedding, each weighted by card similarity × the similarity of its
   decision to the query (so labels from unrelated decisions count little);
3. nothing similar at all (all weights 0): 0.0.

This is DESIGN.md's "value vector" path: usable before any scorer is trained.

Example:
    >>> knn = KNNValue().fit(load_labels("labels/"))
    >>> knn.value(render_decision_query(msgs, tools), [render_card(c) for c in cards], k=8)
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from damc.models import DEFAULT_ENCODER

logger = logging.getLogger(__name__)


@dataclass
class KNNConfig:
    """Hyperparameters of the k-NN value."""

    encoder: str = DEFAULT_ENCODER  # sentence encoder (registry name or path)
    k: int = 8  # similar past decisions averaged over
    k_cards: int = 8  # similar labeled cards used for a card never labeled
    batch_size: int = 64  # texts per encoder batch


class KNNValue:
    """Similarity-weighted average of past deltas (see module docstring)."""

    def __init__(self, encoder: str = DEFAULT_ENCODER, k: int = 8, k_cards: int = 8, batch_size: int = 64):
        self.cfg = KNNConfig(encoder, k, k_cards, batch_size)
        self._encoder = None

    @property
    def encoder(self) -> Any:
        if self._encoder is None:
            from damc.runtime.index import load_card_encoder

            self._encoder = load_card_encoder(self.cfg.encoder)  # sentence-transformers, or ONNX in a light install
        return self._encoder

    def _embed(self, texts: Sequence[str]) -> np.ndarray:
        emb = self.encoder.encode(list(texts), batch_size=self.cfg.batch_size, normalize_embeddings=True,
                                  show_progress_bar=False, convert_to_numpy=True)
        return np.ascontiguousarray(emb, dtype=np.float32)  # (n, dim)

    def fit(self, labels: Any) -> "KNNValue":
        """Index a label dataset (`datasets.Dataset` or anything with the label columns)."""
        import faiss

        from damc.query import query_body

        dec = [query_body(t) for t in labels["decision_text"]]   # labels of any render version: no tool list
        card, delta = list(labels["card_text"]), list(labels["delta"])
        if not dec:
            raise ValueError("no labels to fit")
        self.decisions = list(dict.fromkeys(dec))
        d_ix = {t: i for i, t in enumerate(self.decisions)}
        self.cards = list(dict.fromkeys(card))
        c_ix = {t: i for i, t in enumerate(self.cards)}
        # per decision: {card index: delta}; rows of the same (decision, card) pair are averaged
        acc: dict[tuple[int, int], list[float]] = defaultdict(list)
        for dt, ct, v in zip(dec, card, delta):
            if v is not None and np.isfinite(v):
                acc[(d_ix[dt], c_ix[ct])].append(float(v))
        self.table: dict[int, dict[int, float]] = defaultdict(dict)
        for (di, ci), vs in acc.items():
            self.table[di][ci] = float(np.mean(vs))
        self.pairs = np.array([(di, ci, v) for di, row in self.table.items() for ci, v in row.items()])  # (n, 3)
        self.dec_emb = self._embed(self.decisions)  # (n_decisions, dim)
        self.card_emb = self._embed(self.cards)  # (n_cards, dim)
        self.dec_index = faiss.IndexFlatIP(self.dec_emb.shape[1])
        self.dec_index.add(self.dec_emb)
        self.card_index = faiss.IndexFlatIP(self.card_emb.shape[1])
        self.card_index.add(self.card_emb)
        self.card_to_pairs: dict[int, list[int]] = defaultdict(list)
        for r, (_, ci, _) in enumerate(self.pairs):
            self.card_to_pairs[int(ci)].append(r)
        logger.info("KNNValue: %d decisions, %d distinct cards, %d labels", len(self.decisions), len(self.cards),
                    len(self.pairs))
        return self

    def value(self, decision_text: str, cards: Sequence[Any], k: int | None = None) -> np.ndarray:
        """(n_cards,) values of `cards` (card texts, or Cards rendered with `render_card`) for a decision."""
        from damc.query import query_body, render_card

        texts = [c if isinstance(c, str) else render_card(c) for c in cards]
        if not texts:
            return np.zeros(0)
        k = min(k or self.cfg.k, len(self.decisions))
        q = self._embed([query_body(decision_text)])  # (1, dim)
        sims, idx = self.dec_index.search(q, k)  # (1, k)
        near = {int(i): max(float(s), 0.0) for s, i in zip(sims[0], idx[0]) if i >= 0}
        dec_sim_all = (self.dec_emb @ q[0]).clip(min=0.0)  # (n_decisions,) cosine to the query
        out = np.zeros(len(texts))
        c_ix = {t: i for i, t in enumerate(self.cards)}
        unseen = []
        for j, t in enumerate(texts):
            ci = c_ix.get(t)
            hits = [(w, self.table[di][ci]) for di, w in near.items() if ci is not None and ci in self.table[di]]
            wsum = sum(w for w, _ in hits)
            if wsum > 0:
                out[j] = sum(w * v for w, v in hits) / wsum
            else:
                unseen.append(j)
        if unseen:
            emb = self._embed([texts[j] for j in unseen])  # (n_unseen, dim)
            kc = min(self.cfg.k_cards, len(self.cards))
            csims, cidx = self.card_index.search(emb, kc)  # (n_unseen, k_cards)
            for row, j in enumerate(unseen):
                num = den = 0.0
                for s, ci in zip(csims[row], cidx[row]):
                    if ci < 0 or s <= 0:
                        continue
                    for r in self.card_to_pairs[int(ci)]:
                        di, _, v = self.pairs[r]
                        w = float(s) * float(dec_sim_all[int(di)])
                        num, den = num + w * v, den + w
                out[j] = num / den if den > 0 else 0.0
        return out
