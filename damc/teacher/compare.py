"""Estimators (and teachers) compared on evidence: key-card hit rates, agreement, cost — behind
`scripts/compare_estimators.py`.

On a seeded sample of decisions whose episode records key cards, each episode is fed to a fresh runtime memory
(`RuntimeCandidates`, as the labels are made) and every estimator values the runtime's candidate set under the
teacher. Per estimator: **hit@1 / hit@3** (a key card is the estimator's best / among its 3 best, over the
decisions whose key card reached the candidate set), forward tokens and seconds per decision; between
estimators: the mean per-decision Spearman and the share of decisions with the same top card. Also reported:
how often a key card is labelled at all — by the runtime's candidate set versus the old newest-12 window.
Precision: a *confuser card* is a candidate that is not a key card but holds an argument value of one of the
decision's rivals that the gold does not use (`damc.facts.confuser_values` over `make_distractors`, the
harness's rivals: the caller's other order, a look-alike id); per estimator, over the decisions with key cards and at
least one confuser card, **confuser@1** (the estimator's best card is a confuser card) and **key > confuser** (the
best key card is valued above every confuser card).
Recall beyond the first occurrence: a *key card* is where one of the gold's history values (`key_facts`) *first*
appears; a later card that repeats it — often the more specific record, e.g. the details of the very order the
gold acts on after the user's order list — is not one. **fact@1 / fact@3** count a hit when the estimator's best
card (one of its 3 best) holds any of the gold's key facts, wherever it sits (`holds_fact`, over the decisions
whose episode records `key_facts`).

Several runs (e.g. SmolLM2 and Qwen2.5-Coder-1.5B on the same decisions) are compared with `agreement(a, b)`.

Example:
    >>> res = compare(episodes, HFTeacher("smollm2-135m"), ["loo", "loi"], n_decisions=40)
    >>> markdown(res)
"""

from __future__ import annotations

import json
import logging
import os
import random
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from damc.episodes import DecisionPoint, Episode, decision_points
from damc.ranking import hit_at_k, spearman, summarize_values

logger = logging.getLogger(__name__)

OLD_WINDOW = 12   # the newest-N window of the first study's labels


def sample_decisions(episodes: Sequence[Episode], n: int, seed: int = 0) -> list[DecisionPoint]:
    """A seeded sample of tool-call decisions whose key card lies before the current user turn (where memory
    matters: a key card inside the current turn is never a candidate), in episode order."""
    from damc.teacher.context import candidate_cards

    pool = [dp for ep in episodes for dp in decision_points(ep, tool_calls_only=True)
            if dp.key_card_ids and set(dp.key_card_ids) & {c.card_id for c in candidate_cards(dp)}]
    if len(pool) > n:
        keep = set(random.Random(seed).sample(range(len(pool)), n))
        pool = [dp for i, dp in enumerate(pool) if i in keep]
    return pool


def _done_rows(checkpoint: Path | None, teacher_id: str, estimators: Sequence[str],
               render: str = "template") -> dict[str, dict[str, Any]]:
    """Rows of an earlier (killed) run of the same teacher and rendering that carry every estimator; a torn last
    line is skipped (and ended, so the rows appended after it stay on lines of their own)."""
    done: dict[str, dict[str, Any]] = {}
    if checkpoint is None or not checkpoint.exists():
        return done
    text = checkpoint.read_text(encoding="utf-8")
    if text and not text.endswith("\n"):
        with checkpoint.open("a", encoding="utf-8") as f:
            f.write("\n")
    for line in text.splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if row.get("teacher") == teacher_id and row.get("render", "template") == render and \
                (set(estimators) <= set(row["deltas"]) or not row["card_ids"]):
            done[row["decision_id"]] = row
    return done


