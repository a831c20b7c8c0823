"""damc.eval.report: the README's policy × budget table and the study's targets, from real aggregate() output."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from damc.eval.report import check_targets, compact_table, load_operating, load_results, report, targets_table
from damc.eval.results import aggregate

ROOT = Path(__file__).resolve().parents[2]
N = 20


def _records(policy, setting, n_correct, tokens, n=N, key_hits=0, confusers=0):
    """n decisions of n/4 episodes; the first `key_hits` contexts hold their key card, the first `confusers` a
    distractor's value."""
    return [{"policy": policy, "setting": str(setting), "decision_id": f"d{i}", "episode_id": f"e{i // 4}",
             "failed": False, "correct": i < n_correct, "gold_logprob": -10.0, "gold_logprob_per_token": -1.0,
             "prompt_tokens": tokens, "overhead_ms": 1.0, "llm_ms": 5.0, "key_card_ids": [f"k{i}"],
             "kept_card_ids": [f"k{i}"] if i < key_hits else [], "key_in_candidates": [f"k{i}"],
             "confuser": i < confusers} for i in range(n)]


def _results(damc_correct, damc_tokens, budgets=(512, 4096), oracle_correct=18, bm25_correct=8, hits=19, conf=4):
    recs = []
    for b in budgets:
        recs += _records("window", b, 6, 1000)                  # 0.30
        recs += _records("oracle", b, oracle_correct, 700)      # 0.90 by default
        recs += _records("bm25", b, bm25_correct, 900)          # 0.40 by default
        recs += _records("damc", b, damc_correct, damc_tokens, key_hits=hits, confusers=conf)
    recs += _records("full", "none", 10, 5000)
    recs += _records("damc", "512/k4", damc_correct - 1, damc_tokens // 2, key_hits=hits, confusers=conf)
    pols = ["full", "window", "bm25", "damc", "oracle"]
    return aggregate(recs, [f"d{i}" for i in range(N)], pols, {"decision_llm": "x"}, n_boot=200)


def test_targets_met_and_missed_with_figures():
    good = check_targets(_results(damc_correct=16, damc_tokens=550), operating="512/k4")   # 0.80 at 0.55x window
    row = good[0]
    assert row["setting"] == "512" and row["accuracy"] == pytest.approx(0.80)
    assert row["token_ratio"] == pytest.approx(0.55)
    assert row["delta_vs_window"] == pytest.approx(0.50) and row["delta_ci"][0] > 0 and row["gain_ok"] is True
    assert row["lexical_ok"] is True and row["lexical_accuracy"] == pytest.approx(0.40)
    assert row["oracle_ok"] is False                                     # 0.90 - 0.80 > 0.05
    assert row["key_hit"] == pytest.approx(0.95) and row["key_hit_ok"] is True
    assert row["confuser_rate"] == pytest.approx(0.20) and row["confuser_ok"] is True
    assert [r["setting"] for r in good] == ["512", "4096", "512/k4"]     # the operating point is checked too
    assert good[2]["accuracy"] == pytest.approx(0.75) and good[2]["token_ratio"] == pytest.approx(0.275)

    bad = check_targets(_results(damc_correct=7, damc_tokens=1400, hits=10, conf=12))[0]  # 0.35 at 1.4x window
    assert bad["gain_ok"] is False and bad["lexical_ok"] is False and bad["oracle_ok"] is False
    assert bad["key_hit_ok"] is False and bad["confuser_ok"] is False
    # more accurate than window but with more tokens: the gain target needs both
    costly = check_targets(_results(damc_correct=16, damc_tokens=1100))[0]
    assert costly["delta_vs_window"] == pytest.approx(0.50) and costly["gain_ok"] is False


def test_tables_show_each_policy_budget_the_front_and_operating_points():
    res = _results(damc_correct=16, damc_tokens=550)
    table = compact_table(res)
    lines = table.strip().splitlines()
    assert lines[0] == "| policy | budget 512 | budget 4,096 |"
    damc = next(line for line in lines if "damc" in line)
    assert damc.startswith("| **damc** | 0.80 (+0.50 [")
    assert damc.rstrip(" |").endswith("· 550")
    assert next(line for line in lines if line.startswith("| window")) == "| window | 0.30 · 1000 | 0.30 · 1000 |"
    full = next(line for line in lines if line.startswith("| full")).strip("| ").split(" | ")[1:]
    assert len(full) == 2 and all(c.startswith("0.50 (+0.20 [") and c.endswith("· 5000") for c in full)
    tt = targets_table(res, operating="512/k4")
    assert "0.55× ✓" in tt and "512/k4 (operating point)" in tt and "0.95 ✓" in tt
    text = report({"synthetic": res}, operating={"synthetic": {"damc": "512/k4", "window": "512"}})
    assert text.startswith("### synthetic") and table in text
    assert "| damc | 512/k4 | 0.75 (+0.45 [" in text and "Pareto front" in text
    assert "`damc@512/k4`" in text and "`oracle@" not in text.split("Pareto front")[1].splitlines()[0]
    # the operating-point table carries the prompt-level metrics when the records have them, "–" when not
    assert "| all values | prompt confuser |" in text
    assert next(ln for ln in text.splitlines() if ln.startswith("| damc | 512/k4 |")).endswith("| – | – |")
    recs = [dict(r, value_recall=1.0 if i < 15 else 0.5, prompt_confuser=i < 2)
            for i, r in enumerate(_records("damc", 512, 16, 550, key_hits=19, confusers=4))]
    recs += _records("window", 512, 6, 1000)
    res2 = aggregate(recs, [f"d{i}" for i in range(N)], ["window", "damc"], {"decision_llm": "x"}, n_boot=50)
    row = next(ln for ln in report({"t": res2}, operating={"t": {"damc": "512"}}).splitlines()
               if ln.startswith("| damc | 512 |"))
    assert row.endswith("| 0.75 | 0.10 |")   # 15 of 20 with every value; 2 of 20 with a look-alike in the prompt


def test_load_results_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no results.json"):
        load_results(tmp_path)
    (tmp_path / "results.json").write_text('{"policies": ')
    with pytest.raises(ValueError, match="line 1: not valid JSON"):
        load_results(tmp_path)
    (tmp_path / "results.json").write_text('{"accuracy": 1}')
    with pytest.raises(ValueError, match="not an evaluate results file"):
        load_results(tmp_path / "results.json")


def test_cli_writes_report(tmp_path):
    d = tmp_path / "eval"
    d.mkdir()
    (d / "results.json").write_text(json.dumps(_results(16, 550)))
    (d / "ops.json").write_text(json.dumps({"damc": "512/k4"}))
    out = tmp_path / "report.md"
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "report.py"), f"synthetic={d}", "--out", str(out),
                        "--operating", str(d / "ops.json")], capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    assert out.read_text().startswith("### synthetic") and "| **damc** | 0.80" in p.stdout
    assert "512/k4 (operating point)" in p.stdout
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "report.py"), str(tmp_path / "nope")],
                       capture_output=True, text=True, cwd=ROOT)
    assert p.returncode != 0 and "report: error:" in p.stderr and "no results.json" in p.stderr


