"""`damc.teacher.compare` (behind scripts/compare_estimators.py): key-card hit rates per estimator on the runtime's
candidates, `loo_loi` derived from its halves, a killed comparison resuming from its checkpoint; and one decision
with the real smollm2-135m teacher."""

import json
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import small_episode

from damc.teacher.compare import compare, markdown, sample_decisions


class _Fake:
    """An estimator that values key cards `key_value` and the others 0 (or the reverse order), counting calls."""

    calls: list[str] = []

    def __init__(self, name: str, key_value: float):
        self.name, self.key_value = name, key_value

    def estimate(self, teacher, dp, cards):
        _Fake.calls.append(self.name)
        keys = set(dp.key_card_ids)
        d = np.array([self.key_value if c.card_id in keys else 0.0 for c in cards]) + 1e-3 * np.arange(len(cards))
        return SimpleNamespace(deltas=d, n_forward_tokens=10 * len(cards))


@pytest.fixture()
def fakes(monkeypatch):
    _Fake.calls = []
    monkeypatch.setattr("damc.teacher.estimators.ESTIMATORS", {
        "loo": lambda **kw: _Fake("loo", 1.0), "loi": lambda **kw: _Fake("loi", -1.0),
        "loo_loi": lambda **kw: _Fake("loo_loi", 0.0)})
    return SimpleNamespace(tokenizer=None, model_id="fake-teacher")


