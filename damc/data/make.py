"""`make_data`: build train/dev/test episode files from a source, and summarise them honestly.

`main(cfg)` is what `scripts/make_data.py` runs (Hydra config `configs/make_data.yaml`):

* `source=synthetic` generates `n_episodes` seeded support episodes (`damc.data.synthetic`) and splits
  them by episode with the same seed (deterministic: same seed, byte-identical files);
* `source=bfcl` replays a BFCL multi-turn category (`damc.data.bfcl.build_bfcl_splits`);
* `source=tau2` replays τ²-bench retail, airline or telecom tasks offline (`damc.data.tau2.build_tau2_splits`;
  airline and telecom are test-only; telecom: `damc.data.tau2_telecom`).

Each split is written atomically to `{out_dir}/{split}.jsonl`. `summarize(episodes)` is reusable
(e.g. by `make demo`): episodes, messages, decisions, key-card statistics, approximate tokens and the
tool error rate, and the share of decisions whose key fact lies before the current user turn.

Example:
    >>> from omegaconf import OmegaConf
    >>> cfg = OmegaConf.create({"source": "synthetic", "n_episodes": 20, "seed": 0, "out_dir": "/tmp/d",
    ...                         "split": {"train": 0.8, "dev": 0.1, "test": 0.1}})
    >>> main(cfg)["splits"]["train"]["episodes"]
    16
"""

from __future__ import annotations

import logging
import statistics
from pathlib import Path
from typing import Any

from damc.cards import detect_status, parse_result
from damc.episodes import SPLITS, Episode, decision_points, message_text, split_episodes, write_episodes

logger = logging.getLogger(__name__)

def _card_position(episode_id: str, cid: str) -> int:
    """Message index encoded in a card id (`ep:msg` or `ep:msg:call`)."""
    return int(cid[len(episode_id) + 1:].split(":")[0])


def summarize(episodes: list[Episode]) -> dict[str, Any]:
    """Honest statistics of a list of episodes.

    Returns:
        `episodes`; `messages` {min, median, max, total}; `decisions` (assistant messages);
        `tool_call_decisions`; `decisions_with_key_cards`; `far_key_decisions` (nearest key card >= 10
        messages before the decision); `mean_key_distance` (messages from a decision to its *nearest*
        key card, i.e. the most recent card holding the fact; None without key cards);
        `repeated_key_decisions`; `key_before_turn_share` (decisions with a key card positioned before the
        last user message preceding the decision, over all decisions: where memory matters, since the
        current turn is kept verbatim); `approx_tokens` {total, per_episode_median, per_episode_max}
        (characters / 4 over message contents and call arguments: approximate, no tokenizer);
        `tool_results`, `tool_errors` and `tool_error_rate` (errors as detected by
        `damc.cards.detect_status`).
    """
    lens, toks, dists = [], [], []
    n_dec = n_tool = n_key = n_far = n_rep = n_res = n_err = n_before = 0
    for ep in episodes:
        lens.append(len(ep.messages))
        chars = 0
        for m in ep.messages:
            chars += len(message_text(m))
            for c in m.get("tool_calls") or []:
                fn = c.get("function") or {}
                chars += len(str(fn.get("name", ""))) + len(str(fn.get("arguments", "")))
            if m.get("role") == "tool":
                n_res += 1
                n_err += detect_status(parse_result(message_text(m)))[0] == "error"
        toks.append(chars / 4)
        keys = ep.metadata.get("key_card_ids") or {}
        n_rep += len(ep.metadata.get("repeated_key") or [])
        for dp in decision_points(ep):
            n_dec += 1
            n_tool += dp.is_tool_call
            ks = keys.get(str(dp.index)) or []
            if ks:
                n_key += 1
                d = dp.index - max(_card_position(ep.episode_id, k) for k in ks)
                dists.append(d)
                n_far += d >= 10
                n_before += any(_card_position(ep.episode_id, k) < dp.current_turn_start for k in ks)
    return {
        "episodes": len(episodes),
        "messages": {"min": min(lens, default=0), "median": statistics.median(lens) if lens else 0,
                     "max": max(lens, default=0), "total": sum(lens)},
        "decisions": n_dec,
        "tool_call_decisions": n_tool,
        "decisions_with_key_cards": n_key,
        "far_key_decisions": n_far,
        "mean_key_distance": round(statistics.mean(dists), 2) if dists else None,
        "repeated_key_decisions": n_rep,
        "key_before_turn_share": round(n_before / n_dec, 4) if n_dec else 0.0,
        "approx_tokens": {"total": int(sum(toks)), "per_episode_median": int(statistics.median(toks)) if toks else 0,
                          "per_episode_max": int(max(toks, default=0))},
        "tool_results": n_res,
        "tool_errors": n_err,
        "tool_error_rate": round(n_err / n_res, 4) if n_res else 0.0,
    }


