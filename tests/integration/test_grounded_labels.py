"""`scripts/label.py estimator=grounded` end to end (real configs, the real runtime memory and encoder, no teacher),
its resumption, and the hybrid label script; the scorer's training reads both label sets unchanged."""

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import small_episode
from hydra import compose, initialize

from damc.episodes import Episode, write_episodes
from damc.labels import load_labels
from damc.teacher.label import main, plan_decisions

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def episodes_file(tmp_path_factory):
    """Two short real synthetic episodes (tool calls and text replies, key cards recorded)."""
    a = small_episode(24)
    b = Episode(a.episode_id + "-b", a.messages, a.domain, a.tools, a.distractors, a.metadata)
    path = tmp_path_factory.mktemp("eps") / "eps.jsonl"
    write_episodes(path, [a, b])
    return path


def cfg_for(episodes, out, *extra):
    with initialize(config_path="../../configs", version_base="1.3"):
        return compose(config_name="label", overrides=[f"data.path={episodes}", f"out_dir={out}",
                                                       "estimator=grounded", "shard_size=2", *extra])


@pytest.fixture(scope="module")
def grounded_dir(episodes_file, tmp_path_factory):
    out = tmp_path_factory.mktemp("grounded") / "labels"
    main(cfg_for(episodes_file, out))
    return out


def test_grounded_labels_need_no_teacher_and_skip_text_replies(episodes_file, grounded_dir):
    s = json.loads((grounded_dir / "summary.json").read_text())
    planned = plan_decisions(episodes_file)
    n_text = sum(not dp.is_tool_call for dp in planned)
    assert n_text >= 1 and s["skipped_text_reply"] == n_text and s["teacher"] == "grounded"
    assert s["decisions"] + s["skipped_no_cards"] + s["skipped_text_reply"] == len(planned)
    assert s["forward_passes"] == 0 and s["decisions_with_positive"] >= 1
    df = load_labels(grounded_dir).to_pandas()
    assert len(df) == s["total_rows"] and not df.duplicated(["decision_id", "card_id"]).any()
    assert set(df.estimator) == {"grounded"} and set(df.teacher) == {"grounded"}
    assert df.logp_full.isna().all() and df.logp_without.isna().all() and (df.n_action_tokens == 0).all()
    tool_ids = {dp.decision_id for dp in planned if dp.is_tool_call}
    assert set(df.decision_id) <= tool_ids                                  # no text reply has a row
    assert df.feat_bm25.notna().all()
    assert df.delta.max() <= 1.0 and df.delta.min() >= -1.0
    keyed = df[df.groupby("decision_id").is_key.transform("any")]
    assert (keyed[keyed.is_key].delta > 0).mean() > 0.5                    # key cards are mostly positives
    cfg = json.loads((grounded_dir / "label_config.json").read_text())
    assert "teacher" not in cfg and "max_context_tokens" not in cfg and cfg["estimator"]["_target_"].endswith("Grounded")


def test_grounded_labels_resume_without_duplicates_and_ignore_teacher_settings(episodes_file, grounded_dir, tmp_path):
    out = tmp_path / "resumed"
    first = main(cfg_for(episodes_file, out, "max_decisions=5"))            # a run stopped early
    assert first["planned_decisions"] == 5
    # the teacher's settings do not enter the grounded labels: another (absent) model resumes the same labels
    again = main(cfg_for(episodes_file, out, "teacher.model=no-such-model", "max_context_tokens=64"))
    assert again["already_done"] >= 1 and again["decisions"] >= 1
    a = load_labels(grounded_dir).to_pandas().sort_values(["decision_id", "card_id"]).reset_index(drop=True)
    b = load_labels(out).to_pandas().sort_values(["decision_id", "card_id"]).reset_index(drop=True)
    assert len(a) == len(b) and not b.duplicated(["decision_id", "card_id"]).any()
    assert (a[["decision_id", "card_id"]] == b[["decision_id", "card_id"]]).all().all()
    np.testing.assert_array_equal(a.delta, b.delta)
    with pytest.raises(ValueError, match="other settings"):
        main(cfg_for(episodes_file, out, "estimator.superseded=1.0"))


