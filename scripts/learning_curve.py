"""The student's dev key-card recall and held-out fidelity against the number of labelled decisions (Hydra):

    python scripts/learning_curve.py labels_path=LABELS dev=DEV.jsonl out_dir=DIR ['sizes=[125,250,500,1000]']

Each point trains, exports and evaluates (selection only, no decision LLM) as a resumable stage.
The work is done by `damc.pipeline.curve.main(cfg)`.
"""

from damc.cli import run
from damc.pipeline.curve import main

if __name__ == "__main__":
    run("learning_curve", main)
