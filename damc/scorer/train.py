"""Train the card scorer: `main(cfg) -> metrics` behind `scripts/train.py` (Hydra; `accelerate launch` ready).

Pipeline: read the teacher's label dataset → group rows into decisions (one query, its candidate cards,
their deltas) → split by **episode** into train/dev (seeded) → normalise deltas with train statistics
(`z = clip((delta − mean) / std, ±clip)`) → fine-tune a sentence-transformers `CrossEncoder` (one output)
with `CrossEncoderTrainer` and `ListwiseDistillationLoss` (KL per decision + pointwise MSE) → save the
model, `train_meta.json` (normalisation, split, teacher, render version) and, on the main process only,
the teacher-fidelity metrics of the dev decisions against the cosine and recency baselines
(`metrics.json`, also sent to the logger).

`data.labels` is one label set or a list of them, one per training domain: each is split by episode on its own
(`dev_fraction` of its episodes), and the training and dev decisions are pooled, so every domain has dev
decisions and the combiner's threshold τ and floor `k_min` are chosen on the pooled dev splits of every training
domain (`damc.scorer.combiner`; `metrics.json` `combiner.threshold.by_domain` gives each domain's own τ).

The trainer (transformers + accelerate underneath) brings DDP under `accelerate launch`, bf16 autocast,
gradient accumulation, checkpoints every `save_steps` and `resume=true` from the last one.

Example:
    $ python scripts/train.py data.labels=data/generated/labels out_dir=runs/scorer
    $ python scripts/train.py 'data.labels=[runs/a/labels,runs/b/labels]' out_dir=runs/pooled   # two domains
    $ accelerate launch --num_processes 2 scripts/train.py data.labels=... out_dir=... trainer.bf16=true
"""

from __future__ import annotations

import json
import logging
import os
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from damc.labels import LabeledDecision, LabelFormatError, group_decisions, load_labels, split_by_episode
from damc.runtime.scorer import Normalization

logger = logging.getLogger(__name__)

# ----------------------------------------------------------------------------- data

def fit_normalization(decisions: Sequence[LabeledDecision], clip: float, kind: str = "zscore") -> Normalization:
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


SAMPLINGS = ("uniform", "informative")


