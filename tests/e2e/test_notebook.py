"""notebooks/damc_analysis.ipynb runs top to bottom (nbclient) on a small labels dataset and results dir.

The inputs are written in the real formats by the real writers: label rows with the teacher's parquet
schema (`damc.labels.label_schema`), results through `damc.eval.results.aggregate`/`write_results`.
"""

import json
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "notebooks" / "damc_analysis.ipynb"


@pytest.fixture()
def inputs(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from damc.eval.results import aggregate, write_results
    from damc.labels import label_schema

    rng = np.random.default_rng(0)
    rows = []
    for d in range(12):
        for c in range(6):
            key = c == d % 6
            delta = float(rng.normal(3.0 if key else 0.0, 1.0))
            rows.append({"decision_id": f"ep{d // 3}@{d}", "episode_id": f"ep{d // 3}", "card_id": f"ep{d // 3}:{c}",
                         "decision_text": f"user: question {d}", "card_text": f"[tool_result] card {c}",
                         "logp_full": -5.0, "logp_without": -5.0 - delta, "delta": delta, "estimator": "loo",
                         "teacher": "smollm2-135m", "n_action_tokens": 9, "decision_index": d, "card_position": c,
                         "card_kind": "tool_result", "is_key": key, "render_version": "1"})
    labels = tmp_path / "labels" / "shards"
    labels.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=label_schema()), labels / "part-00000.parquet")

    recs = []
    for i in range(10):
        for pol, b, p_ok, tok in [("window", 256, 0.3, 400), ("window", 512, 0.4, 650), ("damc", 256, 0.6, 300),
                                  ("damc", 512, 0.7, 500), ("full", "none", 0.5, 3000)]:
            recs.append({"policy": pol, "setting": str(b), "budget": b, "decision_id": f"d{i}", "episode_id": f"e{i // 2}", "failed": False,
                         "correct": bool(rng.random() < p_ok), "gold_logprob": -10.0, "gold_logprob_per_token": -1.0,
                         "prompt_tokens": tok, "overhead_ms": 3.0, "llm_ms": 500.0, "kept_card_ids": [],
                         "key_card_ids": []})
    res_dir = tmp_path / "eval"
    res_dir.mkdir()
    (res_dir / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    res = aggregate(recs, [f"d{i}" for i in range(10)], ["full", "window", "damc"],
                    {"decision_llm": "test"}, n_boot=100)
    write_results(res_dir, res)
    return tmp_path / "labels", res_dir


def test_analysis_notebook_executes_on_small_inputs(inputs, monkeypatch):
    import nbformat
    from nbclient import NotebookClient

    labels, results = inputs
    monkeypatch.setenv("DAMC_LABELS", str(labels))
    monkeypatch.setenv("DAMC_RESULTS", str(results))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}).execute()
    text = "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "72 label rows over 12 decisions" in text
    assert "key card ranked first in" in text
    images = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if "image/png" in o.get("data", {})]
    assert len(images) >= 3  # delta distribution, key-card ranks, Pareto curve
