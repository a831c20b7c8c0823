"""Results of an A/B run: aggregation of the per-decision records, the table, the Pareto plot, operating points.

`aggregate(records, ...)` gives `results.json`:

* `policies["name@setting"]` — accuracy with a **cluster-bootstrap** 95 % interval (episodes resampled),
  median gold log-prob and prompt tokens, overheads, and the memory metrics over decisions with key cards:
  `key_recall` (share of key cards kept), `key_hit` (a key card kept), `candidate_recall` (share of key cards
  that reached the candidate set — no valuer can pick what retrieval missed) and `confuser_rate` (contexts
  holding a distractor's argument value the gold does not use);
* `paired["name@setting"]` — accuracy Δ against `window` at the same budget on the decisions both succeeded
  on (cluster bootstrap), the median per-decision prompt-token ratio, and `key_decisions`: the same Δ on the
  decisions where memory matters (a key card before the current user turn);
* `paired_full["name@setting"]` — the same paired entry against `full` (verbatim history, budget-free): accuracy Δ
  with its interval, `prompt_token_ratio` (the median share of `full`'s tokens: "matches full history at a fraction
  of its tokens" is read here) and `ll_gain`;
* `paired[...]["ll_gain"]` and `paired_full[...]["ll_gain"]` — the **gold log-likelihood gain**: the paired
  difference of the gold action's mean per-token log-prob (`gold_logprob_per_token`, nats per token, from the same
  forward pass that scores accuracy) against `window` at the same budget and against `full`, on the decisions both
  scored: mean with a cluster-bootstrap 95 % interval (episodes resampled) and the median. Records written before the
  field existed simply leave it out ("–");
* `sensitivity` — the smallest paired accuracy difference the set can detect (`mde`, see `sensitivity`);
* `pareto` — the points no other point beats on both accuracy and median prompt tokens.

**Minimum detectable difference.** For a two-sided test at α = 0.05 with 80 % power, a paired difference is
detectable when it is at least `(z_0.975 + z_0.8) × SE ≈ 2.80 × SE`, where SE is the standard error of the paired
accuracy difference. SE is taken from the cluster bootstrap itself (the standard deviation of the resampled paired
Δ, episodes resampled, so the clustering of decisions in episodes is in it): per set, the median of that SE over
every plain-budget comparison against `window` in the table. It is a property of the set (n, episodes, how often
policies disagree), printed under every results table so a reader knows what the set can and cannot see.

A budget-free policy (`full`, setting `none`) is reported at every budget. `operating_points(dev_results)`
chooses each policy's setting on a dev split (best accuracy at ≤ window's tokens).

Example:
    >>> res = aggregate(records, decision_ids, ["window", "damc"], config)
    >>> res["policies"]["damc@1024"]["accuracy"], res["paired"]["damc@1024"]["ci"]
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from damc.eval.metrics import history_keys, summarize_records
from damc.ranking import paired_bootstrap

BASELINE = "window"
FULL = "full"        # the second reference of the log-likelihood gain
Z_POWER = 1.959963984540054 + 0.8416212335729143   # z_{0.975} + z_{0.80}: α = 0.05 two-sided, 80 % power
NO_BUDGET = "none"   # the setting of budget-free policies
REFERENCES = ("oracle", "oracle_fill", "damc_teacher")


def budget_of(setting: str) -> str:
    """`"1024/k4"` → `"1024"`."""
    return str(setting).split("/")[0]


_SELECTION_PART = re.compile(r"[kt]-?[0-9.]+(?:e[-+]?[0-9]+)?")   # `k4`, `t0.05`, `t1e-05` (Setting.key's parts)


def plain_setting_of(setting: str) -> str:
    """The budget with its rendering, without the selection (top-k / threshold): `"1024/k4/fields"` →
    `"1024/fields"`, `"1024/t0.05"` → `"1024"` — the setting whose `bm25` / `oracle` a point is compared with."""
    return "/".join(p for p in str(setting).split("/") if not _SELECTION_PART.fullmatch(p))


def aggregate(records: Iterable[dict[str, Any]], decision_ids: Sequence[str], policies: Sequence[str],
              config: dict[str, Any], *, n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
    """results.json from records: one entry per `policy@setting`, paired deltas vs `window@budget`."""
    wanted, names = set(decision_ids), set(policies)
    by: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
    for r in records:
        if r["decision_id"] in wanted and r["policy"] in names:
            by.setdefault((r["policy"], str(r["setting"])), {})[r["decision_id"]] = r
    budgets = sorted({budget_of(s) for (_, s) in by if s != NO_BUDGET}, key=int)
    res: dict[str, Any] = {"policies": {}, "paired": {}, "paired_full": {}, "config": config,
                           # the decisions these figures describe: records.jsonl may hold others (an earlier sample)
                           "decision_ids": list(dict.fromkeys(decision_ids))}
    full = by.get((FULL, NO_BUDGET))
    for name in dict.fromkeys(policies):
        settings = sorted({s for (n, s) in by if n == name}, key=setting_order)
        if settings == [NO_BUDGET]:
            settings = budgets  # a budget-free policy stands at every budget
        for s in settings:
            recs = by.get((name, s)) or by.get((name, NO_BUDGET))
            key = f"{name}@{s}"
            entry = summarize_records(list(recs.values()), n_boot=n_boot, seed=seed)
            entry.update(policy=name, setting=s, budget=int(budget_of(s)))
            res["policies"][key] = entry
            if full and name != FULL:
                res["paired_full"][key] = paired(recs, full, decision_ids, f"{FULL}@{NO_BUDGET}", n_boot, seed)
            base = by.get((BASELINE, budget_of(s)))
            if (name == BASELINE and s == budget_of(s)) or not base:
                continue
            res["paired"][key] = paired(recs, base, decision_ids, f"{BASELINE}@{budget_of(s)}", n_boot, seed)
    res["sensitivity"] = sensitivity(res)
    res["pareto"] = pareto_front(res)
    return res


def ll_gain(recs: dict[str, dict[str, Any]], base: dict[str, dict[str, Any]], decision_ids: Sequence[str],
            n_boot: int, seed: int) -> dict[str, Any]:
    """The gold log-likelihood gain of `recs` over `base`: paired difference of `gold_logprob_per_token` (nats per
    token) on the decisions both scored — mean with a cluster-bootstrap 95 % interval, median, n. Decisions whose
    record lacks the field (older runs, `score=false`) are left out; none left: NaN figures and `n` 0."""
    common = [i for i in decision_ids if i in recs and i in base and not recs[i].get("failed")
              and not base[i].get("failed") and recs[i].get("gold_logprob_per_token") is not None
              and base[i].get("gold_logprob_per_token") is not None]
    a = [float(recs[i]["gold_logprob_per_token"]) for i in common]
    b = [float(base[i]["gold_logprob_per_token"]) for i in common]
    pb = paired_bootstrap(a, b, clusters=[recs[i]["episode_id"] for i in common], n_boot=n_boot, seed=seed)
    return {"mean": pb["delta"], "ci": pb["ci"], "median": float(np.median(np.subtract(a, b))) if common
            else float("nan"), "n": pb["n"], "n_episodes": pb["n_clusters"]}


def sensitivity(results: dict[str, Any]) -> dict[str, Any]:
    """The smallest paired accuracy difference the set can detect at 80 % power (α = 0.05, two-sided):
    `Z_POWER` × the median bootstrap SE of the paired accuracy Δ over the plain-budget comparisons against `window`
    (see the module docstring). NaN when no comparison was scored (selection-only runs)."""
    ps = [p for k, p in results["paired"].items() if p.get("n") and p.get("se") is not None
          and np.isfinite(p["se"]) and plain_setting_of(k.split("@", 1)[1]) == k.split("@", 1)[1]]
    if not ps:
        return {"mde": float("nan"), "se": float("nan"), "n": 0, "n_episodes": 0, "n_comparisons": 0}
    se = float(np.median([p["se"] for p in ps]))
    return {"mde": Z_POWER * se, "se": se, "n": int(max(p["n"] for p in ps)),
            "n_episodes": int(max(p["n_episodes"] for p in ps)), "n_comparisons": len(ps),
            "method": "(z_0.975 + z_0.8) x median cluster-bootstrap SE of the paired accuracy delta vs window"}


def setting_order(s: str) -> tuple:
    """Sort key: by numeric budget (a budget-free setting last), plain before its sweep points."""
    parts = s.split("/")
    return (int(parts[0]) if parts[0].isdigit() else 1 << 40, len(parts), s)


def paired(recs: dict[str, dict[str, Any]], base: dict[str, dict[str, Any]], decision_ids: Sequence[str], vs: str,
           n_boot: int, seed: int) -> dict[str, Any]:
    """Accuracy Δ and token ratio of `recs` against `base` on the decisions both succeeded on."""
    common = [i for i in decision_ids if i in recs and i in base and not recs[i].get("failed")
              and not base[i].get("failed") and recs[i].get("correct") is not None
              and base[i].get("correct") is not None]
    pb = paired_bootstrap([float(recs[i]["correct"]) for i in common], [float(base[i]["correct"]) for i in common],
                          clusters=[recs[i]["episode_id"] for i in common], n_boot=n_boot, seed=seed)
    tok = [recs[i]["prompt_tokens"] / max(base[i]["prompt_tokens"], 1) for i in common]
    out = {"vs": vs, "accuracy_delta": pb["delta"], "ci": pb["ci"], "n": pb["n"], "n_episodes": pb["n_clusters"],
           "p_le_0": pb["p_le_0"], "se": pb.get("se"), "prompt_token_ratio": float(np.median(tok)) if tok else float("nan"),
           "ll_gain": ll_gain(recs, base, decision_ids, n_boot, seed)}
    keyed = [i for i in common if history_keys(recs[i])]
    if keyed:  # where memory matters: a key card before the current user turn
        pk = paired_bootstrap([float(recs[i]["correct"]) for i in keyed], [float(base[i]["correct"]) for i in keyed],
                              clusters=[recs[i]["episode_id"] for i in keyed], n_boot=n_boot, seed=seed)
        out["key_decisions"] = {"accuracy_delta": pk["delta"], "ci": pk["ci"], "n": pk["n"],
                                "n_episodes": pk["n_clusters"]}
    return out


def pareto_front(results: dict[str, Any]) -> list[str]:
    """Keys of the deployable points (references excluded) that no other deployable point dominates (at least as
    accurate with at most as many median prompt tokens, and better on one)."""
    pts = {k: (e["accuracy"], e["prompt_tokens"]) for k, e in results["policies"].items()
           if e["policy"] not in REFERENCES and np.isfinite(e["accuracy"]) and np.isfinite(e["prompt_tokens"])}
    front = []
    for k, (a, t) in pts.items():
        if not any((a2 >= a and t2 <= t) and (a2 > a or t2 < t) for k2, (a2, t2) in pts.items() if k2 != k):
            front.append(k)
    return sorted(front, key=lambda k: pts[k][1])


def operating_points(dev: dict[str, Any]) -> dict[str, str]:
    """Per policy, the setting chosen on a dev split: the most accurate one whose median prompt tokens are at most
    `window`'s at the same budget (ties: fewer tokens); without such a setting, the most accurate one."""
    P = dev["policies"]
    out: dict[str, str] = {}
    for name in dict.fromkeys(e["policy"] for e in P.values()):
        cands = [e for e in P.values() if e["policy"] == name and np.isfinite(e["accuracy"])]
        if not cands:
            continue

        def fits(e: dict[str, Any]) -> bool:
            w = P.get(f"{BASELINE}@{budget_of(e['setting'])}")
            return w is not None and e["prompt_tokens"] <= w["prompt_tokens"]

        pool = [e for e in cands if fits(e)] or cands
        best = max(pool, key=lambda e: (e["accuracy"], -e["prompt_tokens"]))
        out[name] = best["setting"]
    return out