def test_hits_loo_loi_and_resume_from_the_checkpoint(fakes, tmp_path):
    episodes = [small_episode(40)]
    dps = sample_decisions(episodes, 3, seed=0)
    assert len(dps) == 3 and all(dp.key_card_ids for dp in dps)
    ckpt = tmp_path / "cmp.partial.jsonl"
    res = compare(episodes, fakes, ["loo", "loi", "loo_loi"], n_decisions=3, checkpoint=ckpt, progress=False)
    s = res["summary"]
    assert s["loo"]["hit@1"] == 1.0 and s["loi"]["hit@1"] == 0.0          # key cards valued highest / lowest
    assert _Fake.calls == ["loo", "loi"] * 3                               # loo_loi is never run when both halves are
    for r in res["decisions"]:
        np.testing.assert_allclose(r["deltas"]["loo_loi"], (np.array(r["deltas"]["loo"]) + r["deltas"]["loi"]) / 2)
        assert r["forward_tokens"]["loo_loi"] == r["forward_tokens"]["loo"] + r["forward_tokens"]["loi"]
    assert "| loo_loi |" in markdown(res)
    lines = ckpt.read_text().splitlines()
    assert len(lines) == 3 and all(json.loads(x)["teacher"] == "fake-teacher" for x in lines)

    _Fake.calls = []
    assert compare(episodes, fakes, ["loo", "loi"], n_decisions=3, checkpoint=ckpt, progress=False)["decisions"] \
        == [{k: v for k, v in json.loads(x).items() if k not in ("teacher", "render")} for x in lines]
    assert _Fake.calls == []                                               # all three came from the checkpoint
    ckpt.write_text("\n".join(lines[:2]) + "\n" + lines[2][: len(lines[2]) // 2])   # killed mid-write
    again = compare(episodes, fakes, ["loo", "loi", "loo_loi"], n_decisions=3, checkpoint=ckpt, progress=False)
    assert _Fake.calls == ["loo", "loi"]
    assert [again["summary"][e][h] for e in ("loo", "loi", "loo_loi") for h in ("hit@1", "hit@3")] == \
        [s[e][h] for e in ("loo", "loi", "loo_loi") for h in ("hit@1", "hit@3")]
    assert len([x for x in ckpt.read_text().splitlines() if x.strip()]) == 4   # the torn line stays on its own
    other = SimpleNamespace(tokenizer=None, model_id="another-teacher")        # another teacher reuses nothing
    _Fake.calls = []
    compare(episodes, other, ["loo"], n_decisions=3, checkpoint=ckpt, progress=False)
    assert _Fake.calls == ["loo"] * 3
    _Fake.calls = []                                                           # nor does another rendering
    compare(episodes, fakes, ["loo"], n_decisions=3, checkpoint=ckpt, progress=False, render="fields")
    assert _Fake.calls == ["loo"] * 3
    whole = [json.loads(x) for x in ckpt.read_text().splitlines() if x.strip() and x.endswith("}")]
    assert {r.get("render", "template") for r in whole} == {"template", "fields"}


@pytest.mark.slow
def test_one_decision_with_the_real_teacher():
    from damc.teacher.backends import HFTeacher

    teacher = HFTeacher("smollm2-135m", dtype="auto", device="cpu", batch_size=4)
    res = compare([small_episode(24)], teacher, ["loi"], n_decisions=1, progress=False)
    (row,) = res["decisions"]
    assert any(row["is_key"]) and len(row["deltas"]["loi"]) == len(row["card_ids"]) >= 2
    assert np.isfinite(row["deltas"]["loi"]).all() and row["forward_tokens"]["loi"] > 0
    assert res["summary"]["loi"]["hit@1"] in (0.0, 1.0) and res["teacher"] == "smollm2-135m"


def test_confuser_precision_per_estimator():
    """confuser@1 and key > confuser are counted over the decisions with a key card and a confuser card only."""
    from damc.teacher.compare import summarize

    def row(did, deltas, is_key, is_conf):
        return {"decision_id": did, "card_ids": [f"c{i}" for i in range(len(is_key))], "is_key": is_key,
                "is_confuser": is_conf, "key_in_window": True, "deltas": {"e": deltas}, "seconds": {"e": 1.0},
                "forward_tokens": {"e": 10}}

    per = [row("a", [0.9, 0.1, 0.0], [False, True, False], [True, False, False]),   # confuser first
           row("b", [0.1, 0.8, 0.0], [False, True, False], [True, False, False]),   # key above the confuser
           row("c", [0.9, 0.1, 0.0], [False, True, False], [False, False, False]),  # no confuser card: not counted
           row("d", [0.9, 0.1], [False, False], [True, False])]                     # no key card: not counted
    s = summarize(per, ["e"])
    assert s["with_confuser"] == 2
    assert s["e"]["confuser@1"] == 0.5 and s["e"]["key>confuser"] == 0.5
    del per[0]["is_confuser"], per[1]["is_confuser"]          # rows of runs before the confuser columns
    old = summarize(per, ["e"])
    assert old["with_confuser"] == 0 and old["e"]["confuser@1"] is None


def test_fact_hits_credit_a_later_card_that_repeats_a_key_fact(fakes, tmp_path):
    """A key card is where a gold value first appears; `holds_fact` marks every candidate holding one (the first
    occurrence included), and fact@1 counts a top card that repeats the fact where hit@1 does not."""
    from damc.data.synthetic import generate_episodes
    from damc.episodes import Episode
    from damc.teacher.compare import summarize

    full = generate_episodes(1, seed=0)[0]
    ep = small_episode(40)
    ep = Episode(ep.episode_id, ep.messages, ep.domain, ep.tools, {},
                 {**ep.metadata, "key_facts": {k: v for k, v in full.metadata["key_facts"].items() if int(k) < 40}})
    ckpt = tmp_path / "cmp.partial.jsonl"
    res = compare([ep], fakes, ["loo"], n_decisions=3, progress=False, checkpoint=ckpt)
    ckpt.write_text("".join(json.dumps({k: v for k, v in json.loads(x).items() if k != "holds_fact"}) + "\n"
                            for x in ckpt.read_text().splitlines()))          # a checkpoint from before the column
    _Fake.calls = []
    assert compare([ep], fakes, ["loo"], n_decisions=3, progress=False, checkpoint=ckpt)["decisions"] == res["decisions"]
    assert _Fake.calls == []                                                  # derived from the cards, not re-run
    for r in res["decisions"]:
        facts = [str(v) for v in ep.metadata["key_facts"][r["decision_id"].rsplit("@", 1)[1]]]
        assert facts and all(h for h, k in zip(r["holds_fact"], r["is_key"]) if k)   # a key card holds its fact
    assert res["summary"]["loo"]["fact@1"] == 1.0 and "| fact@1 | fact@3 |" in markdown(res)
    assert [r["holds_fact"] for r in compare([small_episode(40)], fakes, ["loo"], n_decisions=3,
                                             progress=False)["decisions"]] == [[False] * len(r["card_ids"])
                                                                               for r in res["decisions"]]  # no facts

    def row(deltas, is_key, holds):
        return {"decision_id": "d", "card_ids": ["a", "b", "c"], "is_key": is_key, "holds_fact": holds,
                "is_confuser": [False] * 3, "key_in_window": True, "deltas": {"e": deltas}, "seconds": {"e": 1.0},
                "forward_tokens": {"e": 10}}

    # the best card repeats the fact a lower-valued key card held first: a fact hit, not a key hit
    s = summarize([row([0.9, 0.5, 0.0], [False, True, False], [True, True, False])], ["e"])
    assert (s["e"]["hit@1"], s["e"]["fact@1"], s["with_fact"]) == (0.0, 1.0, 1)
    old = summarize([{k: v for k, v in row([0.9, 0.5, 0.0], [False, True, False], [True] * 3).items()
                      if k != "holds_fact"}], ["e"])                        # rows written before the column
    assert old["e"]["fact@1"] is None and old["with_fact"] == 0
