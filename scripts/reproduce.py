"""`make reproduce`: the study behind the README's results (damc/configs/study.yaml): one student trained on the
synthetic and τ²-bench retail labels, every dataset's test split evaluated through the runtime.

    python scripts/reproduce.py                                             # the full study
    python scripts/reproduce.py experiment=study_tau2_small out_dir=DIR    # the reduced τ²-bench profile
    python scripts/reproduce.py use=[tau2_retail,tau2_airline] evaluate.budgets=[1024]

Finished stages are skipped while their settings are unchanged; labelling and evaluation resume per decision.
Writes `<out_dir>/report.md` (tables, Pareto fronts, operating points, targets, stage times).
The work is done by `damc.pipeline.reproduce.run_study(cfg)`.
"""

from damc.cli import run
from damc.pipeline.reproduce import run_study

if __name__ == "__main__":
    run("study", run_study)
