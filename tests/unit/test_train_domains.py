"""Several training domains: `data.labels` as a list, each label set split by its own episodes, dev pooled (the
combiner's τ and floor are chosen there: tests/unit/test_combiner.py). No model: `_prepare_data` only."""

import json
from pathlib import Path

import pytest
from hydra import compose, initialize

from damc.labels import LabelFormatError
from damc.scorer.train import _prepare_data, domain_names, label_sources

ROOT = Path(__file__).resolve().parents[2]
LABELS = ROOT / "data" / "samples" / "scorer_labels_sample.jsonl"


def _cfg(labels, tmp_path):
    with initialize(config_path="../../configs", version_base="1.3"):
        cfg = compose("train", overrides=["data.labels=x", f"out_dir={tmp_path}", "logger=none",
                                          "data.dev_fraction=0.34", "data.max_cards=8"])
    cfg.data.labels = labels
    return cfg


def _other_domain(tmp_path, prefix="other-", name="other"):
    """The sample's labels as a second domain: the same rows under other episode (and decision) ids."""
    rows = [json.loads(x) for x in LABELS.read_text().splitlines()]
    out = tmp_path / name / "labels.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps({**r, "episode_id": prefix + r["episode_id"],
                                       "decision_id": prefix + r["decision_id"]}) + "\n" for r in rows))
    return out


def test_every_domain_gets_dev_decisions_and_the_splits_are_pooled(tmp_path):
    one = _prepare_data(_cfg(str(LABELS), tmp_path))
    other = _other_domain(tmp_path)
    both = _prepare_data(_cfg([str(LABELS), str(other)], tmp_path))
    assert both.sources == [str(LABELS), str(other)] and len(both.decisions) == 2 * len(one.decisions)
    dev_domains = {both.domains[d.decision_id] for d in both.dev}
    assert dev_domains == {"scorer_labels_sample.jsonl", "labels.jsonl"}   # each domain is in the dev pool
    # each domain is split by its own episodes, with the same seed: domain one's split is unchanged
    assert {d.decision_id for d in both.dev if not d.decision_id.startswith("other-")} == {
        d.decision_id for d in one.dev}
    assert {d.episode_id for d in both.dev} & {d.episode_id for d in both.train} == set()
    assert len(both.labels) == 2 * len(one.labels)          # one dataset of both label sets (the combiner's rows)


def test_bad_domain_lists_are_refused_by_name(tmp_path):
    with pytest.raises(ValueError, match="names a label set twice"):
        label_sources([str(LABELS), str(LABELS)])
    with pytest.raises(ValueError, match="empty list"):
        label_sources([])
    with initialize(config_path="../../configs", version_base="1.3"):   # the command line's list form
        cfg = compose("train", overrides=["data.labels=[runs/a/labels,runs/b/labels]", f"out_dir={tmp_path}"])
    assert label_sources(cfg.data.labels) == ["runs/a/labels", "runs/b/labels"]
    assert domain_names(["a/labels", "b/labels", "c/x"]) == ["a/labels", "b/labels", "x"]
    clash = _other_domain(tmp_path, prefix="", name="clash")   # the very same decision ids as the first set
    with pytest.raises(LabelFormatError, match=r"decision '.*' is in two label sets of data.labels"):
        _prepare_data(_cfg([str(LABELS), str(clash)], tmp_path))


def test_domain_repeat_enters_a_small_domain_n_times_an_epoch_and_never_its_dev(tmp_path):
    other = _other_domain(tmp_path)
    once = _prepare_data(_cfg([str(LABELS), str(other)], tmp_path))
    cfg = _cfg([str(LABELS), str(other)], tmp_path)
    cfg.data.domain_repeat = [1, 3]
    thrice = _prepare_data(cfg)
    n_other = sum(1 for d in once.train if once.domains[d.decision_id] == "labels.jsonl")   # the file's name
    n_first = len(once.train) - n_other
    assert n_other > 0 and len(thrice.train) == n_first + 3 * n_other
    assert [d.decision_id for d in thrice.dev] == [d.decision_id for d in once.dev]
    assert len(thrice.train_ds) == len(thrice.train)
    assert (thrice.norm.mean, thrice.norm.std) == (once.norm.mean, once.norm.std)   # statistics of each decision once


@pytest.mark.parametrize("value", [[1], [1, 0], [1, "x"], 2])
def test_domain_repeat_that_does_not_name_each_domain_is_refused(tmp_path, value):
    cfg = _cfg([str(LABELS), str(_other_domain(tmp_path))], tmp_path)
    cfg.data.domain_repeat = value
    with pytest.raises(ValueError, match="one positive integer per entry of data.labels"):
        _prepare_data(cfg)