def compare(episodes: Sequence[Episode], teacher: Any, estimators: Sequence[str], n_decisions: int = 40,
            seed: int = 0, memory: dict[str, Any] | None = None, progress: bool = True,
            checkpoint: str | os.PathLike | None = None, render: str = "template") -> dict[str, Any]:
    """Label the same sampled decisions with every estimator; returns per-decision deltas and the summary.

    `render`: how the teacher reads the cards (`damc.teacher.context.TEACHER_RENDERS`: the runtime's template lines
    or its `fields` lines). `checkpoint`: a JSONL file each finished decision is appended to (fsync'd); a rerun
    with the same teacher and rendering takes the decisions found there (with every requested estimator) instead
    of labelling them again."""
    from tqdm import tqdm

    from damc.episodes import make_distractors
    from damc.facts import confuser_values, holds_any
    from damc.teacher.candidates import RuntimeCandidates
    from damc.teacher.context import candidate_cards
    from damc.teacher.estimators import ESTIMATORS

    ests = {name: ESTIMATORS[name](render=render) for name in estimators}
    decisions = sample_decisions(episodes, n_decisions, seed)
    per: list[dict[str, Any]] = []
    runtime = None
    teacher_id = str(getattr(teacher, "model_id", "?"))
    ckpt = Path(checkpoint) if checkpoint else None
    done = _done_rows(ckpt, teacher_id, estimators, render)

    def cards_at(dp: DecisionPoint) -> list:
        nonlocal runtime             # one runtime memory per episode, built only when a decision needs its cards
        if runtime is None or runtime.episode.episode_id != dp.episode.episode_id:
            runtime = RuntimeCandidates(dp.episode, teacher.tokenizer, memory)
        return runtime.at(dp)

    for dp in tqdm(decisions, desc="compare estimators", unit="decision", disable=not progress):
        if dp.decision_id in done:
            row = {k: v for k, v in done[dp.decision_id].items() if k not in ("teacher", "render")}
            if "holds_fact" not in row:               # a checkpoint written before the column: derived, not re-run
                row["holds_fact"] = holds_fact(dp, cards_at(dp))
            per.append(row)
            continue
        cards = cards_at(dp)
        keys = set(dp.key_card_ids)
        newest = [c.card_id for c in candidate_cards(dp)][-OLD_WINDOW:]
        conf = confuser_values(dp.gold, make_distractors(dp.episode, dp.index))
        row: dict[str, Any] = {"decision_id": dp.decision_id, "card_ids": [c.card_id for c in cards],
                               "is_key": [c.card_id in keys for c in cards], "key_in_window": bool(keys & set(newest)),
                               "is_confuser": [c.card_id not in keys and bool(conf) and holds_any(c.raw_text, conf)
                                               for c in cards],
                               "holds_fact": holds_fact(dp, cards),
                               "deltas": {}, "seconds": {}, "forward_tokens": {}}
        raw: dict[str, np.ndarray] = {}
        for name, est in ests.items():
            if not cards:
                continue
            if name == "loo_loi" and {"loo", "loi"} <= set(raw):   # exactly their mean (`LooLoi`): not run twice
                raw[name] = (raw["loo"] + raw["loi"]) / 2.0
                row["seconds"][name] = row["seconds"]["loo"] + row["seconds"]["loi"]          # what it costs alone
                row["forward_tokens"][name] = row["forward_tokens"]["loo"] + row["forward_tokens"]["loi"]
            else:
                t0 = time.perf_counter()
                res = est.estimate(teacher, dp, cards)
                row["seconds"][name] = time.perf_counter() - t0
                raw[name] = np.asarray(res.deltas, dtype=float)
                row["forward_tokens"][name] = res.n_forward_tokens
            row["deltas"][name] = np.nan_to_num(raw[name], nan=-1e9).tolist()
        per.append(row)
        if ckpt is not None:
            with ckpt.open("a", encoding="utf-8") as f:
                f.write(json.dumps({**row, "teacher": teacher_id, "render": render}) + "\n")
                f.flush()
                os.fsync(f.fileno())
    return {"teacher": getattr(teacher, "model_id", "?"), "render": render, "estimators": list(estimators), "seed": seed,
            "decisions": per, "summary": summarize(per, list(estimators))}


