"""Time the one-off GGUF → Hugging Face conversion (`damc.models.resolve_model` on a registry GGUF, what the first
`make demo` or the first teacher load on a fresh machine pays) as transformers does it alone and with DAMC's
conversion memo (`damc.models._gguf_parsed_once`: the file parsed once, gguf's tensor-name map built once), side
by side in one process, each into its own empty cache; then checks that both wrote the same tensors and tokenizer:

    python scripts/bench_gguf.py                       # smollm2-135m
    python scripts/bench_gguf.py --model gemma3-270m

Imports and the file's pages are warmed before either run. Prints one line per variant, the ratio and one JSON object.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def convert(model: str, cache: str, memo: bool) -> tuple[float, Path]:
    from damc import models

    os.environ["DAMC_CACHE"] = cache
    saved = models._gguf_parsed_once
    if not memo:   # transformers alone: the memo replaced by a context that does nothing
        models._gguf_parsed_once = contextlib.nullcontext
    try:
        t0 = time.perf_counter()
        path = Path(models.resolve_model(model))
        return time.perf_counter() - t0, path
    finally:
        models._gguf_parsed_once = saved


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m", help="a registry GGUF name (damc.models.REGISTRY)")
    args = ap.parse_args(argv)
    import gguf  # noqa: F401  (imports warmed)
    import transformers  # noqa: F401
    from safetensors.numpy import load_file

    from damc import models

    gguf_file = models.packaged_path(args.model)
    with open(gguf_file, "rb") as f:   # the file's pages warmed
        while f.read(1 << 24):
            pass
    out = {"model": args.model, "file_mb": round(gguf_file.stat().st_size / 1e6, 1)}
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        out["transformers_s"], pa = convert(args.model, a, memo=False)
        out["memo_s"], pb = convert(args.model, b, memo=True)
        ta, tb = load_file(str(pa / "model.safetensors")), load_file(str(pb / "model.safetensors"))
        out["same_tensors"] = ta.keys() == tb.keys() and all((ta[k] == tb[k]).all() for k in ta)
        out["same_tokenizer"] = (pa / "tokenizer.json").read_bytes() == (pb / "tokenizer.json").read_bytes()
    out["ratio"] = round(out["transformers_s"] / out["memo_s"], 2)
    print(f"transformers alone   {out['transformers_s']:7.1f} s")
    print(f"with the memo        {out['memo_s']:7.1f} s   ({out['ratio']}x; same tensors: {out['same_tensors']}, "
          f"same tokenizer: {out['same_tokenizer']})")
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
