"""Benchmark how the ONNX encoder and the card scorer cut their inputs into batches, side by side in one run:

    python scripts/bench_batching.py                                   # the sample episodes in data/samples/
    python scripts/bench_batching.py --episodes SPLIT.jsonl --rounds 2

* `size`    — the cut before 2026-12-07: inputs sorted longest first, cut every `batch_size` inputs or when the
              next batch would pass the padded-token cap (4,096 for the encoder, 1,024 for the scorer); a short
              text batched behind a long one is padded to the long one's length;
* `padding` — `damc.runtime.encoder.token_batches` (what the encoder and the scorer use now): the cut that
              minimises padded tokens + a pass's fixed cost, under the same caps.

Work measured, as the label runs and the runtime do it: **encoder** — each episode's card documents and decision
queries embedded in one call (a label run's `prefetch`); **scorer** — the default scorer shipped in the package
(`damc/assets/scorer`, int8 ONNX) scores each decision's query against its (up to) `--cards` most recent earlier
cards (a runtime decision's candidate set is about that size). Each round times both cuts one after the other
(best round reported); the outputs of the two cuts are compared (largest absolute difference), and an encoder
pass's fixed cost is measured (what `BATCH_OVERHEAD_TOKENS` stands for). Prints a table and one JSON object.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SAMPLES = ("synthetic_sample.jsonl", "tau2_retail_sample.jsonl", "bfcl_sample.jsonl")


def size_batches(lengths_desc: Sequence[int], batch_size: int, max_batch_tokens: int | None,
                 overhead_tokens: int = 0) -> list[slice]:
    """The cut before 2026-12-07 (the baseline): by count and padded-token cap only."""
    out, i = [], 0
    while i < len(lengths_desc):
        n = batch_size
        if max_batch_tokens:
            n = max(1, min(n, max_batch_tokens // max(1, lengths_desc[i])))
        out.append(slice(i, i + n))
        i += n
    return out


class Counter:
    """Wraps a cut function and counts the real and padded tokens of the batches it makes."""

    def __init__(self, cut: Any) -> None:
        self.cut, self.real, self.padded, self.batches = cut, 0, 0, 0

    def __call__(self, lengths_desc: Sequence[int], *args: Any, **kwargs: Any) -> list[slice]:
        out = self.cut(lengths_desc, *args, **kwargs)
        self.real += int(sum(lengths_desc))
        self.padded += sum((s.stop - s.start) * lengths_desc[s.start] for s in out)
        self.batches += len(out)
        return out


@contextlib.contextmanager
def cut_with(cut: Any) -> Iterator[Counter]:
    """Make the encoder and the scorer batch with `cut` (restored on exit)."""
    import damc.runtime.encoder as enc
    import damc.runtime.scorer as sc

    counter, saved = Counter(cut), (enc.token_batches, sc.token_batches)
    enc.token_batches = sc.token_batches = counter
    try:
        yield counter
    finally:
        enc.token_batches, sc.token_batches = saved


def workload(paths: list[Path], n_cards: int) -> tuple[list[list[str]], list[tuple[str, list[str]]]]:
    """Per episode, its card documents and decision queries; per decision, its query and recent cards' renderings."""
    from damc.cards import cards_before, encode_episode
    from damc.episodes import decision_points, load_episodes
    from damc.query import card_document, render_card, render_decision_query

    texts, pairs = [], []
    for path in paths:
        for ep in load_episodes(path):
            cards = encode_episode(ep)
            queries = []
            for dp in decision_points(ep):
                earlier = cards_before(cards, dp.current_turn_start)[-n_cards:]
                if not earlier:
                    continue
                q = render_decision_query(dp.context, ep.tools)
                queries.append(q)
                pairs.append((q, [render_card(c) for c in earlier]))
            texts.append([card_document(c) for c in cards] + queries)
    return texts, pairs


def pass_overhead(encoder: Any, repeats: int = 20) -> dict[str, float]:
    """A forward pass's fixed cost: the median time of one 4-token and one 64-token input, extrapolated to 0 tokens
    (what `damc.runtime.encoder.BATCH_OVERHEAD_TOKENS` stands for), in ms and in tokens' worth."""
    from damc.runtime.encoder import pad_batch

    times = {}
    for n in (4, 64):
        feats = [{"input_ids": [101] + [2000] * (n - 2) + [102], "attention_mask": [1] * n, "token_type_ids": [0] * n}]
        batch = pad_batch(feats, 0)
        encoder._forward(batch)
        runs = []
        for _ in range(repeats):
            t = time.perf_counter()
            encoder._forward(batch)
            runs.append(time.perf_counter() - t)
        times[n] = float(np.median(runs)) * 1000
    per_token = (times[64] - times[4]) / 60
    fixed = times[4] - 4 * per_token
    return {"ms_4_tokens": round(times[4], 3), "ms_64_tokens": round(times[64], 3), "fixed_ms": round(fixed, 3),
            "fixed_tokens": round(fixed / per_token, 1)}


