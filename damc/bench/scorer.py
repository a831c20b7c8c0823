"""Scorer benchmark: throughput per precision/backend, per-decision latency and cost vs. teacher LOO.

Everything is measured in one process, one after the other, so the ratios are comparable:

* pairs/second at exactly 64 and 128 tokens per pair for torch fp32, torch bf16, ONNX fp32 and ONNX int8
  (dynamic quantisation, built on the fly when the scorer dir has no `model_int8.onnx`);
* per-decision Spearman vs. the teacher for each path on a label set (int8 is recommended only when it
  stays within 0.02 of fp32);
* wall time to score one real decision's 50 candidate cards (natural lengths);
* wall time of the teacher's leave-one-out for that same decision (`damc.teacher.estimators.LeaveOneOut`
  when present, else the teacher backend's own batched, prefix-reusing forward passes over the full
  context and the 50 leave-one-out contexts), and the ratio.

Example:
    $ python scripts/bench_scorer.py --scorer artifacts/scorer --labels data/samples/scorer_labels_sample.jsonl
"""

from __future__ import annotations

import logging
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

logger = logging.getLogger(__name__)


def _time(fn: Callable[[], Any], repeats: int = 3) -> float:
    """Median wall time of `fn()` over `repeats` runs, after one warm-up run."""
    fn()
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


def fixed_length_pairs(scorer: Any, n_tokens: int, n_pairs: int, seed: int = 0) -> list[tuple[str, str]]:
    """`n_pairs` (query, card) pairs that tokenize to exactly `n_tokens` after truncation."""
    rng = np.random.default_rng(seed)
    words = ("order refund ticket 88412 status error shipped address email replacement escalate "
             "customer invoice payment card delivered warehouse courier tracking damaged").split()
    pairs = []
    for _ in range(n_pairs):
        q = "user: " + " ".join(rng.choice(words, 60))
        c = "[tool_result] get_order(order_id=88412) -> " + " ".join(rng.choice(words, 200))
        pairs.append((q, c))
    lens = {len(f["input_ids"]) for f in _with_max_length(scorer, n_tokens, lambda: scorer._encode(pairs[:8]))}
    assert lens == {n_tokens}, lens
    return pairs


def _with_max_length(scorer: Any, n: int, fn: Callable[[], Any]) -> Any:
    old = scorer.max_length
    scorer.max_length = n
    try:
        return fn()
    finally:
        scorer.max_length = old


def load_paths(scorer_dir: Path, int8: bool = True, threads: int | None = None) -> dict[str, Any]:
    """The scorer under every available path: torch fp32/bf16, onnx fp32, onnx int8."""
    from damc.runtime.scorer import ONNX_FILE, ONNX_INT8_FILE, CardScorer
    from damc.scorer.export import export_onnx, quantize_int8

    paths = {"torch fp32": CardScorer.from_pretrained(scorer_dir, dtype="float32", num_threads=threads),
             "torch bf16": CardScorer.from_pretrained(scorer_dir, dtype="bfloat16", num_threads=threads)}
    onnx_dir = scorer_dir
    if not (scorer_dir / ONNX_FILE).exists():
        onnx_dir = Path(tempfile.mkdtemp(prefix="damc-bench-"))
        paths["torch fp32"].save_pretrained(onnx_dir)
        export_onnx(paths["torch fp32"].model, paths["torch fp32"].tokenizer, onnx_dir / ONNX_FILE)
    paths["onnx fp32"] = CardScorer.from_pretrained(onnx_dir, backend="onnx", num_threads=threads)
    if int8:
        if not (onnx_dir / ONNX_INT8_FILE).exists():
            if onnx_dir == scorer_dir:  # never write into the user's scorer dir
                tmp = Path(tempfile.mkdtemp(prefix="damc-bench-"))
                quantize_int8(scorer_dir / ONNX_FILE, tmp / ONNX_INT8_FILE)
                paths["torch fp32"].save_pretrained(tmp)
                onnx_dir = tmp
            else:
                quantize_int8(onnx_dir / ONNX_FILE, onnx_dir / ONNX_INT8_FILE)
        paths["onnx int8"] = CardScorer.from_pretrained(onnx_dir, backend="onnx", onnx_file=ONNX_INT8_FILE,
                                                        num_threads=threads)
    return paths


def fidelity_by_path(paths: dict[str, Any], labels: str, max_decisions: int = 60) -> dict[str, float]:
    """Mean per-decision Spearman vs. the teacher for each path, on the same decisions."""
    from damc.labels import group_decisions, load_labels
    from damc.ranking import spearman

    decisions = group_decisions(load_labels(labels))[:max_decisions]
    out = {}
    for name, s in paths.items():
        rhos = [spearman(s.score(d.query, d.docs), d.deltas) for d in decisions]
        out[name] = float(np.nanmean(rhos))
    return out


