"""Train the card scorer: `main(cfg) -> metrics` behind `scripts/train.py` (Hydra; `accelerate launch` ready).

Pipeline: read the teacher's label dataset → group rows into decisions (one query, its candidate cards,
their deltas) → split by **episode** into train/dev (seeded) → normalise deltas with train statistics
(`z = clip((delta − mean) / std, ±clip)`) → fine-tune a sentence-transformers `CrossEncoder` (one output)
with `CrossEncoderTrainer` and `ListwiseDistillationLoss` (KL per decision + pointwise MSE) → save the
model, `train_meta.json` (normalisation, split, teacher, render version) and, on the main process only,
the teacher-fidelity metrics of the dev decisions against the cosine and recency baselines
(`metrics.json`, also sent to the logger).

The trainer (transformers + accelerate underneath) brings DDP under `accelerate launch`, bf16 autocast,
gradient accumulation, checkpoints every `save_steps` and `resume=true` from the last one.

Example:
    $ python scripts/train.py data.labels=data/generated/labels out_dir=runs/scorer
    $ accelerate launch --num_processes 2 scripts/train.py data.labels=... out_dir=... trainer.bf16=true
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

logger = logging.getLogger(__name__)

# The DESIGN.md label contract; training needs all of them (extras are allowed).
REQUIRED_COLUMNS = ("decision_id", "episode_id", "card_id", "decision_text", "card_text", "logp_full",
                    "logp_without", "delta", "estimator", "teacher", "n_action_tokens")


class LabelsFormatError(ValueError):
    """A label dataset that cannot be trained on (missing columns, no usable decisions)."""


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


@dataclass
class Decision:
    """One labelled decision: the query, its candidate cards and their teacher deltas."""

    decision_id: str
    episode_id: str
    query: str              # decision_text
    docs: list[str]         # card_text per card
    card_ids: list[str]
    deltas: list[float]     # teacher delta per card (nats)
    positions: list[int]    # card position in the episode (recency baseline)

    def as_dict(self) -> dict[str, Any]:
        return {"query": self.query, "docs": self.docs, "deltas": self.deltas, "positions": self.positions}


# ----------------------------------------------------------------------------- data

def read_labels(path: str | os.PathLike) -> Any:
    """A label dataset as a `datasets.Dataset`, checked against the label contract.

    Uses the teacher's `damc.teacher.labels.load_labels` when present; otherwise reads a `save_to_disk`
    directory, parquet/JSONL files or a directory of shards.

    Raises:
        FileNotFoundError: nothing at `path`.
        LabelsFormatError: required columns are missing (named in the message).
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"label dataset {path} does not exist (write one with scripts/label.py)")
    try:
        from damc.teacher.labels import load_labels  # the teacher's reader (shards, resumable layout)
    except ImportError:
        load_labels = None
    ds = None
    if load_labels is not None:
        try:
            ds = load_labels(path)
        except Exception as e:  # noqa: BLE001 - fall back to plain formats, but keep column errors loud
            if "column" in str(e).lower():
                raise LabelsFormatError(str(e)) from e
            logger.debug("load_labels(%s) failed (%s); reading plain files", path, e)
    if ds is None:
        ds = _read_plain(path)
    missing = [c for c in REQUIRED_COLUMNS if c not in ds.column_names]
    if missing:
        raise LabelsFormatError(f"label dataset {path} is missing column(s) {', '.join(missing)}; "
                                f"has {', '.join(ds.column_names)}. Expected the label contract: "
                                f"{', '.join(REQUIRED_COLUMNS)}")
    return ds


def _read_plain(path: Path) -> Any:
    import datasets

    if path.is_dir() and ((path / "dataset_info.json").exists() or (path / "state.json").exists()):
        return datasets.load_from_disk(str(path))
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.suffix in (".parquet", ".jsonl"))
    if not files:
        raise LabelsFormatError(f"{path} holds no label data (no dataset, .parquet or .jsonl files)")
    if all(f.suffix == ".parquet" for f in files):
        return datasets.Dataset.from_parquet([str(f) for f in files])
    return datasets.Dataset.from_json([str(f) for f in files])


def group_decisions(ds: Any, min_cards: int = 2) -> list[Decision]:
    """Group label rows into decisions (cards in episode order); drop decisions with < `min_cards` cards."""
    cols = ["decision_id", "episode_id", "card_id", "decision_text", "card_text", "delta"]
    has_pos = "card_position" in ds.column_names
    df = ds.select_columns(cols + (["card_position"] if has_pos else [])).to_pandas()
    df = df.drop_duplicates(["decision_id", "card_id"])
    if not has_pos:
        df["card_position"] = df.groupby("decision_id").cumcount()
    out = []
    for did, g in df.groupby("decision_id", sort=True):
        if len(g) < min_cards:
            continue
        g = g.sort_values("card_position", kind="stable")
        out.append(Decision(str(did), str(g["episode_id"].iloc[0]), str(g["decision_text"].iloc[0]),
                            g["card_text"].astype(str).tolist(), g["card_id"].astype(str).tolist(),
                            g["delta"].astype(float).tolist(), g["card_position"].astype(int).tolist()))
    return out