def holds_fact(dp: DecisionPoint, cards: Sequence[Any]) -> list[bool]:
    """For each card, whether its raw text holds one of the decision's key facts (the gold's values found in the
    history, `metadata["key_facts"]`) as a whole token — any card repeating one, not only the key card where it
    first appeared. All False when the episode records no key facts."""
    from damc.facts import holds_any

    facts = dp.key_facts
    return [bool(facts) and holds_any(c.raw_text, facts) for c in cards]


def summarize(per: Sequence[dict[str, Any]], estimators: Sequence[str]) -> dict[str, Any]:
    """Hit rates, cost and pairwise agreement from `compare`'s per-decision rows."""
    keyed = [r for r in per if any(r["is_key"])]
    confused = [r for r in keyed if any(r.get("is_confuser") or [])]   # rows of runs before 2026-12-04 lack it
    factual = [r for r in keyed if any(r.get("holds_fact") or [])]
    out: dict[str, Any] = {"decisions": len(per), "key_in_candidates": len(keyed),
                           "key_in_old_window": sum(r["key_in_window"] for r in per), "with_confuser": len(confused),
                           "with_fact": len(factual)}
    for name in estimators:
        rows = [r for r in keyed if name in r["deltas"]]
        out[name] = {"hit@1": float(np.mean([hit_at_k(r["deltas"][name], r["is_key"], 1) for r in rows])) if rows
                     else None,
                     "hit@3": float(np.mean([hit_at_k(r["deltas"][name], r["is_key"], 3) for r in rows])) if rows
                     else None,
                     "fact@1": _rate([hit_at_k(r["deltas"][name], r["holds_fact"], 1) for r in factual
                                      if name in r["deltas"]]),
                     "fact@3": _rate([hit_at_k(r["deltas"][name], r["holds_fact"], 3) for r in factual
                                      if name in r["deltas"]]),
                     "confuser@1": _rate([_confuser_first(r["deltas"][name], r["is_confuser"])
                                          for r in confused if name in r["deltas"]]),
                     "key>confuser": _rate([_key_above_confuser(r["deltas"][name], r["is_key"], r["is_confuser"])
                                            for r in confused if name in r["deltas"]]),
                     "seconds_per_decision": float(np.mean([r["seconds"][name] for r in per if name in r["seconds"]]
                                                           or [np.nan])),
                     "forward_tokens_per_decision": float(np.mean([r["forward_tokens"][name] for r in per
                                                                   if name in r["forward_tokens"]] or [np.nan]))}
    pairs = {}
    for i, a in enumerate(estimators):
        for b in estimators[i + 1:]:
            pairs[f"{a}~{b}"] = pair_agreement([r["deltas"].get(a) for r in per], [r["deltas"].get(b) for r in per])
    out["agreement"] = pairs
    return out


def _rate(xs: Sequence[bool]) -> float | None:
    return float(np.mean(xs)) if xs else None


def _confuser_first(deltas: Sequence[float], is_confuser: Sequence[bool]) -> bool:
    """Whether the highest-valued card is a confuser card."""
    return bool(is_confuser[int(np.argmax(deltas))])


def _key_above_confuser(deltas: Sequence[float], is_key: Sequence[bool], is_confuser: Sequence[bool]) -> bool:
    """Whether the best key card is valued strictly above every confuser card."""
    d = np.asarray(deltas, dtype=float)
    return bool(d[np.asarray(is_key, bool)].max() > d[np.asarray(is_confuser, bool)].max())


def pair_agreement(a: Sequence[Sequence[float] | None], b: Sequence[Sequence[float] | None]) -> dict[str, Any]:
    """Mean per-decision Spearman of two value lists over the same cards, and the share with the same top card."""
    rho, top = [], []
    for x, y in zip(a, b):
        if x is None or y is None or len(x) < 2:
            continue
        rho.append(spearman(x, y))
        top.append(float(int(np.argmax(x)) == int(np.argmax(y))))
    return {"spearman": summarize_values(rho), "same_top": float(np.mean(top)) if top else None, "n": len(top)}


