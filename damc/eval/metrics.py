"""Decision metrics of the A/B harness (one definition each, see DESIGN.md "Metrics").

Per decision:

* **multiple-choice accuracy** — the gold action has the highest *length-normalised* log-prob
  (mean log-prob per action token) among the gold and its distractors; a tie counts as wrong;
* **gold log-prob** — total and per token, under the decision LLM;
* **exact match** (optional) — a greedy generation names the same tools with the same arguments.

Per decision and card ranking (teacher fidelity, key-card hits): **spearman**, **ndcg@k**, **recall_at**
and **hit_at_k** live on the ground floor (`damc.ranking`), shared with the teacher and the scorer.

Over decisions (`summarize_records`): means and medians with 95 % bootstrap intervals from
`damc.ranking` — accuracy resamples *episodes* (a cluster bootstrap), since decisions of one episode
are not independent.

Example:
    >>> mc = multiple_choice([np.array([-0.1, -0.2]), np.array([-2.0]), np.array([-1.0, -0.5])])
    >>> mc.correct, round(mc.gold_logprob, 2)
    (True, -0.3)
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from damc.episodes import call_arguments
from damc.facts import holds_any, parse_action
from damc.ranking import bootstrap_ci


@dataclass
class MCResult:
    """Scores of one multiple-choice decision.

    Attributes:
        correct: the gold has the strictly highest length-normalised log-prob.
        gold_logprob: total log-prob of the gold action (nats).
        gold_logprob_per_token: mean log-prob per gold token (nats).
        n_action_tokens: number of gold action tokens.
        normalised: length-normalised log-prob of every candidate, gold first.
        rank: 1 + number of distractors scoring at least as high as the gold.
    """

    correct: bool
    gold_logprob: float
    gold_logprob_per_token: float
    n_action_tokens: int
    normalised: list[float]
    rank: int


def multiple_choice(token_logprobs: Sequence[np.ndarray]) -> MCResult:
    """Score gold (first) against distractors (the rest) from per-token log-probs of each action."""
    if not token_logprobs or len(token_logprobs[0]) == 0:
        raise ValueError("need the gold action's per-token log-probs first (at least one token)")
    norm = [float(np.mean(lp)) if len(lp) else float("-inf") for lp in token_logprobs]
    gold = norm[0]
    rank = 1 + sum(1 for x in norm[1:] if x >= gold)
    total = float(np.sum(token_logprobs[0]))
    return MCResult(correct=rank == 1, gold_logprob=total, gold_logprob_per_token=gold,
                    n_action_tokens=int(len(token_logprobs[0])), normalised=norm, rank=rank)


# ----------------------------------------------------------------------------- exact match

def exact_match(generated: str, gold_message: dict[str, Any]) -> dict[str, bool]:
    """Tool-name and full (name + arguments) exact match of a generation against the gold message."""
    gold_calls = [(c["function"]["name"], call_arguments(c)) for c in gold_message.get("tool_calls") or []]
    pred = parse_action(generated)
    if not gold_calls:
        same = isinstance(pred, str) and pred.strip() == (gold_message.get("content") or "").strip()
        return {"name": isinstance(pred, str), "full": same}
    if isinstance(pred, str):
        return {"name": False, "full": False}
    names = [n for n, _ in pred] == [n for n, _ in gold_calls]
    return {"name": names, "full": names and all(_norm(a) == _norm(b) for (_, a), (_, b) in zip(pred, gold_calls))}


def _norm(args: dict[str, Any]) -> str:
    return json.dumps(args, sort_keys=True, default=str)


def summarize_records(records: Sequence[dict[str, Any]], *, n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
    """Aggregate per-decision records of one policy@setting into the results.json entry.

    Failed records count in `n_failed` only; every other figure is over the successful decisions. Memory
    metrics are over the decisions with a key card *before the current user turn* (where memory matters; a key card
    inside the current turn is always in the prompt): `accuracy_key_decisions` (their accuracy), `key_recall`
    (share of those key cards kept), `key_hit` (at least one kept), `candidate_recall` (share among the
    candidates), `confuser_rate` (the context holds a distractor's argument value that the gold does not use;
    decisions whose distractors add no value are left out of it; measured on the kept cards' raw text) and
    `prompt_confuser_rate` (the same on the prompt's own text: what the compressed lines carry). Over the decisions
    whose gold uses a value that only the history holds: `value_recall` (share of those values in the prompt) and
    `all_values` (all of them there). Message policies: `n_truncated` / `truncated_rate` (history messages dropped —
    for `full`, the oldest, only when the whole history exceeds the decision LLM's window).
    """
    ok = [r for r in records if not r.get("failed")]
    scored = [r for r in ok if r.get("correct") is not None]   # selection-only records (score=false) carry none
    acc = [float(r["correct"]) for r in scored]
    eps = [r["episode_id"] for r in scored]
    glp = [r["gold_logprob"] for r in scored]
    glpt = [r["gold_logprob_per_token"] for r in scored if r.get("gold_logprob_per_token") is not None]
    tok = [r["prompt_tokens"] for r in ok]
    out: dict[str, Any] = {
        "accuracy": float(np.mean(acc)) if acc else float("nan"),
        "accuracy_ci": list(bootstrap_ci(acc, np.mean, clusters=eps, n_boot=n_boot, seed=seed)),
        "gold_logprob": float(np.median(glp)) if glp else float("nan"),
        "gold_logprob_ci": list(bootstrap_ci(glp, np.median, n_boot=n_boot, seed=seed)),
        "gold_logprob_per_token": float(np.median(glpt)) if glpt else float("nan"),
        "gold_logprob_per_token_mean": float(np.mean(glpt)) if glpt else float("nan"),
        "prompt_tokens": float(np.median(tok)) if tok else float("nan"),
        "prompt_tokens_ci": list(bootstrap_ci(tok, np.median, n_boot=n_boot, seed=seed)),
        "prompt_tokens_mean": float(np.mean(tok)) if tok else float("nan"),
        "overhead_ms_p50": _p(ok, "overhead_ms", 50),
        "overhead_ms_p95": _p(ok, "overhead_ms", 95),
        "llm_ms_p50": _p(ok, "llm_ms", 50),
        "n_decisions": len(ok),
        "n_failed": len(records) - len(ok),
    }
    keyed = [r for r in ok if history_keys(r)]
    if keyed:  # key cards before the current turn: the ones memory has to bring in
        kept = [set(history_keys(r)) & set(r["kept_card_ids"]) for r in keyed]
        out["key_recall"] = float(np.mean([len(k) / len(history_keys(r)) for k, r in zip(kept, keyed)]))
        out["key_hit"] = float(np.mean([bool(k) for k in kept]))
        cand = [r for r in keyed if r.get("key_in_candidates") is not None]
        if cand:
            out["candidate_recall"] = float(np.mean([len(r["key_in_candidates"]) / len(history_keys(r)) for r in cand]))
        conf = [r["confuser"] for r in keyed if r.get("confuser") is not None]
        if conf:
            out["confuser_rate"] = float(np.mean(conf))
        pconf = [r["prompt_confuser"] for r in keyed if r.get("prompt_confuser") is not None]
        if pconf:
            out["prompt_confuser_rate"] = float(np.mean(pconf))
        acc_key = [float(r["correct"]) for r in keyed if r.get("correct") is not None]
        out["accuracy_key_decisions"] = float(np.mean(acc_key)) if acc_key else float("nan")
        out["n_key_decisions"] = len(keyed)
    trunc = [bool(r["truncated"]) for r in ok if r.get("truncated") is not None]
    if trunc:  # message policies: history dropped (`full`: only beyond the decision LLM's window)
        out["n_truncated"] = int(sum(trunc))
        out["truncated_rate"] = float(np.mean(trunc))
    vr = [r["value_recall"] for r in ok if r.get("value_recall") is not None]
    if vr:  # decisions whose gold uses a value only the history holds
        out["value_recall"] = float(np.mean(vr))
        out["all_values"] = float(np.mean([v >= 1.0 for v in vr]))
        out["n_value_decisions"] = len(vr)
    em = [r["exact_match"] for r in ok if r.get("exact_match") is not None]
    if em:
        out["exact_match_name"] = float(np.mean([e["name"] for e in em]))
        out["exact_match"] = float(np.mean([e["full"] for e in em]))
    return out


def history_keys(r: dict[str, Any]) -> list[str]:
    """The key cards memory is judged on: those before the current turn (`history_key_ids`; older records: all)."""
    return list(r["history_key_ids"] if "history_key_ids" in r else r.get("key_card_ids") or [])


def _p(records: Sequence[dict[str, Any]], key: str, q: float) -> float:
    xs = [r[key] for r in records if r.get(key) is not None]
    return float(np.percentile(xs, q)) if xs else float("nan")


def prompt_values(messages: list[dict[str, Any]], need: Sequence[str], turn: str,
                  confusers: Sequence[str]) -> dict[str, Any]:
    """What the prompt itself holds (every message but the system prompt, as the LLM reads it — compressed lines,
    not the cards behind them): `value_recall`, the share of `need` (the gold's history-only values) in it (None
    when there are none), and `prompt_confuser`, whether it holds one of `confusers` (distractor values) that the
    current `turn` text does not (None when there are none)."""

    text = json.dumps([m for m in messages if m.get("role") != "system"], ensure_ascii=False)
    conf = [v for v in confusers if not holds_any(turn, [v])]
    return {"value_recall": (sum(holds_any(text, [v]) for v in need) / len(need)) if need else None,
            "prompt_confuser": holds_any(text, conf) if conf else None}
