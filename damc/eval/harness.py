"""The A/B harness: every memory policy, every token budget, the same decisions, one decision LLM.

`main(cfg)` (behind `scripts/evaluate.py`) loads episodes, picks decision points (filters, seeded
`max_decisions` sample), and for each decision × policy × budget builds the prompt with the policy,
scores the gold action against its distractors with the decision LLM (the teacher backend, so scoring
shares the teacher's rendering) and appends one JSON record per (policy, budget, decision) to
`out_dir/records.jsonl` (fsync'd; a rerun skips what is there, so a killed run resumes where it
stopped). A policy or LLM call that raises is recorded as failed for that decision only.

At the end it aggregates the records into

* `out_dir/results.json` — `{"policies": {"name@budget": {...}}, "paired": {"name@budget": {...}},
  "config": {...}}` (medians and 95 % bootstrap intervals; paired bootstrap against `window` at the
  same budget, on the decisions both succeeded on),
* `out_dir/results.md` — the table, and
* `out_dir/pareto.png` — accuracy vs. prompt tokens.

Budget-free policies (`full`) are run once per decision and reported at every budget.

Example:
    $ python scripts/evaluate.py data.path=data/generated/synthetic/test.jsonl \\
        policies=[window,bm25,damc_student,oracle] budgets=[512,1024] scorer=runs/scorer out_dir=runs/eval
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import random
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from damc.cards import Card, cards_before, encode_episode, token_counter
from damc.data.episodes import DecisionPoint, Episode, decision_points, load_episodes, make_distractors
from damc.eval.metrics import exact_match, multiple_choice, summarize_records as summarize
from damc.eval.stats import paired_bootstrap
from damc.eval.policies import Policy, PolicyContext, make_policy
from damc.prompting import action_text, format_prompt

logger = logging.getLogger(__name__)

BASELINE = "window"
NO_BUDGET = "none"   # the budget field of records of budget-free policies


# ----------------------------------------------------------------------------- decision LLM

class DecisionLLM:
    """The decision LLM as the harness needs it: prompt token counts, action log-probs, greedy generation.

    Wraps a teacher backend (`log_prob_many(context_messages, actions) -> [per-token logprobs]`), so the
    harness scores actions exactly as the teacher labels them.

    Args:
        backend: a teacher backend instance (`damc.teacher.backends.HFTeacher`, the vLLM one, ...).
        tokenizer: the decision LLM's tokenizer (defaults to `backend.tokenizer`).
    """

    def __init__(self, backend: Any, tokenizer: Any = None):
        self.backend = backend
        self.tokenizer = tokenizer if tokenizer is not None else getattr(backend, "tokenizer", None)
        # the backend counts chars/4 when it has no local tokenizer (a vLLM server without `tokenizer=`)
        self.count_tokens = backend.count_tokens if hasattr(backend, "count_tokens") else token_counter(self.tokenizer)
        self.window = getattr(backend, "max_context_tokens", None)

    @property
    def name(self) -> str:
        return str(getattr(self.backend, "model_id", None) or getattr(self.backend, "name", None)
                   or type(self.backend).__name__)

    def prompt_tokens(self, messages: Sequence[dict[str, str]]) -> int:
        """Tokens of the templated prompt (generation prompt included)."""
        return self.count_tokens(format_prompt(self.tokenizer, messages))

    def log_probs(self, messages: Sequence[dict[str, str]], actions: Sequence[str]) -> list[np.ndarray]:
        """Per-token log-probs of each action after the context."""
        out = self.backend.log_prob_many(list(messages), list(actions))
        return [np.asarray(x, dtype=float) for x in out]

    def generate(self, messages: Sequence[dict[str, str]], max_new_tokens: int = 96) -> str:
        """Greedy generation (backends with `generate`, or an HF `model` attribute)."""
        if hasattr(self.backend, "generate"):
            return self.backend.generate(list(messages), max_new_tokens=max_new_tokens)
        import torch

        model = self.backend.model
        ids = self.tokenizer(format_prompt(self.tokenizer, messages), return_tensors="pt",
                             add_special_tokens=False).to(model.device)
        with torch.no_grad():
            out = model.generate(**ids, max_new_tokens=max_new_tokens, do_sample=False,
                                 pad_token_id=self.tokenizer.pad_token_id)
        return self.tokenizer.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)


def load_decision_llm(llm_cfg: Any) -> DecisionLLM:
    """Instantiate the backend of `cfg.llm` (a teacher backend config with `_target_`)."""
    from hydra.utils import instantiate

    return DecisionLLM(instantiate(llm_cfg))


# ----------------------------------------------------------------------------- decisions

@dataclass
class Decision:
    """One decision point prepared for evaluation (cards and distractors computed once)."""

    dp: DecisionPoint
    cards: list[Card]
    distractors: list[str]

    @property
    def decision_id(self) -> str:
        return self.dp.decision_id


def select_decisions(episodes: Sequence[Episode], cfg: Any, count_tokens: Any) -> list[Decision]:
    """Decision points that pass the filters, then a seeded sample of `max_decisions` in episode order.

    Filters: tool-call decisions only (`cfg.data.tool_calls_only`); `cfg.filters`: decisions with recorded key cards only, a minimum
    number of candidate cards, at least one distractor (always: MC accuracy needs one).
    """
    f = cfg.filters
    out: list[Decision] = []
    for ep in episodes:
        dps = decision_points(ep, tool_calls_only=bool(cfg.data.get("tool_calls_only", False)))
        if not dps:
            continue
        cards = encode_episode(ep, count_tokens=count_tokens)
        for dp in dps:
            if f.key_cards_only and not dp.key_card_ids:
                continue
            cand = cards_before(cards, dp.current_turn_start)
            if len(cand) < f.min_history_cards:
                continue
            dis = make_distractors(ep, dp.index, n=cfg.n_distractors, seed=cfg.seed)
            if not dis:
                continue
            out.append(Decision(dp, cand, dis))
    if cfg.max_decisions and len(out) > cfg.max_decisions:
        keep = set(random.Random(cfg.seed).sample(range(len(out)), cfg.max_decisions))
        out = [d for i, d in enumerate(out) if i in keep]
    return out


# ----------------------------------------------------------------------------- records (resumable)

class RecordLog:
    """Append-only JSONL of per-decision records, fsync'd per record; reopened runs skip done keys."""

    def __init__(self, path: Path):
        self.path = path
        self.records: dict[str, dict[str, Any]] = {}
        if not path.exists():
            return
        raw = path.read_bytes()
        if raw and not raw.endswith(b"\n"):
            # a kill in the middle of an append left a torn last line: drop it (that record is redone)
            raw = raw[: raw.rfind(b"\n") + 1]
            with path.open("r+b") as fh:
                fh.truncate(len(raw))
        for line in raw.decode("utf-8").splitlines():
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                logger.warning("skipping an unreadable record in %s", path)
                continue
            self.records[self.key(r["policy"], r["budget"], r["decision_id"])] = r

    @staticmethod
    def key(policy: str, budget: Any, decision_id: str) -> str:
        return f"{policy}@{budget}|{decision_id}"

    def done(self, policy: str, budget: Any, decision_id: str, retry_failed: bool = False) -> bool:
        r = self.records.get(self.key(policy, budget, decision_id))
        return r is not None and not (retry_failed and r.get("failed"))

    def append(self, record: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(record, ensure_ascii=False) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        self.records[self.key(record["policy"], record["budget"], record["decision_id"])] = record


# ----------------------------------------------------------------------------- one decision

def evaluate_one(policy: Policy, name: str, budget: Any, d: Decision, llm: DecisionLLM, ctx: PolicyContext,
                 cache: dict[str, dict[str, Any]], do_exact_match: bool = False) -> dict[str, Any]:
    """Build the prompt with `policy`, score gold vs. distractors, and return the decision's record.

    `cache` maps a prompt hash to its LLM results within one decision: policies that build the same
    prompt (e.g. every policy when the whole history fits the budget) are scored once.
    """
    dp = d.dp
    rec: dict[str, Any] = {"policy": name, "budget": budget, "decision_id": d.decision_id,
                           "episode_id": dp.episode.episode_id, "index": dp.index, "is_tool_call": dp.is_tool_call,
                           "key_card_ids": dp.key_card_ids, "n_cards": len(d.cards)}
    try:
        out = policy.build(dp, d.cards, budget if budget != NO_BUDGET else 10**9, ctx)
        key = hashlib.sha1(json.dumps(out.messages, ensure_ascii=False).encode()).hexdigest()
        hit = cache.get(key)
        if hit is None:
            actions = [action_text(dp.gold)] + d.distractors
            t0 = time.perf_counter()
            lps = llm.log_probs(out.messages, actions)
            llm_ms = (time.perf_counter() - t0) * 1000.0
            mc = multiple_choice(lps)
            hit = {"mc": mc, "llm_ms": llm_ms, "prompt_tokens": llm.prompt_tokens(out.messages), "em": None}
            if do_exact_match:
                hit["em"] = exact_match(llm.generate(out.messages), dp.gold)
            cache[key] = hit
        mc = hit["mc"]
        rec.update(failed=False, correct=mc.correct, rank=mc.rank, gold_logprob=mc.gold_logprob,
                   gold_logprob_per_token=mc.gold_logprob_per_token, n_action_tokens=mc.n_action_tokens,
                   normalised=mc.normalised, prompt_tokens=hit["prompt_tokens"], history_tokens=out.history_tokens,
                   overhead_ms=out.overhead_ms, llm_ms=hit["llm_ms"], exact_match=hit["em"],
                   kept_card_ids=out.kept_card_ids, prompt_hash=key)
    except Exception as e:  # noqa: BLE001 - one failing policy/decision must not stop the run
        logger.warning("%s@%s failed on %s: %s: %s", name, budget, d.decision_id, type(e).__name__, e)
        rec.update(failed=True, error=f"{type(e).__name__}: {e}",
                   traceback=traceback.format_exc(limit=4)[-2000:])
    return rec


# ----------------------------------------------------------------------------- main

def build_policies(cfg: Any) -> dict[str, Policy]:
    """Policies named in `cfg.policies`, with `cfg.policy_options[name]` and the shared scorer/labels paths.

    A name that is not a registry policy is a *variant*: its `policy_options` entry names the registry
    policy in `policy:` and adds options, e.g. `damc_student_k4: {policy: damc_student, top_k: 4}`; results
    are keyed by the variant's name.
    """
    from damc.eval.policies import POLICIES, CardPolicy

    opts = cfg.get("policy_options") or {}
    out = {}
    for name in cfg.policies:
        kw = dict(opts.get(name) or {})
        base = kw.pop("policy", None) or name
        if base not in POLICIES:
            raise KeyError(f"unknown policy {name!r}: not one of {', '.join(POLICIES)} and no "
                           f"`policy_options.{name}.policy` naming one (e.g. "
                           f"'+policy_options.{name}={{policy: damc_student, top_k: 4}}')")
        if base == "damc_student":
            kw.setdefault("scorer", cfg.scorer)
        if base == "damc_knn":
            kw.setdefault("labels", cfg.labels_path)
        if base.startswith("damc_") and cfg.get("compress") is not None:
            kw.setdefault("compress", bool(cfg.compress))
        out[name] = pol = make_policy(base, **kw)
        if isinstance(pol, CardPolicy):
            pol.reuse_scores = True   # one scoring per decision for all budgets (its time still counts)
    return out


def main(cfg: Any) -> dict[str, Any]:
    """Run the A/B evaluation described by `cfg` (configs/evaluate.yaml); returns the results dict."""
    from omegaconf import OmegaConf
    from tqdm import tqdm

    out_dir = Path(cfg.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    budgets = [int(b) for b in cfg.budgets]
    llm = load_decision_llm(cfg.llm)
    ctx = PolicyContext(count_tokens=llm.count_tokens, llm=llm.backend, window_tokens=llm.window)
    decisions = select_decisions(load_episodes(cfg.data.path), cfg, llm.count_tokens)
    if not decisions:
        raise ValueError(f"no decisions in {cfg.data.path} pass the filters {dict(cfg.filters)}")
    policies = build_policies(cfg)
    log = RecordLog(out_dir / "records.jsonl")
    units = [(n, p, b) for n, p in policies.items() for b in (budgets if p.budgeted else [NO_BUDGET])]
    todo = sum(not log.done(n, b, d.decision_id, cfg.retry_failed) for d in decisions for n, _, b in units)
    logger.info("%d decisions x %d policy/budget units: %d to run (%d done)", len(decisions), len(units), todo,
                len(decisions) * len(units) - todo)
    warm_up(policies, decisions[0], budgets[0], ctx)
    with tqdm(total=todo, desc="evaluate", unit="prompt", disable=not cfg.progress) as bar:
        for d in decisions:
            cache: dict[str, dict[str, Any]] = {}
            for name, pol, b in units:
                if log.done(name, b, d.decision_id, cfg.retry_failed):
                    continue
                log.append(evaluate_one(pol, name, b, d, llm, ctx, cache, cfg.exact_match))
                bar.update(1)
    config = OmegaConf.to_container(cfg, resolve=True)
    config["decision_llm"] = llm.name
    config["hardware"] = hardware()
    results = aggregate([r for r in log.records.values()], [d.decision_id for d in decisions], list(policies),
                        budgets, config, n_boot=cfg.n_boot, seed=cfg.seed)
    write_results(out_dir, results)
    return results


def warm_up(policies: dict[str, Policy], d: Decision, budget: int, ctx: PolicyContext) -> None:
    """Build one prompt per policy untimed, so model loading does not count as policy overhead."""
    for name, pol in policies.items():
        try:
            pol.build(d.dp, d.cards, budget, ctx)
        except Exception as e:  # noqa: BLE001 - the real run records the failure per decision
            logger.warning("warm-up of %s failed: %s: %s", name, type(e).__name__, e)


def hardware() -> dict[str, Any]:
    """Where the run happened (for the results' provenance)."""
    import torch

    info = {"platform": platform.platform(), "cpu": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
            "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}
    return info


# ----------------------------------------------------------------------------- aggregation and reports

def aggregate(records: Iterable[dict[str, Any]], decision_ids: Sequence[str], policies: Sequence[str],
              budgets: Sequence[int], config: dict[str, Any], *, n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
    """results.json from records: one entry per policy@budget, paired deltas vs. `window@budget`."""
    wanted = set(decision_ids)
    by: dict[tuple[str, Any], dict[str, dict[str, Any]]] = {}
    for r in records:
        if r["decision_id"] in wanted and r["policy"] in policies:
            by.setdefault((r["policy"], r["budget"]), {})[r["decision_id"]] = r
    res: dict[str, Any] = {"policies": {}, "paired": {}, "config": config}
    for name in policies:
        for b in budgets:
            recs = by.get((name, b)) or by.get((name, NO_BUDGET))
            if not recs:
                continue
            entry = summarize(list(recs.values()), n_boot=n_boot, seed=seed)
            entry.update(policy=name, budget=b)
            res["policies"][f"{name}@{b}"] = entry
            base = by.get((BASELINE, b))
            if name == BASELINE or not base:
                continue
            common = [i for i in decision_ids if i in recs and i in base
                      and not recs[i].get("failed") and not base[i].get("failed")]
            pb = paired_bootstrap([float(recs[i]["correct"]) for i in common],
                                  [float(base[i]["correct"]) for i in common], n_boot=n_boot, seed=seed)
            tok = [recs[i]["prompt_tokens"] / max(base[i]["prompt_tokens"], 1) for i in common]
            res["paired"][f"{name}@{b}"] = {"vs": f"{BASELINE}@{b}", "accuracy_delta": pb["delta"], "ci": pb["ci"],
                                            "n": pb["n"], "p_le_0": pb["p_le_0"],
                                            "prompt_token_ratio": float(np.median(tok)) if tok else float("nan")}
    return res


def _f(x: Any, nd: int = 3) -> str:
    return "–" if x is None or (isinstance(x, float) and not np.isfinite(x)) else f"{x:.{nd}f}"


def results_table(results: dict[str, Any]) -> str:
    """The results as a Markdown table (one row per policy@budget, grouped by budget)."""
    rows = ["| policy | budget | accuracy [95% CI] | Δacc vs window [95% CI] | tokens vs window | gold logp (median) "
            "| prompt tokens (median) | key recall | overhead ms p50 | LLM ms p50 | n | failed |",
            "|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    entries = sorted(results["policies"].items(), key=lambda kv: (kv[1]["budget"], kv[0]))
    for key, e in entries:
        p = results["paired"].get(key)
        delta = f"{p['accuracy_delta']:+.3f} [{_f(p['ci'][0])}, {_f(p['ci'][1])}]" if p else "(baseline)"
        ratio = _f(p["prompt_token_ratio"], 2) if p else "1.00"
        rows.append(f"| {e['policy']} | {e['budget']} | {_f(e['accuracy'])} [{_f(e['accuracy_ci'][0])}, "
                    f"{_f(e['accuracy_ci'][1])}] | {delta} | {ratio} | {_f(e['gold_logprob'], 2)} | "
                    f"{_f(e['prompt_tokens'], 0)} | {_f(e.get('key_recall'), 2)} | {_f(e['overhead_ms_p50'], 1)} | "
                    f"{_f(e['llm_ms_p50'], 0)} | {e['n_decisions']} | {e['n_failed']} |")
    return "\n".join(rows) + "\n"


def plot_pareto(results: dict[str, Any], path: Path) -> None:
    """Accuracy vs. median prompt tokens, one line per policy across budgets, 95 % CI bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 5))
    names = list(dict.fromkeys(e["policy"] for e in results["policies"].values()))
    for name in names:
        es = sorted((e for e in results["policies"].values() if e["policy"] == name), key=lambda e: e["budget"])
        x = [e["prompt_tokens"] for e in es]
        y = [e["accuracy"] for e in es]
        err = [[max(e["accuracy"] - e["accuracy_ci"][0], 0) for e in es],
               [max(e["accuracy_ci"][1] - e["accuracy"], 0) for e in es]]
        style = "--" if name in ("oracle", "damc_teacher") else "-"
        ax.errorbar(x, y, yerr=err, marker="o", linestyle=style, capsize=3, label=name)
    ax.set_xlabel("prompt tokens (median, decision-LLM tokenizer)")
    ax.set_ylabel("decision accuracy (multiple choice)")
    ax.set_xscale("log")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    llm = results.get("config", {}).get("decision_llm", "")
    ax.set_title(f"Accuracy vs. prompt tokens ({llm})", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def print_summary(cfg: Any, results: dict[str, Any]) -> None:
    """The results table and where the files are (after `scripts/evaluate.py`)."""
    print(results_table(results))
    print(f"results: {cfg.out_dir}/results.json  table: {cfg.out_dir}/results.md  plot: {cfg.out_dir}/pareto.png")


def write_results(out_dir: Path, results: dict[str, Any]) -> None:
    """results.json, results.md and pareto.png into `out_dir`."""
    from damc.data.episodes import atomic_write_text

    atomic_write_text(out_dir / "results.json", json.dumps(results, indent=2, default=str))
    cfg = results.get("config", {})
    head = (f"# DAMC A/B results\n\ndata: `{cfg.get('data', {}).get('path')}` · decision LLM: "
            f"`{cfg.get('decision_llm')}` · hardware: {cfg.get('hardware', {}).get('cpu_count')} CPUs "
            f"({cfg.get('hardware', {}).get('cuda') or 'no GPU'})\n\n")
    atomic_write_text(out_dir / "results.md", head + results_table(results))
    plot_pareto(results, out_dir / "pareto.png")


if __name__ == "__main__":  # python -m damc.eval.harness KEY=VALUE ...  (configs: damc/configs/evaluate.yaml)
    from damc.cli import run

    run("evaluate", main, print_summary)