def big_decision(n_cards: int = 50, seed: int = 3) -> dict[str, Any]:
    """A synthetic decision with at least `n_cards` candidate cards: its teacher contexts and scorer texts."""
    from damc.cards import cards_before, encode_episode
    from damc.data.synthetic import SyntheticConfig, generate_episodes
    from damc.episodes import decision_points
    from damc.prompting import action_text, build_decision_messages, cards_to_messages
    from damc.query import render_card, render_decision_query

    cfg = SyntheticConfig(min_messages=120, max_messages=150)
    for i in range(20):
        ep = generate_episodes(1, seed=seed + i, cfg=cfg, progress=False)[0]
        cards = encode_episode(ep)
        for dp in reversed(decision_points(ep)):
            cand = cards_before(cards, dp.current_turn_start)
            if len(cand) >= n_cards and dp.gold.get("tool_calls"):
                cand = cand[-n_cards:]
                cur = ep.messages[dp.current_turn_start:dp.index]
                return {"query": render_decision_query(ep.messages[:dp.index], ep.tools), "dp": dp,
                        "cards": [render_card(c) for c in cand], "card_objects": cand, "episode": ep,
                        "current_turn": cur, "action": action_text(ep.messages[dp.index]),
                        "full": build_decision_messages(None, ep.tools, cards_to_messages(cand), cur),
                        "loo": [build_decision_messages(None, ep.tools, cards_to_messages(cand[:j] + cand[j + 1:]),
                                                        cur) for j in range(len(cand))]}
    raise RuntimeError(f"no synthetic decision with {n_cards} candidate cards")


def teacher_loo_seconds(dec: dict[str, Any], teacher_name: str = "smollm2-135m") -> tuple[float, str]:
    """Wall time of one leave-one-out labeling of `dec` with the HF teacher (after a warm-up call)."""
    from damc.teacher.backends import HFTeacher

    teacher = HFTeacher(teacher_name)
    teacher.log_prob(dec["full"][:2], dec["action"])  # warm-up: weights paged in, kernels initialised
    try:
        from damc.teacher.estimators import LeaveOneOut
    except ImportError:  # the teacher package without estimators: time its backend over the same variants
        t0 = time.perf_counter()
        teacher.log_probs([dec["full"], *dec["loo"]], dec["action"])
        return time.perf_counter() - t0, f"HFTeacher({teacher_name}).log_probs, full + 50 LOO contexts, prefix KV reuse"
    # cards capped at 128 teacher tokens so all 50 fit the teacher's window: a conservative (cheap) LOO
    est = LeaveOneOut(max_card_tokens=128)
    t0 = time.perf_counter()
    res = est.estimate(teacher, dec["dp"], dec["card_objects"])
    sec = time.perf_counter() - t0
    return sec, (f"damc.teacher.estimators.LeaveOneOut + HFTeacher({teacher_name}), prefix KV reuse, "
                 f"{res.n_forward} sequences, {res.n_forward_tokens} tokens")


def run(scorer_dir: str, labels: str | None = None, n_pairs: int = 256, batch_size: int = 64,
        teacher: str | None = "smollm2-135m", threads: int | None = None) -> dict[str, Any]:
    """Run every measurement; returns `{"throughput", "latency_50", "spearman", "teacher_loo_s", ...}`."""
    from damc.runtime.scorer import available_cpus

    scorer_dir = Path(scorer_dir)
    paths = load_paths(scorer_dir, threads=threads)
    res: dict[str, Any] = {"threads": threads or available_cpus(), "n_pairs": n_pairs, "batch_size": batch_size,
                           "throughput": {}, "latency_50_ms": {}}
    for L in (64, 128):
        pairs = fixed_length_pairs(paths["torch fp32"], L, n_pairs)
        for name, s in paths.items():
            sec = _with_max_length(s, L, lambda: _time(lambda: s.predict(pairs, batch_size=batch_size)))
            res["throughput"].setdefault(name, {})[L] = n_pairs / sec
            logger.info("%s @%d tokens: %.0f pairs/s", name, L, n_pairs / sec)
    dec = big_decision(50)
    for name, s in paths.items():
        res["latency_50_ms"][name] = 1000 * _time(lambda: s.score(dec["query"], dec["cards"]), repeats=5)
    if labels:
        res["spearman"] = fidelity_by_path(paths, labels)
    if teacher:
        res["teacher_loo_s"], res["teacher_how"] = teacher_loo_seconds(dec, teacher)
        best = min(res["latency_50_ms"].values()) / 1000
        res["loo_ratio_best"] = res["teacher_loo_s"] / best
    return res


def markdown(res: dict[str, Any]) -> str:
    """The benchmark as a Markdown table (+ a line on the teacher ratio)."""
    lines = ["| path | pairs/s @64 tok | pairs/s @128 tok | 50 cards (ms) | Spearman vs teacher | × cheaper than LOO |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for name, tp in res["throughput"].items():
        lat = res["latency_50_ms"][name]
        rho = res.get("spearman", {}).get(name)
        ratio = res["teacher_loo_s"] / (lat / 1000) if "teacher_loo_s" in res else None
        lines.append(f"| {name} | {tp[64]:.0f} | {tp[128]:.0f} | {lat:.0f} | "
                     f"{'' if rho is None else f'{rho:.3f}'} | {'' if ratio is None else f'{ratio:.0f}×'} |")
    if "teacher_loo_s" in res:
        lines.append(f"\nTeacher leave-one-out for the same 50-card decision: {res['teacher_loo_s']:.1f} s "
                     f"({res['teacher_how']}). Threads: {res['threads']}, {res['n_pairs']} pairs per throughput run, "
                     f"batch {res['batch_size']}.")
    if "spearman" in res and "onnx int8" in res["spearman"]:
        gap = res["spearman"]["onnx int8"] - res["spearman"]["torch fp32"]
        verdict = "keeps" if abs(gap) <= 0.02 else "does NOT keep"
        lines.append(f"int8 {verdict} Spearman within 0.02 of fp32 (Δ = {gap:+.3f}).")
    return "\n".join(lines)
