"""The shipped scorer's bookkeeping without loading a model: checksums, metadata fields, valuer names, the fallback."""

import hashlib
import json
import logging

import pytest

from damc.assets import ENV_VAR, file_checksums, shipped_dir, verify_checksums
from damc.runtime.scorer_metadata import Normalization, ScorerMetadata


def _tree(root):
    (root / "encoder").mkdir(parents=True)
    (root / "model_int8.onnx").write_bytes(b"\x00weights")
    (root / "encoder" / "damc_encoder.json").write_text("{}")
    (root / "damc_scorer.json").write_text("{}")
    return root


def test_checksums_cover_every_file_but_the_metadata_and_name_each_difference(tmp_path):
    root = _tree(tmp_path / "s")
    sums = file_checksums(root)
    assert list(sums) == ["encoder/damc_encoder.json", "model_int8.onnx"]   # sorted, posix, metadata left out
    assert sums["model_int8.onnx"] == hashlib.sha256(b"\x00weights").hexdigest()
    assert verify_checksums(root, sums) == []
    (root / "model_int8.onnx").write_bytes(b"\x00weightz")
    (root / "encoder" / "damc_encoder.json").unlink()
    (root / "extra.txt").write_text("x")
    problems = verify_checksums(root, sums)
    assert len(problems) == 3
    assert problems[0] == "encoder/damc_encoder.json: missing"
    assert problems[1] == "extra.txt: not in the recorded checksums"
    assert problems[2].startswith("model_int8.onnx: SHA-256 ")
    assert verify_checksums(root, None) == [f"{root}: damc_scorer.json records no checksums"]


def test_the_shipped_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv(ENV_VAR, raising=False)
    assert shipped_dir().parts[-2:] == ("assets", "scorer")
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    assert shipped_dir() == tmp_path
    for off in ("", "none", "None"):
        monkeypatch.setenv(ENV_VAR, off)
        assert shipped_dir() is None


def test_metadata_round_trips_the_shipped_fields_and_older_files_lack_them(tmp_path):
    meta = ScorerMetadata("3", Normalization(), 128, provenance={"labels": {"synthetic": {"sha256": "ab"}}},
                          evaluation={"setting": "1024/k4"}, checksums={"model_int8.onnx": "cd"})
    meta.save(tmp_path)
    back = ScorerMetadata.load(tmp_path)
    assert back == meta and back.checksums == {"model_int8.onnx": "cd"}
    d = json.loads((tmp_path / "damc_scorer.json").read_text())
    for key in ("provenance", "evaluation", "checksums"):
        d.pop(key)
    (tmp_path / "damc_scorer.json").write_text(json.dumps(d))
    old = ScorerMetadata.load(tmp_path)
    assert old.provenance is None and old.evaluation is None and old.checksums is None


def test_named_valuers(monkeypatch):
    from damc.runtime.memory import named_valuer

    assert named_valuer("heuristic").name == "cached(heuristic)"
    with pytest.raises(ValueError, match=r"one of \('default', 'shipped', 'heuristic'\)"):
        named_valuer("bm25")


def test_a_missing_shipped_scorer_falls_back_to_the_heuristic_with_one_warning(monkeypatch, tmp_path, caplog):
    from damc.runtime import default_scorer
    from damc.runtime.memory import default_selector, default_valuer
    from damc.runtime.select import TopK

    monkeypatch.setenv(ENV_VAR, str(tmp_path / "nowhere"))
    default_scorer.clear_cache()
    try:
        with caplog.at_level(logging.WARNING, logger="damc.runtime.default_scorer"):
            valuers = [default_valuer() for _ in range(3)]
        assert [v.name for v in valuers] == ["cached(heuristic)"] * 3
        assert isinstance(default_selector(valuers[0]), TopK)
        warnings = [r for r in caplog.records if r.name == "damc.runtime.default_scorer"]
        assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING
        msg = warnings[0].getMessage()
        assert "nowhere/damc_scorer.json is missing" in msg and 'valuer="heuristic"' in msg
        from damc.runtime.memory import named_valuer

        with pytest.raises(ValueError, match="valuer='shipped'.*ships no readable scorer"):
            named_valuer("shipped")
    finally:
        default_scorer.clear_cache()
