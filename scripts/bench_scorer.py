"""Benchmark an exported scorer: pairs/s (fp32, bf16, ONNX, int8), 50-card latency, cost vs teacher LOO.

python scripts/bench_scorer.py --scorer SCORER [--labels LABELS] [--teacher smollm2-135m|none] [--json out.json]
Prints a Markdown table (the one in docs/scorer.md). The work is in `damc.bench.scorer`.
"""

import argparse
import json
import logging


def cli() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scorer", required=True, help="exported scorer directory")
    p.add_argument("--labels", default=None, help="label dataset for the per-path Spearman check")
    p.add_argument("--teacher", default="smollm2-135m", help="teacher for the LOO timing ('none' skips it)")
    p.add_argument("--pairs", type=int, default=256, help="pairs per throughput measurement")
    p.add_argument("--batch-size", type=int, default=64, help="pairs per forward pass")
    p.add_argument("--threads", type=int, default=None, help="intra-op threads (default: all available cores)")
    p.add_argument("--json", default=None, help="also write the raw results here")
    a = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    from damc.bench.scorer import markdown, run

    res = run(a.scorer, a.labels, a.pairs, a.batch_size, None if a.teacher == "none" else a.teacher, a.threads)
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(res, fh, indent=2, default=str)
    print(markdown(res))


if __name__ == "__main__":
    cli()
