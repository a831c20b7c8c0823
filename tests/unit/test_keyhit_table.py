"""scripts/keyhit_table.py: the setting's rows, margins over the best baseline, paired counts checked against results."""

import importlib.util
import json
from pathlib import Path

import pytest

SPEC = importlib.util.spec_from_file_location("keyhit_table", Path(__file__).parents[2] / "scripts" / "keyhit_table.py")
kt = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(kt)

HITS = {"bm25": [1, 0, 0, 0], "similarity": [1, 1, 0, 0], "rrf": [0, 1, 0, 0], "damc_a": [1, 1, 1, 0]}


def _entry(key_hit: float) -> dict:
    return {"key_hit": key_hit, "candidate_recall": 1.0, "all_values": 0.5, "prompt_confuser_rate": float("nan"),
            "prompt_tokens": 812.4, "n_decisions": 5, "n_key_decisions": 4, "n_value_decisions": 3}


def _run(tmp_path: Path, damc_rate: float = 0.75) -> Path:
    pol = {f"{p}@1024/k4": _entry(sum(h) / 4) for p, h in HITS.items()}
    pol["damc_a@1024/k4"] = _entry(damc_rate)
    pol["oracle@1024"] = _entry(1.0)
    pol["bm25@1024"] = _entry(0.0)           # another setting: left out
    (tmp_path / "results.json").write_text(json.dumps({"policies": pol}))
    recs = [{"policy": p, "setting": "1024/k4", "decision_id": f"d{i}", "history_key_ids": ["k"], "failed": False,
             "kept_card_ids": ["k"] if h else ["x"]} for p, hs in HITS.items() for i, h in enumerate(hs)]
    recs.append({"policy": "damc_a", "setting": "1024/k4", "decision_id": "d9", "history_key_ids": [],
                 "failed": False, "kept_card_ids": []})   # no key card in the history: not counted
    (tmp_path / "records.jsonl").write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    return tmp_path


def test_report_rows_margins_and_paired_counts(tmp_path):
    lines = kt.report(_run(tmp_path), "1024/k4", {"damc_a": "unseen"})
    assert lines[2] == "| bm25 | 0.25 | 1.00 | 0.50 | – | 812 | 5 (4 / 3) |"
    assert "| damc_a (unseen) | 0.75 |" in lines[5]
    assert lines[6].startswith("| oracle | 1.00 |")            # the oracle at its budget row
    assert len([x for x in lines if x.startswith("| ")]) == 6  # header + 5 policies; bm25@1024 left out
    assert "max(bm25, similarity, rrf) key hit = 0.500" in lines
    assert "damc_a: key hit 0.750, minus that max = +0.250" in lines
    assert lines[-1] == "damc_a (3/4 hit): vs bm25 +2/−0, vs similarity +1/−0, vs rrf +2/−0"


def test_records_out_of_step_with_results_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="damc_a: key hit 3/4 from records.jsonl but 0.5"):
        kt.report(_run(tmp_path, damc_rate=0.5), "1024/k4", {})


def test_records_of_decisions_outside_the_run_are_left_out(tmp_path):
    """An earlier sample's records stay in records.jsonl; results.json's `decision_ids` name the run's own."""
    run = _run(tmp_path)
    res = json.loads((run / "results.json").read_text())
    (run / "results.json").write_text(json.dumps({**res, "decision_ids": [f"d{i}" for i in range(4)] + ["d9"]}))
    with open(run / "records.jsonl", "a") as fh:   # a fifth key decision of an earlier sample: rrf hits, damc misses
        for p in HITS:
            fh.write(json.dumps({"policy": p, "setting": "1024/k4", "decision_id": "old", "history_key_ids": ["k"],
                                 "failed": False, "kept_card_ids": ["k"] if p == "rrf" else ["x"]}) + "\n")
    lines = kt.report(run, "1024/k4", {})
    assert lines[-1] == "damc_a (3/4 hit): vs bm25 +2/−0, vs similarity +1/−0, vs rrf +2/−0"
    (run / "results.json").write_text(json.dumps(res))   # an older results.json without ids: every record counts
    with pytest.raises(ValueError, match="bm25: key hit 1/5 from records.jsonl"):
        kt.report(run, "1024/k4", {})


