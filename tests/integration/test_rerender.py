"""Migrating a label set across a query-rendering change: queries re-rendered from the episodes, deltas kept."""

import json
import subprocess
import sys

import pytest
from conftest import LABEL_SAMPLE, ROOT, SAMPLES, label_sample_rows, write_jsonl

from damc.episodes import load_episodes
from damc.labels import LabelFormatError, load_labels
from damc.query import RENDER_VERSION, query_body, render_decision_query
from damc.teacher.rerender import rerender_labels

EPISODES = SAMPLES / "synthetic_sample.jsonl"   # the episodes the label sample was made from


def test_rerender_gives_todays_query_and_keeps_the_teachers_labels(tmp_path):
    out = tmp_path / "labels_now"
    rep = rerender_labels(LABEL_SAMPLE, EPISODES, out)
    old, new = label_sample_rows(), load_labels(out).to_list()
    eps = {e.episode_id: e for e in load_episodes(EPISODES)}
    assert rep["rows"] == len(old) == len(new) and rep["render_version"] == RENDER_VERSION
    for a, b in zip(old, new):
        ep = eps[a["episode_id"]]
        assert b["decision_text"] == query_body(render_decision_query(ep.messages[: a["decision_index"]], ep.tools))
        assert b["render_version"] == RENDER_VERSION
        for col in ("decision_id", "card_id", "card_text", "teacher_text", "delta", "logp_full", "logp_without"):
            assert b[col] == a[col], col
    assert rep["changed_rows"] == sum(a["decision_text"] != b["decision_text"] for a, b in zip(old, new))
    with pytest.raises(FileExistsError, match="already exists"):
        rerender_labels(LABEL_SAMPLE, EPISODES, out)


def test_rerender_refuses_what_it_cannot_migrate_and_writes_nothing(tmp_path):
    rows = label_sample_rows()
    old = [dict(r, render_version="1") if i == 3 else r for i, r in enumerate(rows)]
    with pytest.raises(LabelFormatError, match="row 4 .*render_version '1'.*relabel"):
        rerender_labels(write_jsonl(tmp_path / "v1.jsonl", old), EPISODES, tmp_path / "a")
    stray = [dict(r, episode_id="nobody") if i == 0 else r for i, r in enumerate(rows)]
    with pytest.raises(LabelFormatError, match="row 1: episode 'nobody' is not in the episodes file"):
        rerender_labels(write_jsonl(tmp_path / "stray.jsonl", stray), EPISODES, tmp_path / "b")
    far = [dict(r, decision_index=10_000) if i == 1 else r for i, r in enumerate(rows)]
    with pytest.raises(LabelFormatError, match="row 2: decision_index 10000 is outside"):
        rerender_labels(write_jsonl(tmp_path / "far.jsonl", far), EPISODES, tmp_path / "c.jsonl")
    assert not any((tmp_path / n).exists() for n in ("a", "b", "c.jsonl"))


def test_the_shipped_label_sample_is_rendered_at_todays_version(tmp_path):
    """The sample the tests train on is migrated whenever the query rendering changes (this command)."""
    assert {r["render_version"] for r in label_sample_rows()} == {RENDER_VERSION}
    out = tmp_path / "again.jsonl"
    res = subprocess.run([sys.executable, str(ROOT / "scripts" / "rerender_labels.py"), str(LABEL_SAMPLE),
                          str(EPISODES), str(out)], capture_output=True, text=True, check=True)
    assert json.loads(res.stdout)["changed_rows"] == 0 and out.read_text() == LABEL_SAMPLE.read_text()