def card_subset(deltas: Sequence[float], max_cards: int | None, rng: random.Random,
                sampling: str = "uniform") -> list[int]:
    """The indices of the cards a decision's training list keeps, in their original order (all of them when the
    decision has at most `max_cards`).

    `uniform`: a uniform random subset — the listwise target stays an unbiased sample of the decision's own.
    `informative`: the cards the labels single out first — up to `max_cards // 2` of the highest positive deltas
    (the cards the decision needed) and up to `max_cards // 4` of the most negative (rivals, hard negatives) —
    then a uniform draw from the rest. With 48 candidates and 8 cards a list, a uniform subset holds a given
    needed card one time in six, so most lists teach nothing about what the decision needed; dense retrieval
    trains on positives with hard negatives for the same reason. Ties are broken at random.

    Raises:
        ValueError: an unknown `sampling`.
    """
    if sampling not in SAMPLINGS:
        raise ValueError(f"data.sampling={sampling!r}: expected one of {', '.join(SAMPLINGS)}")
    idx = list(range(len(deltas)))
    if not max_cards or len(idx) <= max_cards:
        return idx
    if sampling == "uniform":
        return sorted(rng.sample(idx, max_cards))
    shuffled = rng.sample(idx, len(idx))                       # random order among equal deltas
    ranked = sorted(shuffled, key=lambda i: -deltas[i])        # stable: highest delta first
    top = [i for i in ranked[: max_cards // 2] if deltas[i] > 0]
    bottom = [i for i in reversed(ranked) if deltas[i] < 0][: max_cards // 4]
    chosen = set(top) | set(bottom)
    rest = [i for i in shuffled if i not in chosen]
    chosen.update(rest[: max_cards - len(chosen)])
    return sorted(chosen)


def to_dataset(decisions: Sequence[LabeledDecision], norm: Normalization, max_cards: int | None, seed: int,
               sampling: str = "uniform") -> Any:
    """HF dataset with columns `query`, `docs`, `labels` (normalised deltas) for the listwise loss; lists longer
    than `max_cards` are cut to a subset drawn by `card_subset` (`sampling`)."""
    import datasets

    rng = random.Random(seed)
    rows: dict[str, list] = {"query": [], "docs": [], "labels": []}
    for d in decisions:
        idx = card_subset(d.deltas, max_cards, rng, sampling)
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
        from damc.llm import cpu_supports_bf16

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


def score_decisions(model: Any, tokenizer: Any, decisions: Sequence[LabeledDecision], max_length: int,
                    batch_size: int = 64) -> list[np.ndarray]:
    """Scores of the trained model for each decision's cards (same code path as `CardScorer`)."""
    from damc.runtime.scorer import CardScorer

    scorer = CardScorer(model, tokenizer, {"max_length": max_length, "normalization": {}, "render_version": ""},
                        batch_size=batch_size)
    pairs = [(d.query, c) for d in decisions for c in d.docs]
    flat = predict_with_progress(scorer, pairs, "dev scores")
    out, i = [], 0
    for d in decisions:
        out.append(flat[i:i + len(d.docs)])
        i += len(d.docs)
    return out


def predict_with_progress(scorer: Any, pairs: Sequence[tuple[str, str]], desc: str, block: int = 4096) -> np.ndarray:
    """`scorer.predict(pairs)` in blocks of `block` pairs behind a tqdm bar (a whole training split's rows take
    minutes on a CPU); each block is batched on its own, longest first."""
    from tqdm.auto import tqdm

    out = np.empty(len(pairs), dtype=np.float32)
    with tqdm(total=len(pairs), desc=desc, unit="pair", disable=len(pairs) <= block) as bar:
        for i in range(0, len(pairs), block):
            out[i:i + block] = scorer.predict(pairs[i:i + block])
            bar.update(len(pairs[i:i + block]))
    return out


@dataclass
class _PreparedData:
    """Labels turned into training data: the decisions, their episode split, normalisation and datasets."""

    labels: Any  # the label dataset as loaded (teacher, estimator and render-version provenance)
    decisions: list[LabeledDecision]  # every decision kept (≥ data.min_cards cards, ≤ data.max_decisions)
    train: list[LabeledDecision]  # training decisions (after data.train_fraction)
    dev: list[LabeledDecision]  # held-out decisions: whole episodes, the same for every train_fraction
    norm: Normalization  # fitted on the training deltas
    train_ds: Any  # HF dataset of `train` (`to_dataset`)
    dev_ds: Any  # HF dataset of `dev`, or None without dev decisions
    teachers: list[str]  # distinct `teacher` values of the labels
    versions: list[str]  # distinct render versions of the labels (empty for labels without the column)
    card_render: str = "template"  # how the labels' card_text is written (`card_render` column; null: template)
    domains: dict[str, str] = field(default_factory=dict)  # decision id -> training domain (its label set's name)
    sources: list[str] = field(default_factory=list)  # the label sets of `data.labels`, one per domain


def label_sources(labels: Any) -> list[str]:
    """`data.labels` as a list of label sets, one per training domain (a path, or a list / tuple of paths).

    Raises:
        ValueError: an empty list, or a repeated path.
    """
    if isinstance(labels, (str, os.PathLike)):
        return [str(labels)]
    sources = [str(p) for p in labels]
    if not sources:
        raise ValueError("data.labels is an empty list: give a label set (or a list, one per training domain)")
    if len(set(sources)) != len(sources):
        raise ValueError(f"data.labels names a label set twice: {sources}")
    return sources


def domain_names(sources: Sequence[str]) -> list[str]:
    """A short name per label set (its directory or file name; the whole path where two names collide)."""
    names = [Path(p).name or p for p in sources]
    return [n if names.count(n) == 1 else p for n, p in zip(names, sources)]


def _concat_labels(sets: Sequence[Any], sources: Sequence[str]) -> Any:
    """The label sets of several domains as one dataset (the columns they share, typed as the first's).

    Raises:
        LabelFormatError: a decision id occurs in two label sets, or their columns cannot be typed alike.
    """
    import datasets

    seen: dict[str, str] = {}
    for src, ds in zip(sources, sets):
        for did in set(ds.unique("decision_id")):
            if did in seen:
                raise LabelFormatError(f"decision {did!r} is in two label sets of data.labels: {seen[did]} and {src}; "
                                       f"each training domain's labels must have their own episode ids")
            seen[did] = src
    common = [c for c in sets[0].column_names if all(c in ds.column_names for ds in sets[1:])]
    first = sets[0].select_columns(common)
    parts = [first]
    for src, ds in zip(sources[1:], sets[1:]):
        try:
            parts.append(ds.select_columns(common).cast(first.features))
        except (ValueError, TypeError) as e:
            raise LabelFormatError(f"{src}: its label columns cannot be read as {sources[0]}'s ({e})") from None
    return datasets.concatenate_datasets(parts)


@dataclass
class _Student:
    """The cross-encoder being trained and its distillation loss."""

    model: Any  # sentence-transformers CrossEncoder, one output, identity activation
    kept_layers: list[int] | None  # encoder layers kept by `prune_layers` (None: all)
    loss: Any  # ListwiseDistillationLoss over `model`


def _prepare_data(cfg: Any) -> _PreparedData:
    """Load the labels, group them into decisions, split by episode and normalise (the `data` config group).

    Raises:
        LabelFormatError: the decisions come from fewer than 2 episodes (no train/dev split possible).
        ValueError: `data.train_fraction` outside (0, 1], or `data.train_decisions` not a positive count.
    """
    from damc.query import RENDER_VERSION

    data = cfg.data
    sources = label_sources(data.labels)
    names = domain_names(sources)
    sets = [load_labels(p) for p in sources]
    ds = sets[0] if len(sets) == 1 else _concat_labels(sets, sources)
    repeat = domain_repeat(data.get("domain_repeat"), sources)
    decisions, train_dec, dev_dec, domains = [], [], [], {}
    for src, name, part in zip(sources, names, sets):  # each domain split by its own episodes, then pooled
        decs = group_decisions(part, min_cards=int(data.min_cards))
        if data.get("max_decisions"):
            decs = decs[: int(data.max_decisions)]
        if len({d.episode_id for d in decs}) < 2:
            raise LabelFormatError(f"{src}: need decisions from at least 2 episodes to split train/dev, "
                                   f"found {len(decs)} decision(s) with ≥ {data.min_cards} cards")
        tr, dv = split_by_episode(decs, float(data.dev_fraction), int(data.split_seed))
        decisions += decs
        train_dec += tr
        dev_dec += dv
        domains.update({d.decision_id: name for d in decs})
    frac = data.get("train_fraction")
    frac = 1.0 if frac is None else float(frac)
    if not 0 < frac <= 1:
        raise ValueError(f"data.train_fraction must be in (0, 1], got {frac}")
    if frac < 1:  # learning curves: fewer training decisions, the very same dev decisions
        keep = set(random.Random(int(data.split_seed)).sample(range(len(train_dec)), max(1, round(frac * len(train_dec)))))
        train_dec = [d for i, d in enumerate(train_dec) if i in keep]
    train_dec = _first_n_decisions(train_dec, data.get("train_decisions"), int(data.split_seed))
    norm = fit_normalization(train_dec, float(data.clip), str(data.get("normalization") or "zscore"))
    # a small domain's decisions enter an epoch r times, each with its own draw of cards when the list is cut
    times = {name: repeat[src] for src, name in zip(sources, names)}
    if any(r > 1 for r in times.values()):
        train_dec = [d for d in train_dec for _ in range(times.get(domains[d.decision_id], 1))]
        logger.info("data.domain_repeat: %s -> %d training lists an epoch", times, len(train_dec))
    logger.info("labels: %d decisions (%d train / %d dev), normalisation mean=%.4f std=%.4f",
                len(decisions), len(train_dec), len(dev_dec), norm.mean, norm.std)
    sampling = str(data.get("sampling") or "uniform")
    train_ds = to_dataset(train_dec, norm, data.get("max_cards"), int(cfg.seed), sampling)
    dev_ds = to_dataset(dev_dec, norm, data.get("max_cards"), int(cfg.seed), sampling) if dev_dec else None

    teachers = sorted(set(ds.unique("teacher")))
    versions = sorted(set(ds.unique("render_version"))) if "render_version" in ds.column_names else []
    if versions and versions != [str(RENDER_VERSION)]:
        logger.warning("labels were rendered with version(s) %s but this DAMC renders %s: the exported scorer will "
                       "be refused at load; carry the labels over first with scripts/rerender_labels.py LABELS "
                       "EPISODES OUT", versions, RENDER_VERSION)
    renders = sorted({r or "template" for r in ds.unique("card_render")}) if "card_render" in ds.column_names \
        else ["template"]
    if len(renders) > 1:
        raise LabelFormatError(f"{', '.join(sources)}: the labels mix card renderings {renders} (column card_render); "
                               f"train on labels made with one `render` (scripts/label.py render=...)")
    return _PreparedData(ds, decisions, train_dec, dev_dec, norm, train_ds, dev_ds, teachers, versions, renders[0],
                         domains, sources)


def domain_repeat(value: Any, sources: Sequence[str]) -> dict[str, int]:
    """`data.domain_repeat` as `{label source: times}`: null (every domain once), or one positive integer per entry
    of `data.labels`, in order — how many times each domain's training decisions enter an epoch (a small real
    domain beside a large synthetic one; its dev decisions are never repeated).

    Raises:
        ValueError: not one positive integer per label source.
    """
    if value is None:
        return {src: 1 for src in sources}
    values = list(value) if not isinstance(value, (int, str)) else [value]
    if len(values) != len(sources) or not all(str(v).isdigit() and int(v) >= 1 for v in values):
        raise ValueError(f"data.domain_repeat={values}: expected one positive integer per entry of data.labels "
                         f"({len(sources)}: {', '.join(sources)}), e.g. data.domain_repeat=[1,10]")
    return {src: int(v) for src, v in zip(sources, values)}


def _first_n_decisions(train_dec: list[LabeledDecision], n: Any, seed: int) -> list[LabeledDecision]:
    """`data.train_decisions=N`: the first N training decisions of one seeded shuffle, so the sets of a learning
    curve are nested (the 250 decisions hold the 125); all of them, with a warning, when fewer exist.

    Raises:
        ValueError: N is not a positive whole number.
    """
    if n is None:
        return train_dec
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"data.train_decisions must be a positive number of decisions or null, got {n!r}")
    if n > len(train_dec):
        logger.warning("data.train_decisions=%d but the labels hold %d training decisions: training on all of them",
                       n, len(train_dec))
        return train_dec
    order = random.Random(seed).sample(range(len(train_dec)), len(train_dec))
    keep = set(order[:n])
    return [d for i, d in enumerate(train_dec) if i in keep]


def _build_student(cfg: Any) -> _Student:
    """The cross-encoder of `cfg.model` (optionally pruned to `model.num_layers`) and the `trainer.loss`; its new
    classifier head is drawn from torch's global generator, seeded here from `cfg.seed` (the trainer seeds only
    later, so without it two runs on the same labels wrote different weights)."""
    import torch
    from sentence_transformers.cross_encoder import CrossEncoder
    from transformers import set_seed

    from damc.models import resolve_model
    from damc.scorer.losses import ListwiseDistillationLoss

    base = str(cfg.model.name)
    set_seed(int(cfg.seed))
    lcfg = cfg.trainer.loss
    model = CrossEncoder(resolve_model(base), num_labels=1, max_length=int(cfg.model.max_length),
                         activation_fn=torch.nn.Identity(), device=cfg.get("device"))
    kept_layers = prune_layers(model, cfg.model.get("num_layers"))
    if kept_layers is not None:
        logger.info("student keeps encoder layers %s of %s", kept_layers, base)
    loss = ListwiseDistillationLoss(model, listwise_weight=float(lcfg.listwise_weight),
                                    pointwise_weight=float(lcfg.pointwise_weight),
                                    temperature=float(lcfg.temperature), mini_batch_size=int(lcfg.mini_batch_size))
    return _Student(model, kept_layers, loss)


def _training_arguments(cfg: Any, out_dir: Path, has_dev: bool, report_to: list[str]) -> Any:
    """`CrossEncoderTrainingArguments` from the `trainer` config group (checkpoints in `out_dir/checkpoints`)."""
    import torch
    from sentence_transformers.cross_encoder.training_args import CrossEncoderTrainingArguments

    tr = cfg.trainer
    return CrossEncoderTrainingArguments(
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
        eval_strategy=str(tr.eval_strategy) if has_dev else "no",
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


def _run_training(cfg: Any, out_dir: Path, student: _Student, data: _PreparedData, report_to: list[str]
                 ) -> tuple[Any, dict[str, Any]]:
    """Fit the student (resuming from the last checkpoint when `resume=true`); returns the trainer and a summary."""
    from sentence_transformers.cross_encoder import CrossEncoderTrainer

    args = _training_arguments(cfg, out_dir, data.dev_ds is not None, report_to)
    trainer = CrossEncoderTrainer(model=student.model, args=args, train_dataset=data.train_ds,
                                  eval_dataset=data.dev_ds, loss=student.loss)
    resume = _last_checkpoint(out_dir / "checkpoints") if cfg.get("resume") else None
    if cfg.get("resume") and resume is None:
        logger.warning("resume=true but no checkpoint in %s; training from scratch", out_dir / "checkpoints")
    result = trainer.train(resume_from_checkpoint=resume)
    train_summary = {"global_step": int(result.global_step), "train_loss": float(result.training_loss),
                     "resumed_from": resume, "world_size": int(trainer.args.world_size),
                     **{k: float(v) for k, v in result.metrics.items() if isinstance(v, (int, float))}}
    return trainer, train_summary


def _evaluate_dev(cfg: Any, student: _Student, data: _PreparedData, train_summary: dict[str, Any]) -> dict[str, Any]:
    """Teacher fidelity of the trained student on the dev decisions, next to the cosine and recency baselines."""
    from damc.scorer.metrics import fidelity_with_baselines

    dev_dec, train_dec = data.dev, data.train
    hf_model, tokenizer = student.model.model, student.model.tokenizer
    hf_model.eval()
    dev_scores = score_decisions(hf_model, tokenizer, dev_dec, int(cfg.model.max_length))
    metrics: dict[str, Any] = fidelity_with_baselines([d.as_dict() for d in dev_dec], dev_scores,
                                                      encoder=str(cfg.eval.baseline_encoder), seed=int(cfg.seed))
    metrics["train"] = train_summary
    metrics["split"] = {"train_decisions": len(train_dec), "dev_decisions": len(dev_dec),
                        "train_episodes": len({d.episode_id for d in train_dec}),
                        "dev_episodes": len({d.episode_id for d in dev_dec}),
                        "dev_fraction": float(cfg.data.dev_fraction), "split_seed": int(cfg.data.split_seed)}
    if len(data.sources) > 1:   # several training domains: each one's share of the pooled split
        metrics["split"]["domains"] = {
            name: {"train_decisions": sum(data.domains[d.decision_id] == name for d in train_dec),
                   "dev_decisions": sum(data.domains[d.decision_id] == name for d in dev_dec)}
            for name in domain_names(data.sources)}
    return metrics


def _fit_combiner(cfg: Any, student: _Student, data: _PreparedData, out_dir: Path) -> dict[str, Any] | None:
    """Fit the learned combiner (`damc.scorer.combiner`) on the label rows of `combiner.fit_on` (the training
    decisions by default, or the held-out dev ones) with the trained student's scores, choose its threshold and
    floor `k_min` on the dev decisions (pooled over the training domains), write `combiner.json`; None when the labels lack the runtime signals (labels made before
    RENDER_VERSION 2) or `combiner.enabled=false`."""
    from damc.scorer.combiner import fit_combiner, has_features

    if not cfg.combiner.enabled:
        return None
    df = data.labels.to_pandas()
    if not has_features(df.columns):
        logger.warning("labels lack the runtime signals (feat_*, card_age): no combiner is fitted")
        return None
    df = df.drop_duplicates(["decision_id", "card_id"])
    parts = {}
    cap = cfg.combiner.get("max_fit_decisions")
    for name, decs in (("train", data.train), ("dev", data.dev)):
        ids = list(dict.fromkeys(d.decision_id for d in decs))   # a repeated domain's decisions count once
        if name == "train" and cap and len(ids) > int(cap):       # the combiner has a handful of weights: a seeded
            ids = random.Random(int(cfg.seed)).sample(ids, int(cap))   # sample of the training decisions fits it
        rows = df[df.decision_id.isin(set(ids))].reset_index(drop=True)
        scores = score_rows(student, rows, int(cfg.model.max_length))
        parts[name] = (rows, scores)
    dev_rows = parts["dev"][0]
    dev_domains = dev_rows["decision_id"].map(data.domains).tolist() if len(data.sources) > 1 else None
    k_min = cfg.combiner.get("k_min", "auto")
    comb, tau, report = fit_combiner(*parts["train"], *parts["dev"], min_delta=float(cfg.combiner.min_delta),
                                     fit_on=str(cfg.combiner.get("fit_on", "train")),
                                     features=str(cfg.combiner.get("features", "auto")),
                                     k_min="auto" if k_min in (None, "auto") else k_min, dev_domains=dev_domains)
    comb.save(out_dir / "combiner.json")
    return {**report, "threshold_choice": report.get("threshold"), "threshold": tau}  # tau: a number or None


def score_rows(student: _Student, rows: Any, max_length: int) -> list[float]:
    """The trained student's score of each label row (`decision_text`, `card_text`)."""
    from damc.runtime.scorer import CardScorer

    hf_model, tokenizer = student.model.model, student.model.tokenizer
    scorer = CardScorer(hf_model, tokenizer, {"max_length": max_length, "normalization": {}, "render_version": ""})
    pairs = list(zip(rows["decision_text"], rows["card_text"]))
    return predict_with_progress(scorer, pairs, f"student scores ({len(pairs):,} label rows)").tolist()


def _train_metadata(cfg: Any, student: _Student, data: _PreparedData) -> dict[str, Any]:
    """`train_meta.json`: what the saved model needs at inference (normalisation, render version) and provenance."""
    from omegaconf import OmegaConf

    from damc.query import RENDER_VERSION

    versions, teachers = data.versions, data.teachers
    return {"base_model": str(cfg.model.name), "kept_layers": student.kept_layers,
            "max_length": int(cfg.model.max_length),
            "render_version": versions[0] if len(versions) == 1 else str(RENDER_VERSION),
            "card_render": data.card_render,
            "teacher": teachers[0] if len(teachers) == 1 else teachers,
            "estimators": sorted(set(data.labels.unique("estimator"))), "normalization": vars(data.norm),
            "loss": {k: float(v) for k, v in cfg.trainer.loss.items()}, "labels": ", ".join(data.sources),
            "dev_episodes": sorted({d.episode_id for d in data.dev}),
            "config": OmegaConf.to_container(cfg, resolve=True)}


def main(cfg: Any) -> dict[str, Any]:
    """Train a scorer from labels and write `out_dir/{model,combiner.json,train_meta.json,metrics.json}`.

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
    from damc.scorer.metrics import flatten

    out_dir = Path(cfg.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    data = _prepare_data(cfg)
    student = _build_student(cfg)
    report_to = _setup_logger(cfg, out_dir)
    trainer, train_summary = _run_training(cfg, out_dir, student, data, report_to)
    if not trainer.is_world_process_zero():
        return {"train": train_summary}

    student.model.save_pretrained(str(out_dir / "model"))
    metrics = _evaluate_dev(cfg, student, data, train_summary)
    combiner = _fit_combiner(cfg, student, data, out_dir)
    if combiner is not None:
        metrics["combiner"] = combiner
    (out_dir / "metrics.json").write_text(json.dumps(metrics, indent=2))
    meta = _train_metadata(cfg, student, data)
    meta["threshold"] = combiner["threshold"] if combiner else None
    meta["k_min"] = combiner["k_min"] if combiner else None   # None: no threshold, so no floor was chosen
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


if __name__ == "__main__":  # python -m damc.scorer.train KEY=VALUE ...  (configs: damc/configs/train.yaml)
    from damc.cli import run

    run("train", main)
