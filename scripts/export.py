"""Export a training run to a self-contained scorer directory (Hydra).

python scripts/export.py run_dir=RUN out=SCORER [fp32=true] [int8=false] [encoder=null]
By default the directory holds only what the light runtime reads (int8 ONNX scorer, tokenizer, damc_scorer.json,
combiner.json, encoder/); fp32=true adds the torch weights and the fp32 model.onnx.
The work is done by `damc.scorer.export.main(cfg)`.
"""

from damc.cli import run
from damc.scorer.export import main

if __name__ == "__main__":
    run("export", main)
