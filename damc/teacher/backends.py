"""Teacher backends: per-token log-probabilities of an action given a decision context.

Two backends share one small interface (`Teacher`):

* `HFTeacher` — any local Hugging Face causal LM (default `smollm2-135m` from the offline registry): the one
  local backend, `damc.llm.LocalLLM`, whose scoring engine takes many variants of one context and reuses the
  KV cache of the prefix they share with the first variant (the full context), so leave-one-out only
  recomputes what follows the removed card; precision by `damc.llm.dtype_name`.
* `VLLMTeacher` — an OpenAI-compatible server that returns prompt log-probabilities
  (`/v1/completions` with `echo=True, logprobs=1`, or vLLM's `prompt_logprobs`), for large teachers.
  The action's tokens are found by character offsets (`text_offset`), so no local tokenizer is needed.
  vLLM's automatic prefix caching plays the role of the KV reuse.

Contexts are chat messages rendered with `damc.prompting.format_prompt`; the tokens of a context are
the concatenated tokens of its `damc.prompting.prompt_segments` (one piece per message), so variants
that differ by whole messages share an exact token prefix. The action is tokenized on its own and
appended after the generation prompt.

Example:
    >>> t = HFTeacher("smollm2-135m")
    >>> lp = t.log_prob(messages, 'get_order(order_id="88412")')      # (n_action_tokens,)
    >>> gold, *others = t.log_prob_many(messages, [gold_action, *distractors])
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from typing import Any, Sequence

import numpy as np

from damc.llm import LocalLLM, ScoreStats
from damc.prompting import prompt_segments

logger = logging.getLogger(__name__)


class TeacherServerError(RuntimeError):
    """The log-probability server failed, or answered without prompt log-probabilities."""


class Teacher(ABC):
    """Scores actions under a decision context. Subclasses set `model_id` and `tokenizer`."""

    model_id: str
    tokenizer: Any
    max_context_tokens: int | None = None

    @abstractmethod
    def score_segment_variants(self, variants: Sequence[Sequence[str]], action: str, *,
                               reuse: bool = True) -> tuple[list[np.ndarray], ScoreStats]:
        """Per-token log-probs of `action` after each variant (a list of prompt segments).

        `variants[0]` is the reference (usually the full context): with `reuse`, a backend may reuse its
        KV cache for the prefix each other variant shares with it. Returns one `(n_action_tokens,)`
        array per variant, and the cost.
        """

    def score_variant_actions(self, variants: Sequence[Sequence[str]], actions: Sequence[str]
                              ) -> tuple[list[list[np.ndarray]], ScoreStats]:
        """Per-token log-probs of every action after every variant: `out[a][v]` is `(n_tokens of action a,)`.
        Default: one `score_segment_variants` call per action; `HFTeacher` runs each variant's context once and
        the actions on top of it."""
        out, stats = [], ScoreStats()
        for a in actions:
            lps, st = self.score_segment_variants(variants, a, reuse=True)
            out.append(lps)
            stats += st
        return out, stats

    def log_probs(self, contexts: Sequence[Sequence[dict]], action: str) -> list[np.ndarray]:
        """`log_prob` for several contexts and one action (batched; shared prefixes reused)."""
        # tokenizer None (a server teacher without a local tokenizer): the plain fallback template
        variants = [prompt_segments(self.tokenizer, list(c)) for c in contexts]
        return self.score_segment_variants(variants, action)[0]

    def log_prob(self, context_messages: Sequence[dict], action: str) -> np.ndarray:
        """Per-token log-probs `(n_action_tokens,)` of `action` as the assistant's next message."""
        return self.log_probs([context_messages], action)[0]

    def log_prob_many(self, context_messages: Sequence[dict], actions: Sequence[str]) -> list[np.ndarray]:
        """Per-token log-probs of several actions after the same context (e.g. gold vs distractors)."""
        return [self.log_prob(context_messages, a) for a in actions]

    def count_tokens(self, text: str) -> int:
        """Token count of a text under the teacher's tokenizer (chars/4 when it has none)."""
        if self.tokenizer is None:
            return max(1, (len(text) + 3) // 4) if text else 0
        return len(self.tokenizer.encode(text, add_special_tokens=False)) if text else 0


# ----------------------------------------------------------------------------- Hugging Face

class HFTeacher(LocalLLM, Teacher):
    """A local Hugging Face causal LM as teacher: `damc.llm.LocalLLM` (KV-cache prefix reuse, batched scoring,
    the one dtype policy) with the `Teacher` interface — the same forward as the harness's decision LLM.

    Args:
        model: registry name ("smollm2-135m", "gemma3-270m"), HF id or local path.
        dtype: "auto" (`damc.llm.dtype_name`: `$DAMC_DTYPE`, else bf16 where the hardware has it, else fp32) |
            "float32" | "bfloat16" | "float16".
        device: "auto" (cuda if available) | "cpu" | "cuda:N".
        batch_size: sequences per forward pass.
        max_context_tokens: model window in tokens; None reads `max_position_embeddings`.
        threads: torch CPU threads (None: as they are).

    Example:
        >>> t = HFTeacher("smollm2-135m", dtype="float32")
        >>> float(t.log_prob(msgs, "ls(a=true)").sum())
    """


# ----------------------------------------------------------------------------- vLLM / OpenAI-compatible

class VLLMTeacher(Teacher):
    """A teacher behind an OpenAI-compatible server with prompt log-probs (vLLM).

    Each variant is sent as text `prompt + action` to `/v1/completions` with `echo=True, logprobs=1`;
    the action's tokens are those whose `text_offset` falls inside the action (vLLM's `prompt_logprobs`
    with decoded tokens is understood too). Requests retry with exponential backoff on connection
    errors, timeouts, 429 and 5xx.

    Args:
        url: server base URL, e.g. "http://localhost:8000" (with or without "/v1").
        model: the served model name.
        tokenizer: optional HF tokenizer name/path for the chat template (else the plain fallback
            template of `damc.prompting`; use the served model's tokenizer for real work).
        timeout: seconds per request.
        retries: extra attempts after a failed request.
        backoff: first retry delay in seconds (doubled each retry).
        batch_size: prompts per request.
        max_tokens: tokens to generate (1: vLLM rejects 0 in some versions; generated text is ignored).
        api_key: sent as a Bearer token when set.
        max_context_tokens: the server model's window (used to truncate contexts; chars/4 estimate
            when no tokenizer is given).
    """

    def __init__(self, url: str = "http://localhost:8000", model: str = "???", tokenizer: str | None = None,
                 timeout: float = 120.0, retries: int = 4, backoff: float = 1.0, batch_size: int = 16,
                 max_tokens: int = 1, api_key: str | None = None, max_context_tokens: int | None = 32768):
        self.url = url.rstrip("/")
        self.endpoint = self.url + ("/completions" if self.url.endswith("/v1") else "/v1/completions")
        self.model_id = str(model)
        self.tokenizer = None
        if tokenizer:
            from damc.models import load_tokenizer

            self.tokenizer = load_tokenizer(tokenizer)
        self.timeout, self.retries, self.backoff = float(timeout), int(retries), float(backoff)
        self.batch_size, self.max_tokens, self.api_key = max(1, int(batch_size)), int(max_tokens), api_key
        self.max_context_tokens = max_context_tokens

    def score_segment_variants(self, variants: Sequence[Sequence[str]], action: str, *,
                               reuse: bool = True) -> tuple[list[np.ndarray], ScoreStats]:
        if not action:
            raise ValueError("the action is empty: nothing to score")
        prompts = ["".join(v) for v in variants]
        stats = ScoreStats(n_forward=len(prompts))
        out: list[np.ndarray] = []
        for b in range(0, len(prompts), self.batch_size):
            batch = prompts[b: b + self.batch_size]
            choices = self._complete([p + action for p in batch])
            for p, ch in zip(batch, choices):
                lp, n_tok = self._action_logprobs(ch, len(p), len(p) + len(action))
                out.append(lp)
                stats.n_forward_tokens += n_tok
        stats.n_naive_tokens = stats.n_forward_tokens
        return out, stats

    def _complete(self, prompts: list[str]) -> list[dict]:
        """POST one completions request; returns the choices in prompt order."""
        import requests

        body = {"model": self.model_id, "prompt": prompts, "max_tokens": self.max_tokens, "temperature": 0.0,
                "echo": True, "logprobs": 1}
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        last = ""
        for attempt in range(self.retries + 1):
            if attempt:
                delay = self.backoff * 2 ** (attempt - 1)
                logger.warning("teacher server: %s; retry %d/%d in %.1fs", last, attempt, self.retries, delay)
                time.sleep(delay)
            try:
                r = requests.post(self.endpoint, json=body, headers=headers, timeout=self.timeout)
            except (requests.ConnectionError, requests.Timeout) as e:
                last = f"{type(e).__name__}: {e}"
                continue
            if r.status_code == 429 or r.status_code >= 500:
                last = f"HTTP {r.status_code} {r.text[:200]}"
                continue
            if r.status_code >= 400:
                raise TeacherServerError(f"{self.endpoint} answered HTTP {r.status_code}: {r.text[:500]}")
            try:
                choices = r.json()["choices"]
            except (ValueError, KeyError, TypeError):
                raise TeacherServerError(f"{self.endpoint} returned no 'choices': {r.text[:300]}") from None
            if len(choices) != len(prompts):
                raise TeacherServerError(f"{self.endpoint} returned {len(choices)} choices for {len(prompts)} prompts")
            return sorted(choices, key=lambda c: c.get("index", 0))
        raise TeacherServerError(f"{self.endpoint} failed after {self.retries + 1} attempts: {last}")

    def _action_logprobs(self, choice: dict, start: int, end: int) -> tuple[np.ndarray, int]:
        """Log-probs of the tokens starting inside `[start, end)` of the echoed text."""
        lp = choice.get("logprobs") or {}
        tokens, values, offsets = lp.get("tokens"), lp.get("token_logprobs"), lp.get("text_offset")
        if not (tokens and values and offsets) and choice.get("prompt_logprobs"):
            # vLLM extension: [None, {token_id: {"logprob", "decoded_token", ...}}, ...] over the prompt
            # (= prompt + action, ending at `end`); the first token's text is not given, so offsets are
            # counted back from the end
            tokens, values, offsets, pos = [], [], [], end
            for entry in reversed(choice["prompt_logprobs"]):
                d = next(iter(entry.values())) if entry else {}
                tok = d.get("decoded_token") or ""
                pos -= len(tok)
                tokens.append(tok)
                values.append(d.get("logprob"))
                offsets.append(pos if entry else -1)
            tokens, values, offsets = tokens[::-1], values[::-1], offsets[::-1]
        if not (tokens and values and offsets):
            raise TeacherServerError(
                "the server returned no prompt log-probabilities; it must support completions with "
                "echo=True and logprobs (vLLM does), or return vLLM's prompt_logprobs")
        picked = [v for v, o in zip(values, offsets) if start <= o < end]
        if not picked or any(v is None for v in picked):
            raise TeacherServerError("the server returned no log-probabilities for the action's tokens")
        return np.asarray(picked, dtype=np.float64), sum(1 for o in offsets if o < end)
