"""The last stage of `make reproduce PROFILE=default_scorer`: the study's exported student into the package.

    runs/<profile>/scorer/ (export) ─► ship.out (damc/assets/scorer/):
        model_int8.onnx, tokenizer.json, tokenizer_config.json, combiner.json   the student
        encoder/{model_int8.onnx, tokenizer.json, tokenizer_config.json, damc_encoder.json}
        tokens/<ship.token_counter>/{tokenizer.json, tokenizer_config.json, chat_template.jinja}
        damc_scorer.json   + provenance (profile, data and label fingerprints, the stage-fingerprint chain),
                           evaluation (key hit at `ship.setting` on every dev split, per policy),
                           checksums (SHA-256 of every other file: `damc.assets.verify_checksums`)

Only what the light runtime reads is copied (no `vocab.txt`, `special_tokens_map.json`: `tokenizer.json` holds
them), and `tokenizer.json` without indentation (checked to encode alike). The directory is written beside the target and swapped in whole; the copy is loaded back as the runtime
loads it and its token counter checked against the source's counts before the swap.

Fingerprints: a data split is the SHA-256 of its JSONL file (`make_data` writes byte-identical files for a seed);
a label set is the SHA-256 of its rows in a canonical order and spelling (`label_fingerprint`: shard boundaries and
parquet encodings do not count); `export_fingerprint` is the stage-fingerprint chain of data → labels → train →
export (`damc.pipeline.stages.fingerprint`: every composed stage config and the render version), recomputed
without running anything by `Study(cfg, dry_run=True)` — tests/integration/test_default_scorer.py compares both.

Example:
    $ python scripts/reproduce.py experiment=default_scorer
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

SCORER_FILES = ("model_int8.onnx", "tokenizer.json", "tokenizer_config.json", "combiner.json")
ENCODER_FILES = ("model_int8.onnx", "tokenizer.json", "tokenizer_config.json", "damc_encoder.json")
KEY_METRICS = ("key_hit", "key_recall", "candidate_recall", "confuser_rate", "all_values", "prompt_confuser_rate",
               "prompt_tokens", "n_decisions", "n_key_decisions")
PROBE_TEXTS = ("Where is order #W2378156? It never arrived.", "héllo wörld\n\n\ttabs", "日本語 123456789",
               '{"order_id": "#W2378156", "item_ids": ["1008292230"]}')


def data_fingerprints(study: Any) -> dict[str, dict[str, str]]:
    """`{dataset: {split: SHA-256 of its JSONL}}` of every dataset of the profile."""
    from damc.assets import sha256_file

    out = {}
    for name in study.datasets:
        d = study.data_dir(name)
        out[name] = {p.stem: sha256_file(p) for p in sorted(d.glob("*.jsonl"))}
    return out


def label_fingerprint(path: str | os.PathLike) -> dict[str, Any]:
    """`{"sha256", "rows", "decisions", "estimators"}` of a label set: the SHA-256 of its rows sorted by (decision,
    card) with deltas rounded to 1e-6 — the same for the same labels however they were sharded."""
    from damc.labels import load_labels

    ds = load_labels(path)
    cols = [c for c in ("decision_id", "card_id", "decision_text", "card_text", "delta", "estimator", "is_key")
            if c in ds.column_names]
    rows = sorted(zip(*(ds[c] for c in cols)), key=lambda r: (str(r[0]), str(r[1])))
    digest = hashlib.sha256()
    for r in rows:
        rec = {c: (round(float(v), 6) if c == "delta" and v is not None else v) for c, v in zip(cols, r)}
        digest.update(json.dumps(rec, sort_keys=True, ensure_ascii=False).encode() + b"\n")
    return {"sha256": digest.hexdigest(), "rows": len(rows), "decisions": len({r[0] for r in rows}),
            "estimators": sorted({str(e) for e in ds["estimator"]}) if "estimator" in ds.column_names else []}


def export_fingerprint(cfg: Any) -> str:
    """The stage-fingerprint chain data → labels → train → export of a study profile, computed without running a
    stage (the chain a finished `make reproduce` exported its student under)."""
    from damc.pipeline.study import Study

    study = Study(cfg, dry_run=True)
    study.data()
    study.train_export(study.labels())
    return study.exported


def dev_figures(evals: dict[str, Any], setting: str) -> dict[str, dict[str, dict[str, Any]]]:
    """`{dataset: {policy: {key_hit, ...}}}` at `setting` (e.g. `1024/k4`) of each dev evaluation."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for title, e in evals.items():
        name = title.split(" · ")[0]
        pol = e["results"]["policies"]
        out[name] = {p["policy"]: {m: p.get(m) for m in KEY_METRICS if m in p}
                     for key, p in pol.items() if p.get("setting") == setting}
    return out


def figures_table(figures: dict[str, dict[str, dict[str, Any]]], setting: str) -> str:
    """Markdown: key hit (candidate recall in brackets) per dev split and policy at `setting`."""
    policies = list(dict.fromkeys(p for d in figures.values() for p in d))
    lines = [f"| dev split ({setting}) | " + " | ".join(f"`{p}`" for p in policies) + " | decisions with key cards |",
             "|---|" + "---:|" * (len(policies) + 1)]
    for name, d in figures.items():
        cells = [f"{d[p]['key_hit']:.3f} ({d[p]['candidate_recall']:.2f})" if p in d and d[p].get("key_hit") is not None
                 and d[p].get("candidate_recall") is not None else "–" for p in policies]
        n = next((d[p].get("n_key_decisions") for p in policies if p in d), "–")
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {n} |")
    return "\n".join(lines) + "\n"


