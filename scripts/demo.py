"""`make demo`: synthetic data → labels → training → export → A/B evaluation, on configs/demo.yaml.

    python scripts/demo.py [out_dir=runs/demo] [evaluate.budgets=[512,1024]]

The work is done by `damc.demo.main(cfg)`.
"""

import hydra
from omegaconf import DictConfig


@hydra.main(config_path="../configs", config_name="demo", version_base="1.3")
def run(cfg: DictConfig) -> None:
    from damc.demo import main

    main(cfg)


if __name__ == "__main__":
    run()
