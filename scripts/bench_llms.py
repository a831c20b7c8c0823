"""Benchmark: forward time of the registry's decision/teacher LLMs, measured side by side in one run.

Every model is loaded once (dtype `auto`: bf16 on AMX/AVX512-BF16 CPUs and GPUs, fp32 otherwise), then the
rounds interleave the models (round r times every model at every length), so load from other jobs on a shared
box hits all models alike and the ratios hold even when the absolute times drift. One forward pass over a
prompt of exactly N tokens (each model's own tokenizer, text from the repository's docs), no KV cache kept.
Prints a Markdown table: median seconds per pass, ms per 1k tokens, and the ratio to the first model.

    python scripts/bench_llms.py [--models smollm2-135m qwen2.5-coder-0.5b qwen2.5-coder-1.5b]
        [--lengths 1024 3072] [--rounds 2] [--dtype auto] [--json OUT.json]
"""

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def corpus() -> str:
    """Ordinary English + code text (the repository's docs), long enough for a few thousand tokens."""
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    return "\n\n".join(f.read_text() for f in files if f.exists())


def prompt_ids(tok, text: str, n: int):
    import torch

    ids = tok(text, add_special_tokens=False).input_ids
    while len(ids) < n:
        ids = ids + ids
    return torch.tensor([ids[:n]])


def time_forward(model, ids) -> float:
    import torch

    t0 = time.perf_counter()
    with torch.inference_mode():
        model(ids.to(model.device), use_cache=False)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["smollm2-135m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"])
    ap.add_argument("--lengths", nargs="+", type=int, default=[1024, 3072], help="prompt lengths in tokens")
    ap.add_argument("--rounds", type=int, default=2, help="timed passes per model and length (median kept)")
    ap.add_argument("--dtype", default="auto", help="auto | float32 | bfloat16")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--json", default=None, help="write the raw timings here")
    a = ap.parse_args()

    import torch

    from damc.cli import quiet_third_party
    from damc.llm import cpu_supports_bf16, load_causal_lm

    quiet_third_party()
    text = corpus()
    loaded, load_s = {}, {}
    for name in a.models:
        t0 = time.perf_counter()
        model, tok = load_causal_lm(name, dtype=a.dtype, device=a.device)
        load_s[name] = time.perf_counter() - t0
        loaded[name] = (model, {n: prompt_ids(tok, text, n) for n in a.lengths})
        time_forward(model, loaded[name][1][min(a.lengths)][:, :64])  # warm-up (allocator, kernels)
    times: dict[str, dict[int, list[float]]] = {m: {n: [] for n in a.lengths} for m in a.models}
    for r in range(a.rounds):
        for n in a.lengths:
            for name, (model, ids) in loaded.items():
                times[name][n].append(time_forward(model, ids[n]))
                print(f"round {r + 1} {name} {n} tokens: {times[name][n][-1]:.2f} s", flush=True)
    any_model = next(iter(loaded.values()))[0]
    print(f"\ndtype {any_model.dtype}, device {any_model.device}, torch threads {torch.get_num_threads()} "
          f"(OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '-')}), CPU bf16 units: {cpu_supports_bf16()}, "
          f"{platform.processor() or platform.machine()}, median of {a.rounds} interleaved rounds\n")
    base = a.models[0]
    head = " | ".join(f"{n} tok: s / pass | ms / 1k tok | × {base}" for n in a.lengths)
    print(f"| model | params | {head} |")
    print("|---|---:|" + "---:|---:|---:|" * len(a.lengths))
    for name in a.models:
        params = sum(p.numel() for p in loaded[name][0].parameters())
        cells = []
        for n in a.lengths:
            med = statistics.median(times[name][n])
            cells += [f"{med:.2f}", f"{1000 * med / (n / 1000):.0f}",
                      f"{med / statistics.median(times[base][n]):.1f}"]
        print(f"| {name} | {params / 1e6:.0f} M | " + " | ".join(cells) + " |")
    if a.json:
        Path(a.json).write_text(json.dumps({"times_s": times, "load_s": load_s, "dtype": str(any_model.dtype),
                                            "threads": torch.get_num_threads(), "rounds": a.rounds}, indent=2))


if __name__ == "__main__":
    main()