def test_unknown_setting_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="no policy at setting '512/k4'"):
        kt.report(_run(tmp_path), "512/k4", {})


def test_a_scored_run_adds_paired_accuracy_and_gold_log_likelihood(tmp_path):
    """Records with `correct` (a decision LLM ran): damc_a − rrf in accuracy and gold log-prob per token on the same
    decisions, with wins/losses; a selection-only run (the records above) prints no such line."""
    assert not any("accuracy" in x for x in kt.report(_run(tmp_path), "1024/k4", {}))
    correct = {"rrf": [1, 0, 0, 1, 0, 1], "damc_a": [1, 1, 1, 1, 0, 1]}
    recs = [{"policy": p, "setting": "1024/k4", "decision_id": f"d{i}", "episode_id": f"e{i // 2}", "failed": False,
             "correct": bool(c), "gold_logprob_per_token": (-0.5 if c else -1.0) - (0.1 if p == "rrf" else 0.0)}
            for p, cs in correct.items() for i, c in enumerate(cs)]
    lines = kt.decisions(recs, "1024/k4")
    assert len(lines) == 1 and lines[0].startswith("damc_a − rrf on 6 decisions (3 episodes): accuracy +0.333 [")
    assert "(+2/−0)" in lines[0] and "gold LL/token +0.267 [" in lines[0]
    lo = float(lines[0].split("accuracy +0.333 [", 1)[1].split(",", 1)[0])
    assert 0.0 <= lo <= 0.333


def test_a_torn_last_line_is_skipped_and_the_log_left_as_it_is(tmp_path):
    """A report run beside a harness that is appending: the half-written record is not counted, nor cut."""
    run = _run(tmp_path)
    with open(run / "records.jsonl", "a") as fh:
        fh.write('{"policy": "damc_a", "setting": "1024/k4", "decision_id": "d7", "history_ke')
    before = (run / "records.jsonl").read_bytes()
    lines = kt.report(run, "1024/k4", {})
    assert lines[-1] == "damc_a (3/4 hit): vs bm25 +2/−0, vs similarity +1/−0, vs rrf +2/−0"
    assert (run / "records.jsonl").read_bytes() == before


def test_a_missing_records_file_is_a_clear_error(tmp_path):
    run = _run(tmp_path)
    (run / "records.jsonl").unlink()
    with pytest.raises(FileNotFoundError, match="records.jsonl: no such file"):
        kt.report(run, "1024/k4", {})


@pytest.mark.parametrize("setting", ["1024/k4", "1024"])
def test_damc_is_also_paired_with_window_at_its_budget_and_with_full(setting):
    """`window` (at the setting's budget) and `full` (budget-free) take no top-k: their records are read at their own
    settings; another budget's window and a failed record are left out."""
    rows = {("damc_a", setting): [1, 1, 0, 1], ("rrf", setting): [1, 0, 0, 1], ("window", "1024"): [0, 0, 0, 1],
            ("full", "none"): [1, 1, 1, 1], ("window", "512"): [1, 1, 1, 1]}
    recs = [{"policy": p, "setting": st, "decision_id": f"d{i}", "episode_id": f"e{i // 2}", "failed": False,
             "correct": bool(c), "gold_logprob_per_token": -1.0 + 0.5 * c} for (p, st), cs in rows.items()
            for i, c in enumerate(cs)]
    recs.append({"policy": "full", "setting": "none", "decision_id": "d4", "episode_id": "e2", "failed": True})
    lines = kt.decisions(recs, setting)
    assert [x.split(" on ")[0] for x in lines] == ["damc_a − rrf", "damc_a − window", "damc_a − full"]
    assert lines[1].startswith("damc_a − window on 4 decisions (2 episodes): accuracy +0.500 [") and "(+2/−0)" in lines[1]
    assert lines[2].startswith("damc_a − full on 4 decisions (2 episodes): accuracy -0.250 [") and "(+0/−1)" in lines[2]
    assert "gold LL/token -0.125 [" in lines[2]
