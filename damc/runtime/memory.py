"""`DecisionAwareMemory`: the runtime an agent loop calls before every model call.

    add(message) ─► cards (tool calls merged with their results) ─► SQLite store + FAISS index
    build_context(messages, tools) ─► retrieve ─► value ─► select ─► compress ─► assemble ─► Context

* **retrieve**: candidates = FAISS top-N by similarity to the decision query ∪ the most recent M cards ∪
  pinned cards (tool errors, user constraints / changed requirements), capped at `max_candidates`;
  cards of the current turn are never candidates (that turn is kept verbatim).
* **value**: a pluggable `Valuer` (default: `scorer=PATH`, or the student shipped in the package when it passes
  its dev gate (`damc.runtime.default_scorer`), through its learned combiner — a calibrated predicted delta — over
  the `max_scored` candidates best by BM25 + cosine fusion; else the heuristic prior), behind a TTL cache.
* **select**: a pluggable `Selector` under a token budget (default: 65 % of what the context window
  has left after the system prompt, tools and the current turn).
* **compress**: a pluggable `Compressor` (default: templates), one `[card_id]` line per card.
* **assemble**: `damc.runtime.assemble.assemble` — the caller's own chat format: its leading system / developer
  messages verbatim, the fenced and labelled "Relevant history" records in a `user` message of their own
  (`placement="message"`, default; or inside the last instruction message, `placement="system"`), then the
  current turn verbatim. No system prompt or tool-call syntax is added: tools stay in the caller's `tools`.

Everything is explainable (`explain(context)`), expandable (`expand(card_id)`) and persisted under `path`.
Mem0's verbs — `get_all`, `search`, `get`, `history`, `delete`, `delete_all`, `reset` — come from
`damc.runtime.verbs.MemoryVerbs`; erasure leaves no text of the erased cards in any file of the store.
Asyncio code awaits `abuild_context` / `aadd_messages` (`damc.runtime.aio`: a worker thread per call).

Conversation identity (`damc.runtime.identity`, `.sessions`): messages that do not continue their session are another
conversation (a derived session `{session_id}~{hash}`, or `ConversationMismatchError`); `Context.session_id` says which.

Scopes (Mem0's convention): every card belongs to a `user_id` (default "default") and an optional `agent_id`;
`session_id` is the conversation (Mem0's `run_id`). Set the memory's scope when opening it
(`DecisionAwareMemory(path, user_id="alice")`) or per call (`build_context(..., user_id="bob")`). Retrieval,
lifecycle, values, `explain` data and `expand` never cross a scope; within one, other sessions' cards are
candidates only with `share_sessions=True`. `expand` of a card that only another scope holds raises
`PermissionError`.

Example:
    >>> memory = DecisionAwareMemory("runs/mem", user_id="alice")
    >>> ctx = memory.build_context(messages, tools=tools, session_id="chat-42")
    >>> reply = client.chat.completions.create(model=..., messages=ctx.messages, tools=tools)
    >>> print(memory.explain(ctx))
"""

from __future__ import annotations

import logging
import os
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence

import numpy as np

from damc.cards import Card
from damc.cards import card_id as make_card_id
from damc.models import DEFAULT_ENCODER
from damc.prompting import PLACEMENTS, neutralize_line
from damc.query import render_decision_query
from damc.runtime import lifecycle
from damc.runtime.aio import AsyncMethods
from damc.runtime.assemble import assemble, leading_instructions, prompt_tokens, split_conversation
from damc.runtime.compress import COMPRESSORS, Compressor
from damc.runtime.config import MemoryConfig
from damc.runtime.context import Context, DroppedCard, SelectedCard
from damc.runtime.identity import (
    ON_MISMATCH,
    ConversationMismatchError,
    DigestCache,
    TextMemo,
    clean_messages,
    history_tokens,
    message_digest,
)
from damc.runtime.index import IndexConfig
from damc.runtime.ingest import check_call
from damc.runtime.observe import ingest_messages, observe_session
from damc.runtime.paths import created_by_opening, remove_created
from damc.runtime.scope import Scope, tag_card
from damc.runtime.scorer_metadata import DEFAULT_K_MIN
from damc.runtime.select import Selector, Threshold, TopK, check_k_min, default_budget
from damc.runtime.storage import is_server_url, open_storage
from damc.runtime.store import StoreConfig, StoredCard
from damc.runtime.valuers import CachedValuer, HeuristicValuer, ScorerValuer, Valuer, as_valuer
from damc.runtime.verbs import MemoryVerbs

