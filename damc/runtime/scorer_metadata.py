"""`ScorerMetadata`: what a scorer directory needs at inference, typed and versioned (`damc_scorer.json`).

One home for the scorer's metadata schema: `damc.scorer.export` builds it from a training run
(`ScorerMetadata.from_training_run`) and saves it, `CardScorer.from_pretrained` loads it; `Normalization` is the
label normalisation it carries (teacher deltas in nats <-> the scorer's units). Torch-free (the runtime imports it).

Example:
    >>> meta = ScorerMetadata.load("artifacts/scorer")
    >>> meta.threshold, meta.normalization.invert([1.0])
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

META_FILE = "damc_scorer.json"
# damc_scorer.json schema (`ScorerMetadata`): 3 = `k_min` (the selector's floor, chosen on dev with τ);
# 2 = typed, `threshold` a number; 1 = the untyped dict before it
FORMAT_VERSION = 3
# The floor a scorer gets when its metadata names none (exports of format ≤ 2, runs trained before the floor):
# the four cards of the study's top-k operating point (docs/evaluation.md), so an old export's threshold cannot
# leave a prompt without history either. `MemoryConfig.k_min` overrides it, 0 turns the floor off.
DEFAULT_K_MIN = 4
SCORE_UNITS = "normalised delta (to_delta -> nats)"


@dataclass
class Normalization:
    """How teacher deltas (nats) become training targets; stored in `damc_scorer.json`."""

    kind: str = "zscore"   # zscore: z = clip((delta - mean) / std, ±clip); symlog: same on sign(δ)·log1p(|δ|)
    mean: float = 0.0      # mean (transformed) delta over the train rows
    std: float = 1.0       # standard deviation of (transformed) train deltas, floored at 1e-6
    clip: float = 5.0      # |z| cap so one extreme label cannot dominate the pointwise term

    def transform(self, deltas: Sequence[float]) -> np.ndarray:
        d = np.asarray(deltas, dtype=np.float64)
        if self.kind == "symlog":  # LOO deltas are heavy-tailed: a few cards move the action by 10-50 nats
            return np.sign(d) * np.log1p(np.abs(d))
        if self.kind != "zscore":
            raise ValueError(f"unknown normalisation {self.kind!r}; expected 'zscore' or 'symlog'")
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Normalization":
        """From `damc_scorer.json`'s `normalization` (missing keys take the defaults; older files lack `kind`)."""
        return cls(**{f.name: d[f.name] for f in dataclasses.fields(cls) if f.name in d})

    def apply(self, deltas: Sequence[float]) -> np.ndarray:
        z = (self.transform(deltas) - self.mean) / self.std
        return np.clip(z, -self.clip, self.clip)

    def invert(self, z: Sequence[float] | np.ndarray) -> np.ndarray:
        """Normalised scores back to teacher deltas (nats)."""
        y = np.asarray(z, dtype=np.float64) * self.std + self.mean
        return np.sign(y) * np.expm1(np.abs(y)) if self.kind == "symlog" else y


class ScorerFormatError(ValueError):
    """A scorer directory that is missing files or metadata."""


