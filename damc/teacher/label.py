"""`main(cfg)` behind `scripts/label.py`: counterfactual labels of what the runtime chooses from.

Each episode is fed in order to a fresh `DecisionAwareMemory` (`damc.teacher.candidates.RuntimeCandidates`,
settings `memory:` — the same as the A/B harness's); at each planned decision (file order, `per_episode` sample,
the first `max_decisions`) the runtime's candidate set — similarity top-N ∪ recent ∪ pinned, capped; no
newest-N window — is valued by the configured estimator under the configured teacher, in the runtime's own
prompt (`damc.teacher.context`). One row per card (DESIGN.md label rows, `damc.labels`) stores the student's
rendering (`card_text`, with age and kind) beside the line the teacher saw (`teacher_text`); `delta` is in nats
per action token. Decisions without candidates are skipped and counted; the summary counts decisions whose key
card was labelled (`key_labelled` of `key_decisions`).

Output layout (`out_dir`):
    shards/part-AAAAAA-BBBBBB.parquet   rows of a batch of decisions (global ordinals AAAAAA..BBBBBB),
                                        written to a temp file and renamed: a shard is whole or absent
    progress/rank-R.json                per-process manifest, rewritten atomically after every shard
    label_config.json                   what the labels depend on; a resume with other settings fails
    summary.json                        totals of the finished run

Resuming: on start, the decision ids already present in `shards/` are skipped, so a killed run re-run
with the same command finishes without duplicate or lost rows (a crash loses at most one shard).

Sharding: under `accelerate launch --num_processes N` each process (accelerate `PartialState`) takes
every Nth episode, whole (`shard_by_episode`: its memory is fed in order), and writes its own shards; on GPUs
each process uses its own device. Load the result with `damc.labels.load_labels(out_dir)`.
"""

from __future__ import annotations

import json
import logging
import os
import random
import time
from pathlib import Path
from typing import Any, Sequence, TypeVar

import numpy as np

from damc.episodes import DecisionPoint, atomic_write_text, decision_points, load_episodes
from damc.labels import LabelRow, labelled_decision_ids, write_shard

logger = logging.getLogger(__name__)
T = TypeVar("T")


def plan_decisions(path: str | os.PathLike, tool_calls_only: bool = False,
                   max_decisions: int | None = None, per_episode: int | None = None,
                   seed: int = 0) -> list[DecisionPoint]:
    """Every decision point of an episode file in order (episode, then message index), capped.

    `per_episode=N` keeps N decisions per episode (a seeded sample, still in order), which spreads a
    labeling budget over many episodes instead of exhausting the first ones. The sample is drawn from the
    decisions with a history (a message before the current user turn other than the system prompt): one without
    has no candidate card, so it would spend the budget on nothing (without `per_episode` such decisions stay in
    the plan and are counted as `skipped_no_cards`).

    Raises:
        ValueError: the file holds no decision point (no assistant message).
    """
    eps = load_episodes(path)
    dps, n_all = [], 0
    for ep in eps:
        eps_dps = decision_points(ep, tool_calls_only=tool_calls_only)
        n_all += len(eps_dps)
        if per_episode is not None:
            eps_dps = [dp for dp in eps_dps if dp.has_history]
            if len(eps_dps) > per_episode:
                rng = random.Random(f"{seed}/{ep.episode_id}")
                keep = set(rng.sample(range(len(eps_dps)), per_episode))
                eps_dps = [dp for j, dp in enumerate(eps_dps) if j in keep]
        dps += eps_dps
    if not dps and n_all:
        raise ValueError(f"{path}: {n_all} decision points, none with a history (a message before the current user "
                         f"turn besides the system prompt): per_episode samples only those; nothing to label")
    if not dps:
        raise ValueError(f"{path}: {len(eps)} episodes but no decision points (no assistant messages"
                         f"{' with tool calls' if tool_calls_only else ''}); nothing to label")
    return dps[:max_decisions] if max_decisions is not None else dps


