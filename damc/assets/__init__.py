"""Files shipped inside the package: the default scorer directory (`damc/assets/scorer/`).

    scorer/
      model_int8.onnx, tokenizer.json, tokenizer_config.json   the student (3-layer MiniLM cross-encoder, int8 ONNX)
      combiner.json, damc_scorer.json                          its learned combiner; metadata, threshold, provenance
      encoder/                                                 the retrieval encoder (all-MiniLM-L6-v2, int8 ONNX)
      tokens/smollm2-135m/                                     the token counter's tokenizer (tokenizer.json + chat template)

`damc.runtime.memory.DecisionAwareMemory` values cards with it by default (`damc.runtime.default_scorer`); a light
install embeds with `encoder/` and counts tokens with `tokens/<name>/` when the model packages of `damc.models` are
not installed. `make reproduce PROFILE=default_scorer` rebuilds the directory (`damc.pipeline.ship`), recording the
SHA-256 of every other file and the data / label fingerprints in `damc_scorer.json`; docs/scorer.md is its model card.

`DAMC_SCORER_DIR` points the runtime at another directory (an empty value or `none`: no shipped scorer at all).

Example:
    >>> shipped_dir() / "damc_scorer.json"
    >>> verify_checksums(shipped_dir(), ScorerMetadata.load(shipped_dir()).checksums)
    []
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

SCORER_DIR = Path(__file__).resolve().parent / "scorer"
ENV_VAR = "DAMC_SCORER_DIR"
TOKENS_DIR = "tokens"            # tokens/<registry name>/: a token counter's tokenizer files
UNCHECKED = ("damc_scorer.json",)  # the file that records the checksums is not among them


def shipped_dir() -> Path | None:
    """The shipped scorer directory (`$DAMC_SCORER_DIR` when set; empty or `none` there: None), present or not."""
    env = os.environ.get(ENV_VAR)
    if env is None:
        return SCORER_DIR
    if env.strip().lower() in ("", "none"):
        return None
    return Path(env).expanduser()


def sha256_file(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def file_checksums(root: str | os.PathLike) -> dict[str, str]:
    """`{relative posix path: SHA-256}` of every file under `root` except `damc_scorer.json` (sorted)."""
    root = Path(root)
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.relative_to(root).as_posix() not in UNCHECKED)
    return {p.relative_to(root).as_posix(): sha256_file(p) for p in files}


def verify_checksums(root: str | os.PathLike, recorded: dict[str, str] | None) -> list[str]:
    """What differs between the files under `root` and the `recorded` checksums: one line per missing, extra or
    changed file (empty: they match). No recorded checksums at all is one line too."""
    if not recorded:
        return [f"{root}: damc_scorer.json records no checksums"]
    found = file_checksums(root)
    out = [f"{name}: missing" for name in sorted(set(recorded) - set(found))]
    out += [f"{name}: not in the recorded checksums" for name in sorted(set(found) - set(recorded))]
    out += [f"{name}: SHA-256 {found[name]} != recorded {recorded[name]}"
            for name in sorted(set(found) & set(recorded)) if found[name] != recorded[name]]
    return out


__all__ = ["ENV_VAR", "SCORER_DIR", "TOKENS_DIR", "file_checksums", "sha256_file", "shipped_dir", "verify_checksums"]
