"""The label columns are spelled once (damc.labels.LabelRow): the schema, the required/optional split and the
teacher's rows all follow it."""

import pytest

from damc.labels import EXTRA_COLUMNS, LABEL_COLUMNS, LabelRow, label_schema, load_labels, write_shard


def _row(**kw):
    base = dict(decision_id="e@3", episode_id="e", card_id="e:1", decision_text="q", card_text="[user] hi",
                logp_full=-1.0, logp_without=-2.5, delta=0.5, estimator="loi", teacher="t", n_action_tokens=3)
    return LabelRow(**{**base, **kw})


def test_a_label_row_round_trips_through_a_shard_with_the_schema_of_its_fields(tmp_path):
    assert label_schema().names == list(LABEL_COLUMNS + EXTRA_COLUMNS)
    assert str(label_schema().field("is_key").type) == "bool" and str(label_schema().field("card_age").type) == "int64"
    (tmp_path / "shards").mkdir()
    write_shard(tmp_path / "shards", "part-000000-000000.parquet",
                [_row().as_dict(), _row(card_id="e:2", delta=-0.1, is_key=True, card_age=2, feat_bm25=1.5).as_dict()])
    ds = load_labels(tmp_path)
    assert ds["card_id"] == ["e:1", "e:2"] and ds["is_key"] == [None, True] and ds["feat_bm25"] == [None, 1.5]


def test_a_misspelled_or_missing_column_fails_when_the_row_is_made():
    with pytest.raises(TypeError, match="feat_bm2"):
        _row(feat_bm2=1.0)
    with pytest.raises(TypeError, match="n_action_tokens"):
        LabelRow(decision_id="e@3", episode_id="e", card_id="e:1", decision_text="q", card_text="c", logp_full=0.0,
                 logp_without=0.0, delta=0.0, estimator="loi", teacher="t")