def shard_decisions(items: Sequence[T], rank: int, world_size: int) -> list[tuple[int, T]]:
    """`(global ordinal, item)` pairs of process `rank`: every `world_size`-th item from `rank`."""
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} outside world of size {world_size}")
    return [(i, items[i]) for i in range(rank, len(items), world_size)]


def shard_by_episode(decisions: Sequence[DecisionPoint], rank: int, world_size: int
                     ) -> list[tuple[int, DecisionPoint]]:
    """`(global ordinal, decision)` of process `rank`: every `world_size`-th *episode*, whole (its runtime memory is
    fed in order, so an episode's decisions stay in one process), decisions in order."""
    episodes = list(dict.fromkeys(dp.episode.episode_id for dp in decisions))
    mine = {e for _, e in shard_decisions(episodes, rank, world_size)}
    return [(i, dp) for i, dp in enumerate(decisions) if dp.episode.episode_id in mine]


def _fingerprint(cfg: Any) -> dict[str, Any]:
    """The settings labels depend on (not batch sizes, devices, timeouts or max_decisions)."""
    from omegaconf import OmegaConf

    teacher = OmegaConf.to_container(cfg.teacher, resolve=True)
    for k in ("batch_size", "device", "timeout", "retries", "backoff", "api_key", "url"):
        teacher.pop(k, None)
    estimator = OmegaConf.to_container(cfg.estimator, resolve=True)
    estimator.pop("reuse_prefix", None)  # naive or reused: same deltas
    from damc.configs import memory_fingerprint  # the keys hashed before the schema, plus non-defaults
    from damc.query import RENDER_VERSION

    grounded = not needs_teacher(cfg)   # no model: the teacher's settings and its window do not enter
    return {"data": str(Path(cfg.data.path).resolve()), "tool_calls_only": bool(cfg.data.tool_calls_only),
            "per_episode": cfg.get("per_episode"), "sample_seed": cfg.get("sample_seed", 0),
            **({"per_episode_from": "decisions with a history"} if cfg.get("per_episode") is not None else {}),
            **({} if grounded else {"teacher": teacher}), "estimator": estimator,
            "memory": memory_fingerprint(OmegaConf.to_container(cfg.memory, resolve=True)),
            **({} if grounded else {"max_context_tokens": cfg.max_context_tokens}), "render_version": RENDER_VERSION,
            **({"render": cfg.render} if cfg.get("render", "template") != "template" else {}),
            "delta_units": "grounded target (unitless)" if grounded else "nats per action token"}


def estimator_class(cfg: Any) -> Any:
    """The configured estimator's class (`cfg.estimator._target_`), not instantiated."""
    from hydra.utils import get_class

    return get_class(cfg.estimator._target_)


def needs_teacher(cfg: Any) -> bool:
    """Whether the configured estimator reads a teacher model: its class's `needs_teacher` (False for the
    model-free `grounded`, configs/estimator/grounded.yaml; True for every counterfactual estimator)."""
    return bool(getattr(estimator_class(cfg), "needs_teacher", True))


def _rows(dp: DecisionPoint, cards: list, res: Any, est_name: str, teacher_id: str,
          features: dict[str, dict[str, float]] | None = None, render: str = "template") -> list[dict[str, Any]]:
    """Label rows: the student's rendering of each card (`card_text`, age and kind included) beside the line the
    teacher saw (`teacher_text`); `delta` in nats per action token, `logp_*` totals."""
    from damc.query import RENDER_VERSION, query_body, render_card, render_decision_query
    from damc.teacher.context import memory_line

    query = render_decision_query(dp.context, dp.episode.tools)
    decision_text = query_body(query)   # what the student reads
    keys = set(dp.key_card_ids)
    rows = []
    for c, d, w, wo in zip(cards, res.deltas, res.logp_with, res.logp_without):
        if not np.isfinite(d):  # left out for the window (already warned)
            continue
        rows.append(LabelRow(
            decision_id=dp.decision_id, episode_id=dp.episode.episode_id, card_id=c.card_id,
            decision_text=decision_text, card_text=render_card(c, render=render, query=query), logp_full=float(w),
            logp_without=float(wo), delta=float(d), estimator=est_name, teacher=teacher_id,
            n_action_tokens=int(res.n_action_tokens), decision_index=int(dp.index), card_position=int(c.position),
            card_kind=c.kind, is_key=c.card_id in keys, render_version=RENDER_VERSION,
            teacher_text=memory_line(c, render, query), card_age=(c.meta or {}).get("age"), card_render=render,
            **{f"feat_{k}": v for k, v in (features or {}).get(c.card_id, {}).items()}).as_dict())
    return rows