def agreement(a: dict[str, Any], b: dict[str, Any], estimator_b: str) -> dict[str, Any]:
    """Each estimator of run `a` against estimator `estimator_b` of run `b` (e.g. another teacher), on the decisions
    and cards both valued."""
    rows_b = {r["decision_id"]: r for r in b["decisions"]}
    out = {}
    for name in a["estimators"]:
        xs, ys = [], []
        for r in a["decisions"]:
            rb = rows_b.get(r["decision_id"])
            if rb is None or rb["card_ids"] != r["card_ids"] or name not in r["deltas"] or estimator_b not in rb["deltas"]:
                continue
            xs.append(r["deltas"][name])
            ys.append(rb["deltas"][estimator_b])
        out[name] = pair_agreement(xs, ys)
    return out


def label_hit_rates(labels: Any) -> dict[str, Any]:
    """hit@1 / hit@3 of a label set's deltas (its `is_key` column) over the decisions with a labelled key card."""
    from damc.labels import load_labels

    df = load_labels(labels).to_pandas() if not hasattr(labels, "groupby") else labels
    rows = [(g["delta"].to_numpy(), g["is_key"].to_numpy()) for _, g in df.groupby("decision_id") if g["is_key"].any()]
    return {"decisions": int(df["decision_id"].nunique()), "with_key": len(rows),
            "hit@1": float(np.mean([hit_at_k(d, k, 1) for d, k in rows])) if rows else None,
            "hit@3": float(np.mean([hit_at_k(d, k, 3) for d, k in rows])) if rows else None,
            "estimator": sorted(set(df["estimator"])), "teacher": sorted(set(df["teacher"]))}


def markdown(res: dict[str, Any]) -> str:
    """The comparison as Markdown tables (per estimator; pairwise agreement)."""
    s = res["summary"]
    lines = [f"teacher `{res['teacher']}` reading `{res.get('render', 'template')}` lines, {s['decisions']} decisions with key cards; a key card in the runtime's "
             f"candidate set: {s['key_in_candidates']} ({s['key_in_candidates'] / max(s['decisions'], 1):.0%}); in the "
             f"old newest-{OLD_WINDOW} window: {s['key_in_old_window']} ({s['key_in_old_window'] / max(s['decisions'], 1):.0%})"
             f"; {s.get('with_confuser', 0)} of those with a confuser card among the candidates, "
             f"{s.get('with_fact', 0)} with a card holding a key fact (fact@k)",
             "", "| estimator | hit@1 | hit@3 | fact@1 | fact@3 | confuser@1 | key > confuser | forward tokens / decision | "
             "seconds / decision |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name in res["estimators"]:
        e = s[name]
        f = (lambda x, d=2: "–" if x is None or x != x else f"{x:.{d}f}")
        lines.append(f"| {name} | {f(e['hit@1'])} | {f(e['hit@3'])} | {f(e.get('fact@1'))} | {f(e.get('fact@3'))} | "
                     f"{f(e.get('confuser@1'))} | "
                     f"{f(e.get('key>confuser'))} | {f(e['forward_tokens_per_decision'], 0)} | "
                     f"{f(e['seconds_per_decision'], 1)} |")
    if s["agreement"]:
        lines += ["", "| pair | Spearman (mean [95 % CI]) | same top card |", "|---|---|---:|"]
        for k, v in s["agreement"].items():
            sp = v["spearman"]
            ci = f"{sp['mean']:.2f} [{sp['mean_ci'][0]:.2f}, {sp['mean_ci'][1]:.2f}]" if sp["mean"] is not None else "–"
            lines.append(f"| {k} | {ci} | {v['same_top']:.2f} |" if v["same_top"] is not None else f"| {k} | {ci} | – |")
    return "\n".join(lines) + "\n"
