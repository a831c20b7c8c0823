"""`make reproduce`: every stage of a study profile in order, then `<out_dir>/report.md`.

    data → labels → train + export → learning curve (optional) → evaluate each dataset → ship (optional) → report

The stages are `damc.pipeline.study.Study`'s; the learning curve is `damc.pipeline.curve.study_curve`; `ship:` (the
`default_scorer` profile) copies the student into the package (`damc.pipeline.ship`). This
module only chains them (it is what `scripts/reproduce.py` runs), so the study and the curve import neither
this module nor each other's callers.

Example:
    $ python scripts/reproduce.py experiment=study_tau2_small out_dir=runs/small
"""

from __future__ import annotations

import json
import time
from typing import Any

from damc.episodes import atomic_write_text
from damc.eval.report import report
from damc.pipeline.curve import study_curve
from damc.pipeline.study import Study


def run_study(cfg: Any) -> dict[str, Any]:
    """Every stage of the study profile `cfg`; writes and prints `<out_dir>/report.md`. With `dry_run=true`:
    compose every stage's config (a bad override fails here, before any work) and print the plan; run nothing."""
    if cfg.get("dry_run"):
        return plan_study(cfg)
    study = Study(cfg)
    t0 = time.perf_counter()
    study.data()
    labels = study.labels()
    given = study.given_student()   # `student:` names a scorer (e.g. the shipped one): nothing to train
    scorer = given or study.train_export(labels)
    curve = "" if given else study_curve(study, labels, (study.out / "run", scorer, study.exported))
    evals = study.evaluate(scorer, None if given else labels)
    if cfg.evaluate.get("test", True):
        text = report({n: e["results"] for n, e in evals.items()}, policy="damc",
                      operating={n: e["operating"] for n, e in evals.items() if e["operating"]})
    else:   # dev splits only, selection measured without a decision LLM (score=false): the harness's tables
        from damc.eval.results import results_table

        text = "".join(f"### {n}\n\n{results_table(e['results'])}\n" for n, e in evals.items())
    if curve:
        text += "\n## Learning curve (`curve/curve.png`)\n\n" + curve
    if cfg.get("ship"):   # experiment=default_scorer: the student into the package, with checksums
        from damc.pipeline.ship import ship

        text += "\n" + ship(study, evals)["summary"]
    text += "\n" + stage_times(study)
    atomic_write_text(study.out / "report.md", text)
    print(text + f"\nreport: {study.out / 'report.md'} (total {time.perf_counter() - t0:.0f} s)", flush=True)
    return {"evaluations": evals, "timings_s": study.timings, "report": str(study.out / "report.md")}


def plan_study(cfg: Any) -> dict[str, Any]:
    """The stages `run_study` would run, composed and fingerprinted but not run: `{"stages": [(key, overrides)]}`,
    printed one per line."""
    study = Study(cfg, dry_run=True)
    study.data()
    labels = study.labels()
    given = study.given_student()
    study.evaluate(given or study.train_export(labels), None if given else labels)
    for key, overrides in study.planned:
        print(f"[{key}] {' '.join(overrides)}", flush=True)
    return {"stages": study.planned, "student": str(given) if given else None}


def stage_times(study: Study) -> str:
    """Markdown list of every stage's time (from the markers, so earlier runs count too)."""
    lines = ["Stage times (this machine):", ""]
    for f in sorted(study.stages_dir.glob("*.json")):
        d = json.loads(f.read_text())
        lines.append(f"- `{f.stem}`: {d.get('seconds', 0) / 60:.1f} min (finished {d.get('finished')})")
    return "\n".join(lines) + "\n"