# ----------------------------------------------------------------------------- rendering

def _f(x: Any, nd: int = 3) -> str:
    return "–" if x is None or (isinstance(x, float) and not np.isfinite(x)) else f"{x:.{nd}f}"


def results_table(results: dict[str, Any]) -> str:
    """The results as a Markdown table (one row per policy@setting, grouped by budget)."""
    rows = ["| policy | setting | accuracy [95% CI] | Δacc vs window [95% CI] | gold LL gain vs window [95% CI] "
            "| gold LL gain vs full [95% CI] | Δacc vs full [95% CI] (tokens vs full) | tokens vs window | prompt tokens (median) "
            "| key hit | key recall | candidate recall | confuser rate | value recall | all values | prompt confuser "
            "| truncated | overhead ms p50 | LLM ms p50 | n | failed |",
            "|---|---|---|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    entries = sorted(results["policies"].items(), key=lambda kv: (kv[1]["budget"], setting_order(kv[1]["setting"]),
                                                                 kv[0]))
    front = set(results.get("pareto") or [])
    for key, e in entries:
        p = results["paired"].get(key)
        base = e["policy"] == BASELINE and e["setting"] == budget_of(e["setting"])
        delta = (f"{p['accuracy_delta']:+.3f} [{_f(p['ci'][0])}, {_f(p['ci'][1])}]" if p and p["n"] else
                 "(baseline)" if base else "–")   # "–": no decision scored by both (selection-only runs)
        ratio = _f(p["prompt_token_ratio"], 2) if p else "1.00" if base else "–"
        mark = " ◆" if key in front else ""
        gain_w = gain_text(p.get("ll_gain") if p else None) if not base else "(baseline)"
        pf = (results.get("paired_full") or {}).get(key) or {}
        gain_f = gain_text(pf.get("ll_gain")) if e["policy"] != FULL else "(baseline)"
        acc_f = "(baseline)" if e["policy"] == FULL else (
            f"{pf['accuracy_delta']:+.3f} [{_f(pf['ci'][0])}, {_f(pf['ci'][1])}] (×{_f(pf['prompt_token_ratio'], 2)})"
            if pf.get("n") else "–")
        trunc = f"{e['n_truncated']}/{e['n_decisions']}" if "n_truncated" in e else "–"
        rows.append(f"| {e['policy']}{mark} | {e['setting']} | {_f(e['accuracy'])} [{_f(e['accuracy_ci'][0])}, "
                    f"{_f(e['accuracy_ci'][1])}] | {delta} | {gain_w} | {gain_f} | {acc_f} | {ratio} | {_f(e['prompt_tokens'], 0)} | "
                    f"{_f(e.get('key_hit'), 2)} | {_f(e.get('key_recall'), 2)} | {_f(e.get('candidate_recall'), 2)} | "
                    f"{_f(e.get('confuser_rate'), 2)} | {_f(e.get('value_recall'), 2)} | {_f(e.get('all_values'), 2)} | "
                    f"{_f(e.get('prompt_confuser_rate'), 2)} | {trunc} | {_f(e['overhead_ms_p50'], 1)} | "
                    f"{_f(e['llm_ms_p50'], 0)} | {e['n_decisions']} | {e['n_failed']} |")
    return ("\n".join(rows) + "\n\n◆ on the Pareto front (accuracy vs median prompt tokens, references excluded)\n"
            "Gold LL gain: paired difference of the gold action's mean log-prob per token (nats) over the reference "
            "on the same decisions, mean [95 % cluster-bootstrap CI] · median; \"–\": not scored or older records.\n"
            + sensitivity_line(results))


