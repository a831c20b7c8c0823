"""The README's results view of A/B runs: a policy × budget table, the Pareto front, operating points and the
study's targets, checked.

`results.json` (written by the harness, `damc.eval.results`) holds one entry per `policy@setting`; this module
leads each test set with its headline table (`window`, `full`, `similarity`, `bm25`, `rrf`, `heuristic`, `damc`,
`oracle` at their operating points × accuracy, gold log-likelihood gain vs `window` and `full`, where memory
matters, prompt tokens and the memory metrics, then the smallest difference the set can detect), renders the
compact table the README shows (accuracy, paired Δ vs `window` with its 95 % interval, median
prompt tokens, one column per budget), names the Pareto front, shows each policy at the operating point chosen
on a dev split, and checks the study's targets for one policy (by default `damc`) at each budget and at its
operating point:

* gain — ≥ +15 points over `window` (paired 95 % interval above 0) with at most `window`'s prompt tokens;
* lexical — at least BM25's accuracy at the same setting;
* oracle — within 5 points of `oracle`;
* key hit — a key card in ≥ 90 % of the contexts of decisions with key cards;
* confuser — a distractor's value in ≤ 30 % of them.

Nothing here is tuned or hard-coded: every figure comes from the results file. A target is never reported as
met on missing inputs: without `bm25` / `oracle` / a paired entry it reads "n/a".

    python scripts/report.py runs/study/synthetic/eval runs/study/tau2_retail/eval [--out FILE] [--policy P]
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from damc.eval.results import plain_setting_of, sensitivity, sensitivity_line, setting_order

#: the study's targets (issue "labels", A/B through the runtime); change them here, not in the checks.
TARGETS = {"gain_vs_window": 0.15, "token_ratio_vs_window": 1.0, "gap_to_oracle": 0.05, "key_hit": 0.90,
           "confuser_rate": 0.30, "lexical": "bm25"}
EPS = 1e-9   # accuracies are ratios of small counts: 11/20 - 9/20 (0.10000000000000003) is within 0.10


def load_results(path: str | Path) -> dict[str, Any]:
    """`results.json` from a file or an evaluate `out_dir`; clear errors for a missing or foreign file."""
    p = Path(path)
    if p.is_dir():
        p = p / "results.json"
    if not p.exists():
        raise FileNotFoundError(f"{p}: no results.json (expected scripts/evaluate.py's out_dir or its results.json)")
    try:
        res = json.loads(p.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{p}: line {e.lineno}: not valid JSON ({e.msg})") from e
    if not isinstance(res, dict) or not isinstance(res.get("policies"), dict) or "paired" not in res:
        raise ValueError(f"{p}: not an evaluate results file (expected top-level 'policies' and 'paired')")
    return res


def load_operating(path: str | Path) -> dict[str, str]:
    """`{policy: setting}` from an operating-points file: the evaluate pipeline's `eval/operating_points.json` (that
    mapping itself) or a study's `eval/<set>/test/operating_points.json` (`{"chosen_on": set, "points": {...}}`).
    Anything else is refused with the file and what was expected (a wrong shape used to report nothing)."""
    p = Path(path)
    try:
        data = json.loads(p.read_text())
    except OSError as e:
        raise FileNotFoundError(f"{p}: cannot read ({e.strerror})") from e
    except json.JSONDecodeError as e:
        raise ValueError(f"{p}: line {e.lineno}: not valid JSON ({e.msg})") from e
    points = data.get("points") if isinstance(data, dict) and "points" in data else data
    if not isinstance(points, dict) or not points or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in points.items()):
        raise ValueError(f"{p}: expected operating points as {{policy: setting}} (e.g. {{\"damc\": \"1024/k4\"}}), "
                         f"or a study's {{\"chosen_on\": ..., \"points\": {{...}}}}; got {str(data)[:120]}")
    return points


def _plain_settings(results: dict[str, Any]) -> list[str]:
    """The settings that are a budget alone, in each rendering run: `1024`, `512`, and `1024/fields` when the
    prompts were rendered with field lines (`render=[fields]`) — not the top-k / threshold points."""
    out = {str(e["setting"]) for e in results["policies"].values()}
    return sorted((s for s in out if plain_setting_of(s) == s), key=setting_order)


def _policies(results: dict[str, Any]) -> list[str]:
    return list(dict.fromkeys(e["policy"] for e in results["policies"].values()))


def _ok(x: Any) -> bool:
    return x is not None and not (isinstance(x, float) and math.isnan(x))


def compact_table(results: dict[str, Any], bold: str = "damc") -> str:
    """Markdown: one row per policy, one column per budget; cell = `acc (Δ [lo, hi]) · tokens`."""
    budgets = _plain_settings(results)

    def title(s: str) -> str:
        b, *rest = s.split("/")
        return f"budget {int(b):,}" + "".join(f" ({r})" for r in rest) if b.isdigit() else f"budget {s}"

    head = "| policy | " + " | ".join(title(b) for b in budgets) + " |"
    rows = [head, "|---|" + "---|" * len(budgets)]
    for name in _policies(results):
        cells = []
        for b in budgets:
            e = results["policies"].get(f"{name}@{b}")
            if e is None:
                cells.append("–")
                continue
            acc = f"{e['accuracy']:.2f}" if _ok(e.get("accuracy")) else "–"
            p = results["paired"].get(f"{name}@{b}")
            delta = ""
            if p and _ok(p.get("accuracy_delta")):
                lo, hi = p["ci"]
                delta = f" ({p['accuracy_delta']:+.2f} [{lo:+.2f}, {hi:+.2f}])"
            tok = f"{e['prompt_tokens']:.0f}" if _ok(e.get("prompt_tokens")) else "–"
            cells.append(f"{acc}{delta} · {tok}")
        label = f"**{name}**" if name == bold else name
        rows.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


def check_point(results: dict[str, Any], key: str) -> dict[str, Any] | None:
    """The targets at one point (`policy@setting`): each measured figure and whether it is met (None: cannot
    be checked — a missing competitor or figure is never counted as met)."""
    P, pair = results["policies"], results["paired"]
    e = P.get(key)
    if e is None:
        return None
    row: dict[str, Any] = {"key": key, "setting": e["setting"], "accuracy": e["accuracy"]}
    p = pair.get(key)
    if p and _ok(p.get("accuracy_delta")):
        row.update(delta_vs_window=p["accuracy_delta"], delta_ci=p["ci"], token_ratio=p.get("prompt_token_ratio"))
        row["gain_ok"] = (p["accuracy_delta"] >= TARGETS["gain_vs_window"] - EPS and p["ci"][0] > 0
                          and _ok(p.get("prompt_token_ratio"))
                          and p["prompt_token_ratio"] <= TARGETS["token_ratio_vs_window"] + EPS)
    else:
        row.update(delta_vs_window=None, delta_ci=None, token_ratio=None, gain_ok=None)
    rendered = plain_setting_of(e["setting"])   # 1024/k4/fields → 1024/fields
    lex = P.get(f"{TARGETS['lexical']}@{e['setting']}") or P.get(f"{TARGETS['lexical']}@{rendered}")
    row["lexical_accuracy"] = lex["accuracy"] if lex else None
    row["lexical_ok"] = e["accuracy"] >= lex["accuracy"] - EPS if lex else None
    orc = P.get(f"oracle@{rendered}")
    row["oracle_accuracy"] = orc["accuracy"] if orc else None
    row["oracle_ok"] = (orc["accuracy"] - e["accuracy"] <= TARGETS["gap_to_oracle"] + EPS) if orc else None
    row["key_hit"], row["confuser_rate"] = e.get("key_hit"), e.get("confuser_rate")
    row["key_hit_ok"] = e["key_hit"] >= TARGETS["key_hit"] - EPS if _ok(e.get("key_hit")) else None
    row["confuser_ok"] = e["confuser_rate"] <= TARGETS["confuser_rate"] + EPS if _ok(e.get("confuser_rate")) else None
    return row


def check_targets(results: dict[str, Any], policy: str = "damc", operating: str | None = None) -> list[dict[str, Any]]:
    """`check_point` at every plain budget of `policy`, then at its operating point (a setting chosen on dev)."""
    keys = [f"{policy}@{b}" for b in _plain_settings(results)]
    if operating and f"{policy}@{operating}" not in keys:
        keys.append(f"{policy}@{operating}")
    return [r for r in (check_point(results, k) for k in keys) if r is not None]


def _mark(ok: Any) -> str:
    return "n/a" if ok is None else ("✓" if ok else "✗")


def targets_table(results: dict[str, Any], policy: str = "damc", operating: str | None = None) -> str:
    """Markdown: the targets of `check_targets`, one row per point, with the figure behind each mark."""
    t = TARGETS
    rows = [f"| {policy} @ setting | ≥ +{t['gain_vs_window'] * 100:.0f} pts vs window (CI > 0) at ≤ window's tokens "
            f"| ≥ {t['lexical']} | within {t['gap_to_oracle'] * 100:.0f} pts of oracle | key card in ≥ "
            f"{t['key_hit']:.0%} | confuser in ≤ {t['confuser_rate']:.0%} |", "|---|---|---|---|---|---|"]
    for r in check_targets(results, policy, operating):
        gain = (f"{r['delta_vs_window']:+.2f} [{r['delta_ci'][0]:+.2f}, {r['delta_ci'][1]:+.2f}] at "
                f"{r['token_ratio']:.2f}× {_mark(r['gain_ok'])}" if r["delta_vs_window"] is not None else "n/a")
        lex = (f"{r['accuracy']:.2f} vs {r['lexical_accuracy']:.2f} {_mark(r['lexical_ok'])}"
               if r["lexical_ok"] is not None else f"n/a ({t['lexical']} not run)")
        orc = (f"{r['accuracy']:.2f} vs {r['oracle_accuracy']:.2f} {_mark(r['oracle_ok'])}"
               if r["oracle_ok"] is not None else "n/a")
        hit = f"{r['key_hit']:.2f} {_mark(r['key_hit_ok'])}" if r["key_hit_ok"] is not None else "n/a"
        conf = f"{r['confuser_rate']:.2f} {_mark(r['confuser_ok'])}" if r["confuser_ok"] is not None else "n/a"
        label = r["setting"] + (" (operating point)" if operating and r["setting"] == operating else "")
        rows.append(f"| {label} | {gain} | {lex} | {orc} | {hit} | {conf} |")
    return "\n".join(rows) + "\n"


#: the headline table's rows, in this order (other policies follow in the results' order)
HEADLINE = ("window", "full", "similarity", "bm25", "rrf", "heuristic", "damc", "oracle", "oracle_fill")


def default_points(results: dict[str, Any]) -> dict[str, str]:
    """`{policy: setting}` without operating points: each policy at the largest plain budget it was run at."""
    out: dict[str, str] = {}
    for name in _policies(results):
        plain = [s for s in _plain_settings(results) if f"{name}@{s}" in results["policies"]]
        if plain:
            out[name] = plain[-1]
    return out


def operating_table(results: dict[str, Any], operating: dict[str, str], chosen_on_dev: bool = True) -> str:
    """Markdown, the headline of a test set: each policy (`HEADLINE` order first) at its operating point (chosen on
    dev, `damc.eval.results.operating_points`; or `default_points`) — accuracy with its paired Δ vs `window`, the
    gold log-likelihood gain vs `window` and vs `full`, the accuracy Δ vs `full` with the share of its prompt tokens
    ("matches full history at a fraction of its tokens"), where memory matters, prompt tokens and the memory metrics;
    under it the smallest paired accuracy difference the set can detect."""
    n_key = max((e.get("n_key_decisions", 0) for e in results["policies"].values()), default=0)
    rows = [f"| policy | setting{' (chosen on dev)' if chosen_on_dev else ''} | accuracy (Δ vs window [95 % CI]) "
            "| gold LL gain vs window | gold LL gain vs full | Δ accuracy vs full (share of its tokens) "
            f"| where memory matters ({n_key} decisions): accuracy (Δ) | prompt tokens | key hit | candidate recall "
            "| confuser rate | all values | prompt confuser |", "|---|---|---|---|---|---|---|---:|---:|---:|---:|---:|---:|"]
    names = [n for n in HEADLINE if n in operating] + [n for n in operating if n not in HEADLINE]
    for name in names:
        setting = operating[name]
        e = results["policies"].get(f"{name}@{setting}")
        if e is None:
            continue
        p = results["paired"].get(f"{name}@{setting}") or {}
        pf = (results.get("paired_full") or {}).get(f"{name}@{setting}") or {}
        key = f"{e['accuracy_key_decisions']:.2f}{_delta(p.get('key_decisions'))}" if _ok(
            e.get("accuracy_key_decisions")) else "–"
        gain_w = "(baseline)" if name == "window" else _gain(p.get("ll_gain"))
        gain_f = "(baseline)" if name == "full" else _gain(pf.get("ll_gain"))
        acc_f = "(baseline)" if name == "full" else _vs_full(pf)
        cells = [f"{e['accuracy']:.2f}{_delta(p)}", gain_w, gain_f, acc_f, key, f"{e['prompt_tokens']:.0f}"] + [
            f"{e[k]:.2f}" if _ok(e.get(k)) else "–"
            for k in ("key_hit", "candidate_recall", "confuser_rate", "all_values", "prompt_confuser_rate")]
        rows.append(f"| {name} | {setting} | " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n\n" + sensitivity_line(results)


def _gain(g: dict[str, Any] | None) -> str:
    """`+0.031 [+0.004, +0.060]` (nats per token, mean and 95 % cluster-bootstrap CI), or "–" when not scored."""
    if not g or not g.get("n") or not _ok(g.get("mean")):
        return "–"
    return f"{g['mean']:+.3f} [{g['ci'][0]:+.3f}, {g['ci'][1]:+.3f}]"


def _delta(p: dict[str, Any] | None) -> str:
    """` (+0.05 [-0.02, +0.11])` from a paired entry, or "" when there is none."""
    return f" ({_delta_text(p)})" if _delta_text(p) else ""


def _delta_text(p: dict[str, Any] | None) -> str:
    """`+0.05 [-0.02, +0.11]` from a paired entry, or "" when there is none."""
    if not p or not p.get("n", 1) or not _ok(p.get("accuracy_delta")):
        return ""
    return f"{p['accuracy_delta']:+.2f} [{p['ci'][0]:+.2f}, {p['ci'][1]:+.2f}]"


def _vs_full(pf: dict[str, Any]) -> str:
    """`-0.10 [-0.14, -0.06] (×0.29)`: the paired accuracy Δ against `full` and the median share of its prompt
    tokens, or "–" when no decision was scored by both."""
    d = _delta_text(pf)
    return f"{d} (×{pf['prompt_token_ratio']:.2f})" if d and _ok(pf.get("prompt_token_ratio")) else d or "–"


def describe(results: dict[str, Any]) -> str:
    """One line: data, decisions, decision LLM, hardware — what a reader needs next to the table."""
    cfg = results.get("config", {})
    n = max((e.get("n_decisions", 0) for e in results["policies"].values()), default=0)
    hw = cfg.get("hardware", {})
    dev = hw.get("cuda") or "no GPU"
    return (f"data `{cfg.get('data', {}).get('path')}` · {n} decisions · decision LLM `{cfg.get('decision_llm')}` · "
            f"scorer `{cfg.get('scorer')}` · {hw.get('cpu_count')} CPUs ({dev})")


#: what the gold log-likelihood gain is, and when it is not an independent reading (printed above the tables)
LL_NOTE = ("Gold LL gain: the paired difference of the gold action's mean log-probability per token (nats) under "
           "the policy's prompt and under `window`'s / `full`'s, on the same decisions (mean [95 % CI, episodes "
           "resampled]); it comes from the same forward pass that scores accuracy. When the teacher that labelled "
           "the student's training data is the decision model itself, this gain is not independent of the labels "
           "(the student learned to raise exactly this likelihood): the second decision model's tables are the "
           "independent reading.\n")


def summary_table(named: dict[str, dict[str, Any]], policies: tuple[str, ...] = HEADLINE) -> str:
    """Markdown, one row per result set (`{title: results}`): its decisions and episodes, the smallest paired accuracy
    difference it can detect, then each policy at its largest plain budget (`default_points`) — accuracy and the
    paired Δ vs `window`, marked † where the 95 % cluster-bootstrap interval clears zero. The policies none of the
    sets ran are left out; a policy a set did not run reads "–"."""
    cols = [p for p in policies if any(p in default_points(r) for r in named.values())]
    rows = ["| test set | decisions (episodes) | detectable Δ | " + " | ".join(f"`{p}`" for p in cols) + " |",
            "|---|---|---:|" + "---:|" * len(cols)]
    for title, res in named.items():
        points, sv = default_points(res), res.get("sensitivity") or sensitivity(res)
        n = max((e.get("n_decisions", 0) for e in res["policies"].values()), default=0)
        cells = []
        for name in cols:
            e = res["policies"].get(f"{name}@{points.get(name)}")
            if e is None or not _ok(e.get("accuracy")):
                cells.append("–")
                continue
            p = res["paired"].get(f"{name}@{points[name]}") or {}
            if name == "window" or not _ok(p.get("accuracy_delta")):
                cells.append(f"{e['accuracy']:.3f}")
                continue
            clear = p["ci"][0] > 0 or p["ci"][1] < 0
            cells.append(f"{e['accuracy']:.3f} ({p['accuracy_delta']:+.3f}{'†' if clear else ''})")
        mde = f"±{sv['mde']:.3f}" if sv.get("n_comparisons") else "–"
        rows.append(f"| {title} | {n} ({sv.get('n_episodes') or '–'}) | {mde} | " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n\nEach cell: accuracy (paired Δ vs `window`; † where its 95 % interval, episodes " \
        "resampled, clears zero).\n"


def report(named: dict[str, dict[str, Any]], policy: str = "damc",
           operating: dict[str, dict[str, str]] | None = None) -> str:
    """The Markdown section for several result sets (`{title: results}`): per set its description, the headline
    table (`operating_table`: each policy at its operating point — `{title: {policy: setting}}`, chosen on dev —
    or its largest budget, with the gold LL gain and the set's detectable difference), the policy × budget table,
    the Pareto front and the targets checked; then `LL_NOTE` (what the gain is, and when it is not independent)."""
    parts = []
    for title, res in named.items():
        ops = (operating or {}).get(title) or {}
        front = ", ".join(f"`{k}`" for k in res.get("pareto") or []) or "–"
        head = ("Each policy at its operating point (chosen on the dev split):\n" if ops else
                "Each policy at its largest budget:\n")
        parts += [f"### {title}\n", describe(res) + "\n", head,
                  operating_table(res, ops or default_points(res), chosen_on_dev=bool(ops)),
                  "Each cell: accuracy (paired Δ vs `window` at that budget [95 % CI, episodes resampled]) · "
                  "median prompt tokens.\n", compact_table(res, bold=policy),
                  f"Pareto front (accuracy vs prompt tokens, references excluded): {front}\n"]
        parts += ["Targets:\n", targets_table(res, policy, ops.get(policy))]
    parts.append(LL_NOTE)
    return "\n".join(parts)
