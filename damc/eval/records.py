"""Resumable evaluation records: an fsync'd JSONL log keyed by (policy, setting, decision), and the fingerprints
that make a changed setting redo its records instead of silently reusing them (see `damc.eval.harness`)."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

# An out_dir's settings and provenance (the resolved config, decision LLM and its setup, data and scorer digests,
# hardware), written as a run starts: a run stopped before results.json still says what made its records.
RUN_CONFIG = "run_config.json"


class RecordLog:
    """Append-only JSONL of per-decision records, fsync'd per record. On reopen, records are indexed by
    (policy, setting, decision); `done` also requires the record's fingerprint to match the unit's.

    A torn last line (a kill in the middle of an append) is dropped; the writer (`repair=True`, the harness) also cuts
    it from the file so its next append starts on a line of its own. A reader (`repair=False`: reports, merges) never
    writes: the line may be a record a running harness is appending right now."""

    def __init__(self, path: Path, *, repair: bool = True):
        self.path = path
        self.records: dict[str, dict[str, Any]] = {}
        if not path.exists():
            return
        raw = path.read_bytes()
        if raw and not raw.endswith(b"\n"):
            raw = raw[: raw.rfind(b"\n") + 1]  # that record is redone by the next run
            if repair:
                with path.open("r+b") as fh:
                    fh.truncate(len(raw))
        for n, line in enumerate(raw.decode("utf-8").splitlines(), 1):
            try:
                r = json.loads(line)
                self.records[self.key(r["policy"], r["setting"], r["decision_id"])] = r
            except (json.JSONDecodeError, KeyError, TypeError):
                logger.warning("%s:%d: skipping an unreadable record (it is redone)", path, n)

    @staticmethod
    def key(policy: str, setting: str, decision_id: str) -> str:
        return f"{policy}@{setting}|{decision_id}"

    def done(self, policy: str, setting: str, decision_id: str, fingerprint: str, retry_failed: bool = False) -> bool:
        r = self.records.get(self.key(policy, setting, decision_id))
        return (r is not None and r.get("fingerprint") == fingerprint and not (retry_failed and r.get("failed")))

    def append(self, record: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(record, ensure_ascii=False) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        self.records[self.key(record["policy"], record["setting"], record["decision_id"])] = record


def records_by_key(out_dir: str | os.PathLike) -> dict[tuple[str, str], dict[str, Any]]:
    """(policy@setting, decision_id) → the successful records of a harness run's `records.jsonl` (torn lines and
    repeats handled by `RecordLog`, the file left as it is): what the paired A/B scripts compare."""
    rows = RecordLog(Path(out_dir) / "records.jsonl", repair=False).records.values()
    return {(r["policy"] + "@" + r["setting"], r["decision_id"]): r for r in rows if not r.get("failed")}


def file_digest(path: str | os.PathLike | None) -> str | None:
    """SHA-256 of a file, or of a directory's files (names and contents, sorted); None for no path."""
    if not path:
        return None
    p = Path(path)
    files = [p] if p.is_file() else sorted(f for f in p.rglob("*") if f.is_file() and not f.name.startswith("."))
    h = hashlib.sha256()
    for f in files:
        h.update(str(f.relative_to(p) if p.is_dir() else f.name).encode())
        with f.open("rb") as fh:
            while block := fh.read(1 << 20):
                h.update(block)
    return h.hexdigest()


def fingerprints(cfg: Any, options: dict[str, dict[str, Any]]) -> dict[str, str]:
    """Per policy: a hash of everything its records depend on (see the module docstring). Not the sample size
    (`max_decisions`): a decision's record does not depend on which other decisions were sampled (its distractors
    are seeded by episode, index and `seed`), so a larger sample reuses the decisions already recorded."""
    from omegaconf import OmegaConf

    from damc.configs import EVALUATE_MEMORY_KEYS, memory_fingerprint

    plain = OmegaConf.to_container(cfg, resolve=True)
    shared = {"data": file_digest(cfg.data.path), "tool_calls_only": plain["data"].get("tool_calls_only"),
              "filters": plain["filters"], "seed": plain["seed"],
              "n_distractors": plain["n_distractors"], "llm": plain["llm"],
              "memory": memory_fingerprint(plain.get("memory"), EVALUATE_MEMORY_KEYS),
              "exact_match": plain["exact_match"]}
    if not plain.get("score", True):
        shared["score"] = False   # selection-only records carry no accuracy: never reused by a scoring run
    out = {}
    for name, opts in options.items():
        assets = {k: file_digest(v) for k, v in opts.items() if k in ("scorer", "labels") and v}
        blob = json.dumps({"shared": shared, "policy": opts, "assets": assets}, sort_keys=True, default=str)
        out[name] = hashlib.sha256(blob.encode()).hexdigest()[:16]
    return out
