"""One evaluation run's selection figures at one setting, and paired key-hit counts of each `damc*` policy against
the retrieval baselines (docs/results.md "Leave-one-domain-out").

    python scripts/keyhit_table.py OUT_DIR [--setting 1024/k4] [--label damc_a=unseen ...]

OUT_DIR is a `scripts/evaluate.py` results directory (results.json, records.jsonl). Prints a markdown table (key hit,
candidate recall, all values, prompt confuser, median prompt tokens, n) of the setting's rows — the `oracle`, which is
not sweepable, at its budget row —, each `damc*` policy's key hit minus max(bm25, similarity, rrf), and per baseline
the decisions the policy hits and the baseline misses (+) and the reverse (−), recomputed from the records and
checked against results.json. For a scored run (a decision LLM ran: records carry `correct`), each `damc*` policy
minus each baseline and each reference (`window` at the setting's budget, `full`) in accuracy and gold log-prob per
token, with a 95 % cluster-bootstrap interval (episodes).
It reformats and resamples what evaluate.py wrote; it runs no model.
"""

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

BASELINES = ("bm25", "similarity", "rrf")
# the two references of a scored run, which take no top-k: compared at the setting's budget (`window`) or at none
# (`full`, budget-free)
REFERENCES = ("window", "full")


def _f(x: Any) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.2f}"


def rows_at(policies: dict[str, dict[str, Any]], setting: str) -> dict[str, dict[str, Any]]:
    """The policies' entries at `setting` (results.json `policies`, keyed NAME@SETTING); `oracle` at its budget."""
    from damc.eval.results import budget_of

    rows = {k.split("@", 1)[0]: v for k, v in policies.items() if k.split("@", 1)[1] == setting}
    budget = budget_of(setting)
    if "oracle" not in rows and f"oracle@{budget}" in policies:
        rows["oracle"] = policies[f"oracle@{budget}"]
    return rows


def table(rows: dict[str, dict[str, Any]], labels: dict[str, str]) -> list[str]:
    out = ["| policy | key hit @k | candidate recall | all values | prompt confuser | prompt tokens (median) "
           "| n (key / value) |", "|---|---:|---:|---:|---:|---:|---:|"]
    for name, e in rows.items():
        lab = f" ({labels[name]})" if name in labels else ""
        out.append(f"| {name}{lab} | {_f(e['key_hit'])} | {_f(e['candidate_recall'])} | {_f(e['all_values'])} "
                   f"| {_f(e['prompt_confuser_rate'])} | {e['prompt_tokens']:.0f} "
                   f"| {e['n_decisions']} ({e['n_key_decisions']} / {e.get('n_value_decisions')}) |")
    return out


def margins(rows: dict[str, dict[str, Any]]) -> list[str]:
    """Each `damc*` policy's key hit minus the best of the retrieval baselines present."""
    base = [rows[b]["key_hit"] for b in BASELINES if b in rows]
    if not base:
        return []
    best = max(base)
    out = [f"max({', '.join(b for b in BASELINES if b in rows)}) key hit = {best:.3f}"]
    out += [f"{n}: key hit {e['key_hit']:.3f}, minus that max = {e['key_hit'] - best:+.3f}"
            for n, e in rows.items() if n.startswith("damc")]
    return out


def key_hits(records: list[dict[str, Any]], setting: str) -> dict[str, dict[str, bool]]:
    """Per policy, per decision with a key card in the history: is a key card among the kept cards."""
    hit: dict[str, dict[str, bool]] = {}
    for r in records:
        if r.get("setting") != setting or not r.get("history_key_ids") or r.get("failed"):
            continue
        hit.setdefault(r["policy"], {})[r["decision_id"]] = bool(set(r["history_key_ids"]) & set(r["kept_card_ids"]))
    return hit


def paired(hit: dict[str, dict[str, bool]], rows: dict[str, dict[str, Any]]) -> list[str]:
    """`damc*` vs each baseline on the same decisions: +wins / −losses.

    Raises:
        ValueError: a recomputed key-hit rate differs from results.json (records and results out of step).
    """
    for p, h in hit.items():
        if p in rows and h and abs(sum(h.values()) / len(h) - rows[p]["key_hit"]) > 1e-9:
            raise ValueError(f"{p}: key hit {sum(h.values())}/{len(h)} from records.jsonl but {rows[p]['key_hit']} "
                             f"in results.json: rerun evaluate.py so both describe the same records")
    out = []
    for s in sorted(p for p in hit if p.startswith("damc")):
        cells = []
        for b in (b for b in BASELINES if b in hit):
            ids = hit[s].keys() & hit[b].keys()
            win = sum(hit[s][i] and not hit[b][i] for i in ids)
            loss = sum(hit[b][i] and not hit[s][i] for i in ids)
            cells.append(f"vs {b} +{win}/−{loss}")
        out.append(f"{s} ({sum(hit[s].values())}/{len(hit[s])} hit): " + ", ".join(cells))
    return out


