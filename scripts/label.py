"""Counterfactual labels: python scripts/label.py data.path=EPISODES.jsonl out_dir=LABELS [teacher=...] [estimator=...]

Thin Hydra wrapper around `damc.teacher.label.main` (see configs/label.yaml and docs/teacher.md).
Under `accelerate launch --num_processes N scripts/label.py ...` each process labels every Nth decision.
"""

from damc.cli import run
from damc.teacher.label import main

if __name__ == "__main__":
    run("label", main)