def test_thresholds_hold_exactly_at_the_boundary():
    # 11/20 - 10/20 is 0.050000000000000044 in floating point: exactly 5 points from oracle is within 5
    row = check_targets(_results(damc_correct=10, damc_tokens=1000, oracle_correct=11, bm25_correct=10, hits=18,
                                 conf=6))[0]
    assert 11 / 20 - 10 / 20 > 0.05
    assert row["oracle_ok"] is True and row["lexical_ok"] is True and row["token_ratio"] == pytest.approx(1.0)
    assert row["key_hit_ok"] is True and row["confuser_ok"] is True                         # 0.90 and 0.30 exactly
    row = check_targets(_results(damc_correct=9, damc_tokens=1001, oracle_correct=11, hits=17, conf=7))[0]
    assert row["oracle_ok"] is False and row["gain_ok"] is False and row["key_hit_ok"] is False
    assert row["confuser_ok"] is False


def test_where_memory_matters_is_paired_on_the_keyed_decisions_only():
    """Δ vs window on the decisions with a key card before the current turn, separate from the overall Δ."""
    def recs(policy, correct_when_keyed):
        out = _records(policy, 512, 0, 1000)
        for r in out:
            i = int(r["decision_id"][1:])
            keyed = i < 8
            r["history_key_ids"] = [f"k{i}"] if keyed else []
            r["correct"] = correct_when_keyed if keyed else not correct_when_keyed
            r["kept_card_ids"] = [f"k{i}"] if policy == "damc" else []
        return out

    res = aggregate(recs("window", False) + recs("damc", True), [f"d{i}" for i in range(N)], ["window", "damc"],
                    {"decision_llm": "x"}, n_boot=200)
    e, p = res["policies"]["damc@512"], res["paired"]["damc@512"]
    assert e["n_key_decisions"] == 8 and e["accuracy_key_decisions"] == pytest.approx(1.0)
    assert p["accuracy_delta"] == pytest.approx(8 / 20 - 12 / 20)                 # overall: worse
    assert p["key_decisions"]["accuracy_delta"] == pytest.approx(1.0)             # where memory matters: better
    assert p["key_decisions"]["n"] == 8 and p["key_decisions"]["n_episodes"] == 2
    table = report({"t": res}, operating={"t": {"window": "512", "damc": "512"}})
    assert "where memory matters (8 decisions)" in table
    assert "| damc | 512 | 0.40 (-0.20 [" in table and "| 1.00 (+1.00 [+1.00, +1.00]) |" in table