def labels_made_with_other_settings(cfg: Any) -> bool:
    """Whether `cfg.out_dir` holds labels made with other settings than `cfg`'s (its `label_config.json`
    differs), i.e. a resume would be refused. An unreadable file counts as no (the label run reports it)."""
    fp_path = Path(cfg.out_dir) / "label_config.json"
    try:
        old = json.loads(fp_path.read_text())
    except (OSError, json.JSONDecodeError):
        return False
    return old != json.loads(json.dumps(_fingerprint(cfg)))


def _prepare_out_dir(cfg: Any, state: Any) -> Path:
    """Create `out_dir/{shards,progress}` (wiped first with `overwrite=true`) and check or write `label_config.json`.

    Raises:
        ValueError: `out_dir` holds labels made with other settings (`_fingerprint`).
    """
    out = Path(cfg.out_dir)
    shard_dir, prog_dir = out / "shards", out / "progress"
    if cfg.overwrite and state.is_main_process and out.exists():
        import shutil

        shutil.rmtree(out)
    state.wait_for_everyone()
    shard_dir.mkdir(parents=True, exist_ok=True)
    prog_dir.mkdir(parents=True, exist_ok=True)
    fp = _fingerprint(cfg)
    fp_path = out / "label_config.json"
    if fp_path.exists():
        old = json.loads(fp_path.read_text())
        if old != json.loads(json.dumps(fp)):
            raise ValueError(f"{out} holds labels made with other settings ({fp_path}); use another out_dir "
                             f"or overwrite=true.\n old: {old}\n new: {fp}")
    elif state.is_main_process:
        atomic_write_text(fp_path, json.dumps(fp, indent=2))
    return out


def _build_labelers(cfg: Any, state: Any, need_teacher: bool) -> tuple[Any, Any]:
    """`(teacher, estimator)` from the config groups; the teacher is None when nothing is left to label, and always
    for the `grounded` estimator (no model is loaded).

    Under a multi-process launch with `teacher.device=auto`, each process's teacher uses its own device.
    """
    import hydra
    from omegaconf import OmegaConf

    teacher_cfg = OmegaConf.to_container(cfg.teacher, resolve=True)
    if teacher_cfg.get("device") == "auto" and state.num_processes > 1:
        teacher_cfg["device"] = str(state.device)  # one device per process
    teacher = hydra.utils.instantiate(teacher_cfg) if need_teacher and needs_teacher(cfg) else None
    estimator = hydra.utils.instantiate(cfg.estimator, max_context_tokens=cfg.max_context_tokens,
                                        render=cfg.get("render", "template"))
    return teacher, estimator


def _new_stats() -> dict[str, Any]:
    """Per-process counters, written to `progress/rank-R.json` and summed into `summary.json`."""
    return {"decisions": 0, "cards": 0, "rows": 0, "skipped_no_cards": 0, "skipped_too_long": 0,
            "cards_dropped": 0, "key_decisions": 0, "key_labelled": 0, "forward_passes": 0, "forward_tokens": 0,
            "naive_forward_tokens": 0, "passes_saved": 0.0, "shards": 0, "skipped_text_reply": 0,
            "decisions_with_positive": 0}