if TYPE_CHECKING:
    from damc.runtime.explain import Explanation

logger = logging.getLogger(__name__)

STAGES = ("ingest", "retrieve", "value", "select", "compress", "assemble")


VALUER_NAMES = ("default", "shipped", "heuristic")   # DecisionAwareMemory(valuer="...") by name


def default_valuer(scorer: Any = None, config: MemoryConfig | None = None) -> Valuer:
    """The valuer `DecisionAwareMemory` builds when none is given (the A/B harness calls this same function).

    With a scorer (a `CardScorer`, or the path of an exported scorer): the student through its learned combiner
    (`ScorerValuer`: calibrated predicted delta). Without one: the same with the scorer shipped in the package
    (`damc.runtime.default_scorer`, loaded once per process) when its dev figures pass the dev gate (at or above
    BM25, similarity and RRF in key hit on every dev split); else — below the gate, or none shipped (one warning) —
    the heuristic prior. Either way behind a TTL cache of `value_ttl_s` seconds. `named_valuer("heuristic")`
    is the heuristic prior by choice.
    """
    config = config or MemoryConfig()
    if scorer is None:
        from damc.runtime.default_scorer import gated_default_scorer

        scorer = gated_default_scorer()   # None: none shipped (warned once) or below retrieval on dev (said once)
    valuer: Valuer = HeuristicValuer() if scorer is None else ScorerValuer.from_pretrained(
        str(scorer), max_scored=config.max_scored) if isinstance(scorer, (str, os.PathLike)) \
        else ScorerValuer(scorer, max_scored=config.max_scored)
    return CachedValuer(valuer, ttl_s=config.value_ttl_s)


def named_valuer(name: str, scorer: Any = None, config: MemoryConfig | None = None) -> Valuer:
    """`DecisionAwareMemory(valuer=name)`: "default" (`default_valuer(scorer)`), "shipped" (the student shipped in
    the package, whatever its dev gate says) or "heuristic" (the heuristic prior, no scorer loaded), behind the same
    TTL cache.

    Raises:
        ValueError: another name, or "shipped" when the package ships no readable scorer.
    """
    if name == "default":
        return default_valuer(scorer, config)
    if name == "shipped":
        from damc.runtime.default_scorer import load_default_scorer

        shipped = load_default_scorer()
        if shipped is None:
            raise ValueError("DecisionAwareMemory(valuer='shipped'): the package ships no readable scorer "
                             "(see the warning above; $DAMC_SCORER_DIR points at another scorer directory)")
        return default_valuer(shipped, config)
    if name == "heuristic":
        return CachedValuer(HeuristicValuer(), ttl_s=(config or MemoryConfig()).value_ttl_s)
    raise ValueError(f"DecisionAwareMemory(valuer={name!r}): a valuer name must be one of {VALUER_NAMES} "
                     f"(or pass a Valuer object)")


def default_selector(valuer: Valuer, config: MemoryConfig | None = None) -> Selector:
    """`Threshold(τ, k_min=...)` when the valuer is a scorer whose export chose a threshold on dev
    (`damc_scorer.json` "threshold", in the combiner's delta units), else `TopK(12)`.

    The floor `k_min` (the best `k_min` cards that fit are kept whatever τ says) is `config.k_min` when set,
    else the scorer's own, chosen on dev with τ (`ScorerMetadata.k_min`; `DEFAULT_K_MIN` for older exports)."""
    inner = getattr(valuer, "inner", valuer)
    meta = getattr(getattr(inner, "scorer", None), "metadata", None)  # ScorerMetadata
    tau = getattr(meta, "threshold", None)
    if getattr(inner, "combiner", None) is not None and tau is not None:
        k_min = config.k_min if config is not None and config.k_min is not None else \
            getattr(meta, "k_min", DEFAULT_K_MIN)
        return Threshold(float(tau), k_min=k_min)
    return TopK(12)


