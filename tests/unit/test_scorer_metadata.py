"""`ScorerMetadata`: `damc_scorer.json` typed and versioned, written and read in one place, with one shim for the
exports of format 1 (untyped dicts: `threshold` as the combiner's report, no `card_render`)."""

import json

import pytest

from damc.runtime.scorer import FORMAT_VERSION, META_FILE, Normalization, ScorerFormatError, ScorerMetadata

FORMAT_1 = {"render_version": "5", "normalization": {"mean": 0.1, "std": 2.0, "clip": 5.0}, "max_length": 96,
            "teacher": "smollm2-135m", "base_model": "minilm-l6", "kept_layers": None, "loss": {"listwise": 1.0},
            "threshold": {"tau": 0.125, "f1": 0.5, "min_delta": 0.05, "chosen_on": "dev"},
            "metrics": {"scorer": {"spearman": {"median": 0.4}}}, "score_units": "normalised delta (to_delta -> nats)"}


def test_metadata_round_trips_exactly(tmp_path):
    meta = ScorerMetadata("5", Normalization("symlog", 0.2, 1.5, 4.0), 128, card_render="fields", threshold=0.25,
                          teacher=["a", "b"], estimators=["loi"], kept_layers=[0, 2], metrics={"n_pairs": 7})
    path = meta.save(tmp_path)
    assert path.name == META_FILE and json.loads(path.read_text())["format_version"] == FORMAT_VERSION == 2
    again = ScorerMetadata.load(tmp_path)
    assert again == meta and again.normalization.kind == "symlog" and again.to_delta([0.0]).tolist() == [
        pytest.approx(float(Normalization("symlog", 0.2, 1.5, 4.0).invert([0.0])[0]))]


def test_format_1_exports_are_read_once_by_the_shim(tmp_path):
    (tmp_path / META_FILE).write_text(json.dumps(FORMAT_1))
    meta = ScorerMetadata.load(tmp_path)
    assert meta.threshold == 0.125 and meta.card_render == "template" and meta.normalization.kind == "zscore"
    assert meta.normalization.std == 2.0 and meta.format_version == FORMAT_VERSION
    meta.save(tmp_path)  # re-saved in the current format: a plain number
    assert json.loads((tmp_path / META_FILE).read_text())["threshold"] == 0.125


def test_bad_metadata_names_the_file_and_field(tmp_path):
    with pytest.raises(ScorerFormatError, match="has no damc_scorer.json"):
        ScorerMetadata.load(tmp_path)
    (tmp_path / META_FILE).write_text(json.dumps({k: v for k, v in FORMAT_1.items() if k != "max_length"}))
    with pytest.raises(ScorerFormatError, match=r"damc_scorer.json lacks the field 'max_length'"):
        ScorerMetadata.load(tmp_path)
    (tmp_path / META_FILE).write_text(json.dumps({**FORMAT_1, "format_version": FORMAT_VERSION + 1}))
    with pytest.raises(ScorerFormatError, match=f"scorer format {FORMAT_VERSION + 1}; this DAMC reads formats"):
        ScorerMetadata.load(tmp_path)
    (tmp_path / META_FILE).write_text("[1, 2]")
    with pytest.raises(ScorerFormatError, match="expected an object"):
        ScorerMetadata.load(tmp_path)


def test_the_default_selector_reads_the_typed_threshold():
    from damc.runtime.memory import default_selector
    from damc.runtime.select import Threshold, TopK

    class Scorer:
        metadata = ScorerMetadata.from_dict(FORMAT_1)

    class Valuer:
        scorer, combiner = Scorer(), object()

    sel = default_selector(Valuer())
    assert isinstance(sel, Threshold) and sel.min_value == 0.125
    Valuer.combiner = None
    assert isinstance(default_selector(Valuer()), TopK)
