"""`make demo`: synthetic data → labels → training → export → A/B evaluation, on configs/demo.yaml.

    python scripts/demo.py [out_dir=runs/demo] [evaluate.budgets=[512,1024]]

The work is done by `damc.pipeline.stages.main(cfg)`.
"""

from damc.cli import run
from damc.pipeline.stages import main

if __name__ == "__main__":
    run("demo", main)
