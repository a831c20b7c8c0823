"""One results directory from the records of several harness runs over the same decisions: the shards of a run
split across machines (`shard.index` / `shard.count`), a run resumed elsewhere, or a GPU machine's run
(`scripts/device_study.sh`) joined with a CPU machine's.

Every run must have been made by the same decision LLM (the records' `decision_llm`, else the run's config) on the
same data file with the same scorer (the runs' `data_digest`, `scorer_digest`); otherwise `MergeError` says which
run differs. A run's config is its `results.json`'s, or for a run stopped before writing it, the
`run_config.json` the harness writes as a run starts.
The machines may differ in precision (a GPU's bf16, a CPU's fp32), so **each decision's records come from one
run only**: the first run, in the order given, that holds a successful record of every policy setting any run
holds for that decision; when none holds them all, the run holding the most (earliest on a tie). Paired
differences (policy vs `window` on the same decision) therefore never compare two machines' numerics, and no
(policy, setting, decision) appears twice. The merged directory holds `records.jsonl` (the chosen records),
`results.json` / `results.md` / `pareto.png` (aggregated as the harness does) and `merge.json` (which run gave
what, and how many records were left out as duplicates).

Example:
    $ python scripts/merge_records.py runs/qwen15/cpu_shard0 runs/qwen15/cpu_shard1 runs/qwen15/gpu --out runs/qwen15/all
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Sequence

from damc.eval.records import RUN_CONFIG, records_by_key
from damc.eval.results import aggregate, write_results


class MergeError(ValueError):
    """The runs cannot be merged (different decision LLMs or data, or a run without records)."""


def _run_config(run: Path) -> dict[str, Any]:
    """The `config` of a run's results.json, else of its run_config.json (written as the run starts, so a run
    stopped before its results still names its data, model, scorer and hardware); {} when it has neither."""
    for name in ("results.json", RUN_CONFIG):
        try:
            return json.loads((run / name).read_text()).get("config") or {}
        except FileNotFoundError:
            continue
        except json.JSONDecodeError as e:
            raise MergeError(f"{run / name}: not valid JSON ({e}); rerun that run's evaluate to rewrite it")
    return {}


def load_run(run: str | os.PathLike) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(config, successful records) of one harness out_dir; each record gets `decision_llm` from the run's config
    when it predates the field.

    Raises:
        MergeError: no `records.jsonl`, no successful record, or no way to tell the decision LLM.
    """
    run = Path(run)
    path = run / "records.jsonl"
    if not path.exists():
        raise MergeError(f"{run}: no records.jsonl (expected a scripts/evaluate.py out_dir)")
    config = _run_config(run)
    records = list(records_by_key(run).values())
    if not records:
        raise MergeError(f"{path}: no successful record to merge")
    for r in records:
        r.setdefault("decision_llm", config.get("decision_llm"))
        if not r["decision_llm"]:
            raise MergeError(f"{path}: record {r['policy']}@{r['setting']}|{r['decision_id']} does not name its "
                             f"decision LLM and {run} has no results.json or {RUN_CONFIG}: rerun the run to "
                             f"finish it")
    return config, records


def _check_same(runs: Sequence[Path], values: Sequence[set[str]], what: str, hint: str) -> None:
    """Every run holds the same single value of `what` (runs without one are not checked)."""
    seen = {str(run): sorted(v) for run, v in zip(runs, values) if v}
    distinct = {x for v in seen.values() for x in v}
    if len(distinct) > 1:
        listed = "; ".join(f"{run}: {', '.join(v)}" for run, v in seen.items())
        raise MergeError(f"the runs differ in {what} ({listed}); {hint}")


def choose_sources(per_run: Sequence[list[dict[str, Any]]]) -> tuple[list[dict[str, Any]], list[int], int]:
    """Pick each decision's records from one run (see the module docstring).

    Returns:
        (chosen records, decisions taken from each run, records left out).
    """
    units: dict[str, set[str]] = {}          # decision → every policy@setting any run holds for it
    holds: list[dict[str, dict[str, dict[str, Any]]]] = []   # run → decision → unit → record
    for records in per_run:
        by: dict[str, dict[str, dict[str, Any]]] = {}
        for r in records:
            unit = f"{r['policy']}@{r['setting']}"
            by.setdefault(r["decision_id"], {})[unit] = r
            units.setdefault(r["decision_id"], set()).add(unit)
        holds.append(by)
    chosen: list[dict[str, Any]] = []
    taken = [0] * len(per_run)
    left_out = 0
    for decision, wanted in units.items():
        counts = [len(wanted & set(h.get(decision, {}))) for h in holds]
        best = max(range(len(holds)), key=lambda i: (counts[i], -i))   # a complete run first, else the fullest
        chosen.extend(holds[best][decision].values())
        taken[best] += 1
        left_out += sum(counts) - counts[best]
    return chosen, taken, left_out


def merge_runs(runs: Sequence[str | os.PathLike], out_dir: str | os.PathLike, *, n_boot: int = 1000,
               seed: int = 0) -> dict[str, Any]:
    """Merge the records of `runs` into `out_dir` (see the module docstring); returns the results dict.

    Raises:
        MergeError: no run, a run without records, or runs of different decision LLMs, data or scorers.
    """
    from damc.episodes import atomic_write_text

    paths = [Path(r) for r in runs]
    if not paths:
        raise MergeError("no run to merge: name one or more scripts/evaluate.py out_dirs")
    out = Path(out_dir)
    if any(out.resolve() == p.resolve() for p in paths):
        raise MergeError(f"--out {out} is one of the runs: merge into a new directory")
    loaded = [load_run(p) for p in paths]
    configs, per_run = [c for c, _ in loaded], [r for _, r in loaded]
    _check_same(paths, [{str(r["decision_llm"]) for r in recs} for recs in per_run], "decision LLM",
                "merge only runs of one decision model (run the others into their own merged directory)")
    for key, what, hint in (
            ("data_digest", "data file",
             "every run must read the same episodes file (make it with the same make_data settings and seed)"),
            ("scorer_digest", "scorer files",
             "every run must evaluate the same exported scorer (the same `scorer=` directory contents)")):
        _check_same(paths, [{c[key]} if c.get(key) else set() for c in configs], what, hint)
    chosen, taken, left_out = choose_sources(per_run)
    in_order = sorted(chosen, key=lambda r: (r["episode_id"], r["index"]))
    decisions = list(dict.fromkeys(r["decision_id"] for r in in_order))
    policies = list(dict.fromkeys(r["policy"] for recs in per_run for r in recs))
    sources = [{"run": str(p), "decision_llm": sorted({str(r["decision_llm"]) for r in recs}),
                "llm_setup": sorted({str(r.get("llm_setup") or c.get("llm_setup") or "unknown") for r in recs}),
                "records": len(recs), "decisions_taken": n}
               for p, c, recs, n in zip(paths, configs, per_run, taken)]
    config = {**next((c for c in configs if c), {}), "merged_from": sources, "records_left_out": left_out}
    config.pop("shard", None)   # the first run's part: the merged results hold every run's
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "records.jsonl", "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in chosen))
    results = aggregate(chosen, decisions, policies, config, n_boot=n_boot, seed=seed)
    write_results(out, results)
    atomic_write_text(out / "merge.json", json.dumps({"sources": sources, "decisions": len(decisions),
                                                      "records": len(chosen), "records_left_out": left_out},
                                                     indent=2))
    return results
