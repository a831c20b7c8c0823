"""Label agreement (the distillation noise ceiling) on the real teacher label sample."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import LABEL_SAMPLE, label_sample_rows, write_jsonl

from damc.teacher.agreement import label_agreement, paired_decisions

ROOT = Path(__file__).resolve().parents[2]
LABELS = LABEL_SAMPLE
_rows, _write = label_sample_rows, write_jsonl


def test_a_label_set_agrees_perfectly_with_itself():
    res = label_agreement(LABELS, LABELS)
    n = len({r["decision_id"] for r in _rows()})
    assert res["n_decisions"] == n
    assert res["spearman"]["mean"] == pytest.approx(1.0) and res["top1"]["mean"] == 1.0
    assert res["ndcg@5"]["mean"] == pytest.approx(1.0)


def test_reversed_deltas_disagree_and_only_common_cards_count(tmp_path):
    rows = _rows()
    rev = []
    for did in {r["decision_id"] for r in rows}:
        group = [r for r in rows if r["decision_id"] == did]
        deltas = [r["delta"] for r in group][::-1]                 # the opposite order of importance
        rev += [{**r, "delta": d} for i, (r, d) in enumerate(zip(group, deltas)) if i % 4 != 3]  # b lacks some cards
    b = _write(tmp_path / "b.jsonl", rev)
    pairs = paired_decisions(LABELS, b)
    common = {(r["decision_id"], r["card_id"]) for r in rev}
    assert all((p["decision_id"], c) in common for p in pairs for c in p["card_ids"])
    res = label_agreement(LABELS, b)
    assert res["spearman"]["mean"] < 0                             # reversed ranking → negative rank correlation


def test_disjoint_label_sets_are_a_clear_error(tmp_path):
    other = _write(tmp_path / "other.jsonl", [{**r, "decision_id": "x-" + r["decision_id"]} for r in _rows()])
    with pytest.raises(ValueError, match="share no decision"):
        label_agreement(LABELS, other)


def test_cli_prints_and_writes_json(tmp_path):
    out = tmp_path / "agree.json"
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "label_agreement.py"), str(LABELS), str(LABELS),
                           "--json", str(out)], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "spearman  mean 1.000" in proc.stdout
    assert np.isclose(json.loads(out.read_text())["spearman"]["mean"], 1.0)