def with_age(sc: StoredCard, session_id: str, u: int) -> Card:
    """The candidate card with its age (`meta["age"]`: messages between its last message and the current user
    turn `u`) when it belongs to the session being decided (cards of other sessions carry no age), tagged with
    its scope (`meta["scope"]`)."""
    card = tag_card(sc.card, sc.scope)
    if sc.session_id == session_id:
        last = card.result_index if card.result_index is not None else card.position
        card.meta = {**(card.meta or {}), "age": max(0, u - last)}
    return card


class DecisionAwareMemory(MemoryVerbs, AsyncMethods):
    """Decision-aware memory for a tool-calling agent (see module docstring).

    Args:
        path: None (in memory), a directory (`cards.db` + `cards.faiss` inside), or a `.db` file path, or a
            PostgreSQL server: a `postgresql://` URL or a `psycopg_pool.ConnectionPool` (`damc.runtime.storage`).
        valuer: how cards are valued (default: `default_valuer(scorer)` — the student through its learned
            combiner: `scorer` when given, else the scorer shipped in the package, `damc/assets/scorer/`, when it
            passes its dev gate; otherwise the heuristic prior). `valuer="shipped"` chooses the shipped student
            whatever its gate says, `valuer="heuristic"` the cold-start prior (nothing loaded); a `Valuer` object
            is used as is.
        selector: how cards are chosen (default: `default_selector` — the scorer's dev-chosen `Threshold(τ)` with
            its floor of `k_min` cards, else `TopK(12)`; always under the budget).
        compressor: how kept cards are written (default: `config.compressor`, "template" — `TemplateCompressor`).
        scorer: a `CardScorer` or a path to an exported one (`CardScorer.from_pretrained`; default: the shipped
            one when it passes its dev gate, `damc.runtime.default_scorer`).
        encoder: sentence encoder for the FAISS index (registry name, path, or an encoder object); how a name
            runs is `config.encoder_backend` (a scorer exported with `encoder/` brings its ONNX encoder).
        tokenizer: the decision model's tokenizer for token counts: a registry name / GGUF / tokenizer dir
            (read by `damc.tokens.load_token_counter`, no weights, no torch), a tokenizer object, or None (chars/4).
        user_id: the default scope's user (`MemoryConfig.user_id`); every method also takes `user_id` / `agent_id`
            per call.
        config: every setting (`MemoryConfig`: context window, session, agent, share_sessions, budgets, …);
            `user_id` above overrides its user. `context_window=`, `session_id=`, `agent_id=` and
            `share_sessions=` as keywords still work for one release, with a `DeprecationWarning`.
        index_config / store_config: FAISS and SQLite settings (`PgConfig` as `store_config` for PostgreSQL).

    Example:
        >>> memory = DecisionAwareMemory("memory_dir", user_id="alice", config=MemoryConfig(context_window=32_768))
    """

    def __init__(self, path: str | os.PathLike | None = None, *, valuer: Valuer | str | None = None,
                 selector: Selector | None = None, compressor: Compressor | None = None, scorer: Any = None,
                 encoder: str | Any = DEFAULT_ENCODER, tokenizer: str | Any | None = "smollm2-135m",
                 context_window: int | None = None, session_id: str | None = None, user_id: str | None = None,
                 agent_id: str | None = None, share_sessions: bool | None = None, config: MemoryConfig | None = None,
                 index_config: IndexConfig | None = None, store_config: StoreConfig | None = None):
        self.config = config or MemoryConfig()
        if user_id is not None:
            self.config.user_id = user_id
        moved = {"context_window": context_window, "session_id": session_id, "agent_id": agent_id,
                 "share_sessions": share_sessions}
        for name, value in moved.items():   # settings belong on MemoryConfig; the keywords stay for one release
            if value is not None:
                warnings.warn(f"DecisionAwareMemory({name}=...) is deprecated and will be removed in the next "
                              f"release: pass config=MemoryConfig({name}=...)", DeprecationWarning, stacklevel=2)
                setattr(self.config, name, value)
        self.scope = Scope(self.config.user_id, self.config.agent_id)  # raises ValueError on a bad id
        if self.config.placement not in PLACEMENTS:
            raise ValueError(f"MemoryConfig.placement must be one of {PLACEMENTS}, got {self.config.placement!r}")
        if compressor is None and self.config.compressor not in COMPRESSORS:
            raise ValueError(f"MemoryConfig.compressor must be one of {sorted(COMPRESSORS)}, "
                             f"got {self.config.compressor!r}")
        if self.config.k_min is not None:
            try:
                check_k_min(self.config.k_min)
            except ValueError as e:
                raise ValueError(f"MemoryConfig.{e} (or None: the scorer's own)") from None
        if self.config.on_mismatch not in ON_MISMATCH:
            raise ValueError(f"MemoryConfig.on_mismatch must be one of {ON_MISMATCH}, got {self.config.on_mismatch!r}")
        self._tokenizer_spec = tokenizer
        self._tokenizer: Any = None
        self._memo = TextMemo()                    # big strings: cleaned and hashed once per object
        self._message_tokens = DigestCache(16_384)   # message digest -> tokens it adds to a prompt
        from damc.models import REGISTRY

        if isinstance(tokenizer, str) and tokenizer not in REGISTRY:
            self.tokenizer    # a path or hub id: a missing or corrupt file fails here, naming it
        server = is_server_url(path)
        created = [] if server else created_by_opening(path)
        try:
            self.path = None if server or not path else Path(path)   # None for a PostgreSQL memory
            scorer_dir = scorer if isinstance(scorer, (str, os.PathLike)) else getattr(scorer, "path", None)
            self.store, self.index = open_storage(path, encoder, store_config=store_config,
                                                  index_config=index_config,
                                                  encoder_backend=self.config.encoder_backend, scorer_dir=scorer_dir)
            self.valuer = named_valuer(valuer, scorer, self.config) if isinstance(valuer, str) else \
                valuer if valuer is not None else default_valuer(scorer, self.config)
            self.selector = selector or default_selector(self.valuer, self.config)
            self.compressor = compressor or COMPRESSORS[self.config.compressor]()
        except BaseException:   # leave nothing behind: no half-made directory for the next attempt to trip on
            if getattr(self, "store", None) is not None:
                self.store.close()
            remove_created(created)
            raise

    def _scope(self, user_id: str | None, agent_id: str | None) -> Scope:
        """The memory's scope with per-call ids overriding it."""
        return Scope.of(user_id, agent_id, self.scope)

    # ------------------------------------------------------------------ tokens

    @property
    def tokenizer(self) -> Any:
        if self._tokenizer is None and self._tokenizer_spec is not None:
            if isinstance(self._tokenizer_spec, str):  # tokenizer files only (GGUF metadata / tokenizer.json)
                from damc.tokens import load_token_counter

                self._tokenizer = load_token_counter(self._tokenizer_spec)
            else:
                self._tokenizer = self._tokenizer_spec
        return self._tokenizer

    def count_tokens(self, text: str) -> int:
        tok = self.tokenizer
        if tok is None:
            return max(1, (len(text) + 3) // 4) if text else 0
        return len(tok.encode(text, add_special_tokens=False)) if text else 0

    def _count_many(self, texts: list[str]) -> list[int]:
        tok = self.tokenizer
        if tok is None or not texts:
            return [self.count_tokens(t) for t in texts]
        return [len(ids) for ids in tok(texts, add_special_tokens=False)["input_ids"]]

    def _prompt_tokens(self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None = None) -> int:
        return prompt_tokens(messages, self.tokenizer, tools=tools)

    # ------------------------------------------------------------------ ingestion

    def add(self, message: dict[str, Any], session_id: str | None = None, *, user_id: str | None = None,
            agent_id: str | None = None) -> list[str]:
        """Record one OpenAI chat message; returns the ids of the cards written or updated."""
        return self.add_messages([message], session_id, user_id=user_id, agent_id=agent_id)

    def add_messages(self, messages: Iterable[dict[str, Any]], session_id: str | None = None, *,
                     user_id: str | None = None, agent_id: str | None = None) -> list[str]:
        """Record OpenAI chat messages in order (one transaction) in a scope's session; returns the card ids
        written or updated.

        Tool calls become cards at once (status pending) and are merged with their result when the
        `tool` message arrives, in this batch or a later one. Text beyond `max_card_chars` is cut and the cut
        recorded on the card (`meta["truncated"]`).

        Raises:
            EpisodeFormatError: a malformed message (says which message, which field, what was expected);
                nothing of the batch is written.
        """
        msgs = clean_messages(list(messages), self._memo)
        return ingest_messages(self, msgs, session_id or self.config.session_id, self._scope(user_id, agent_id),
                               [message_digest(m, self._memo) for m in msgs])


    # ------------------------------------------------------------------ retrieval

    def candidates(self, query: str, *, session_id: str | None = None, from_position: int | None = None,
                   user_id: str | None = None, agent_id: str | None = None, config: MemoryConfig | None = None
                   ) -> tuple[list[StoredCard], dict[str, list[str]]]:
        """Candidate cards for a query: FAISS top-N ∪ recent ∪ pinned (capped), and why each is one.

        Only the scope's cards, and only the session's own unless `share_sessions`; the session's cards at
        positions ≥ `from_position` (the current turn) are left out. `config` overrides the memory's settings for
        this call (`search` widens `top_n` to its `limit`).
        """
        cfg = config or self.config
        sid = session_id or cfg.session_id
        scope = self._scope(user_id, agent_id)
        only = None if cfg.share_sessions else sid
        self.index.sync()
        rowids, _ = self.index.search_text(query, cfg.top_n, scope, only) if cfg.top_n > 0 else ([], None)
        found: dict[str, StoredCard] = {}
        why: dict[str, list[str]] = {}

        def keep(sc: StoredCard) -> bool:
            return sc.tier == "hot" and sc.scope == scope and (only is None or sc.session_id == only) and not (
                from_position is not None and sc.session_id == sid and sc.card.position >= from_position)

        groups = [("similar", self.store.by_rowids([int(r) for r in rowids], scope)),
                  ("recent", self.store.recent(cfg.recent + 8, scope=scope, session_id=only) if cfg.recent > 0 else []),
                  ("pinned", self.store.pinned(cfg.pinned + 8, scope=scope, session_id=only) if cfg.pinned > 0 else [])]
        limits = {"similar": cfg.top_n, "recent": cfg.recent, "pinned": cfg.pinned}
        for name, group in groups:
            n = 0
            for sc in group:
                if not keep(sc) or n >= limits[name]:
                    continue
                n += 1
                why.setdefault(sc.card.card_id, []).append(name)
                found.setdefault(sc.card.card_id, sc)
        out = list(found.values())
        if len(out) > cfg.max_candidates:
            # pinned and recent first (they are few and cheap to miss), then the most similar
            rank = {"pinned": 0, "recent": 1, "similar": 2}
            out.sort(key=lambda sc: min(rank[w] for w in why[sc.card.card_id]))
            out = out[: cfg.max_candidates]
        return out, why

    # ------------------------------------------------------------------ build

    def observe(self, messages: Sequence[dict[str, Any]], session_id: str | None = None, *,
                user_id: str | None = None, agent_id: str | None = None) -> int:
        """Record the messages of a live conversation the store has not seen yet, up to its current user turn
        (that turn and after stay out: `build_context` keeps them verbatim), and embed the new cards.

        `build_context` calls it itself; call it directly to ingest as messages arrive (then `build_context`
        spends nothing on ingestion). Messages that do not continue the session are another conversation (see
        the module docstring: a derived session, or `ConversationMismatchError`). Returns the number of messages
        recorded.
        """
        msgs = clean_messages(list(messages), self._memo)
        return self._observe(msgs, session_id, self._scope(user_id, agent_id))[1]

    def _observe(self, msgs: list[Any], session_id: str | None, scope: Scope) -> tuple[str, int, int]:
        return observe_session(self, msgs, session_id, scope)

    def retrieve(self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None = None, *,
                 session_id: str | None = None, user_id: str | None = None, agent_id: str | None = None
                 ) -> tuple[str, list[Card], dict[str, list[str]]]:
        """The first two stages of `build_context` alone — ingest, then retrieve — with nothing valued, packed or
        recorded: `(decision query, candidate cards with their ages, why each is a candidate)`, exactly the
        candidates `build_context` would value for these messages, oldest first (as a context lists them). The
        labels read the runtime's candidate sets this way (`damc.teacher.candidates.RuntimeCandidates`).

        Raises:
            EpisodeFormatError / ConversationMismatchError: as `build_context`.
        """
        msgs, tools = self._checked(messages, tools)
        _, query, stored, cards, why = self._retrieve(msgs, tools, session_id or self.config.session_id,
                                                      self._scope(user_id, agent_id), {})
        order = sorted(range(len(cards)), key=lambda i: (stored[i].t, cards[i].position, cards[i].card_id))
        return query, [cards[i] for i in order], why

    def _checked(self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None
                 ) -> tuple[list[Any], Sequence[dict[str, Any]] | None]:
        """A call's messages and tools checked (`check_call`) and cleaned: lone surrogates out before anything is
        written or tokenized."""
        msgs, tools = check_call(messages, tools)
        return clean_messages(msgs, self._memo), (clean_messages(tools, self._memo) if tools is not None else None)

    def _retrieve(self, msgs: list[Any], tools: Sequence[dict[str, Any]] | None, sid: str, scope: Scope,
                  timings: dict[str, float]) -> tuple[str, str, list[StoredCard], list[Card], dict[str, list[str]]]:
        """Ingest (`timings["ingest"]`) then retrieve (`timings["retrieve"]`): (session used, query, stored
        candidates, their cards with ages, why)."""
        t = time.perf_counter()
        sid, _, u = self._observe(msgs, sid, scope)   # the session used, and where its current turn starts
        timings["ingest"] = (time.perf_counter() - t) * 1000

        t = time.perf_counter()
        query = render_decision_query(msgs, list(tools) if tools else None)
        stored, why = self.candidates(query, session_id=sid, from_position=u, user_id=scope.user_id,
                                      agent_id=scope.agent_id)
        cards = [with_age(sc, sid, u) for sc in stored]
        timings["retrieve"] = (time.perf_counter() - t) * 1000
        return sid, query, stored, cards, why

    def build_context(self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None = None,
                      system: str | None = None, budget_tokens: int | None = None, *, session_id: str | None = None,
                      user_id: str | None = None, agent_id: str | None = None, now: float | None = None,
                      valuer: Valuer | None = None, selector: Selector | None = None,
                      compressor: Compressor | None = None) -> Context:
        """Assemble the prompt for the next decision: ingest → retrieve → value → select → compress → assemble.

        Args:
            messages: the live conversation (OpenAI format). Messages before the current (last) user
                turn that the store has not seen yet are recorded first; the current turn and after are
                kept verbatim.
            tools: OpenAI tool schemas available now (they steer the decision query and count against the
                window; they are not written into the messages: pass them to your API's `tools` yourself).
            system: system prompt sent as one leading system message instead of the conversation's own
                system / developer messages (default: those, verbatim; none when the conversation has none).
            budget_tokens: memory budget (default: `budget_fraction` of what the window has left).
            session_id: session of `messages` (default: the memory's).
            user_id / agent_id: scope of the conversation (default: the memory's); only its cards are candidates.
            now: decision time in epoch seconds (default: now).
            valuer / selector / compressor: use these for this call instead of the memory's own (e.g. to
                compare valuers on one store); the same retrieval, packing and assembly run either way.
        """
        t_start = time.perf_counter()
        msgs, tools = self._checked(messages, tools)
        system = self._memo.clean(system) if isinstance(system, str) else system
        sid = session_id or self.config.session_id
        scope = self._scope(user_id, agent_id)
        now = time.time() if now is None else now
        valuer, selector = valuer or self.valuer, selector or self.selector
        _, history, turn, u = split_conversation(msgs)
        instructions = [{"role": "system", "content": system}] if system is not None else leading_instructions(msgs)
        timings: dict[str, float] = {}

        sid, query, stored, cards, why = self._retrieve(msgs, tools, sid, scope, timings)

        t = time.perf_counter()
        valuer = as_valuer(valuer)
        valuer.bind(self)
        notes: list[str | None] = [None] * len(cards)
        if cards:
            values, notes = valuer.value_with_notes(query, cards, now)
        else:
            values = np.zeros(0, dtype=np.float32)
        timings["value"] = (time.perf_counter() - t) * 1000

        ctx = self._pack(query, stored, cards, values, why, (instructions, tools, history, turn), budget_tokens, now,
                         selector, compressor or self.compressor, timings, notes,
                         who=(sid, scope, valuer.name), t_start=t_start)
        if self.config.record:
            self.store.record_values({c.card_id: float(v) for c, v in zip(cards, values)}, scope)
            self.store.save_context(sid, ctx.to_dict(), scope)
        logger.debug("context for %s/%s: %d/%d cards kept, %d -> %d tokens, %.1f ms", scope, sid, len(ctx.selected),
                     len(cards), ctx.tokens_before, ctx.tokens_after, ctx.timings_ms["total"])
        return ctx

    def _pack(self, query: str, stored: list[StoredCard], cards: list[Card], values: np.ndarray,
              why: dict[str, list[str]], parts: tuple, budget_tokens: int | None, now: float, selector: Selector,
              compressor: Compressor, timings: dict[str, float], notes: Sequence[str | None] | None = None, *,
              who: tuple[str, Scope, str], t_start: float) -> Context:
        """select → compress → assemble over valued candidates; `parts` = (instructions, tools, history, turn),
        `who` = (session id used, scope, valuer name); the timings' total runs from `t_start`."""
        instructions, tools, history, turn = parts
        notes = list(notes) if notes is not None else [None] * len(cards)
        cfg = self.config
        t = time.perf_counter()
        base_tokens = self._prompt_tokens(assemble(instructions, [], turn, placement=cfg.placement), tools)
        budget = budget_tokens if budget_tokens is not None else \
            default_budget(cfg.context_window, base_tokens, cfg.budget_fraction)
        line_tokens = self._count_many([neutralize_line(f"[{c.card_id}] {text}")
                                        for c, text in zip(cards, compressor.preview(cards, query))])
        sel = selector.select(cards, values, line_tokens, budget, now)
        timings["select"] = (time.perf_counter() - t) * 1000

        t = time.perf_counter()
        kept = sorted(sel.kept, key=lambda i: (stored[i].t, cards[i].position, cards[i].card_id))
        compressed = compressor.compress([cards[i] for i in kept], query)
        lines = [neutralize_line(c.line) for c in compressed]  # as the prompt shows them
        kept_tokens = self._count_many(lines)
        timings["compress"] = (time.perf_counter() - t) * 1000

        t = time.perf_counter()
        out_msgs = assemble(instructions, lines, turn, placement=cfg.placement)
        tokens_after = self._prompt_tokens(out_msgs, tools)
        tokens_before = base_tokens + history_tokens(history, self._prompt_tokens, self._message_tokens, self._memo)
        timings["assemble"] = (time.perf_counter() - t) * 1000

        floor = set(sel.floor)
        selected = [SelectedCard(cards[i].card_id, float(values[i]), float(sel.scores[i]), kept_tokens[j],
                                 cards[i].n_tokens, compressed[j].text, lines[j], compressed[j].source,
                                 why[cards[i].card_id], cards[i], notes[i], "floor" if i in floor else "selector")
                    for j, i in enumerate(kept)]
        dropped = [DroppedCard(cards[i].card_id, float(values[i]), float(sel.scores[i]), line_tokens[i],
                               cards[i].n_tokens, reason, why[cards[i].card_id], notes[i])
                   for i, reason in sorted(sel.dropped.items(), key=lambda kv: -float(sel.scores[kv[0]]))]
        sid, scope, valuer_name = who
        tau = getattr(selector, "min_value", None)
        timings["total"] = (time.perf_counter() - t_start) * 1000
        return Context(messages=out_msgs, selected=selected, dropped=dropped, decision_query=query,
                       budget_tokens=budget, tokens_before=tokens_before, tokens_after=tokens_after,
                       memory_tokens=sum(kept_tokens), timings_ms=timings, n_candidates=len(cards),
                       n_hot=self.store.count("hot", scope), session_id=sid, valuer=valuer_name,
                       selector=getattr(selector, "name", type(selector).__name__),
                       threshold=None if tau is None else float(tau), k_min=int(getattr(selector, "k_min", 0) or 0),
                       current_turn=turn,
                       user_id=scope.user_id, agent_id=scope.agent_id)

    # ------------------------------------------------------------------ inspection

    def expand(self, card_id: str, *, user_id: str | None = None, agent_id: str | None = None) -> Card:
        """The raw card behind a `[card_id]` line (hot or archived), in the memory's scope (or the one given).

        Raises:
            PermissionError: the card belongs to another scope only.
            KeyError: no scope holds a card with this id.
        """
        return self._stored_or_raise(card_id, self._scope(user_id, agent_id)).card

    def explain(self, context: Context, print_: bool = False) -> "Explanation":
        """Which cards were kept or dropped, with scores, tokens saved and why (`str()` it to read)."""
        from damc.runtime.explain import Explanation

        exp = Explanation.from_context(context)
        if print_:
            print(exp)
        return exp

    # ------------------------------------------------------------------ lifecycle

    def archive(self, min_age_s: float = 7 * 86400, max_value: float = 0.2, *, keep_pinned: bool = True,
                now: float | None = None, user_id: str | None = None, agent_id: str | None = None) -> list[str]:
        """Move a scope's cards older than `min_age_s` whose best value so far is ≤ `max_value` to the cold tier
        (`damc.runtime.lifecycle.archive`). Returns the archived card ids."""
        return lifecycle.archive(self, min_age_s, max_value, keep_pinned=keep_pinned, now=now,
                                 scope=self._scope(user_id, agent_id))

    def merge_similar(self, threshold: float = 0.92, *, neighbors: int = 16, user_id: str | None = None,
                      agent_id: str | None = None) -> list[Card]:
        """Merge a scope's near-duplicate hot cards into one card each, keeping every atom
        (`damc.runtime.lifecycle.merge_similar`). Returns the new cards."""
        return lifecycle.merge_similar(self, threshold, neighbors=neighbors, scope=self._scope(user_id, agent_id),
                                       share_sessions=self.config.share_sessions)

    # ------------------------------------------------------------------ housekeeping

    def flush(self) -> None:
        """Persist the FAISS index now (SQLite writes are already durable)."""
        self.index.save(force=True)

    def close(self) -> None:
        self.flush()
        self.store.close()

    def __enter__(self) -> "DecisionAwareMemory":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __len__(self) -> int:
        """Hot cards of the memory's scope."""
        return self.store.count("hot", self.scope)


__all__ = ["DecisionAwareMemory", "MemoryConfig", "Context", "SelectedCard", "DroppedCard", "default_valuer", "named_valuer",
           "make_card_id", "ConversationMismatchError"]
