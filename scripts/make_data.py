"""Build train/dev/test episode files: `python scripts/make_data.py source=synthetic n_episodes=200 seed=0 out_dir=DIR`.

Thin Hydra wrapper; the work is `damc.data.make.main(cfg)` (config: `configs/make_data.yaml`).
"""

import hydra
from omegaconf import DictConfig

from damc.data.make import main as make_data


@hydra.main(config_path="../configs", config_name="make_data", version_base="1.3")
def main(cfg: DictConfig) -> dict:
    return make_data(cfg)


if __name__ == "__main__":
    main()
