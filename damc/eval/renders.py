"""A/B of how kept cards are written: one template line per card vs field-level lines (`render=fields`), every
other setting equal, on the same decisions — through the harness, i.e. through `DecisionAwareMemory`.

    python scripts/compare_renders.py OUT_DIR data.path=TEST.jsonl scorer=SCORER \
        'policies=[window,similarity,damc,oracle]' budgets=[1024] 'sweep.top_k=[4]' data.tool_calls_only=true
    python scripts/compare_renders.py --table OUT_DIR1 OUT_DIR2 ...     # finished runs, one table each
    python scripts/compare_renders.py --key-cards EPISODES.jsonl ...    # the key cards' lines alone (`key_card_lines`)

One harness run with `render=[template,fields]` (resumable; records of an earlier run with the same settings —
e.g. a study's template records copied into OUT_DIR — are reused) and one table. `--table` reads any finished run,
whatever renderings it holds (`scripts/evaluate.py … 'render=[template,fields,raw]'`): per policy@setting and
rendering other than the template, accuracy with each and the paired difference render − template (cluster
bootstrap over episodes), the gold log-likelihood gain (nats per token, same bootstrap), the accuracy on the
decisions where memory matters (a key card before the current user turn), and what the prompts hold — median
tokens, `value_recall` (share of the gold's history-only values in the prompt), `all_values`, and
`prompt_confuser` (a distractor's value in the prompt text).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from damc.eval.policy_base import RENDERS
from damc.eval.records import records_by_key
from damc.ranking import paired_bootstrap

RENDER = "fields"


def _mean(xs: list[Any], nd: int = 2) -> str:
    xs = [float(x) for x in xs if x is not None]
    return f"{np.mean(xs):.{nd}f}" if xs else "–"


def _delta(a: list[float], b: list[float], clusters: list[str], nd: int = 2) -> str:
    """`+0.03 [-0.00, +0.06]`: the paired difference a − b, 95 % cluster-bootstrap interval (2,000 resamples)."""
    if not a or any(x is None for x in a + b):
        return "–"
    p = paired_bootstrap([float(x) for x in a], [float(x) for x in b], clusters=clusters, n_boot=2000)
    return f"{p['delta']:+.{nd}f} [{p['ci'][0]:+.{nd}f}, {p['ci'][1]:+.{nd}f}]"


def table(out: Path) -> str:
    """The Markdown table of one finished run with several renderings (see the module docstring): one row per
    template `policy@setting` and other rendering found in the records (`fields`, `raw`), paired on the decisions
    both scored — accuracy template → other with the Δ, the gold log-likelihood gain (nats per token; "–" for
    selection-only runs), the same accuracy on the decisions where memory matters, and what the prompts hold."""
    recs = records_by_key(out)
    pairs: dict[tuple[str, str], list[str]] = {}
    for (k, d), r in recs.items():
        tail = k.rsplit("/", 1)[-1]   # Setting.key puts the render mode last (records without the field)
        render = r.get("render") or (tail if tail in RENDERS else "template")
        base = k.removesuffix("/" + render)
        if render != "template" and render in RENDERS and base != k and (base, d) in recs:
            pairs.setdefault((base, render), []).append(d)
    head = ("| policy@setting | render | n | accuracy: template → render (Δ [95 % CI]) | gold LL gain (nats/token) "
            "| where memory matters: n, template → render (Δ) | prompt tokens | value recall (n) | all values "
            "| prompt confuser |")
    lines = [f"**{out}**", "", head, "|---|---|---:|---|---|---|---|---|---|---|"]
    for (key, render) in sorted(pairs, key=lambda kr: (kr[0], RENDERS.index(kr[1]))):
        ids = sorted(pairs[key, render])
        t = [recs[(key, d)] for d in ids]
        f = [recs[(f"{key}/{render}", d)] for d in ids]
        acc_t, acc_f = [r["correct"] for r in t], [r["correct"] for r in f]
        cl = [r["episode_id"] for r in t]
        mm = [i for i, r in enumerate(t) if r.get("memory_matters")]
        scored = all(x is not None for x in acc_t + acc_f)
        acc = (f"{np.mean(acc_t):.2f} → {np.mean(acc_f):.2f} ({_delta(acc_f, acc_t, cl)})" if scored else "–")
        lt, lf = [r.get("gold_logprob_per_token") for r in t], [r.get("gold_logprob_per_token") for r in f]
        ll = _delta(lf, lt, cl, nd=3) if scored else "–"
        acc_mm = (f"{len(mm)}: {np.mean([acc_t[i] for i in mm]):.2f} → {np.mean([acc_f[i] for i in mm]):.2f} "
                  f"({_delta([acc_f[i] for i in mm], [acc_t[i] for i in mm], [cl[i] for i in mm])})"
                  if scored and mm else "–")
        vt = [r.get("value_recall") for r in t]
        vf = [r.get("value_recall") for r in f]
        allv = (_mean([None if v is None else float(v >= 1.0) for v in vt]) + " → " +
                _mean([None if v is None else float(v >= 1.0) for v in vf]))
        lines.append(
            f"| {key} | {render} | {len(ids)} | {acc} | {ll} | {acc_mm} | "
            f"{np.median([r['prompt_tokens'] for r in t]):.0f} → "
            f"{np.median([r['prompt_tokens'] for r in f]):.0f} | {_mean(vt)} → {_mean(vf)} "
            f"({sum(v is not None for v in vt)}) | {allv} | "
            f"{_mean([r.get('prompt_confuser') for r in t])} → {_mean([r.get('prompt_confuser') for r in f])} |")
    return "\n".join(lines)


def compare(out_dir: Path, overrides: list[str]) -> str:
    """Run the harness with both renderings into `out_dir` and return (and write `renders.md`) the table."""
    from hydra import compose, initialize_config_module

    from damc.episodes import atomic_write_text
    from damc.eval.harness import main

    with initialize_config_module("damc.configs", version_base="1.3"):
        cfg = compose("evaluate", overrides=[*overrides, f"render=[template,{RENDER}]", f"out_dir={out_dir}"])
    main(cfg)
    text = table(out_dir)
    atomic_write_text(out_dir / "renders.md", text + "\n")
    return text


def key_card_lines(path: str | Path, renders: dict[str, Any] | None = None) -> str:
    """How much of what a decision needs its key cards' lines keep, without any selection: over the tool-call
    decisions of an episode file that have key cards, the share of the gold's argument values held by the key
    cards' raw text that each rendering keeps (`value recall`, `all values`), whether the lines carry a
    distractor's value (`confuser`), and their length. `renders`: name → `card, query -> text` (default: raw,
    template, fields without focus, fields)."""
    from damc.cards import encode_episode
    from damc.episodes import decision_points, load_episodes, make_distractors
    from damc.eval.harness import Decision
    from damc.facts import gold_values, holds_any
    from damc.query import render_decision_query
    from damc.templates import FieldConfig, field_compress, template_compress

    renders = renders or {"raw": lambda c, q: c.raw_text, "template": lambda c, q: template_compress(c),
                          "fields (every id)": lambda c, q: field_compress(c, q, FieldConfig(focus=False)),
                          "fields": lambda c, q: field_compress(c, q)}
    stats = {name: {"values": 0, "all": 0, "confuser": 0, "chars": 0} for name in renders}
    n = n_values = 0
    for ep in load_episodes(path):
        cards = {c.card_id: c for c in encode_episode(ep)}
        for dp in decision_points(ep, tool_calls_only=True):
            keys = [cards[k] for k in dp.key_card_ids if k in cards]
            if not keys:
                continue
            raw = " ".join(c.raw_text for c in keys)
            need = [v for v in gold_values(dp.gold) if holds_any(raw, [v])]
            conf = Decision(dp, list(cards.values()), make_distractors(ep, dp.index)).confuser_values()
            q = render_decision_query(dp.context, ep.tools)
            n, n_values = n + 1, n_values + len(need)
            for name, fn in renders.items():
                text = " ".join(fn(c, q) for c in keys)
                st = stats[name]
                st["values"] += sum(holds_any(text, [v]) for v in need)
                st["all"] += all(holds_any(text, [v]) for v in need)
                st["confuser"] += bool(conf) and holds_any(text, conf)
                st["chars"] += len(text)
    lines = [f"**{path}**: {n} tool-call decisions with key cards, {n_values} gold values in them", "",
             "| lines | value recall | all values | confuser | characters per decision |", "|---|---:|---:|---:|---:|"]
    for name, st in stats.items():
        lines.append(f"| {name} | {st['values'] / max(n_values, 1):.2f} | {st['all'] / max(n, 1):.2f} | "
                     f"{st['confuser'] / max(n, 1):.2f} | {st['chars'] / max(n, 1):.0f} |")
    return "\n".join(lines)
