"""Where a policy's prompt confusers come from, against a baseline, decision by decision (issue 32's "prompt confuser
no higher than `rrf`'s" target): of the decisions where POLICY's prompt holds a distractor's value and BASELINE's
does not, how many hold it only in a key card (the card that carries the needed value also lists the rival's: the
price of keeping that card whole) and in how many BASELINE kept no key card at all.

    python scripts/confuser_sources.py OUT_DIR EPISODES [--policy damc] [--baseline rrf] [--setting 1024/k4]

OUT_DIR is a `scripts/evaluate.py` results directory (its records.jsonl), EPISODES the episode file it read. A kept
card counts as holding a look-alike when its template line (`damc.templates.template_compress`: what the prompt
carries) holds a distractor value that the gold does not use and the current turn does not hold — the rule of the
harness's `prompt_confuser`. It runs no model.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Iterable


def sources(records: Iterable[dict[str, Any]], decisions: Iterable[Any], policy: str, baseline: str,
            setting: str | None = None) -> Counter:
    """Counts over the decisions with a key card before the current turn and at least one look-alike value:
    `decisions`, `policy` / `baseline` (prompts holding a look-alike), `policy_only` / `baseline_only`, and of the
    `policy_only` ones: `only_in_key_cards` (every kept card holding a look-alike is a key card), `in_a_key_card`,
    `baseline_missed_key` (the baseline kept no key card)."""
    from damc.facts import holds_any
    from damc.templates import template_compress

    by: dict[str, dict[str, dict[str, Any]]] = {}
    for r in records:
        if r.get("failed") or r["policy"] not in (policy, baseline):
            continue
        if setting is not None and r["setting"] != setting:
            continue
        by.setdefault(r["decision_id"], {})[r["policy"]] = r
    out: Counter = Counter()
    for d in decisions:
        pair = by.get(d.decision_id) or {}
        if policy not in pair or baseline not in pair or not d.history_key_ids:
            continue
        rivals = [v for v in d.confuser_values() if not holds_any(d.turn_text, [v])]
        if not rivals:
            continue
        lines = {c.card_id: template_compress(c) for c in d.cards}
        keys = set(d.history_key_ids)
        mine, theirs = pair[policy], pair[baseline]
        out["decisions"] += 1
        out[policy] += bool(mine.get("prompt_confuser"))
        out[baseline] += bool(theirs.get("prompt_confuser"))
        if theirs.get("prompt_confuser") and not mine.get("prompt_confuser"):
            out["baseline_only"] += 1
        if mine.get("prompt_confuser") and not theirs.get("prompt_confuser"):
            out["policy_only"] += 1
            holders = [c for c in mine["kept_card_ids"] if holds_any(lines.get(c, ""), rivals)]
            out["in_a_key_card"] += any(c in keys for c in holders)
            out["only_in_key_cards"] += bool(holders) and all(c in keys for c in holders)
            out["baseline_missed_key"] += not set(theirs["kept_card_ids"]) & keys
    return out


def cli() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run", help="scripts/evaluate.py out_dir (records.jsonl)")
    p.add_argument("episodes", help="the episode file the run read")
    p.add_argument("--policy", default="damc")
    p.add_argument("--baseline", default="rrf")
    p.add_argument("--setting", default=None, help="only records of this setting, e.g. 1024/k4 (default: every one)")
    args = p.parse_args()
    path = Path(args.run) / "records.jsonl"
    if not path.exists():
        sys.exit(f"confuser_sources: error: {path}: no records (expected scripts/evaluate.py's out_dir)")
    from omegaconf import OmegaConf

    from damc.episodes import load_episodes
    from damc.eval.harness import select_decisions
    from damc.eval.records import records_by_key

    cfg = OmegaConf.create({"data": {"tool_calls_only": True}, "n_distractors": 3, "seed": 0, "max_decisions": None,
                            "filters": {"key_cards_only": False, "memory_only": True, "min_history_cards": 0}})
    decisions = select_decisions(load_episodes(args.episodes), cfg, lambda text: len(text) // 4)  # counts unused here
    records = records_by_key(args.run).values()   # repeats and a torn last line handled; the log left as it is
    counts = sources(records, decisions, args.policy, args.baseline, args.setting)
    print(json.dumps(dict(counts), indent=1))


if __name__ == "__main__":
    cli()