def _copy(src: Path, dst: Path, names: tuple[str, ...]) -> None:
    """Copy the named files; `tokenizer.json` is rewritten without indentation (the same JSON, a third smaller)."""
    dst.mkdir(parents=True, exist_ok=True)
    for name in names:
        if not (src / name).exists():
            continue
        if name == "tokenizer.json":
            data = json.loads((src / name).read_text(encoding="utf-8"))
            (dst / name).write_text(json.dumps(data, ensure_ascii=False, separators=(",", ":")), encoding="utf-8")
        else:
            shutil.copy2(src / name, dst / name)


def _same_tokens(a: Path, b: Path) -> bool:
    """The tokenizer files of `a` and `b` encode the probe pairs alike (ids, masks, type ids)."""
    from damc.tokens import PairTokenizer

    pairs = [(t, u) for t in PROBE_TEXTS for u in PROBE_TEXTS[:2]]
    return PairTokenizer.from_dir(a, 128).encode_pairs(pairs) == PairTokenizer.from_dir(b, 128).encode_pairs(pairs)


def ship(study: Any, evals: dict[str, Any]) -> dict[str, Any]:
    """Write `study.cfg.ship.out` from the study's exported scorer (see module docstring); returns
    `{"out", "size_mb", "files", "summary"}`.

    Raises:
        FileNotFoundError: the export is missing (`study.out/scorer`).
        RuntimeError: the copy does not load, or its token counter disagrees with the source's.
    """
    from damc.assets import TOKENS_DIR, file_checksums
    from damc.runtime.encoder import ENCODER_DIR
    from damc.runtime.scorer import CardScorer, ScorerMetadata
    from damc.tokens import TokenCounter, load_token_counter

    cfg, ship_cfg = study.cfg, study.cfg.ship
    src, dst = study.out / "scorer", Path(str(ship_cfg.out))
    if not (src / "model_int8.onnx").exists() or not (src / ENCODER_DIR).is_dir():
        raise FileNotFoundError(f"{src} lacks model_int8.onnx or {ENCODER_DIR}/: export with onnx=true int8=true "
                                f"encoder=minilm-l6 first")
    chain = export_fingerprint(cfg)
    if study.exported and chain != study.exported:
        raise RuntimeError(f"the dry-run fingerprint chain {chain} differs from the one the student was exported "
                           f"under ({study.exported}): damc.pipeline.study.Study(dry_run=True) is out of step")
    tmp = dst.parent / f".{dst.name}.tmp{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        _copy(src, tmp, SCORER_FILES)
        _copy(src / ENCODER_DIR, tmp / ENCODER_DIR, ENCODER_FILES)
        for a, b in ((src, tmp), (src / ENCODER_DIR, tmp / ENCODER_DIR)):
            if not _same_tokens(a, b):
                raise RuntimeError(f"the shipped tokenizer in {b} encodes differently from {a}")
        counter = load_token_counter(str(ship_cfg.token_counter))
        shipped_tok = TokenCounter.from_dir(counter.save(tmp / TOKENS_DIR / str(ship_cfg.token_counter)))
        if [counter.count(t) for t in PROBE_TEXTS] != [shipped_tok.count(t) for t in PROBE_TEXTS]:
            raise RuntimeError(f"the shipped tokenizer of {ship_cfg.token_counter} counts differently from "
                               f"{counter.name}")
        labels = {n: label_fingerprint(study.out / "labels" / n) for n, ds in study.datasets.items()
                  if ds.get("label") is not None}
        figures = dev_figures(evals, str(ship_cfg.setting))
        meta = ScorerMetadata.load(src)
        meta.provenance = {
            "profile": str(ship_cfg.get("profile") or "default_scorer"),
            "command": f"make reproduce PROFILE={ship_cfg.get('profile') or 'default_scorer'}",
            "datasets": {n: {"make": [str(o) for o in ds.make],
                             "label": None if ds.get("label") is None else [str(o) for o in ds.label]}
                         for n, ds in study.datasets.items()},
            "label_overrides": [str(o) for o in cfg.label.overrides],
            "train_overrides": [str(o) for o in cfg.train.overrides],
            "data": data_fingerprints(study), "labels": labels,
            "export_fingerprint": chain,
            "token_counter": {"name": str(ship_cfg.token_counter), "source": counter.name},
            "built": time.strftime("%Y-%m-%d")}
        meta.evaluation = {"setting": str(ship_cfg.setting), "split": "dev", "score": "selection only (score=false)",
                           "dev": figures}
        meta.checksums = file_checksums(tmp)
        meta.save(tmp)
        loaded = CardScorer.from_pretrained(tmp, backend="onnx", onnx_file="model_int8.onnx")
        if loaded.score("user: where is order 88412?", ["[tool_result] get_order(order_id=88412) -> shipped"]).shape != (1,):
            raise RuntimeError(f"{tmp}: the shipped scorer does not score")
        if dst.exists():
            shutil.rmtree(dst)
        dst.parent.mkdir(parents=True, exist_ok=True)
        os.replace(tmp, dst)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    files = sorted(p.relative_to(dst).as_posix() for p in dst.rglob("*") if p.is_file())
    size = sum((dst / f).stat().st_size for f in files) / 1e6
    summary = (f"## Shipped scorer\n\n`{dst}`: {len(files)} files, {size:.1f} MB (checksums in damc_scorer.json).\n\n"
               f"Key hit at `{ship_cfg.setting}` on the dev splits (selection only):\n\n"
               + figures_table(figures, str(ship_cfg.setting)))
    print(summary, flush=True)
    return {"out": str(dst), "size_mb": round(size, 1), "files": files, "summary": summary}