def split_by_episode(decisions: Sequence[Decision], dev_fraction: float, seed: int
                     ) -> tuple[list[Decision], list[Decision]]:
    """Seeded episode-level split: every decision of an episode lands on the same side."""
    episodes = sorted({d.episode_id for d in decisions})
    random.Random(seed).shuffle(episodes)
    n_dev = min(len(episodes) - 1, max(1, math.ceil(dev_fraction * len(episodes)))) if dev_fraction > 0 else 0
    dev_eps = set(episodes[:n_dev])
    return [d for d in decisions if d.episode_id not in dev_eps], [d for d in decisions if d.episode_id in dev_eps]


def fit_normalization(decisions: Sequence[Decision], clip: float, kind: str = "zscore") -> Normalization:
    """Train-split statistics of the (transformed) deltas."""
    x = Normalization(kind).transform([x for d in decisions for x in d.deltas])
    return Normalization(kind, float(x.mean()), float(max(x.std(), 1e-6)), float(clip))


def prune_layers(cross_encoder: Any, num_layers: int | None) -> list[int] | None:
    """Keep `num_layers` evenly spaced transformer layers (first and last included) of the encoder — the
    DistilBERT-style initialisation of a shallower student. Returns the kept layer indices (None: all kept).

    Raises:
        ValueError: the model has no `encoder.layer` stack or `num_layers` is out of range.
    """
    if not num_layers:
        return None
    hf = cross_encoder.model
    stack = getattr(getattr(hf.base_model, "encoder", None), "layer", None)
    if stack is None:
        raise ValueError(f"model.num_layers={num_layers}: {type(hf).__name__} has no encoder.layer stack to prune; "
                         f"use model.num_layers=null")
    total = len(stack)
    if not 1 <= num_layers <= total:
        raise ValueError(f"model.num_layers={num_layers} but the encoder has {total} layers")
    keep = sorted({int(round(x)) for x in np.linspace(0, total - 1, num_layers)})
    import torch

    hf.base_model.encoder.layer = torch.nn.ModuleList([stack[i] for i in keep])
    hf.config.num_hidden_layers = len(keep)
    return keep


def to_dataset(decisions: Sequence[Decision], norm: Normalization, max_cards: int | None, seed: int) -> Any:
    """HF dataset with columns `query`, `docs`, `labels` (normalised deltas) for the listwise loss."""
    import datasets

    rng = random.Random(seed)
    rows: dict[str, list] = {"query": [], "docs": [], "labels": []}
    for d in decisions:
        idx = list(range(len(d.docs)))
        if max_cards and len(idx) > max_cards:  # an unbiased subset keeps the listwise target faithful
            idx = sorted(rng.sample(idx, max_cards))
        z = norm.apply([d.deltas[i] for i in idx])
        rows["query"].append(d.query)
        rows["docs"].append([d.docs[i] for i in idx])
        rows["labels"].append([float(x) for x in z])
    return datasets.Dataset.from_dict(rows)


# ----------------------------------------------------------------------------- training

def _resolve_bf16(flag: Any) -> bool:
    import torch

    if isinstance(flag, bool):
        return flag
    if str(flag) == "auto":
        if torch.cuda.is_available():
            return torch.cuda.is_bf16_supported()
        from damc.models import cpu_supports_bf16

        return cpu_supports_bf16()
    return str(flag).lower() in ("1", "true", "yes")


def _setup_logger(cfg: Any, out_dir: Path) -> list[str]:
    """`report_to` for the trainer; W&B offline by default and in the run dir."""
    lg = cfg.get("logger") or {}
    if lg.get("name", "none") != "wandb":
        os.environ["WANDB_DISABLED"] = "true"
        return []
    os.environ.setdefault("WANDB_MODE", str(lg.get("mode", "offline")))
    os.environ.setdefault("WANDB_PROJECT", str(lg.get("project", "damc-scorer")))
    os.environ.setdefault("WANDB_DIR", str(out_dir))
    os.environ.setdefault("WANDB_SILENT", "true")
    return ["wandb"]


def _last_checkpoint(ckpt_dir: Path) -> str | None:
    if not ckpt_dir.is_dir():
        return None
    from transformers.trainer_utils import get_last_checkpoint

    return get_last_checkpoint(str(ckpt_dir))


