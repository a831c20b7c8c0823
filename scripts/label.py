"""Counterfactual labels: python scripts/label.py data.path=EPISODES.jsonl out_dir=LABELS [teacher=...] [estimator=...]

Thin Hydra wrapper around `damc.teacher.label.main` (see configs/label.yaml and docs/teacher.md).
Under `accelerate launch --num_processes N scripts/label.py ...` each process labels every Nth decision.
"""

import logging

import hydra
from omegaconf import DictConfig


@hydra.main(config_path="../configs", config_name="label", version_base="1.3")
def run(cfg: DictConfig) -> None:
    from damc.teacher.label import main

    logging.getLogger("damc").setLevel(cfg.log_level)
    main(cfg)


if __name__ == "__main__":
    run()
