"""Train the card scorer (Hydra): python scripts/train.py data.labels=LABELS out_dir=RUN [logger=none].

Multi-GPU / DDP: accelerate launch --num_processes 2 scripts/train.py data.labels=... out_dir=...
The work is done by `damc.scorer.train.main(cfg)`.
"""

import hydra
from omegaconf import DictConfig


@hydra.main(config_path="../configs", config_name="train", version_base="1.3")
def run(cfg: DictConfig) -> None:
    from damc.scorer.train import main

    main(cfg)


if __name__ == "__main__":
    run()
