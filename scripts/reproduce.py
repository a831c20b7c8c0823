"""`make reproduce`: the full-size study (synthetic and BFCL long_context, test splits) behind docs/evaluation.md.

    python scripts/reproduce.py                          # both profiles
    python scripts/reproduce.py study_bfcl               # one profile (configs/experiment/study_*.yaml)
    python scripts/reproduce.py study_synthetic evaluate.budgets=[1024]   # extra overrides of configs/demo.yaml

Sized for a 2-core CPU (about 2.3 h for both profiles: synthetic labels 41 min, training 8, evaluation 68;
BFCL 7 + 2.5 + 11 min); on a GPU box raise `per_episode`
and `max_decisions` in the profiles. Finished stages are skipped, labelling and evaluation resume per decision.
Each profile writes `<out_dir>/report.md` (the README's table and the study's targets, checked).
The work is done by `damc.eval.pipelines.reproduce(...)`.
"""

import logging
import sys


def run() -> None:
    from damc.cli import quiet_third_party, verbose_requested
    from damc.eval.pipelines import reproduce

    verbose = verbose_requested()
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING,
                        format="[%(asctime)s][%(name)s][%(levelname)s] - %(message)s")
    quiet_third_party(verbose)
    args = [a for a in sys.argv[1:] if a not in ("-v", "--verbose")]
    profiles = [a for a in args if a.startswith("study_")] or ["study_synthetic", "study_bfcl"]
    reproduce(profiles, [a for a in args if not a.startswith("study_")])


if __name__ == "__main__":
    run()