def decisions(records: list[dict[str, Any]], setting: str) -> list[str]:
    """Scored runs (records with `correct`): each `damc*` policy minus each retrieval baseline and each reference
    (`window` at the setting's budget, `full`) on the same decisions — accuracy and the gold action's log-prob per
    token — with a 95 % bootstrap interval clustered by episode (`damc.ranking.paired_bootstrap`, 2,000 resamples,
    seed 0) and the +wins / −losses in accuracy. None for a selection-only run."""
    from damc.eval.results import NO_BUDGET, budget_of
    from damc.ranking import paired_bootstrap

    at: dict[str, set[str]] = {}   # setting → the comparison policies read at it
    for where, names in ((setting, BASELINES), (budget_of(setting), ("window",)), (NO_BUDGET, ("full",))):
        at.setdefault(where, set()).update(names)
    by: dict[str, dict[str, dict[str, Any]]] = {}
    for r in records:
        if r.get("correct") is None or r.get("failed") or r.get("setting") not in at:
            continue
        if (r["setting"] == setting and r["policy"].startswith("damc")) or r["policy"] in at[r["setting"]]:
            by.setdefault(r["policy"], {})[r["decision_id"]] = r
    out = []
    for s in sorted(p for p in by if p.startswith("damc")):
        for b in (b for b in BASELINES + REFERENCES if b in by):
            ids = sorted(by[s].keys() & by[b].keys())
            eps = [by[s][i]["episode_id"] for i in ids]
            acc = paired_bootstrap([float(by[s][i]["correct"]) for i in ids], [float(by[b][i]["correct"]) for i in ids],
                                   clusters=eps, n_boot=2000)
            cells = [f"accuracy {acc['delta']:+.3f} [{acc['ci'][0]:+.3f}, {acc['ci'][1]:+.3f}] "
                     f"(+{sum(by[s][i]['correct'] and not by[b][i]['correct'] for i in ids)}/"
                     f"−{sum(by[b][i]['correct'] and not by[s][i]['correct'] for i in ids)})"]
            ll = [i for i in ids if by[s][i].get("gold_logprob_per_token") is not None
                  and by[b][i].get("gold_logprob_per_token") is not None]
            if ll:
                g = paired_bootstrap([by[s][i]["gold_logprob_per_token"] for i in ll],
                                     [by[b][i]["gold_logprob_per_token"] for i in ll],
                                     clusters=[by[s][i]["episode_id"] for i in ll], n_boot=2000)
                cells.append(f"gold LL/token {g['delta']:+.3f} [{g['ci'][0]:+.3f}, {g['ci'][1]:+.3f}]")
            out.append(f"{s} − {b} on {len(ids)} decisions ({len(set(eps))} episodes): " + ", ".join(cells))
    return out


def report(out_dir: Path, setting: str, labels: dict[str, str]) -> list[str]:
    """The lines this script prints for one evaluation directory.

    Raises:
        FileNotFoundError: no results.json / records.jsonl in `out_dir`.
        ValueError: no row at `setting`, or records and results out of step.
    """
    results = json.loads((out_dir / "results.json").read_text())
    policies = results["policies"]
    rows = rows_at(policies, setting)
    if not any("@" + setting in k for k in policies):
        raise ValueError(f"{out_dir / 'results.json'}: no policy at setting {setting!r} "
                         f"(have {sorted({k.split('@', 1)[1] for k in policies})})")
    from damc.eval.records import records_by_key

    if not (out_dir / "records.jsonl").is_file():
        raise FileNotFoundError(f"{out_dir / 'records.jsonl'}: no such file (run scripts/evaluate.py first)")
    records = list(records_by_key(out_dir).values())   # failed ones left out; a torn last line skipped
    if results.get("decision_ids") is not None:  # the run's own decisions (an earlier sample's records stay in the log)
        wanted = set(results["decision_ids"])
        records = [r for r in records if r["decision_id"] in wanted]
    scored = decisions(records, setting)
    return (table(rows, labels) + [""] + margins(rows) + paired(key_hits(records, setting), rows)
            + ([""] + scored if scored else []))


def cli() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out_dir", type=Path, help="evaluate.py results directory")
    p.add_argument("--setting", default="1024/k4", help="harness setting name (default 1024/k4)")
    p.add_argument("--label", nargs="*", default=[], help="NAME=TEXT shown beside a policy, e.g. damc_a=unseen")
    args = p.parse_args()
    labels = dict(x.split("=", 1) for x in args.label)
    try:
        lines = report(args.out_dir, args.setting, labels)
    except (FileNotFoundError, ValueError) as e:
        sys.exit(f"keyhit_table: error: {e}")
    print("\n".join(lines))


if __name__ == "__main__":
    cli()