def run(cut: Any, encoder: Any, scorer: Any, texts: list[list[str]],
        pairs: list[tuple[str, list[str]]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with cut_with(cut) as c:
        t = time.perf_counter()
        emb = [encoder.encode(ep) for ep in texts]
        out["encoder_s"], out["encoder_real"], out["encoder_padded"] = time.perf_counter() - t, c.real, c.padded
        out["encoder_batches"], out["encoder_out"] = c.batches, emb
    with cut_with(cut) as c:
        t = time.perf_counter()
        scores = [scorer.score(q, cards) for q, cards in pairs]
        out["scorer_s"], out["scorer_real"], out["scorer_padded"] = time.perf_counter() - t, c.real, c.padded
        out["scorer_batches"], out["scorer_out"] = c.batches, scores
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--episodes", type=Path, nargs="*", default=None, help="episode files (default: the samples)")
    ap.add_argument("--cards", type=int, default=24, help="most recent earlier cards the scorer reads per decision")
    ap.add_argument("--rounds", type=int, default=2, help="timed rounds, each running both cuts (best reported)")
    args = ap.parse_args(argv)
    paths = args.episodes or [ROOT / "data" / "samples" / s for s in SAMPLES]
    for p in paths:
        if not p.exists():
            ap.error(f"--episodes {p}: no such file (make one with scripts/make_data.py)")

    from damc.runtime.default_scorer import default_scorer_dir
    from damc.runtime.encoder import OnnxEncoder, available_cpus, token_batches
    from damc.runtime.scorer import CardScorer

    encoder, scorer = OnnxEncoder.packaged(), CardScorer.from_pretrained(default_scorer_dir())
    overhead = pass_overhead(encoder)
    texts, pairs = workload(paths, args.cards)
    run(token_batches, encoder, scorer, texts[:1], pairs[:2])      # warm-up
    cuts = {"size": size_batches, "padding": token_batches}
    best: dict[str, dict[str, Any]] = {}
    for _ in range(args.rounds):
        for name, cut in cuts.items():
            r = run(cut, encoder, scorer, texts, pairs)
            for part in ("encoder", "scorer"):
                if r[f"{part}_s"] < best.setdefault(name, {}).get(f"{part}_s", float("inf")):
                    best[name].update({k: v for k, v in r.items() if k.startswith(part)})
    emb_diff, score_diff = (max(float(np.abs(a - b).max()) for a, b in zip(best["size"][k], best["padding"][k]))
                            for k in ("encoder_out", "scorer_out"))
    rows = {}
    for name, r in best.items():
        rows[name] = {p: {"wall_s": round(r[f"{p}_s"], 2), "batches": r[f"{p}_batches"],
                          "real_tokens": r[f"{p}_real"], "padded_tokens": r[f"{p}_padded"],
                          "padding_share": round(1 - r[f"{p}_real"] / max(1, r[f"{p}_padded"]), 4),
                          "real_tokens_per_s": round(r[f"{p}_real"] / r[f"{p}_s"], 1)}
                      for p in ("encoder", "scorer")}
    speedup = {p: round(rows["size"][p]["wall_s"] / rows["padding"][p]["wall_s"], 2) for p in ("encoder", "scorer")}
    result = {"episodes": [str(p) for p in paths], "texts": sum(map(len, texts)), "decisions": len(pairs),
              "cards_per_decision": args.cards, "threads": available_cpus(), "rounds": args.rounds, "cuts": rows,
              "speedup": speedup, "max_abs_diff": {"embedding": emb_diff, "score": score_diff},
              "encoder_pass_overhead": overhead}
    print(f"{result['texts']} encoder texts in {len(texts)} episodes; {len(pairs)} decisions × ≤ {args.cards} "
          f"cards for the scorer; {result['threads']} threads; best of {args.rounds} rounds")
    print(f"{'part':<8} {'cut':<8} {'wall s':>8} {'batches':>8} {'padding':>8} {'real tok/s':>11} {'speed-up':>9}")
    for p in ("encoder", "scorer"):
        for name in cuts:
            r = rows[name][p]
            sp = f"{rows['size'][p]['wall_s'] / r['wall_s']:.2f}x"
            print(f"{p:<8} {name:<8} {r['wall_s']:>8.2f} {r['batches']:>8} {r['padding_share']:>8.1%} "
                  f"{r['real_tokens_per_s']:>11.1f} {sp:>9}")
    print(f"largest difference between the cuts: embedding {emb_diff:.2e}, score {score_diff:.2e}")
    print(f"an encoder pass's fixed cost: {overhead['fixed_ms']:.2f} ms = {overhead['fixed_tokens']:.1f} tokens' worth "
          f"(4 tokens {overhead['ms_4_tokens']:.2f} ms, 64 tokens {overhead['ms_64_tokens']:.2f} ms)")
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