def score_decisions(model: Any, tokenizer: Any, decisions: Sequence[Decision], max_length: int,
                    batch_size: int = 64) -> list[np.ndarray]:
    """Scores of the trained model for each decision's cards (same code path as `CardScorer`)."""
    from damc.scorer.model import CardScorer

    scorer = CardScorer(model, tokenizer, {"max_length": max_length, "normalization": {}, "render_version": ""},
                        batch_size=batch_size)
    pairs = [(d.query, c) for d in decisions for c in d.docs]
    flat = scorer.predict(pairs)
    out, i = [], 0
    for d in decisions:
        out.append(flat[i:i + len(d.docs)])
        i += len(d.docs)
    return out


def main(cfg: Any) -> dict[str, Any]:
    """Train a scorer from labels and write `out_dir/{model,train_meta.json,metrics.json}`.

    Args:
        cfg: the composed `configs/train.yaml` (groups `data` ← `labels/`, `model/`, `trainer/`, `logger/`).

    Returns:
        The metrics written to `metrics.json` (`{"scorer", "cosine", "recency", "train", ...}`); on
        non-main processes of a distributed run, the train summary only.

    Example:
        >>> from hydra import compose, initialize
        >>> with initialize(config_path="../configs", version_base="1.3"):
        ...     cfg = compose("train", overrides=["data.labels=data/samples/labels", "out_dir=runs/t"])
        >>> main(cfg)["scorer"]["spearman"]["median"]
    """
    import torch
    from omegaconf import OmegaConf
    from sentence_transformers.cross_encoder import CrossEncoder, CrossEncoderTrainer
    from sentence_transformers.cross_encoder.training_args import CrossEncoderTrainingArguments

    from damc.models import resolve_model
    from damc.query import RENDER_VERSION
    from damc.scorer.losses import ListwiseDistillationLoss
    from damc.scorer.metrics import fidelity_with_baselines, flatten

    out_dir = Path(cfg.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    data, tr, lcfg = cfg.data, cfg.trainer, cfg.trainer.loss

    ds = read_labels(data.labels)
    decisions = group_decisions(ds, min_cards=int(data.min_cards))
    if data.get("max_decisions"):
        decisions = decisions[: int(data.max_decisions)]
    if len({d.episode_id for d in decisions}) < 2:
        raise LabelsFormatError(f"{data.labels}: need decisions from at least 2 episodes to split train/dev, "
                                f"found {len(decisions)} decision(s) with ≥ {data.min_cards} cards")
    train_dec, dev_dec = split_by_episode(decisions, float(data.dev_fraction), int(data.split_seed))
    frac = data.get("train_fraction")
    frac = 1.0 if frac is None else float(frac)
    if not 0 < frac <= 1:
        raise ValueError(f"data.train_fraction must be in (0, 1], got {frac}")
    if frac < 1:  # learning curves: fewer training decisions, the very same dev decisions
        keep = set(random.Random(int(data.split_seed)).sample(range(len(train_dec)), max(1, round(frac * len(train_dec)))))
        train_dec = [d for i, d in enumerate(train_dec) if i in keep]
    norm = fit_normalization(train_dec, float(data.clip), str(data.get("normalization") or "zscore"))
    logger.info("labels: %d decisions (%d train / %d dev), normalisation mean=%.4f std=%.4f",
                len(decisions), len(train_dec), len(dev_dec), norm.mean, norm.std)
    train_ds = to_dataset(train_dec, norm, data.get("max_cards"), int(cfg.seed))
    dev_ds = to_dataset(dev_dec, norm, data.get("max_cards"), int(cfg.seed)) if dev_dec else None

    teachers = sorted(set(ds.unique("teacher")))
    versions = sorted(set(ds.unique("render_version"))) if "render_version" in ds.column_names else []
    if versions and versions != [str(RENDER_VERSION)]:
        logger.warning("labels were rendered with version(s) %s but this DAMC renders %s", versions, RENDER_VERSION)

    base = str(cfg.model.name)
    max_length = int(cfg.model.max_length)
    model = CrossEncoder(resolve_model(base), num_labels=1, max_length=max_length,
                         activation_fn=torch.nn.Identity(), device=cfg.get("device"))
    kept_layers = prune_layers(model, cfg.model.get("num_layers"))
    if kept_layers is not None:
        logger.info("student keeps encoder layers %s of %s", kept_layers, base)
    loss = ListwiseDistillationLoss(model, listwise_weight=float(lcfg.listwise_weight),
                                    pointwise_weight=float(lcfg.pointwise_weight),
                                    temperature=float(lcfg.temperature), mini_batch_size=int(lcfg.mini_batch_size))

    report_to = _setup_logger(cfg, out_dir)
    eval_strategy = str(tr.eval_strategy) if dev_ds is not None else "no"
    args = CrossEncoderTrainingArguments(
        output_dir=str(out_dir / "checkpoints"),
        num_train_epochs=float(tr.epochs),
        max_steps=int(tr.max_steps),
        per_device_train_batch_size=int(tr.batch_size),
        per_device_eval_batch_size=int(tr.batch_size),
        gradient_accumulation_steps=int(tr.grad_accum),
        learning_rate=float(tr.lr),
        weight_decay=float(tr.weight_decay),
        warmup_steps=float(tr.warmup_ratio),  # transformers v5: a float < 1 is a ratio of total steps
        lr_scheduler_type=str(tr.scheduler),
        bf16=_resolve_bf16(tr.bf16),
        eval_strategy=eval_strategy,
        eval_steps=tr.get("eval_steps"),
        save_strategy="steps",
        save_steps=int(tr.save_steps),
        save_total_limit=int(tr.save_total_limit),
        logging_steps=int(tr.logging_steps),
        report_to=report_to,
        run_name=(cfg.logger.get("run_name") if cfg.get("logger") else None) or out_dir.name,
        seed=int(cfg.seed),
        dataloader_num_workers=int(tr.num_workers),
        use_cpu=str(cfg.get("device") or "") == "cpu" or not torch.cuda.is_available(),
        disable_tqdm=not bool(tr.progress_bar),
        # Every parameter takes part in every step; with the default (True for non-PreTrainedModel
        # wrappers such as CrossEncoder) DDP marks the classifier ready twice and the backward fails.
        ddp_find_unused_parameters=False,
    )
    trainer = CrossEncoderTrainer(model=model, args=args, train_dataset=train_ds, eval_dataset=dev_ds, loss=loss)
    resume = _last_checkpoint(out_dir / "checkpoints") if cfg.get("resume") else None
    if cfg.get("resume") and resume is None:
        logger.warning("resume=true but no checkpoint in %s; training from scratch", out_dir / "checkpoints")
    result = trainer.train(resume_from_checkpoint=resume)
    train_summary = {"global_step": int(result.global_step), "train_loss": float(result.training_loss),
                     "resumed_from": resume, "world_size": int(trainer.args.world_size), **{k: float(v) for k, v in result.metrics.items()
                                                if isinstance(v, (int, float))}}
    if not trainer.is_world_process_zero():
        return {"train": train_summary}

    model.save_pretrained(str(out_dir / "model"))
    hf_model, tokenizer = model.model, model.tokenizer
    hf_model.eval()
    dev_scores = score_decisions(hf_model, tokenizer, dev_dec, max_length)
    metrics: dict[str, Any] = fidelity_with_baselines([d.as_dict() for d in dev_dec], dev_scores,
                                                      encoder=str(cfg.eval.baseline_encoder), seed=int(cfg.seed))
    metrics["train"] = train_summary
    metrics["split"] = {"train_decisions": len(train_dec), "dev_decisions": len(dev_dec),
                        "train_episodes": len({d.episode_id for d in train_dec}),
                        "dev_episodes": len({d.episode_id for d in dev_dec}),
                        "dev_fraction": float(data.dev_fraction), "split_seed": int(data.split_seed)}
    (out_dir / "metrics.json").write_text(json.dumps(metrics, indent=2))
    meta = {"base_model": base, "kept_layers": kept_layers, "max_length": max_length, "render_version": versions[0] if len(versions) == 1
            else str(RENDER_VERSION), "teacher": teachers[0] if len(teachers) == 1 else teachers,
            "estimators": sorted(set(ds.unique("estimator"))), "normalization": vars(norm),
            "loss": {k: float(v) for k, v in lcfg.items()}, "labels": str(data.labels),
            "dev_episodes": sorted({d.episode_id for d in dev_dec}),
            "config": OmegaConf.to_container(cfg, resolve=True)}
    (out_dir / "train_meta.json").write_text(json.dumps(meta, indent=2, default=str))
    if report_to:
        _log_wandb(flatten(metrics, "fidelity/"), out_dir)
    logger.info("dev fidelity: spearman median %s (cosine %s, recency %s)",
                metrics["scorer"]["spearman"]["median"], metrics["cosine"]["spearman"]["median"],
                metrics["recency"]["spearman"]["median"])
    return metrics


def _log_wandb(flat: dict[str, float], out_dir: Path) -> None:
    """Fidelity metrics into the trainer's W&B run (or a new offline one), then close it."""
    try:
        import wandb
    except ImportError:  # pragma: no cover
        return
    run = wandb.run or wandb.init(project=os.environ.get("WANDB_PROJECT", "damc-scorer"), dir=str(out_dir),
                                  name=out_dir.name, mode=os.environ.get("WANDB_MODE", "offline"))
    run.log(flat)
    run.summary.update(flat)
    wandb.finish()
