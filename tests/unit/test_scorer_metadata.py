"""`ScorerMetadata`: `damc_scorer.json` typed and versioned, written and read in one place, with one shim for the
exports of format 1 (untyped dicts: `threshold` as the combiner's report, no `card_render`) and of format ≤ 2
(no `k_min`: the floor's compatibility default)."""

import json

import pytest

from damc.runtime.scorer import FORMAT_VERSION, META_FILE, Normalization, ScorerFormatError, ScorerMetadata
from damc.runtime.scorer_metadata import DEFAULT_K_MIN

FORMAT_1 = {"render_version": "5", "normalization": {"mean": 0.1, "std": 2.0, "clip": 5.0}, "max_length": 96,
            "teacher": "smollm2-135m", "base_model": "minilm-l6", "kept_layers": None, "loss": {"listwise": 1.0},
            "threshold": {"tau": 0.125, "f1": 0.5, "min_delta": 0.05, "chosen_on": "dev"},
            "metrics": {"scorer": {"spearman": {"median": 0.4}}}, "score_units": "normalised delta (to_delta -> nats)"}


def test_metadata_round_trips_exactly(tmp_path):
    meta = ScorerMetadata("5", Normalization("symlog", 0.2, 1.5, 4.0), 128, card_render="fields", threshold=0.25,
                          k_min=7, teacher=["a", "b"], estimators=["loi"], kept_layers=[0, 2], metrics={"n_pairs": 7})
    path = meta.save(tmp_path)
    written = json.loads(path.read_text())
    assert path.name == META_FILE and written["format_version"] == FORMAT_VERSION == 3 and written["k_min"] == 7
    again = ScorerMetadata.load(tmp_path)
    assert again == meta and again.k_min == 7 and again.normalization.kind == "symlog" and again.to_delta([0.0]).tolist() == [
        pytest.approx(float(Normalization("symlog", 0.2, 1.5, 4.0).invert([0.0])[0]))]


def test_format_1_exports_are_read_once_by_the_shim(tmp_path):
    (tmp_path / META_FILE).write_text(json.dumps(FORMAT_1))
    meta = ScorerMetadata.load(tmp_path)
    assert meta.threshold == 0.125 and meta.card_render == "template" and meta.normalization.kind == "zscore"
    assert meta.normalization.std == 2.0 and meta.format_version == FORMAT_VERSION
    assert meta.k_min == DEFAULT_K_MIN == 4   # no floor was chosen before format 3: the compatibility default
    meta.save(tmp_path)  # re-saved in the current format: a plain number, the floor written out
    again = json.loads((tmp_path / META_FILE).read_text())
    assert again["threshold"] == 0.125 and again["k_min"] == DEFAULT_K_MIN and again["format_version"] == 3


def test_format_2_exports_get_the_default_floor_and_bad_k_min_is_refused(tmp_path):
    (tmp_path / META_FILE).write_text(json.dumps({**FORMAT_1, "threshold": 0.3, "format_version": 2}))
    meta = ScorerMetadata.load(tmp_path)
    assert (meta.threshold, meta.k_min, meta.format_version) == (0.3, DEFAULT_K_MIN, 3)
    (tmp_path / META_FILE).write_text(json.dumps({**FORMAT_1, "threshold": 0.3, "k_min": 0, "format_version": 3}))
    assert ScorerMetadata.load(tmp_path).k_min == 0   # a dev-chosen 0 stays 0 (no floor), not the default
    for bad in (-1, 2.5, "4", True):
        (tmp_path / META_FILE).write_text(json.dumps({**FORMAT_1, "k_min": bad, "format_version": 3}))
        with pytest.raises(ScorerFormatError, match=r"damc_scorer.json: field 'k_min' is .*expected a whole number"):
            ScorerMetadata.load(tmp_path)


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
    from damc.runtime.config import MemoryConfig
    from damc.runtime.memory import default_selector
    from damc.runtime.select import Threshold, TopK

    class Scorer:
        metadata = ScorerMetadata.from_dict(FORMAT_1)

    class Valuer:
        scorer, combiner = Scorer(), object()

    sel = default_selector(Valuer())
    assert isinstance(sel, Threshold) and sel.min_value == 0.125 and sel.k_min == DEFAULT_K_MIN
    Scorer.metadata = ScorerMetadata.from_dict({**FORMAT_1, "k_min": 2, "format_version": 3})
    assert default_selector(Valuer()).k_min == 2                                  # the scorer's dev-chosen floor
    assert default_selector(Valuer(), MemoryConfig(k_min=0)).k_min == 0           # the config overrides it
    assert default_selector(Valuer(), MemoryConfig(k_min=None)).k_min == 2
    Valuer.combiner = None
    assert isinstance(default_selector(Valuer()), TopK)


def test_the_damc_policy_keeps_the_scorers_floor_under_a_swept_threshold(tmp_path):
    """The harness's `damc` measures the product: a swept threshold keeps the scorer's floor (`k_min`), as
    `default_selector` does in `DecisionAwareMemory`; other card policies' thresholds have none."""
    from damc.eval.policies import BM25Policy, DAMCPolicy
    from damc.eval.policy_base import Setting

    (tmp_path / META_FILE).write_text(json.dumps({**FORMAT_1, "threshold": 0.3, "k_min": 3, "format_version": 3}))
    sel = DAMCPolicy(scorer=str(tmp_path)).selector(Setting(budget=500, top_k=4, threshold=0.9))
    assert (sel.min_value, sel.k, sel.k_min) == (0.9, 4, 3)
    assert BM25Policy().selector(Setting(budget=500, top_k=4, threshold=0.9)).k_min == 0
    assert DAMCPolicy(scorer=str(tmp_path)).selector(Setting(budget=500, top_k=4)).k == 4
