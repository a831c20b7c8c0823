"""damc.eval.records: the resumable record log keeps whole records only; a reader never writes to a run's log."""

import json

from damc.eval.records import RecordLog, records_by_key


def _rec(policy: str, decision: str, **kw) -> dict:
    return {"policy": policy, "setting": "1024", "decision_id": decision, "fingerprint": "f", **kw}


def _log_with_torn_tail(tmp_path):
    path = tmp_path / "records.jsonl"
    whole = [_rec("window", "d0"), _rec("damc", "d0"), _rec("damc", "d1", failed=True)]
    path.write_text("".join(json.dumps(r) + "\n" for r in whole) + json.dumps(_rec("rrf", "d0"))[:25])
    return path


def test_the_writer_drops_a_torn_last_line_and_appends_on_a_line_of_its_own(tmp_path):
    path = _log_with_torn_tail(tmp_path)
    log = RecordLog(path)
    assert sorted(log.records) == ["damc@1024|d0", "damc@1024|d1", "window@1024|d0"]
    assert not log.done("rrf", "1024", "d0", "f")            # the torn record is redone
    assert log.done("damc", "1024", "d0", "f") and not log.done("damc", "1024", "d0", "g")
    assert log.done("damc", "1024", "d1", "f") and not log.done("damc", "1024", "d1", "f", retry_failed=True)
    log.append(_rec("rrf", "d0"))
    lines = path.read_text().splitlines()
    assert len(lines) == 4 and [json.loads(x)["policy"] for x in lines] == ["window", "damc", "damc", "rrf"]
    assert sorted(RecordLog(path).records) == ["damc@1024|d0", "damc@1024|d1", "rrf@1024|d0", "window@1024|d0"]


def test_a_reader_skips_a_torn_last_line_without_touching_the_file(tmp_path):
    """The torn line may be a record a running harness is writing now: a report or merge must not cut it."""
    path = _log_with_torn_tail(tmp_path)
    before = path.read_bytes()
    got = records_by_key(tmp_path)
    assert sorted(got) == [("damc@1024", "d0"), ("window@1024", "d0")]   # failed records left out too
    assert path.read_bytes() == before


def test_a_later_record_of_the_same_unit_replaces_the_earlier(tmp_path):
    path = tmp_path / "records.jsonl"
    path.write_text(json.dumps(_rec("damc", "d0", failed=True, fingerprint="old")) + "\n"
                    + json.dumps(_rec("damc", "d0", correct=True)) + "\n")
    assert records_by_key(tmp_path)[("damc@1024", "d0")]["correct"] is True
    assert RecordLog(path).done("damc", "1024", "d0", "f")
