"""Teacher backends: per-token log-probabilities of an action given a decision context.

Two backends share one small interface (`Teacher`):

* `HFTeacher` — any local Hugging Face causal LM (default `smollm2-135m` from the offline registry);
  bf16 on CPUs with AMX/AVX512-BF16 and on GPUs, fp32 otherwise. Its scoring engine takes many variants
  of one context and reuses the KV cache of the prefix they share with the first variant (the full
  context), so leave-one-out only recomputes what follows the removed card.
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
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from damc.prompting import prompt_segments

logger = logging.getLogger(__name__)


@dataclass
class ScoreStats:
    """Cost of one scoring call.

    Attributes:
        n_forward: sequences evaluated (one per variant; batching does not change it).
        n_forward_tokens: tokens actually run through the model (padding excluded).
        n_naive_tokens: tokens the same variants cost without any prefix reuse.
    """

    n_forward: int = 0
    n_forward_tokens: int = 0
    n_naive_tokens: int = 0

    def __iadd__(self, other: "ScoreStats") -> "ScoreStats":
        self.n_forward += other.n_forward
        self.n_forward_tokens += other.n_forward_tokens
        self.n_naive_tokens += other.n_naive_tokens
        return self


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

def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _cache_covers(cache: Any, n: int) -> bool:
    """Whether every layer of a KV cache holds all `n` positions (False for sliding-window layers that
    keep only their last W, and for cache layouts this code does not know)."""
    layers = getattr(cache, "layers", None)
    if not layers:
        return False
    try:
        return all(layer.keys is not None and layer.keys.shape[2] >= n for layer in layers)
    except AttributeError:
        return False


class HFTeacher(Teacher):
    """A local Hugging Face causal LM as teacher, with KV-cache prefix reuse.

    Args:
        model: registry name ("smollm2-135m", "gemma3-270m"), HF id or local path.
        dtype: "auto" (bf16 where the hardware has it, else fp32) | "float32" | "bfloat16" | "float16".
        device: "auto" (cuda if available) | "cpu" | "cuda:N".
        batch_size: sequences per forward pass.
        max_context_tokens: model window in tokens; None reads `max_position_embeddings`.

    Example:
        >>> t = HFTeacher("smollm2-135m", dtype="float32")
        >>> float(t.log_prob(msgs, "ls(a=true)").sum())
    """

    def __init__(self, model: str = "smollm2-135m", dtype: str = "auto", device: str = "auto",
                 batch_size: int = 8, max_context_tokens: int | None = None):
        from damc.models import load_causal_lm

        self.model_id = str(model)
        self.model, self.tokenizer = load_causal_lm(model, dtype=dtype, device=device)
        self.device = next(self.model.parameters()).device
        self.dtype = next(self.model.parameters()).dtype
        self.batch_size = max(1, int(batch_size))
        window = getattr(self.model.config, "max_position_embeddings", None)
        self.max_context_tokens = int(max_context_tokens or window or 2048)
        self._seg_cache: dict[str, list[int]] = {}
        self._warned_window = False
        # the KV cache of the last reference row, kept across calls: the next call runs only what follows the
        # prefix both share (the system prompt and policy of an episode, the head of a teacher's contexts)
        self._last: tuple[list[int], Any] | None = None
        # reference rows run block by block and are reused only up to a block boundary, so a row's log-probs
        # never depend on what ran before it in this process (bf16 matmuls over 900 tokens and over 768 + 132
        # differ in the last bits, up to ~0.1 nats): a resumed labelling or evaluation run gives the same values
        self.prefix_block = 256       # tokens
        self._base_tokens_run = 0
        self._cache_arg: str | None = None  # the decoder's KV-cache keyword (`_cache_kw`)
        logger.info("HF teacher %s on %s (%s), window %d", self.model_id, self.device, self.dtype,
                    self.max_context_tokens)

    # -- tokenization (per segment, cached: variants repeat the same segments many times)
    def encode(self, text: str) -> list[int]:
        ids = self._seg_cache.get(text)
        if ids is None:
            ids = self.tokenizer.encode(text, add_special_tokens=False)
            if len(self._seg_cache) > 100_000:
                self._seg_cache.clear()
            self._seg_cache[text] = ids
        return ids

    def segment_ids(self, segments: Sequence[str]) -> list[int]:
        """Token ids of a context: the concatenated ids of its segments."""
        return [t for s in segments for t in self.encode(s)]

    def score_segment_variants(self, variants: Sequence[Sequence[str]], action: str, *,
                               reuse: bool = True) -> tuple[list[np.ndarray], ScoreStats]:
        act = self.encode(action)
        if not act:
            raise ValueError("the action is empty: nothing to score")
        rows = [(self.segment_ids(v) + act, len(act)) for v in variants]
        return self.score_rows(rows, reuse=reuse)

    def score_variant_actions(self, variants: Sequence[Sequence[str]], actions: Sequence[str]
                              ) -> tuple[list[list[np.ndarray]], ScoreStats]:
        """Per variant, its context runs once (on top of the whole blocks it shares with the previous variant's)
        and every action after it: a rival costs its own tokens, not the context again."""
        acts = [self.encode(a) for a in actions]
        if not acts or any(not a for a in acts):
            raise ValueError("an action is empty: nothing to score")
        out: list[list[np.ndarray]] = [[] for _ in acts]
        stats = ScoreStats()
        for v in variants:
            ctx = self.segment_ids(v)
            lps, st = self.score_rows([(ctx + a, len(a)) for a in acts], reuse=True)
            for j, lp in enumerate(lps):
                out[j].append(lp)
            stats += st
        return out, stats

    def log_prob_many(self, context_messages: Sequence[dict], actions: Sequence[str]) -> list[np.ndarray]:
        lps, _ = self.score_variant_actions([prompt_segments(self.tokenizer, list(context_messages))], actions)
        return [per_action[0] for per_action in lps]

    # -- the scoring engine
    def score_rows(self, rows: Sequence[tuple[list[int], int]], *,
                   reuse: bool = True) -> tuple[list[np.ndarray], ScoreStats]:
        """Log-probs of the last `n_action` tokens of each row `(ids, n_action)`.

        With `reuse`, row 0 runs once with a KV cache; every other row reuses the cache of the prefix
        it shares with row 0 (never past its own last context token) and runs only the rest, rows with
        similar prefixes batched together (a batch reuses its shortest prefix). Without `reuse`,
        every row runs in full (naive).
        """
        import torch

        for ids, n_act in rows:
            if len(ids) > self.max_context_tokens:
                raise ValueError(f"a sequence of {len(ids)} tokens exceeds the teacher window "
                                 f"({self.max_context_tokens}); truncate the context first")
            if not 0 < n_act < len(ids):
                raise ValueError("each row needs a non-empty context and action")
        stats = ScoreStats(n_forward=len(rows), n_naive_tokens=sum(len(r[0]) for r in rows))
        out: list[np.ndarray | None] = [None] * len(rows)
        with torch.inference_mode():
            todo, cache = list(range(len(rows))), None
            prefix = dict.fromkeys(todo, 0)  # cached positions each row starts from (0: runs in full)
            if reuse:
                base_ids, base_act = rows[0]
                # (1, seq) full pass of the reference row, keeping its KV cache
                out[0], cache = self._run_base(base_ids, base_act)
                stats.n_forward_tokens += self._base_tokens_run
                todo = todo[1:]
                if _cache_covers(cache, len(base_ids)):
                    # reusable prefix of each row: shared with row 0, ending before its last context token
                    prefix = {j: min(_common_prefix(rows[j][0], base_ids), len(rows[j][0]) - rows[j][1] - 1)
                              for j in todo}
                elif not self._warned_window:
                    # sliding-window layers (Gemma 3, Mistral, ...) keep only their last W positions: no full
                    # prefix to reuse, so the rows run in full (exact, just slower)
                    logger.warning("%s keeps a sliding-window KV cache: prefix reuse is off, rows run in full",
                                   self.model_id)
                    self._warned_window = True
            # longest shared prefix first (a batch reuses its shortest one), then shortest rows (little padding)
            order = sorted(todo, key=lambda j: (-prefix[j], len(rows[j][0])))
            for b in range(0, len(order), self.batch_size):
                idx = order[b: b + self.batch_size]
                res, n_tok = self._run(cache, min(prefix[j] for j in idx), [rows[j] for j in idx])
                stats.n_forward_tokens += n_tok
                for j, r in zip(idx, res):
                    out[j] = r
        return out, stats  # type: ignore[return-value]

    def _run_base(self, ids: list[int], n_act: int) -> tuple[np.ndarray, Any]:
        """The reference row with a KV cache, run block by block (`prefix_block` tokens, the last block partial)
        on top of the previous call's cache for the whole blocks they share (the same positions, keys and
        block computations), so a shared system prompt runs once per episode and the values are the same
        whether or not the previous call ran in this process."""
        import torch

        p, cache = self._shared_prefix(ids, n_act)
        self._base_tokens_run = len(ids) - p
        lo, hi = len(ids) - n_act - 1, len(ids) - 1  # positions whose hidden states predict the action
        hs, start = [], p
        while start < len(ids):
            end = min((start // self.prefix_block + 1) * self.prefix_block, len(ids))
            x = torch.tensor([ids[start:end]], device=self.device)  # (1, block)
            o = self.model.get_decoder()(input_ids=x, use_cache=True, **self._cache_kw(cache))
            cache = getattr(o, "cache", None)  # recent transformers; older ones call it past_key_values
            if cache is None:
                cache = getattr(o, "past_key_values", None)
            if start < hi and end > lo:
                hs.append(o.last_hidden_state[0, max(lo, start) - start: min(hi, end) - start])
            start = end
        if _cache_covers(cache, len(ids)):
            self._last = (list(ids), cache)
        return self._action_logprobs(torch.cat(hs), ids[len(ids) - n_act:]), cache  # hs: (n_act, dim) in all

    def _shared_prefix(self, ids: list[int], n_act: int) -> tuple[int, Any]:
        """(p, a fresh cache of the first p positions) from the last reference row, p a whole number of blocks
        before this row's last context token; (0, None) when they share less than a block."""
        if self._last is None:
            return 0, None
        from transformers import DynamicCache

        last_ids, last_cache = self._last
        p = min(_common_prefix(ids, last_ids), len(ids) - n_act - 1) // self.prefix_block * self.prefix_block
        if p == 0:
            return 0, None
        # slices of the stored tensors; the new forward concatenates new ones, the stored cache is never changed
        return p, DynamicCache([(layer.keys[:, :, :p], layer.values[:, :, :p]) for layer in last_cache.layers])

    def _run(self, cache: Any, p: int, rows: Sequence[tuple[list[int], int]]) -> tuple[list[np.ndarray], int]:
        """Run `rows[j][0][p:]` on top of the first `p` cached positions (p=0: no cache)."""
        import torch
        from transformers import DynamicCache

        bsz = len(rows)
        suffixes = [ids[p:] for ids, _ in rows]
        width = max(len(s) for s in suffixes)
        pad = self.tokenizer.pad_token_id or 0
        x = torch.full((bsz, width), pad, dtype=torch.long, device=self.device)  # (batch, width), right-padded
        mask = torch.zeros((bsz, p + width), dtype=torch.long, device=self.device)  # (batch, past + width)
        mask[:, :p] = 1
        for i, s in enumerate(suffixes):
            x[i, : len(s)] = torch.tensor(s, device=self.device)
            mask[i, p: p + len(s)] = 1
        past = None
        if p > 0:
            # every layer's (1, heads, seq, head_dim) keys/values cut to the prefix, repeated per row
            past = DynamicCache([(layer.keys[:, :, :p].expand(bsz, -1, -1, -1),
                                  layer.values[:, :, :p].expand(bsz, -1, -1, -1)) for layer in cache.layers])
        o = self.model.get_decoder()(input_ids=x, attention_mask=mask, use_cache=p > 0, **self._cache_kw(past))
        hidden = o.last_hidden_state  # (batch, width, dim)
        res = []
        for i, (ids, n_act) in enumerate(rows):
            end = len(ids) - p  # suffix length
            h = hidden[i, end - n_act - 1: end - 1]  # (n_act, dim): positions predicting the action tokens
            res.append(self._action_logprobs(h, ids[len(ids) - n_act:]))
        return res, sum(len(s) for s in suffixes)

    def _cache_kw(self, past: Any) -> dict[str, Any]:
        """The KV-cache keyword: recent transformers call it `cache`, older ones `past_key_values`."""
        if past is None:
            return {}
        if self._cache_arg is None:  # looked up once: the reference row calls this once per block
            import inspect

            params = inspect.signature(self.model.get_decoder().forward).parameters
            self._cache_arg = "cache" if "cache" in params else "past_key_values"
        return {self._cache_arg: past}

    def _action_logprobs(self, h: Any, targets: list[int]) -> np.ndarray:
        import torch

        logits = self.model.get_output_embeddings()(h).float()  # (n_act, vocab)
        lp = torch.log_softmax(logits, dim=-1)
        tgt = torch.tensor(targets, device=lp.device)
        return lp.gather(1, tgt[:, None])[:, 0].cpu().numpy().astype(np.float64)  # (n_act,)


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
