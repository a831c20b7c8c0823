"""The A/B harness: `main(cfg)` behind `scripts/evaluate.py` — it measures the product, through the product.

For each episode with sampled decisions, one fresh `DecisionAwareMemory` is fed the conversation message
by message in order (`observe`), and at each decision every policy builds its prompt: card policies through
that memory's own `build_context` with their valuer (see `damc.eval.policies`), message policies from the
messages. Deployable policies receive only a `DecisionView` (the messages before the decision and the tools);
`oracle` and `damc_teacher` also get a `GoldView`. The decision LLM then scores the gold action against its
distractors on each prompt (prompts that came out identical are scored once per decision, also across runs: a
prompt that a current record of the decision already scored is not scored again).

Settings per card policy: every budget of `budgets`, then the `sweep` (top-k and value thresholds under one
budget) — each once per `render` mode (`template` | `fields` | `raw`, the same for every card policy). One JSON record per
(policy, setting, decision) goes to `out_dir/records.jsonl`, fsync'd, with the **fingerprint** of everything
that record depends on (data file, decision filters, decision LLM, memory settings, the policy's options and
the files of its scorer / labels): a rerun skips records whose fingerprint still matches and redoes the
others, so a killed run resumes where it stopped and a changed setting never silently reuses old records.
A policy or LLM call that raises is recorded as failed for that decision only. Besides accuracy, a scored record
holds `gold_logprob_per_token` (the gold's mean log-prob per token under that prompt: the gold log-likelihood gain's
input) and message policies' `truncated` (`full` cut at the decision LLM's window), and every record names the
decision LLM and where it ran (`decision_llm`, `llm_setup`).

`shard.index` / `shard.count` split the decisions between runs on several machines (whole episodes, round-robin);
`scripts/merge_records.py` (`damc.eval.merge`) joins their records into one results directory.

`score=false` is the selection-only mode: the same prompts through the same runtime path, measured (kept cards,
key hit and recall, candidate recall, confuser rate, prompt tokens, overhead) without the decision LLM — only its
tokenizer loads — so memory metrics on hundreds of decisions cost minutes, not hours. Accuracy stays empty.

Aggregation (`damc.eval.results`) writes `results.json`, `results.md` and `pareto.png`.

Example:
    $ python scripts/evaluate.py data.path=data/generated/synthetic/test.jsonl \\
        policies=[window,bm25,damc,oracle] budgets=[512,1024] scorer=runs/scorer out_dir=runs/eval
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import platform
import random
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Sequence

import numpy as np

from damc.cards import Card, cards_before, encode_episode, token_counter
from damc.episodes import (
    DecisionPoint,
    Episode,
    atomic_write_text,
    decision_points,
    load_episodes,
    make_distractors,
)
from damc.eval.metrics import exact_match, multiple_choice, prompt_values
from damc.eval.policies import (
    POLICIES,
    CardPolicy,
    DecisionView,
    GoldView,
    Policy,
    PolicyEnv,
    PolicyOutput,
    Setting,
    make_policy,
)
from damc.eval.records import RUN_CONFIG, RecordLog, file_digest, fingerprints
from damc.eval.results import NO_BUDGET, aggregate, results_table, write_results
from damc.facts import confuser_values, gold_values, holds_any
from damc.models import DEFAULT_ENCODER
from damc.prompting import action_text, format_prompt

logger = logging.getLogger(__name__)


# ----------------------------------------------------------------------------- decision LLM

class DecisionLLM:
    """The decision LLM as the harness needs it: prompt token counts, action log-probs, greedy generation.

    Wraps a scoring backend (`log_prob_many(context_messages, actions) -> [per-token logprobs]`): the one local
    backend `damc.llm.LocalLLM` (`configs/llm/hf.yaml`), the teacher's forward too, so the harness scores actions
    exactly as the teacher labels them — or a server client (`configs/llm/vllm.yaml`).

    Args:
        backend: `damc.llm.LocalLLM`, `damc.teacher.backends.VLLMTeacher`, ... (anything with `log_prob_many`).
        tokenizer: the decision LLM's tokenizer (defaults to `backend.tokenizer`).
    """

    def __init__(self, backend: Any, tokenizer: Any = None):
        self.backend = backend
        self.tokenizer = tokenizer if tokenizer is not None else getattr(backend, "tokenizer", None)
        # the backend counts chars/4 when it has no local tokenizer (a vLLM server without `tokenizer=`)
        self.count_tokens = backend.count_tokens if hasattr(backend, "count_tokens") else token_counter(self.tokenizer)
        self.window = getattr(backend, "max_context_tokens", None)

    @property
    def name(self) -> str:
        return str(getattr(self.backend, "model_id", None) or getattr(self.backend, "name", None)
                   or type(self.backend).__name__)

    @property
    def setup(self) -> str:
        """Where and in what precision the decision LLM runs (`cpu float32`, `cuda:0 bfloat16`; a server: its
        URL): written into every record, so records merged from several machines say where each came from."""
        device, dtype = getattr(self.backend, "device", None), getattr(self.backend, "dtype", None)
        if device is not None and dtype is not None:
            return f"{device} {str(dtype).removeprefix('torch.')}"
        return str(getattr(self.backend, "url", None) or type(self.backend).__name__)

    def prompt_tokens(self, messages: Sequence[dict[str, str]]) -> int:
        """Tokens of the templated prompt (generation prompt included)."""
        return self.count_tokens(format_prompt(self.tokenizer, messages))

    def log_probs(self, messages: Sequence[dict[str, str]], actions: Sequence[str]) -> list[np.ndarray]:
        """Per-token log-probs of each action after the context."""
        return [np.asarray(x, dtype=float) for x in self.backend.log_prob_many(list(messages), list(actions))]

    def generate(self, messages: Sequence[dict[str, str]], max_new_tokens: int = 96) -> str:
        """Greedy generation (`exact_match=true`), by a backend with `generate` (`damc.llm.LocalLLM`).

        Raises:
            NotImplementedError: the backend only scores (a log-prob server): set `exact_match=false`.
        """
        if not hasattr(self.backend, "generate"):
            raise NotImplementedError(f"the decision LLM {self.name} ({type(self.backend).__name__}) scores but does "
                                      f"not generate; exact_match=true needs a local model (llm=hf)")
        return self.backend.generate(list(messages), max_new_tokens=max_new_tokens)


class TokenizerOnly:
    """The decision LLM's tokenizer without its weights, for `score=false` (selection only): prompts are built
    and measured (tokens, kept cards, key hit, candidate recall, confusers, overhead) but never scored.

    Args:
        model: the decision LLM's registry name, GGUF file or tokenizer directory (`cfg.llm.tokenizer` or
            `cfg.llm.model`).
        max_context_tokens: its window (`full` drops its oldest messages beyond it); None: no limit.
    """

    def __init__(self, model: str, max_context_tokens: int | None = None):
        from damc.tokens import load_token_counter

        self.tokenizer = load_token_counter(str(model))
        self.model_id = f"{model} (tokenizer only: score=false)"
        self.max_context_tokens = max_context_tokens

    def log_prob_many(self, context_messages: Any, actions: Any) -> list[np.ndarray]:
        raise RuntimeError("score=false builds prompts only; this policy needs the decision LLM (set score=true)")


def load_decision_llm(llm_cfg: Any, score: bool = True) -> DecisionLLM:
    """Instantiate the backend of `cfg.llm` (a config with `_target_`: `damc.llm.LocalLLM` or a server client);
    with `score=False` only its tokenizer (`TokenizerOnly`)."""
    if not score:
        return DecisionLLM(TokenizerOnly(llm_cfg.get("tokenizer") or llm_cfg.get("model"),
                                         llm_cfg.get("max_context_tokens")))
    from hydra.utils import instantiate

    return DecisionLLM(instantiate(llm_cfg))


# ----------------------------------------------------------------------------- decisions

@dataclass
class Decision:
    """One decision point prepared for evaluation.

    Attributes:
        dp: the decision point (gold and future included: only the harness and reference policies see it).
        cards: the episode's cards before the current user turn (for key-card and confuser checks).
        distractors: canonical action strings scored against the gold.
    """

    dp: DecisionPoint
    cards: list[Card]
    distractors: list[str]

    @property
    def decision_id(self) -> str:
        return self.dp.decision_id

    @property
    def history_key_ids(self) -> list[str]:
        """The key cards that lie before the current user turn: only memory can bring them into the prompt (key
        cards inside the current turn are always there, verbatim)."""
        ids = {c.card_id for c in self.cards}
        return [k for k in self.dp.key_card_ids if k in ids]

    @functools.cached_property
    def turn_text(self) -> str:
        """The current user turn up to the decision, as JSON text (every policy's prompt holds it verbatim)."""
        return json.dumps(self.dp.current_turn, ensure_ascii=False)

    @functools.cached_property
    def history_values(self) -> list[str]:
        """The gold's argument values that only the history holds: in a card before the current user turn and
        not in the turn itself — what memory has to carry into the prompt for the decision to be answerable."""
        turn = self.turn_text
        raw = "\n".join(c.raw_text for c in self.cards)
        return [v for v in gold_values(self.dp.gold) if holds_any(raw, [v]) and not holds_any(turn, [v])]

    def confuser_values(self) -> list[str]:
        """Argument values of the distractors that the gold does not use (an id, a team, a code)."""
        return confuser_values(self.dp.gold, self.distractors)


def select_decisions(episodes: Sequence[Episode], cfg: Any, count_tokens: Any) -> list[Decision]:
    """Decision points that pass the filters, then a seeded sample of `max_decisions`, in episode order.

    Filters: tool-call decisions only (`cfg.data.tool_calls_only`); `cfg.filters`: decisions with recorded key
    cards only, decisions whose key card lies before the current user turn only (`memory_only`: where memory
    matters), a minimum number of history cards; at least one distractor (always: MC accuracy needs one).
    """
    f = cfg.filters
    out: list[Decision] = []
    for ep in episodes:
        dps = decision_points(ep, tool_calls_only=bool(cfg.data.get("tool_calls_only", False)))
        if not dps:
            continue
        cards = encode_episode(ep, count_tokens=count_tokens)
        for dp in dps:
            if f.key_cards_only and not dp.key_card_ids:
                continue
            cand = cards_before(cards, dp.current_turn_start)
            if len(cand) < f.min_history_cards:
                continue
            if f.get("memory_only") and not set(dp.key_card_ids) & {c.card_id for c in cand}:
                continue  # no key card before the current turn: memory cannot matter
            dis = make_distractors(ep, dp.index, n=cfg.n_distractors, seed=cfg.seed)
            if dis:
                out.append(Decision(dp, cand, dis))
    if cfg.max_decisions and len(out) > cfg.max_decisions:
        keep = set(random.Random(cfg.seed).sample(range(len(out)), cfg.max_decisions))
        out = [d for i, d in enumerate(out) if i in keep]
    shard = cfg.get("shard") or {}
    return shard_decisions(out, int(shard.get("index", 0)), int(shard.get("count", 1)))


def shard_decisions(decisions: list[Decision], index: int, count: int) -> list[Decision]:
    """This run's part of the decisions when `count` runs share them (`shard.index` of `shard.count`): whole
    episodes, dealt round-robin in the data's order (one memory per episode stays in one run; shards differ in size by
    one episode at most). Taken after the filters and the `max_decisions` sample, so the shards of one setting are
    disjoint and together hold exactly the unsharded run's decisions; `scripts/merge_records.py` joins their records.

    Raises:
        ValueError: `count` < 1 or `index` outside [0, count).
    """
    if count < 1 or not 0 <= index < count:
        raise ValueError(f"shard.index={index} shard.count={count}: expected count >= 1 and 0 <= index < count "
                         f"(e.g. shard.index=0 shard.count=4 for the first of four runs)")
    if count == 1:
        return decisions
    order = list(dict.fromkeys(d.dp.episode.episode_id for d in decisions))
    mine = {e for i, e in enumerate(order) if i % count == index}
    return [d for d in decisions if d.dp.episode.episode_id in mine]


# ----------------------------------------------------------------------------- policies and settings

def policy_options(cfg: Any) -> dict[str, dict[str, Any]]:
    """Per name in `cfg.policies`: the registry policy (`policy`) and its keyword options.

    A name that is not a registry policy is a *variant*: its `policy_options` entry names the registry policy
    in `policy:` and adds options, e.g. `damc_bfcl: {policy: damc, scorer: runs/bfcl/scorer}`.

    Raises:
        KeyError: a name that is neither a registry policy nor a variant naming one.
    """
    from omegaconf import OmegaConf

    opts = OmegaConf.to_container(cfg.get("policy_options") or {}, resolve=True)
    out = {}
    for name in cfg.policies:
        kw = dict(opts.get(name) or {})
        base = kw.pop("policy", None) or name
        if base not in POLICIES:
            raise KeyError(f"unknown policy {name!r}: not one of {', '.join(POLICIES)} and no "
                           f"`policy_options.{name}.policy` naming one (e.g. "
                           f"'+policy_options.{name}={{policy: damc, scorer: PATH}}')")
        if base == "damc":
            kw.setdefault("scorer", cfg.scorer)
        if base == "damc_knn":
            kw.setdefault("labels", cfg.labels_path)
        out[name] = {"policy": base, **kw}
    return out


def settings_for(policy: Policy, cfg: Any, name: str | None = None) -> list[Setting]:
    """The evaluation points of a policy: each budget, then (card policies) the top-k / threshold sweep under
    `sweep.budget` (default: the largest budget), each in every `render` mode for card policies. A policy whose
    values are not in [0, 1] (`damc` with its combiner: nats per action token) takes its own threshold grid
    from `sweep.threshold_for.<name>` (or `.<registry name>`)."""
    budgets = [int(b) for b in cfg.budgets]
    if not policy.budgeted:
        return [Setting(max(budgets))]
    if not isinstance(policy, CardPolicy):
        return [Setting(b) for b in budgets]
    renders = [str(r) for r in (cfg.get("render") or ["template"])]
    out = [Setting(b, render=r) for r in renders for b in budgets]
    if policy.sweepable:
        sw = cfg.get("sweep") or {}
        sb = int(sw.get("budget") or max(budgets))
        out += [Setting(sb, top_k=int(k), render=r) for r in renders for k in sw.get("top_k") or []]
        per = sw.get("threshold_for") or {}
        own = [k for k in (name, policy.name) if k in per]
        grid = (per[own[0]] if own else sw.get("threshold")) or []
        out += [Setting(sb, threshold=float(t), render=r) for r in renders for t in grid]
    return out


def setting_key(policy: Policy, setting: Setting) -> str:
    return setting.key if policy.budgeted else NO_BUDGET


# ----------------------------------------------------------------------------- running

@dataclass
class Unit:
    """One (policy, setting) column of the evaluation."""

    name: str
    policy: Policy
    setting: Setting
    key: str
    fingerprint: str


def memory_config(cfg: Any) -> Any:
    """The run's `MemoryConfig` (`cfg.memory` without its `encoder`)."""
    from damc.runtime.memory import MemoryConfig

    mem_cfg = dict(cfg.get("memory") or {})
    mem_cfg.pop("encoder", None)
    return MemoryConfig(**mem_cfg)


def run_encoder(cfg: Any) -> Any:
    """The retrieval encoder of the run's memories, loaded once behind a `CachedEncoder` (the one a memory of
    `cfg.memory` would load itself: same name, same vectors) that answers only the card documents
    `prefetch_cards` put in it: a decision query is embedded on every retrieval, as in a live agent."""
    from damc.runtime.encoder import cached_encoder

    mem = cfg.get("memory") or {}
    return cached_encoder(mem.get("encoder", DEFAULT_ENCODER), mem.get("encoder_backend", "auto"),
                          remember_misses=False)


def new_memory(cfg: Any, llm: DecisionLLM, encoder: Any = None) -> Any:
    """A fresh in-memory `DecisionAwareMemory` counting tokens with the decision LLM's tokenizer (every card policy
    brings its own valuer, so the memory's own is the heuristic prior: no scorer is loaded for it); `encoder`: the
    run's (`run_encoder`), else the memory loads the one `cfg.memory` names."""
    from damc.runtime.memory import DecisionAwareMemory

    encoder = encoder if encoder is not None else (cfg.get("memory") or {}).get("encoder", DEFAULT_ENCODER)
    return DecisionAwareMemory(None, valuer="heuristic", encoder=encoder, tokenizer=llm.tokenizer,
                               config=memory_config(cfg))


def prefetch_cards(encoder: Any, episode: Any) -> int:
    """Embed an episode's card documents in one batched call before its memory ingests them (ingestion is not
    timed; decision queries are not prefetched, so each policy's retrieval still pays its query as in a live
    agent). Returns how many texts were embedded."""
    from damc.query import episode_documents

    return encoder.prefetch(episode_documents(episode)) if hasattr(encoder, "prefetch") else 0


# the multiple-choice score's fields a record carries (written by evaluate_unit, read back by scored_prompts)
_MC_FIELDS = ("correct", "rank", "gold_logprob", "gold_logprob_per_token", "n_action_tokens", "normalised")


def scored_prompts(log: RecordLog, units: list[Unit], d: Decision, cfg: Any) -> dict[str, dict[str, Any]]:
    """The prompts this decision's current records already scored, by prompt hash (`score_prompt`'s cache): a unit
    whose prompt comes out identical to one that another unit scored — in an earlier run of fewer policies, say —
    reuses that score instead of a forward pass, as identical prompts within one run already do. Only records whose
    fingerprint is current count: their data, distractors, filters and decision LLM are this run's own."""
    score, em = bool(cfg.get("score", True)), bool(cfg.exact_match)
    cache: dict[str, dict[str, Any]] = {}
    for u in units:
        if not log.done(u.name, u.key, d.decision_id, u.fingerprint, cfg.retry_failed):
            continue
        r = log.records[RecordLog.key(u.name, u.key, d.decision_id)]
        if r.get("failed") or not r.get("prompt_hash") or (score and r.get("correct") is None) \
                or (em and r.get("exact_match") is None):
            continue
        mc = SimpleNamespace(**{k: r.get(k) for k in _MC_FIELDS}) if score else None
        cache.setdefault(r["prompt_hash"], {"mc": mc, "llm_ms": r.get("llm_ms") if score else None,
                                            "prompt_tokens": r["prompt_tokens"], "em": r.get("exact_match"),
                                            "hash": r["prompt_hash"]})
    return cache


def score_prompt(out: PolicyOutput, d: Decision, llm: DecisionLLM, cache: dict[str, dict[str, Any]],
                 do_exact_match: bool, score: bool = True) -> dict[str, Any]:
    """MC scores of the gold vs distractors on this prompt (identical prompts within a decision: once); with
    `score=False` only its token count (`mc` None)."""
    key = hashlib.sha1(json.dumps(out.messages, ensure_ascii=False).encode()).hexdigest()
    hit = cache.get(key)
    if hit is None and not score:
        hit = cache[key] = {"mc": None, "llm_ms": None, "prompt_tokens": llm.prompt_tokens(out.messages), "em": None,
                            "hash": key}
    if hit is None:
        t0 = time.perf_counter()
        mc = multiple_choice(llm.log_probs(out.messages, [action_text(d.dp.gold)] + d.distractors))
        hit = {"mc": mc, "llm_ms": (time.perf_counter() - t0) * 1000.0, "prompt_tokens": llm.prompt_tokens(out.messages),
               "em": exact_match(llm.generate(out.messages), d.dp.gold) if do_exact_match else None, "hash": key}
        cache[key] = hit
    return hit


def evaluate_unit(unit: Unit, d: Decision, view: DecisionView, env: PolicyEnv, llm: DecisionLLM, memory: Any,
                  valuer: Any, cache: dict[str, dict[str, Any]], cfg: Any, value_ms: dict[str, float]) -> dict[str, Any]:
    """Build the prompt of one unit at one decision, score it, and return the record (failures recorded)."""
    dp, s = d.dp, unit.setting
    rec: dict[str, Any] = {"policy": unit.name, "setting": unit.key, "budget": s.budget if unit.policy.budgeted
                           else NO_BUDGET, "top_k": s.top_k, "threshold": s.threshold, "render": s.render,
                           "kind": unit.policy.kind, "decision_id": d.decision_id, "episode_id": dp.episode.episode_id,
                           "index": dp.index, "is_tool_call": dp.is_tool_call, "key_card_ids": dp.key_card_ids,
                           "history_key_ids": d.history_key_ids, "memory_matters": bool(d.history_key_ids),
                           "n_cards": len(d.cards), "fingerprint": unit.fingerprint,
                           "decision_llm": llm.name, "llm_setup": llm.setup}
    try:
        out = unit.policy.build(view, s, env, memory=memory, valuer=valuer)
        hit = score_prompt(out, d, llm, cache, bool(cfg.exact_match), bool(cfg.get("score", True)))
        t = out.timings_ms
        # values are cached across the settings of a decision: charge every setting the first (uncached) valuing
        first = value_ms.setdefault(unit.name, t.get("value", 0.0))
        overhead = t.get("total", 0.0) - t.get("ingest", 0.0) - t.get("value", 0.0) + first
        kept = set(out.kept_card_ids)
        text = {c.card_id: c.raw_text for c in d.cards}
        confusers = d.confuser_values()
        mc = hit["mc"]
        rec.update({k: getattr(mc, k, None) for k in _MC_FIELDS})
        rec.update(failed=False, prompt_tokens=hit["prompt_tokens"], history_tokens=out.history_tokens,
                   overhead_ms=overhead, value_ms=first, llm_ms=hit["llm_ms"], exact_match=hit["em"],
                   kept_card_ids=out.kept_card_ids, n_candidates=len(out.candidate_ids), truncated=out.truncated,
                   key_in_candidates=[k for k in d.history_key_ids if k in set(out.candidate_ids)],
                   confuser=(any(holds_any(text.get(c, ""), confusers) for c in kept) if confusers else None),
                   **prompt_values(out.messages, d.history_values, d.turn_text, confusers),
                   prompt_hash=hit["hash"])
    except Exception as e:  # noqa: BLE001 - one failing policy/decision must not stop the run
        logger.warning("%s@%s failed on %s: %s: %s", unit.name, unit.key, d.decision_id, type(e).__name__, e)
        rec.update(failed=True, error=f"{type(e).__name__}: {e}", traceback=traceback.format_exc(limit=4)[-2000:])
    return rec


def run_episode(decisions: list[Decision], units: list[Unit], valuers: dict[str, Any], env: PolicyEnv,
                llm: DecisionLLM, log: RecordLog, cfg: Any, bar: Any, encoder: Any = None) -> None:
    """One fresh memory for an episode, fed in order; every unit at each of its decisions."""
    if encoder is not None:
        prefetch_cards(encoder, decisions[0].dp.episode)
    memory = new_memory(cfg, llm, encoder)
    try:
        for d in decisions:
            todo = [u for u in units if not log.done(u.name, u.key, d.decision_id, u.fingerprint, cfg.retry_failed)]
            view = DecisionView.of(d.dp)
            memory.observe(view.messages, view.session_id)  # ingestion is not a policy's overhead
            if not todo:
                continue
            cache = scored_prompts(log, units, d, cfg)
            value_ms: dict[str, float] = {}
            gold_valuers: dict[str, Any] = {}
            for u in todo:
                valuer = valuers.get(u.name)
                if isinstance(u.policy, CardPolicy) and u.policy.needs_gold:
                    if u.name not in gold_valuers:
                        gold_valuers[u.name] = _cached(u.policy.make_valuer(env, GoldView.of(d.dp)))
                    valuer = gold_valuers[u.name]
                log.append(evaluate_unit(u, d, view, env, llm, memory, valuer, cache, cfg, value_ms))
                bar.update(1)
    finally:
        memory.close()


def _cached(valuer: Any) -> Any:
    """A valuer behind a cache without expiry: one decision's settings value its candidates once."""
    from damc.runtime.valuers import CachedValuer

    return CachedValuer(valuer, ttl_s=float("inf"))


def warm_up(units: list[Unit], d: Decision, valuers: dict[str, Any], env: PolicyEnv, llm: DecisionLLM,
            cfg: Any, encoder: Any = None) -> None:
    """Build one prompt per deployable policy untimed (in a throwaway memory), so model loading does not count
    as policy overhead."""
    memory = new_memory(cfg, llm, encoder)
    view = DecisionView.of(d.dp)
    memory.observe(view.messages, view.session_id)
    seen = set()
    for u in units:
        if u.name in seen or u.policy.needs_gold:
            continue
        seen.add(u.name)
        try:
            u.policy.build(view, u.setting, env, memory=memory, valuer=valuers.get(u.name))
        except Exception as e:  # noqa: BLE001 - the real run records the failure per decision
            logger.warning("warm-up of %s failed: %s: %s", u.name, type(e).__name__, e)
    memory.close()
    for v in valuers.values():  # the real run values the warm-up decision afresh (timed)
        _clear_caches(v)


def _clear_caches(valuer: Any) -> None:
    """Empty every `CachedValuer` inside a (composed) valuer."""
    if valuer is None:
        return
    if hasattr(valuer, "clear"):
        valuer.clear()
    for child in ("inner", "prior", "learned"):
        _clear_caches(getattr(valuer, child, None))


def build_units(cfg: Any) -> tuple[list[Unit], dict[str, Policy]]:
    """Policies of `cfg.policies` and their (policy, setting) units with fingerprints."""
    opts = policy_options(cfg)
    fps = fingerprints(cfg, opts)
    policies = {name: make_policy(o["policy"], **{k: v for k, v in o.items() if k != "policy"})
                for name, o in opts.items()}
    units = [Unit(name, pol, s, setting_key(pol, s), fps[name]) for name, pol in policies.items()
             for s in settings_for(pol, cfg, name)]
    return units, policies


def main(cfg: Any) -> dict[str, Any]:
    """Run the A/B evaluation described by `cfg` (configs/evaluate.yaml); returns the results dict."""
    from omegaconf import OmegaConf
    from tqdm import tqdm

    out_dir = Path(cfg.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    units, policies = build_units(cfg)
    score = bool(cfg.get("score", True))
    needs = sorted({u.name for u in units if getattr(u.policy, "needs_llm", False)})
    if needs and not score:
        raise ValueError(f"score=false loads no decision LLM, but {needs} value cards with it: drop them from "
                         f"`policies` or set score=true")
    llm = load_decision_llm(cfg.llm, score=score)
    env = PolicyEnv(count_tokens=llm.count_tokens, llm=llm.backend, window_tokens=llm.window, memory=memory_config(cfg))
    decisions = select_decisions(load_episodes(cfg.data.path), cfg, llm.count_tokens)
    if not decisions:
        raise ValueError(f"no decisions in {cfg.data.path} pass the filters {dict(cfg.filters)}")
    config = OmegaConf.to_container(cfg, resolve=True)
    config.update(decision_llm=llm.name, llm_setup=llm.setup, data_digest=file_digest(cfg.data.path),
                  scorer_digest=file_digest(cfg.get("scorer")), hardware=hardware())
    # the run's provenance before its first record: a run stopped before results.json can still be merged and checked
    atomic_write_text(out_dir / RUN_CONFIG, json.dumps({"config": config}, indent=2, ensure_ascii=False))
    log = RecordLog(out_dir / "records.jsonl")
    todo = sum(not log.done(u.name, u.key, d.decision_id, u.fingerprint, cfg.retry_failed)
               for d in decisions for u in units)
    logger.info("%d decisions x %d policy/setting units: %d to run (%d done)", len(decisions), len(units), todo,
                len(decisions) * len(units) - todo)
    valuers = {n: _cached(p.make_valuer(env)) for n, p in policies.items()
               if isinstance(p, CardPolicy) and not p.needs_gold}
    encoder = run_encoder(cfg) if todo else None   # loaded once for the run, not once per episode's memory
    if todo:
        warm_up(units, decisions[0], valuers, env, llm, cfg, encoder)
    by_episode: dict[str, list[Decision]] = {}
    for d in decisions:
        by_episode.setdefault(d.dp.episode.episode_id, []).append(d)
    with tqdm(total=todo, desc="evaluate", unit="prompt", disable=not cfg.progress) as bar:
        for eps in by_episode.values():
            if any(not log.done(u.name, u.key, d.decision_id, u.fingerprint, cfg.retry_failed) for d in eps for u in units):
                run_episode(sorted(eps, key=lambda d: d.dp.index), units, valuers, env, llm, log, cfg, bar, encoder)
    current = {RecordLog.key(u.name, u.key, d.decision_id) for d in decisions for u in units}
    results = aggregate([r for k, r in log.records.items() if k in current], [d.decision_id for d in decisions],
                        [u.name for u in units], config, n_boot=cfg.n_boot, seed=cfg.seed)
    write_results(out_dir, results)
    return results


def hardware() -> dict[str, Any]:
    """Where the run happened (for the results' provenance)."""
    import torch

    return {"platform": platform.platform(), "cpu": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
            "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}


def print_summary(cfg: Any, results: dict[str, Any]) -> None:
    """The results table and where the files are (after `scripts/evaluate.py`)."""
    print(results_table(results))
    print(f"results: {cfg.out_dir}/results.json  table: {cfg.out_dir}/results.md  plot: {cfg.out_dir}/pareto.png")


if __name__ == "__main__":  # python -m damc.eval.harness KEY=VALUE ...  (configs: damc/configs/evaluate.yaml)
    from damc.cli import run

    run("evaluate", main, print_summary)
