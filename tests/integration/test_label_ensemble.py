"""The teacher ensemble (`damc.teacher.ensemble.merge_labels`) on the real teacher label sample."""

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import LABEL_SAMPLE, label_sample_rows, write_jsonl

from damc.labels import group_decisions, load_labels
from damc.teacher.ensemble import merge_labels

ROOT = Path(__file__).resolve().parents[2]
LABELS = LABEL_SAMPLE
_rows, _write = label_sample_rows, write_jsonl


def _other_teacher(tmp_path, drop_every=0):
    """A second 'teacher': deltas scaled and shifted per card, some cards not labelled."""
    rows = []
    for i, r in enumerate(_rows()):
        if drop_every and i % drop_every == 0:
            continue
        lw = r["logp_without"] - 0.5 * (i % 3)
        rows.append({**r, "teacher": "other-lm", "logp_without": lw, "delta": (r["logp_full"] - lw) / r["n_action_tokens"]})
    return _write(tmp_path / "other.jsonl", rows), rows


def test_ensemble_delta_is_the_weighted_mean_on_common_cards_and_trains(tmp_path):
    other, orows = _other_teacher(tmp_path, drop_every=5)
    out = tmp_path / "ens"
    s = merge_labels([LABELS, other], out, weights=[1, 3])
    assert s["weights"] == [0.25, 0.75] and s["rows"] == len(orows)
    assert s["left_out_rows"] == {str(LABELS): len(_rows()) - len(orows), str(other): 0}
    merged = {(r["decision_id"], r["card_id"]): r for r in load_labels(out).to_list()}
    base = {(r["decision_id"], r["card_id"]): r for r in _rows()}
    for r in orows:
        k = (r["decision_id"], r["card_id"])
        assert merged[k]["delta"] == pytest.approx(0.25 * base[k]["delta"] + 0.75 * r["delta"])
        assert merged[k]["delta"] == pytest.approx((merged[k]["logp_full"] - merged[k]["logp_without"])
                                                   / merged[k]["n_action_tokens"])
        assert merged[k]["card_text"] == base[k]["card_text"]
    assert {r["teacher"] for r in merged.values()} == {s["teacher"]} and "other-lm" in s["teacher"]
    assert len(group_decisions(load_labels(out))) == s["decisions"]   # the trainer reads it as labels
    with pytest.raises(FileExistsError, match="overwrite"):
        merge_labels([LABELS, other], out)
    assert merge_labels([LABELS, other], out, overwrite=True)["rows"] == len(orows)


def test_members_that_do_not_match_are_clear_errors(tmp_path):
    rows = _rows()
    with pytest.raises(ValueError, match="at least two"):
        merge_labels([LABELS], tmp_path / "a")
    with pytest.raises(ValueError, match="weights"):
        merge_labels([LABELS, LABELS], tmp_path / "a", weights=[1, -1])
    est = _write(tmp_path / "est.jsonl", [{**r, "estimator": "ablation"} for r in rows])
    with pytest.raises(ValueError, match="different estimators"):
        merge_labels([LABELS, est], tmp_path / "a")
    txt = _write(tmp_path / "txt.jsonl", [{**r, "card_text": r["card_text"] + " (longer)"} for r in rows])
    with pytest.raises(ValueError, match="card_text of card"):
        merge_labels([LABELS, txt], tmp_path / "a")
    disjoint = _write(tmp_path / "dis.jsonl", [{**r, "decision_id": "x-" + r["decision_id"]} for r in rows])
    with pytest.raises(ValueError, match="share no labelled"):
        merge_labels([LABELS, disjoint], tmp_path / "a")
    dup = _write(tmp_path / "dup.jsonl", rows + rows[:1])
    with pytest.raises(ValueError, match="labelled twice"):
        merge_labels([LABELS, dup], tmp_path / "a")
    assert not (tmp_path / "a").exists()  # nothing half-written


def test_cli_merges_and_reports_errors(tmp_path):
    other, orows = _other_teacher(tmp_path)
    cmd = [sys.executable, str(ROOT / "scripts" / "merge_labels.py"), str(LABELS), str(other), "--out",
           str(tmp_path / "ens")]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"{len(orows)} rows" in proc.stdout and (tmp_path / "ens" / "summary.json").exists()
    again = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert again.returncode != 0 and "already holds labels" in again.stderr