@dataclass
class ScorerMetadata:
    """What a scorer directory needs at inference and where it came from: `damc_scorer.json`, typed and versioned.

    Written by `save` (`damc.scorer.export`, `CardScorer.save_pretrained`) and read by `load` — the only two places
    that touch the file, as sentence-transformers keeps its model config. `from_dict` is the one compatibility
    shim: files of format 1 (before 2026-12) stored `threshold` as the combiner's whole report
    (`{"tau": ..., "f1": ...}`) and may lack `card_render`; files of format ≤ 2 lack `k_min` (they get
    `DEFAULT_K_MIN`); all are read once, here.

    Example:
        >>> meta = ScorerMetadata.load("artifacts/scorer")
        >>> meta.render_version, meta.threshold, meta.normalization.invert([1.0])
    """

    render_version: str                       # query/card rendering the labels were made with (checked on load)
    normalization: Normalization              # how teacher deltas became targets (`to_delta` inverts it)
    max_length: int                           # tokens per (query, card) pair; longer pairs are truncated
    card_render: str = "template"             # how cards are rendered for the scorer: template | fields | raw
    threshold: float | None = None            # τ chosen on dev for the learned combiner (delta units); None: TopK
    k_min: int = DEFAULT_K_MIN                # the floor under τ: the best k_min cards are kept whatever τ says
    teacher: str | list[str] | None = None    # teacher model(s) that labelled the training data
    estimators: list[str] | None = None       # teacher estimators of the labels (loi, loo, ...)
    base_model: str | None = None             # the cross-encoder the student was initialised from
    kept_layers: list[int] | None = None      # encoder layers kept when the student was shrunk (None: all)
    loss: dict[str, float] | None = None      # loss weights of the training run
    labels: str | None = None                 # label dataset the run trained on
    metrics: dict[str, Any] = field(default_factory=dict)  # dev fidelity of the run (scorer, cosine, recency, split)
    # a shipped scorer (damc/assets/scorer/, written by damc.pipeline.ship; None elsewhere):
    provenance: dict[str, Any] | None = None  # profile, command, data and label fingerprints it was trained from
    evaluation: dict[str, Any] | None = None  # dev figures it was chosen on (key hit at four cards vs retrieval)
    checksums: dict[str, str] | None = None   # SHA-256 of every other file of the directory (damc.assets)
    score_units: str = SCORE_UNITS            # what `score` returns
    format_version: int = FORMAT_VERSION      # this schema's version; `load` refuses newer ones

    REQUIRED = ("render_version", "normalization", "max_length")

    @classmethod
    def from_dict(cls, d: dict[str, Any], source: str = META_FILE) -> "ScorerMetadata":
        """From the JSON object of any format version (the compatibility shim lives here and nowhere else).

        Raises:
            ScorerFormatError: a required field is missing, or the file is of a newer format than this DAMC reads.
        """
        version = int(d.get("format_version") or 1)
        if version > FORMAT_VERSION:
            raise ScorerFormatError(f"{source} is scorer format {version}; this DAMC reads formats ≤ {FORMAT_VERSION}"
                                    f" (upgrade damc, or re-export the run with this version)")
        for key in cls.REQUIRED:
            if key not in d:
                raise ScorerFormatError(f"{source} lacks the field {key!r}")
        tau = d.get("threshold")
        if isinstance(tau, dict):  # format 1: the combiner's whole threshold report
            tau = tau.get("tau")
        k_min = d.get("k_min")
        if k_min is None:  # format ≤ 2 (or a run trained before the floor): no floor was chosen on dev
            k_min = DEFAULT_K_MIN
        if isinstance(k_min, bool) or not isinstance(k_min, int) or k_min < 0:
            raise ScorerFormatError(f"{source}: field 'k_min' is {k_min!r}; expected a whole number of cards ≥ 0")
        names = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in d.items() if k in names}
        kw.update(render_version=str(d["render_version"]), max_length=int(d["max_length"]),
                  normalization=Normalization.from_dict(d["normalization"] or {}),
                  card_render=d.get("card_render") or "template",
                  threshold=None if tau is None else float(tau), k_min=k_min, metrics=d.get("metrics") or {},
                  format_version=FORMAT_VERSION)
        return cls(**kw)

    @classmethod
    def from_training_run(cls, run_dir: str | os.PathLike) -> "ScorerMetadata":
        """The metadata of a finished training run (`train_meta.json` + `metrics.json`, `damc.scorer.train`).

        Raises:
            FileNotFoundError: `train_meta.json` is missing (not a finished run).
        """
        run_dir = Path(run_dir)
        meta_path = run_dir / "train_meta.json"
        if not meta_path.exists():
            raise FileNotFoundError(f"{meta_path} is missing: {run_dir} is not a finished training run "
                                    f"(python scripts/train.py ... out_dir={run_dir})")
        tm = json.loads(meta_path.read_text())
        metrics = json.loads((run_dir / "metrics.json").read_text()) if (run_dir / "metrics.json").exists() else {}
        keep = {k: metrics[k] for k in ("scorer", "cosine", "recency", "split", "n_decisions", "n_pairs")
                if k in metrics}
        return cls.from_dict({**tm, "metrics": keep, "format_version": FORMAT_VERSION}, str(meta_path))

    @classmethod
    def load(cls, path: str | os.PathLike) -> "ScorerMetadata":
        """Read and check `damc_scorer.json` of a scorer directory.

        Raises:
            ScorerFormatError: the directory or the file is missing, not JSON, lacks a field or is too new.
        """
        path = Path(path)
        if not path.is_dir():
            raise ScorerFormatError(f"{path} is not a directory; expected a scorer directory written by "
                                    f"scripts/export.py (int8 ONNX or safetensors weights, tokenizer, {META_FILE})")
        meta_path = path / META_FILE
        if not meta_path.exists():
            raise ScorerFormatError(f"{path} has no {META_FILE}: not a DAMC scorer directory. Export a training "
                                    f"run with `python scripts/export.py run_dir=RUN out={path}`")
        try:
            d = json.loads(meta_path.read_text())
        except json.JSONDecodeError as e:
            raise ScorerFormatError(f"{meta_path} is not valid JSON ({e.msg})") from None
        if not isinstance(d, dict):
            raise ScorerFormatError(f"{meta_path} holds a JSON {type(d).__name__}; expected an object")
        return cls.from_dict(d, str(meta_path))

    def to_dict(self) -> dict[str, Any]:
        """The JSON object `save` writes (current format)."""
        d = dataclasses.asdict(self)
        d["format_version"] = FORMAT_VERSION
        return d

    def save(self, path: str | os.PathLike) -> Path:
        """Write `damc_scorer.json` into the scorer directory `path`; returns the file."""
        out = Path(path) / META_FILE
        out.write_text(json.dumps(self.to_dict(), indent=2, sort_keys=True, default=str))
        return out

    def to_delta(self, scores: Sequence[float] | np.ndarray) -> np.ndarray:
        """Scores (normalised units) back to the teacher's delta scale in nats."""
        return self.normalization.invert(scores)