def test_a_study_rendered_with_field_lines_fills_its_budget_column_and_checks_its_targets():
    """`render=[fields]` keys every card policy `512/fields` (the window stays `512`): the table shows a column for
    it, and the targets compare damc with bm25 and oracle of that rendering (the report showed '–' before)."""
    recs = _records("window", 512, 6, 1000)
    recs += _records("oracle", "512/fields", 18, 700)
    recs += _records("bm25", "512/fields", 8, 900)
    recs += _records("bm25", "512/k4/fields", 9, 600)
    recs += _records("damc", "512/fields", 16, 550, key_hits=19, confusers=4)
    recs += _records("damc", "512/k4/fields", 12, 500, key_hits=15, confusers=2)
    res = aggregate(recs, [f"d{i}" for i in range(N)], ["window", "bm25", "damc", "oracle"], {"decision_llm": "x"},
                    n_boot=200)
    table = compact_table(res)
    assert "| policy | budget 512 | budget 512 (fields) |" in table
    assert "| **damc** | – | 0.80 (+0.50 [" in table and "| window | 0.30 · 1000 | – |" in table
    rows = check_targets(res, operating="512/k4/fields")
    assert [r["setting"] for r in rows] == ["512/fields", "512/k4/fields"]
    assert rows[0]["lexical_accuracy"] == pytest.approx(0.40) and rows[0]["oracle_accuracy"] == pytest.approx(0.90)
    assert rows[1]["lexical_accuracy"] == pytest.approx(0.45) and rows[1]["lexical_ok"] is True
    assert rows[1]["oracle_ok"] is False and rows[1]["key_hit"] == pytest.approx(0.75)


def test_operating_points_from_the_pipeline_or_a_study_and_a_wrong_file_refused(tmp_path):
    """Both files the code writes are read (the study's nests the points under "points": passed to the CLI it
    used to report no operating point at all); any other shape is an error naming the file."""
    plain, study, bad = tmp_path / "plain.json", tmp_path / "study.json", tmp_path / "bad.json"
    plain.write_text(json.dumps({"damc": "512/k4", "bm25": "512"}))
    study.write_text(json.dumps({"chosen_on": "tau2_retail", "points": {"damc": "512/k4"}}))
    assert load_operating(plain) == {"damc": "512/k4", "bm25": "512"}
    assert load_operating(study) == {"damc": "512/k4"}
    for text in ('["damc"]', '{"damc": 512}', "{}", '{"points": []}'):
        bad.write_text(text)
        with pytest.raises(ValueError, match=r"bad\.json: expected operating points"):
            load_operating(bad)
    d = tmp_path / "eval"
    d.mkdir()
    (d / "results.json").write_text(json.dumps(_results(16, 550)))
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "report.py"), str(d), "--operating", str(study)],
                       capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    assert "| damc | 512/k4 | 0.75" in p.stdout and "512/k4 (operating point)" in p.stdout
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "report.py"), str(d), "--operating", str(bad)],
                       capture_output=True, text=True, cwd=ROOT)
    assert p.returncode != 0 and "report: error:" in p.stderr and "expected operating points" in p.stderr