def format_summary(summary: dict[str, Any], name: str = "") -> str:
    """One readable line per split summary (tokens are approximate: characters / 4)."""
    s, m, t = summary, summary["messages"], summary["approx_tokens"]
    pct = (lambda a: f"{100 * a / s['decisions']:.1f}%") if s["decisions"] else (lambda a: "n/a")
    return (f"{name + ': ' if name else ''}{s['episodes']} episodes, messages min/median/max "
            f"{m['min']}/{m['median']}/{m['max']}, {s['decisions']} decisions ({s['tool_call_decisions']} tool calls), "
            f"{s['decisions_with_key_cards']} with key cards ({pct(s['decisions_with_key_cards'])}; "
            f"{pct(s['far_key_decisions'])} with the nearest key card >= 10 messages back), "
            f"mean distance to nearest key card {s['mean_key_distance']} messages, "
            f"{s['repeated_key_decisions']} with a repeated key, key fact before the current user turn in "
            f"{pct(s['key_before_turn_share'] * s['decisions'])}, ~{t['total']} tokens (approx., chars/4; "
            f"median {t['per_episode_median']}/episode), tool error rate {s['tool_error_rate']:.1%} "
            f"({s['tool_errors']}/{s['tool_results']})")


def build_splits(cfg: Any) -> dict[str, list[Episode]]:
    """The train/dev/test episodes described by a make_data config."""
    fractions = {s: float(cfg.split[s]) for s in SPLITS}
    source = str(cfg.source)
    if source == "synthetic":
        from damc.data.synthetic import SyntheticConfig, generate_episodes

        overrides = dict(cfg.get("synthetic") or {})
        episodes = generate_episodes(int(cfg.n_episodes), seed=int(cfg.seed), cfg=SyntheticConfig(**overrides))
        return split_episodes(episodes, fractions, seed=int(cfg.seed))
    if source == "bfcl":
        from damc.data.bfcl import build_bfcl_splits

        b = cfg.bfcl
        limit = None if b.get("limit") is None else int(b.limit)
        splits = build_bfcl_splits(str(b.category), seed=int(cfg.seed), limit=limit,
                                   fractions=tuple(fractions[s] for s in SPLITS))
        return {s: list(splits.get(s, [])) for s in SPLITS}
    if source == "tau2":
        from damc.data.tau2 import Tau2Config, build_tau2_splits

        t2 = Tau2Config(**dict(cfg.tau2))
        if t2.domain == "telecom":  # test-only, replayed by its own module (damc.data.tau2_telecom)
            from damc.data.tau2_telecom import build_telecom_episodes

            return {"train": [], "dev": [], "test": build_telecom_episodes(t2, seed=int(cfg.seed))}
        splits = build_tau2_splits(t2, seed=int(cfg.seed), fractions=fractions)
        return {s: list(splits.get(s, [])) for s in SPLITS}
    raise ValueError(f"unknown source {source!r}; expected 'synthetic', 'bfcl' or 'tau2'")


def main(cfg: Any) -> dict[str, Any]:
    """Build the splits, write `{out_dir}/{train,dev,test}.jsonl` atomically, log and return a summary.

    The summary of each split is logged at INFO (Hydra prints it on the console).

    Returns:
        `{"source", "out_dir", "files": {split: path}, "splits": {split: summarize(...)}}`.
    """
    out_dir = Path(str(cfg.out_dir))
    splits = build_splits(cfg)
    result: dict[str, Any] = {"source": str(cfg.source), "out_dir": str(out_dir), "files": {}, "splits": {}}
    for name in SPLITS:
        path = out_dir / f"{name}.jsonl"
        write_episodes(path, splits[name])
        result["files"][name] = str(path)
        result["splits"][name] = summarize(splits[name])
        logger.info("%s", format_summary(result["splits"][name], name))
    logger.info("wrote %s", ", ".join(result["files"].values()))
    return result


if __name__ == "__main__":  # python -m damc.data.make KEY=VALUE ...  (configs: damc/configs/make_data.yaml)
    from damc.cli import run

    run("make_data", main)
