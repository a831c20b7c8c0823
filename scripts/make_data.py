"""Build train/dev/test episode files: `python scripts/make_data.py source=synthetic n_episodes=200 seed=0 out_dir=DIR`.

Thin Hydra wrapper; the work is `damc.data.make.main(cfg)` (config: `configs/make_data.yaml`).
"""

from damc.cli import run
from damc.data.make import main

if __name__ == "__main__":
    run("make_data", main)
