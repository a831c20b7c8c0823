"""A/B evaluation of memory policies (Hydra): decision accuracy, prompt tokens and latency per policy and budget.

    python scripts/evaluate.py data.path=EPISODES.jsonl policies=[window,bm25,damc_student,oracle] \
        budgets=[512,1024] scorer=SCORER labels_path=LABELS out_dir=DIR

Writes DIR/records.jsonl (resumable), DIR/results.json, DIR/results.md and DIR/pareto.png.
The work is done by `damc.evaluate.main(cfg)`.
"""

import hydra
from omegaconf import DictConfig


@hydra.main(config_path="../configs", config_name="evaluate", version_base="1.3")
def run(cfg: DictConfig) -> None:
    from damc.evaluate import main

    res = main(cfg)
    from damc.evaluate import results_table

    print(results_table(res))
    print(f"results: {cfg.out_dir}/results.json  table: {cfg.out_dir}/results.md  plot: {cfg.out_dir}/pareto.png")


if __name__ == "__main__":
    run()
