"""Export a training run to a self-contained scorer directory (Hydra).

python scripts/export.py run_dir=RUN out=SCORER [onnx=true] [int8=true]
The work is done by `damc.scorer.export.main(cfg)`.
"""

from damc.cli import run
from damc.scorer.export import main

if __name__ == "__main__":
    run("export", main)