def _label_decision(dp: DecisionPoint, cards: list, teacher: Any, estimator: Any, est_name: str,
                    stats: dict[str, Any], features: dict[str, dict[str, float]] | None = None) -> list[dict[str, Any]]:
    """The label rows of one decision over the runtime's candidates `cards` (none without candidates or when the
    context does not fit); updates `stats` (`key_labelled`: a key card of the decision among the labelled).
    A model-free estimator (`grounded`: `needs_teacher` False) gets the runtime's `features` and no teacher, and
    skips text replies (no call, no target: `skipped_text_reply`)."""
    from damc.teacher.context import ContextTooLongError

    model_free = not getattr(estimator, "needs_teacher", True)
    if model_free and not dp.is_tool_call:
        stats["skipped_text_reply"] += 1
        return []
    if dp.key_card_ids:
        stats["key_decisions"] += 1
    if not cards:
        stats["skipped_no_cards"] += 1
        return []
    try:
        res = estimator.estimate(teacher, dp, cards, features=features) if model_free \
            else estimator.estimate(teacher, dp, cards)
    except ContextTooLongError as e:
        logger.warning("skipped: %s", e)
        stats["skipped_too_long"] += 1
        return []
    teacher_id = teacher.model_id if teacher is not None else est_name
    rows = _rows(dp, cards, res, est_name, teacher_id, features, estimator.context_cfg.render)
    stats["decisions_with_positive"] += any(r["delta"] > 0 for r in rows) if model_free else 0
    stats["decisions"] += 1
    stats["cards"] += len(rows)
    stats["key_labelled"] += any(r["is_key"] for r in rows)
    stats["cards_dropped"] += len(res.extra.get("dropped", []))
    stats["forward_passes"] += res.n_forward
    stats["forward_tokens"] += res.n_forward_tokens
    naive = int(res.extra.get("naive_tokens", res.n_forward_tokens))
    stats["naive_forward_tokens"] += naive
    stats["passes_saved"] += (naive - res.n_forward_tokens) / (naive / max(res.n_forward, 1)) if naive else 0.0
    return rows


def _label_all(cfg: Any, mine: list[tuple[int, DecisionPoint]], teacher: Any, estimator: Any, out: Path,
               rank: int, world: int, show_progress: bool) -> dict[str, Any]:
    """Label this process's decisions episode by episode (one runtime memory each, fed in order), writing a shard
    and the progress manifest every `shard_size` decisions."""
    from itertools import takewhile

    from omegaconf import OmegaConf
    from tqdm import tqdm

    from damc.teacher.candidates import RuntimeCandidates, shared_encoder

    shard_dir, prog_dir = out / "shards", out / "progress"
    memory_cfg = OmegaConf.to_container(cfg.memory, resolve=True)
    stats = _new_stats()
    batch: list[dict[str, Any]] = []
    first, runtime = None, None
    model_free = not getattr(estimator, "needs_teacher", True)
    encoder = shared_encoder(memory_cfg) if mine else None      # loaded once, not once per episode
    bar = tqdm(mine, desc=f"label[{rank}]", unit="decision", disable=not show_progress or not mine)
    for n, (ordinal, dp) in enumerate(bar):
        if runtime is None or runtime.episode.episode_id != dp.episode.episode_id:
            if runtime is not None:
                runtime.close()
            # no teacher (grounded): the memory counts chars/4 — no effect on the candidates (nothing is packed)
            runtime = RuntimeCandidates(dp.episode, getattr(teacher, "tokenizer", None), memory_cfg, encoder)
            if cfg.get("prefetch", True):   # the episode's cards and queries embedded in one batched call
                ahead = takewhile(lambda od: od[1].episode.episode_id == dp.episode.episode_id, mine[n:])
                runtime.prefetch([d for _, d in ahead if d.is_tool_call or not model_free])
        first = ordinal if first is None else first
        # a text reply has no grounded target: skipped before the runtime is asked (its messages are fed later)
        cards = [] if model_free and not dp.is_tool_call else runtime.at(dp)
        batch += _label_decision(dp, cards, teacher, estimator, estimator.name, stats, runtime.features)
        if (n + 1) % cfg.shard_size == 0 or n == len(mine) - 1:
            if batch:
                write_shard(shard_dir, f"part-{first:06d}-{ordinal:06d}.parquet", batch)
                stats["shards"] += 1
                stats["rows"] += len(batch)
            batch, first = [], None
            atomic_write_text(prog_dir / f"rank-{rank}.json",
                              json.dumps({"rank": rank, "world_size": world, "last_ordinal": ordinal, **stats}))
        bar.set_postfix(rows=stats["rows"] + len(batch))
    if runtime is not None:
        runtime.close()
    return stats