def _two_decisions(with_field=True):
    """Two decisions in two episodes, `window`, `full` and `damc` at budget 512, hand-set gold log-probs per token."""
    lpt = {"window": (-2.0, -1.5), "full": (-1.0, -1.25), "damc": (-0.5, -1.0)}
    recs = []
    for pol, vals in lpt.items():
        for i, v in enumerate(vals):
            r = {"policy": pol, "setting": "none" if pol == "full" else "512", "decision_id": f"d{i}",
                 "episode_id": f"e{i}", "failed": False, "correct": pol != "window" or i == 0, "gold_logprob": 3 * v,
                 "gold_logprob_per_token": v, "prompt_tokens": 400 if pol == "full" else 100, "overhead_ms": 1.0, "llm_ms": 5.0,
                 "key_card_ids": [], "kept_card_ids": []}
            if not with_field:
                r.pop("gold_logprob_per_token")
            recs.append(r)
    return aggregate(recs, ["d0", "d1"], ["window", "full", "damc"], {"decision_llm": "x"}, n_boot=200)


def test_the_gold_log_likelihood_gain_is_the_paired_per_token_difference():
    """damc − window = (+1.5, +0.5): mean +1.0, median +1.0; damc − full = (+0.5, +0.25): mean +0.375."""
    from damc.eval.results import results_table

    res = _two_decisions()
    g = res["paired"]["damc@512"]["ll_gain"]
    assert g["mean"] == pytest.approx(((-0.5 + 2.0) + (-1.0 + 1.5)) / 2) and g["n"] == 2 and g["n_episodes"] == 2
    assert g["median"] == pytest.approx(1.0) and g["ci"][0] <= g["mean"] <= g["ci"][1]
    gf = res["paired_full"]["damc@512"]["ll_gain"]
    assert gf["mean"] == pytest.approx(((-0.5 + 1.0) + (-1.0 + 1.25)) / 2) and gf["median"] == pytest.approx(0.375)
    assert res["paired"]["full@512"]["ll_gain"]["mean"] == pytest.approx(((-1.0 + 2.0) + (-1.25 + 1.5)) / 2)
    table = results_table(res)
    damc = next(ln for ln in table.splitlines() if ln.startswith("| damc"))
    assert "| +1.000 [" in damc and "· med +1.000 |" in damc and "| +0.375 [" in damc
    text = report({"t": res}, operating={"t": {"window": "512", "full": "512", "damc": "512"}})
    row = next(ln for ln in text.splitlines() if ln.startswith("| damc | 512 |"))
    assert "| +1.000 [" in row and "| +0.375 [" in row
    assert [ln.split(" | ")[0] for ln in text.splitlines() if ln.startswith("| ") and " | 512 | " in ln][:3] == \
        ["| window", "| full", "| damc"]                       # the headline order
    assert "not independent of the labels" in text
    # "matches full history at a fraction of its tokens": accuracy Δ vs full and the share of full's tokens
    pw = res["paired_full"]["window@512"]
    assert pw["accuracy_delta"] == pytest.approx(-0.5) and pw["n"] == 2 and pw["prompt_token_ratio"] == 0.25
    assert res["paired_full"]["damc@512"]["accuracy_delta"] == pytest.approx(0.0)
    rows = {ln.split(" | ")[0]: ln for ln in text.splitlines() if " | 512 | " in ln}
    assert "| -0.50 [-1.00, +0.00] (×0.25) |" in rows["| window"] and "| +0.00 [+0.00, +0.00] (×0.25) |" in rows["| damc"]
    assert "| (baseline) | (baseline) |" in rows["| full"]
    assert "| -0.500 [-1.000, 0.000] (×0.25) |" in next(ln for ln in table.splitlines() if ln.startswith("| window"))
    # records written before the field existed still aggregate: the columns read "–"
    old = _two_decisions(with_field=False)
    assert old["paired"]["damc@512"]["ll_gain"]["n"] == 0
    row = next(ln for ln in results_table(old).splitlines() if ln.startswith("| damc"))
    assert row.split(" | ")[4:6] == ["–", "–"]


