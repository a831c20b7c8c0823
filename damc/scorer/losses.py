"""Distillation losses for the card scorer: listwise (per decision) + pointwise, on normalised deltas.

The teacher labels every candidate card of a decision with a counterfactual delta (nats). The student
sees `(decision_text, card_text)` pairs and outputs one logit per pair. Per decision we match the two
distributions over its cards — `softmax(z / T)` of the normalised teacher deltas `z` against
`softmax(scores)` — with a KL divergence (ListNet-style, but with a temperature and a proper KL so a
perfect student reaches 0), and add a small pointwise MSE between the scores and `z` so scores stay
comparable *across* decisions (the runtime thresholds them).

The module plugs into sentence-transformers' `CrossEncoderTrainer` exactly like its `ListNetLoss`: the
dataset has columns `query` (str), `docs` (list[str]) and `labels` (list[float], normalised deltas).

Example:
    >>> import torch
    >>> s = torch.tensor([[2.0, 0.0, -1e4]]); z = torch.tensor([[2.0, 0.0, 0.0]])
    >>> mask = torch.tensor([[True, True, False]])
    >>> round(float(listwise_kl(s, z, mask, temperature=1.0)), 6)
    0.0
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

logger = logging.getLogger(__name__)

_NEG = -1e4  # fill value for padded slots: exp() underflows to 0 in fp32 and bf16 alike


@dataclass
class LossConfig:
    """Weights and temperature of the distillation objective."""

    listwise_weight: float = 1.0   # weight of KL(softmax(z/T) || softmax(scores)) per decision
    pointwise_weight: float = 0.1  # weight of MSE(scores, z) over all pairs (0 disables)
    temperature: float = 1.0       # T of the teacher softmax, in normalised-delta units (<1 sharper)
    mini_batch_size: int = 64      # pairs per forward pass inside one step (memory bound)


def listwise_kl(scores: Tensor, targets: Tensor, mask: Tensor, temperature: float = 1.0) -> Tensor:
    """Mean over decisions of KL(softmax(targets / T) || softmax(scores)), padded slots masked out.

    Args:
        scores: student logits, (decisions, max_cards).
        targets: normalised teacher deltas, (decisions, max_cards).
        mask: True where a card exists, (decisions, max_cards).
        temperature: teacher softmax temperature (> 0).
    """
    scores = scores.float().masked_fill(~mask, _NEG)
    targets = (targets.float() / temperature).masked_fill(~mask, _NEG)
    p = targets.softmax(dim=-1)                      # (decisions, max_cards) teacher distribution
    log_q = scores.log_softmax(dim=-1)               # (decisions, max_cards) student log-distribution
    log_p = targets.log_softmax(dim=-1)
    kl = (p * (log_p - log_q)).masked_fill(~mask, 0.0).sum(dim=-1)  # (decisions,)
    return kl.mean()


def pointwise_mse(scores: Tensor, targets: Tensor, mask: Tensor) -> Tensor:
    """MSE between student logits and normalised teacher deltas over the real (unpadded) pairs."""
    diff = (scores.float() - targets.float()).masked_fill(~mask, 0.0)
    return diff.pow(2).sum() / mask.sum().clamp(min=1)


class ListwiseDistillationLoss(nn.Module):
    """Listwise KL + pointwise MSE for a sentence-transformers `CrossEncoder` with one output.

    Args:
        model: the `CrossEncoder` being trained (num_labels=1).
        listwise_weight: weight of the per-decision KL term.
        pointwise_weight: weight of the MSE term.
        temperature: teacher softmax temperature (normalised-delta units).
        mini_batch_size: pairs per forward pass.

    Example:
        >>> loss = ListwiseDistillationLoss(cross_encoder, pointwise_weight=0.1, temperature=0.5)
        >>> trainer = CrossEncoderTrainer(model=cross_encoder, train_dataset=ds, loss=loss)
    """

    def __init__(self, model: Any, listwise_weight: float = 1.0, pointwise_weight: float = 0.1,
                 temperature: float = 1.0, mini_batch_size: int = 64) -> None:
        super().__init__()
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        if model.num_labels != 1:
            raise ValueError(f"ListwiseDistillationLoss needs a model with 1 output, got {model.num_labels}")
        self.model = model
        self.listwise_weight = listwise_weight
        self.pointwise_weight = pointwise_weight
        self.temperature = temperature
        self.mini_batch_size = mini_batch_size

    def forward(self, inputs: list[Any], labels: list[Tensor], prompt: str | None = None,
                task: str | None = None) -> dict[str, Tensor]:
        """Loss components for a batch of decisions (the trainer sums them and logs each one).

        Args:
            inputs: `[queries, docs_lists]` as collated by `CrossEncoderDataCollator`.
            labels: one tensor of normalised deltas per decision.
        """
        from sentence_transformers.util import batch_to_device

        queries, docs_lists = inputs
        counts = [len(d) for d in docs_lists]
        if counts != [len(x) for x in labels]:
            raise ValueError(f"cards per decision {counts} != labels per decision {[len(x) for x in labels]}")
        pairs = [(q, d) for q, docs in zip(queries, docs_lists) for d in docs]
        device = self.model.device
        logits = []
        for i in range(0, len(pairs), max(1, self.mini_batch_size)):
            feats = self.model.preprocess(pairs[i:i + self.mini_batch_size], prompt=prompt, task=task)
            feats = batch_to_device(feats, device)
            logits.append(self.model(feats)["scores"].view(-1).float())
        flat = torch.cat(logits)                                    # (pairs,)

        n, width = len(counts), max(counts)
        rows = torch.repeat_interleave(torch.arange(n), torch.tensor(counts)).to(device)
        cols = torch.cat([torch.arange(c) for c in counts]).to(device)
        scores = torch.zeros(n, width, device=device, dtype=flat.dtype).index_put((rows, cols), flat)
        targets = torch.zeros(n, width, device=device).index_put(
            (rows, cols), torch.cat([x.float() for x in labels]).to(device))
        mask = torch.zeros(n, width, dtype=torch.bool, device=device).index_put(
            (rows, cols), torch.ones_like(flat, dtype=torch.bool))

        out = {}
        if self.listwise_weight:
            out["listwise"] = self.listwise_weight * listwise_kl(scores, targets, mask, self.temperature)
        if self.pointwise_weight:
            out["pointwise"] = self.pointwise_weight * pointwise_mse(scores, targets, mask)
        if not out:
            raise ValueError("both loss weights are 0")
        return out

    def get_config_dict(self) -> dict[str, Any]:
        return {"listwise_weight": self.listwise_weight, "pointwise_weight": self.pointwise_weight,
                "temperature": self.temperature, "mini_batch_size": self.mini_batch_size}
