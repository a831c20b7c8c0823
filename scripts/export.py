"""Export a training run to a self-contained scorer directory (Hydra).

python scripts/export.py run_dir=RUN out=SCORER [onnx=true] [int8=true]
The work is done by `damc.scorer.export.main(cfg)`.
"""

import hydra
from omegaconf import DictConfig


@hydra.main(config_path="../configs", config_name="export", version_base="1.3")
def run(cfg: DictConfig) -> None:
    from damc.scorer.export import main

    main(cfg)


if __name__ == "__main__":
    run()
