"""Train the card scorer (Hydra): python scripts/train.py data.labels=LABELS out_dir=RUN [logger=none].

Multi-GPU / DDP: accelerate launch --num_processes 2 scripts/train.py data.labels=... out_dir=...
The work is done by `damc.scorer.train.main(cfg)`.
"""

from damc.cli import run
from damc.scorer.train import main

if __name__ == "__main__":
    run("train", main)