def gain_text(g: dict[str, Any] | None) -> str:
    """`+0.031 [+0.004, +0.060] · med +0.020` from an `ll_gain` entry; "–" when nothing was scored."""
    if not g or not g.get("n") or not np.isfinite(g.get("mean", float("nan"))):
        return "–"
    return f"{g['mean']:+.3f} [{g['ci'][0]:+.3f}, {g['ci'][1]:+.3f}] · med {g['median']:+.3f}"


def sensitivity_line(results: dict[str, Any]) -> str:
    """One line: the smallest paired accuracy difference this set can detect (`sensitivity`)."""
    sv = results.get("sensitivity") or sensitivity(results)
    if not sv.get("n_comparisons"):
        return "Smallest detectable paired accuracy difference: – (no scored comparison against window).\n"
    return (f"Smallest detectable paired accuracy difference (80 % power, α = 0.05 two-sided): ±{sv['mde']:.3f} "
            f"on {sv['n']} decisions in {sv['n_episodes']} episodes (2.80 × median cluster-bootstrap SE "
            f"{sv['se']:.3f} of the paired Δ vs window over {sv['n_comparisons']} comparisons).\n")


def plot_pareto(results: dict[str, Any], path: Path) -> None:
    """Accuracy vs median prompt tokens: one curve per policy (its budgets and sweep points in token order), 95 %
    intervals; references dashed; the Pareto front circled."""
    from damc.extras import requires

    with requires("the Pareto plot"):
        import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5.5))
    P = results["policies"]
    for name in dict.fromkeys(e["policy"] for e in P.values()):
        es = sorted((e for e in P.values() if e["policy"] == name and np.isfinite(e["prompt_tokens"])),
                    key=lambda e: e["prompt_tokens"])
        if not es:
            continue
        x, y = [e["prompt_tokens"] for e in es], [e["accuracy"] for e in es]
        err = [[max(e["accuracy"] - e["accuracy_ci"][0], 0) for e in es],
               [max(e["accuracy_ci"][1] - e["accuracy"], 0) for e in es]]
        ax.errorbar(x, y, yerr=err, marker="o", markersize=4, linestyle="--" if name in REFERENCES else "-",
                    capsize=2, label=name + legend_gain(results, es[-1]), alpha=0.85)
    front = [P[k] for k in results.get("pareto") or [] if k in P]
    if front:
        ax.scatter([e["prompt_tokens"] for e in front], [e["accuracy"] for e in front], s=140, facecolors="none",
                   edgecolors="black", linewidths=1.2, label="Pareto front", zorder=5)
    ax.set_xlabel("prompt tokens (median, decision-LLM tokenizer)")
    ax.set_ylabel("decision accuracy (multiple choice)")
    ax.set_xscale("log")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    ax.set_title(f"Accuracy vs. prompt tokens ({results.get('config', {}).get('decision_llm', '')}); legend: gold "
                 f"log-likelihood gain per token", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def legend_gain(results: dict[str, Any], e: dict[str, Any]) -> str:
    """The Pareto legend's gold log-likelihood gain of a policy (at its most token-hungry point `e`): ` (ΔLL +0.031
    vs window, +0.004 vs full)`; "" when neither was scored."""
    key = f"{e['policy']}@{e['setting']}"
    parts = []
    for ref, table in ((BASELINE, "paired"), (FULL, "paired_full")):
        g = ((results.get(table) or {}).get(key) or {}).get("ll_gain")
        if g and g.get("n") and np.isfinite(g.get("mean", float("nan"))):
            parts.append(f"{g['mean']:+.3f} vs {ref}")
    return f" (ΔLL/tok {', '.join(parts)})" if parts else ""


def write_results(out_dir: Path, results: dict[str, Any]) -> None:
    """results.json, results.md and pareto.png into `out_dir` (each written atomically)."""
    from damc.episodes import atomic_write_text

    atomic_write_text(out_dir / "results.json", json.dumps(results, indent=2, default=str))
    cfg = results.get("config", {})
    hw = cfg.get("hardware", {})
    head = (f"# DAMC A/B results\n\ndata: `{cfg.get('data', {}).get('path')}` · decision LLM: "
            f"`{cfg.get('decision_llm')}` · hardware: {hw.get('cpu_count')} CPUs ({hw.get('cuda') or 'no GPU'})\n\n")
    atomic_write_text(out_dir / "results.md", head + results_table(results))
    tmp = out_dir / ".pareto.tmp.png"
    plot_pareto(results, tmp)
    tmp.replace(out_dir / "pareto.png")
