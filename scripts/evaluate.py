"""A/B evaluation of memory policies (Hydra): decision accuracy, prompt tokens and latency per policy and budget.

    python scripts/evaluate.py data.path=EPISODES.jsonl policies=[window,bm25,damc,oracle] \
        budgets=[512,1024] scorer=SCORER labels_path=LABELS out_dir=DIR

Writes DIR/records.jsonl (resumable), DIR/results.json, DIR/results.md and DIR/pareto.png.
The work is done by `damc.eval.harness.main(cfg)`.
"""

from damc.cli import run
from damc.eval.harness import main, print_summary

if __name__ == "__main__":
    run("evaluate", main, print_summary)
