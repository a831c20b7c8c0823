"""One evaluation run's selection figures at one setting, and paired key-hit counts of each `damc*` policy against
the retrieval baselines (docs/results.md "Leave-one-domain-out").

    python scripts/keyhit_table.py OUT_DIR [--setting 1024/k4] [--label damc_a=unseen ...]

OUT_DIR is a `scripts/evaluate.py` results directory (results.json, records.jsonl). Prints a markdown table (key hit,
candidate recall, all values, prompt confuser, median prompt tokens, n) of the setting's rows — the `oracle`, which is
not sweepable, at its budget row —, each `damc*` policy's key hit minus max(bm25, similarity, rrf), and per baseline
the decisions the policy hits and the baseline misses (+) and the reverse (−), recomputed from the records and
checked against results.json. It reformats what evaluate.py wrote; it measures nothing.
"""

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

BASELINES = ("bm25", "similarity", "rrf")


def _f(x: Any) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.2f}"


def rows_at(policies: dict[str, dict[str, Any]], setting: str) -> dict[str, dict[str, Any]]:
    """The policies' entries at `setting` (results.json `policies`, keyed NAME@SETTING); `oracle` at its budget."""
    rows = {k.split("@", 1)[0]: v for k, v in policies.items() if k.split("@", 1)[1] == setting}
    budget = setting.split("/", 1)[0]
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


def report(out_dir: Path, setting: str, labels: dict[str, str]) -> list[str]:
    """The lines this script prints for one evaluation directory.

    Raises:
        FileNotFoundError: no results.json / records.jsonl in `out_dir`.
        ValueError: no row at `setting`, or records and results out of step.
    """
    policies = json.loads((out_dir / "results.json").read_text())["policies"]
    rows = rows_at(policies, setting)
    if not any("@" + setting in k for k in policies):
        raise ValueError(f"{out_dir / 'results.json'}: no policy at setting {setting!r} "
                         f"(have {sorted({k.split('@', 1)[1] for k in policies})})")
    with open(out_dir / "records.jsonl") as fh:
        records = [json.loads(line) for line in fh if line.strip()]
    return table(rows, labels) + [""] + margins(rows) + paired(key_hits(records, setting), rows)


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