def _write_summary(cfg: Any, out: Path, summary: dict[str, Any], stats: dict[str, Any], teacher: Any,
                   rank: int, world: int) -> None:
    """Main process: add every rank's progress totals to `summary` and write `summary.json`."""
    from damc.labels import load_labels

    prog_dir, shard_dir = out / "progress", out / "shards"
    for f in sorted(prog_dir.glob("rank-*.json")):
        if world == 1 and f.name != f"rank-{rank}.json":
            continue
        for k, v in json.loads(f.read_text()).items():
            if k in stats:
                summary[k] = summary.get(k, 0) + v if k != "wall_time_s" else max(summary.get(k, 0), v)
    summary["passes_saved"] = round(summary.get("passes_saved", 0.0), 1)
    summary["teacher"] = estimator_class(cfg).name if not needs_teacher(cfg) else getattr(teacher, "model_id", cfg.teacher.get("model"))
    files = sorted(shard_dir.glob("part-*.parquet"))
    summary["total_rows"] = len(load_labels(out)) if files else 0
    atomic_write_text(out / "summary.json", json.dumps(summary, indent=2))
    logger.info("labels: %s", json.dumps(summary))
    print("label summary: " + ", ".join(f"{k}={v}" for k, v in summary.items()
                                        if k not in ("out_dir",)))


def main(cfg: Any) -> dict[str, Any]:
    """Label the decisions of `cfg.data.path` into `cfg.out_dir` (see module docstring); returns the summary."""
    logging.getLogger("damc").setLevel(str(cfg.get("log_level") or "INFO"))
    from accelerate import PartialState

    from damc.teacher.context import check_render

    check_render(cfg.get("render", "template"))   # before anything is written
    t0 = time.perf_counter()
    # `accelerate launch --cpu` / ACCELERATE_USE_CPU=true under torchrun: several CPU processes (gloo); PartialState
    # reads that flag only when told, else each process would think it is alone and label everything
    state = PartialState(cpu=os.environ.get("ACCELERATE_USE_CPU", "").lower() in ("1", "true", "yes"))
    rank, world = state.process_index, state.num_processes
    out = _prepare_out_dir(cfg, state)
    decisions = plan_decisions(cfg.data.path, cfg.data.tool_calls_only, cfg.max_decisions,
                               cfg.get("per_episode"), cfg.get("sample_seed", 0))
    done = labelled_decision_ids(out / "shards")
    mine = [(i, dp) for i, dp in shard_by_episode(decisions, rank, world) if dp.decision_id not in done]
    logger.info("rank %d/%d: %d decisions to label (%d already done)", rank, world, len(mine), len(done))

    teacher, estimator = _build_labelers(cfg, state, bool(mine))
    stats = _label_all(cfg, mine, teacher, estimator, out, rank, world, state.is_local_main_process)
    stats["wall_time_s"] = round(time.perf_counter() - t0, 2)
    atomic_write_text(out / "progress" / f"rank-{rank}.json",
                      json.dumps({"rank": rank, "world_size": world, "finished": True, **stats}))
    state.wait_for_everyone()
    summary: dict[str, Any] = {"out_dir": str(out), "estimator": estimator.name, "world_size": world,
                               "planned_decisions": len(decisions), "already_done": len(done)}
    if state.is_main_process:
        _write_summary(cfg, out, summary, stats, teacher, rank, world)
    return summary


if __name__ == "__main__":  # python -m damc.teacher.label KEY=VALUE ...  (configs: damc/configs/label.yaml)
    from damc.cli import run

    run("label", main)