def _synthetic(n_episodes, seed=0):
    """`n_episodes` episodes of 4 decisions; window right 50 %, damc 60 % of the time, independently."""
    import random

    rnd = random.Random(seed)
    recs, ids = [], []
    for e in range(n_episodes):
        for j in range(4):
            did = f"d{e}_{j}"
            ids.append(did)
            for pol, p in (("window", 0.5), ("damc", 0.6)):
                recs.append({"policy": pol, "setting": "512", "decision_id": did, "episode_id": f"e{e}",
                             "failed": False, "correct": rnd.random() < p, "gold_logprob": -1.0,
                             "gold_logprob_per_token": -1.0, "prompt_tokens": 100, "overhead_ms": 1.0,
                             "llm_ms": 1.0, "key_card_ids": [], "kept_card_ids": []})
    return aggregate(recs, ids, ["window", "damc"], {"decision_llm": "x"}, n_boot=500)


def test_the_detectable_difference_shrinks_as_the_set_grows():
    from damc.eval.results import Z_POWER, results_table

    small, large = _synthetic(10), _synthetic(160)
    s, l = small["sensitivity"], large["sensitivity"]
    assert s["n"] == 40 and l["n"] == 640 and s["n_episodes"] == 10 and l["n_episodes"] == 160
    assert s["mde"] == pytest.approx(Z_POWER * small["paired"]["damc@512"]["se"])
    assert l["mde"] < s["mde"] / 2.5                          # 16x the episodes: about a quarter of the SE
    assert 0.05 < l["mde"] < 0.25 < s["mde"]
    assert f"±{l['mde']:.3f} on 640 decisions in 160 episodes" in results_table(large)
    assert f"±{s['mde']:.3f}" in report({"t": small})
    # no scored comparison (selection-only runs): the figure is "–", never a number
    sel = aggregate([dict(r, correct=None) for r in []], [], ["window"], {}, n_boot=10)
    assert "difference: –" in results_table(sel)


def test_the_summary_has_one_row_per_set_with_each_policys_delta_and_its_sensitivity(tmp_path):
    from damc.eval.report import summary_table

    strong, weak = _results(damc_correct=16, damc_tokens=550), _results(damc_correct=7, damc_tokens=550)
    text = summary_table({"strong": strong, "weak": weak})
    rows = {line.split(" | ")[0].lstrip("| "): line for line in text.splitlines() if line.startswith("| ")}
    assert list(rows) == ["test set", "strong", "weak"]
    header = rows["test set"].split(" | ")
    assert header[3:] == ["`window`", "`full`", "`bm25`", "`damc`", "`oracle` |"]   # HEADLINE order, those run
    cells = rows["strong"].split(" | ")
    assert cells[1] == "20 (5)" and cells[2].startswith("±")
    assert cells[3] == "0.300" and cells[6] == "0.800 (+0.500†)"          # window; damc at its largest budget
    assert rows["weak"].split(" | ")[6] == "0.350 (+0.050)"               # +1 decision: no mark
    assert "†" in text.splitlines()[-1]
    out = subprocess.run([sys.executable, "scripts/report.py", "--summary", f"a={_write(tmp_path, strong)}"],
                         cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0 and "| a | 20 (5) |" in out.stdout, out.stderr[-2000:]


def _write(tmp_path, results):
    path = tmp_path / "results.json"
    path.write_text(json.dumps(results))
    return path