def test_the_batched_prefetch_writes_exactly_the_rows_of_a_run_without_it(episodes_file, grounded_dir, tmp_path):
    """`prefetch=true` (the default) only changes when texts are embedded: same rows, targets and features."""
    out = tmp_path / "as-asked"
    main(cfg_for(episodes_file, out, "prefetch=false"))
    cols = ["decision_id", "card_id", "delta", "is_key", "card_age", "feat_bm25", "feat_cosine", "feat_pinned"]
    a = load_labels(grounded_dir).to_pandas()[cols].sort_values(cols[:2]).reset_index(drop=True)
    b = load_labels(out).to_pandas()[cols].sort_values(cols[:2]).reset_index(drop=True)
    assert len(a) > 10 and a.equals(b)
    # the prefetch is not a labelling setting: a run without it resumes the same labels
    assert json.loads((out / "label_config.json").read_text()) == json.loads((grounded_dir / "label_config.json").read_text())


def _teacher_like(grounded_dir, out):
    """A teacher label set of the same cards (seeded deltas, estimator loi) plus a text-reply decision."""
    from damc.labels import write_shard

    rows = load_labels(grounded_dir).to_list()
    rng = np.random.default_rng(0)
    t = [{**r, "delta": float(rng.normal(0, 0.05)), "estimator": "loi", "teacher": "smollm2-135m",
          "logp_full": -10.0, "logp_without": -11.0, "n_action_tokens": 7} for r in rows]
    t += [{**rows[0], "decision_id": rows[0]["episode_id"] + "@999", "delta": 0.3, "estimator": "loi",
           "teacher": "smollm2-135m", "logp_full": -1.0, "logp_without": -2.0, "n_action_tokens": 4}]
    (out / "shards").mkdir(parents=True)
    write_shard(out / "shards", "part-000000-000001.parquet", t)
    return out


def test_hybrid_script_sums_row_by_row_and_training_reads_it(grounded_dir, tmp_path):
    teacher = _teacher_like(grounded_dir, tmp_path / "teacher")
    out = tmp_path / "hybrid"
    cmd = [sys.executable, str(ROOT / "scripts/hybrid_labels.py"), "--teacher", str(teacher), "--grounded",
           str(grounded_dir), "--out", str(out), "--lam", "0.5"]
    subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True)
    t = load_labels(teacher).to_pandas().set_index(["decision_id", "card_id"])
    g = load_labels(grounded_dir).to_pandas().set_index(["decision_id", "card_id"])
    h = load_labels(out).to_pandas().set_index(["decision_id", "card_id"])
    assert len(h) == len(t) and not h.index.duplicated().any()
    both = g.index
    np.testing.assert_allclose(h.loc[both, "delta"], t.loc[both, "delta"] + 0.5 * g.loc[both, "delta"])
    text = [k for k in t.index if k not in both]
    assert len(text) == 1 and h.loc[text[0], "delta"] == 0.3 and h.loc[text[0], "estimator"] == "loi"
    s = json.loads((out / "summary.json").read_text())
    assert s["lam"] == 0.5 and s["summed_rows"] == len(g) and s["teacher_only_rows"] == 1
    again = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    assert again.returncode != 0 and "already holds labels" in again.stderr

    # the scorer's data preparation reads the grounded and the hybrid labels as they are
    from damc.scorer.train import _prepare_data

    for labels in (grounded_dir, out):
        with initialize(config_path="../../configs", version_base="1.3"):
            cfg = compose(config_name="train", overrides=[f"data.labels={labels}", f"out_dir={tmp_path / 'run'}",
                                                          "logger=none"])
        data = _prepare_data(cfg)
        assert len(data.train) >= 1 and len(data.dev) >= 1 and math.isfinite(data.norm.std)
        assert len(data.train_ds) == len(data.train)


def test_hybrid_lambda_auto_writes_its_table(grounded_dir, tmp_path):
    from damc.teacher.hybrid import write_hybrid

    teacher = _teacher_like(grounded_dir, tmp_path / "teacher")
    s = write_hybrid(teacher, grounded_dir, tmp_path / "hybrid", "auto", grid=(0.0, 0.1, 1.0))
    assert s["lam"] in (0.0, 0.1, 1.0) and len(s["lam_table"]) == 4
    cfg = json.loads((tmp_path / "hybrid" / "label_config.json").read_text())
    assert cfg["hybrid"]["lam"] == s["lam"] and cfg["grounded"]["estimator"]["_target_"].endswith("Grounded")

