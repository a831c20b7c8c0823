"""damc.eval.renders.table (scripts/compare_renders.py --table): each rendering a run holds, paired with the
template row of the same policy@setting — accuracy and gold log-likelihood gain computed from the records."""

import json

from damc.eval.renders import table


def _rec(setting: str, render: str, d: int, correct: bool, lpt: float) -> dict:
    return {"policy": "damc", "setting": setting, "render": render, "decision_id": f"d{d}", "episode_id": f"e{d}",
            "fingerprint": "f", "correct": correct, "gold_logprob_per_token": lpt, "memory_matters": d < 2,
            "prompt_tokens": 100 + d, "value_recall": None, "prompt_confuser": None}


def _run(tmp_path, with_raw=True):
    recs = []
    for d in range(4):
        recs.append(_rec("1024", "template", d, d == 0, -2.0))
        recs.append(_rec("1024/fields", "fields", d, d < 2, -1.5 - 0.25 * d))   # +0.5, +0.25, 0, −0.25
        if with_raw:
            recs.append(_rec("1024/raw", "raw", d, d < 3, -1.0))                 # +1.0 on each
        recs.append(_rec("1024/k4", "template", d, False, -3.0))               # no other rendering: no row
    recs.append(_rec("1024/raw", "raw", 9, True, 0.0))                           # no template pair: left out
    (tmp_path / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    return {ln.split(" | ")[1]: ln.split(" | ") for ln in table(tmp_path).splitlines()
            if ln.startswith("| damc@")}


def test_each_rendering_is_paired_with_the_template_row_of_its_setting(tmp_path):
    rows = _run(tmp_path)
    assert list(rows) == ["fields", "raw"]                                       # template order, k4 has no pair
    fields, raw = rows["fields"], rows["raw"]
    assert fields[0] == "| damc@1024" and fields[2] == "4" and raw[2] == "4"
    assert fields[3].startswith("0.25 → 0.50 (+0.25 [") and raw[3].startswith("0.25 → 0.75 (+0.50 [")
    assert fields[4].startswith(f"{(0.5 + 0.25 + 0 - 0.25) / 4:+.3f} [") and raw[4] == "+1.000 [+1.000, +1.000]"
    assert fields[5].startswith("2: 0.50 → 1.00 (+0.50 [")                        # where memory matters: d0, d1
    assert fields[6] == "102 → 102"


def test_a_run_with_one_other_rendering_has_one_row_per_setting(tmp_path):
    assert list(_run(tmp_path, with_raw=False)) == ["fields"]


def test_records_without_the_render_field_pair_by_the_setting_suffix(tmp_path):
    rows = _run(tmp_path)
    path = tmp_path / "records.jsonl"
    old = [{k: v for k, v in json.loads(x).items() if k != "render"} for x in path.read_text().splitlines()]
    path.write_text("".join(json.dumps(r) + "\n" for r in old))
    again = {ln.split(" | ")[1]: ln.split(" | ") for ln in table(tmp_path).splitlines() if ln.startswith("| damc@")}
    assert again == rows and list(again) == ["fields", "raw"]
