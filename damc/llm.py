"""The one local causal-LM backend: log-probs of actions with KV-cache prefix reuse, batched scoring, generation.

Every local language-model forward of DAMC runs here — the teacher's counterfactual labels
(`damc.teacher.backends.HFTeacher` is this class with the teacher interface), the A/B harness's decision LLM
(`configs/llm/hf.yaml` instantiates `LocalLLM`), the runtime's LLM judge (`damc.runtime.valuers.judge`) and the
LLM compressor (`damc.runtime.compress`) — so a label, a decision and a judge rating read the same numbers from
the same code. A server model (vLLM) is a client, not a forward, and stays in `damc.teacher.backends`.

Precision is chosen in one place, `dtype_name`: an explicit `dtype` (the `dtype` key of the `teacher/`, `llm/`
configs, the judge's and compressor's `dtype=`) wins; `dtype="auto"` takes `$DAMC_DTYPE` when it is set; otherwise
bf16 on GPUs and on CPUs with native bf16 units (AMX or AVX512-BF16), fp32 elsewhere. Two forward paths that are
compared to each other (a test, an estimator check) pin fp32: in bf16 the same log-prob computed over differently
shaped matmuls differs by up to tenths of a nat.

Contexts are chat messages rendered with `damc.prompting.format_prompt`; the tokens of a context are the
concatenated tokens of its `damc.prompting.prompt_segments` (one piece per message), so variants that differ by
whole messages share an exact token prefix. An action is tokenized on its own and appended after the context.
torch and transformers are imported inside the functions that need them, so importing this module (and
`import damc`, and the light runtime) stays torch-free.

Example:
    >>> llm = LocalLLM("smollm2-135m", dtype="float32")
    >>> gold, rival = llm.log_prob_many(messages, ['get_order(order_id="88412")', 'get_order(order_id="1")'])
    >>> gold.sum(), len(gold)                       # nats, action tokens
    >>> llm.generate(messages, max_new_tokens=32)   # greedy
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from damc.prompting import format_prompt, prompt_segments

logger = logging.getLogger(__name__)

DTYPE_ENV = "DAMC_DTYPE"   # the environment override of `dtype="auto"` (auto | float32 | bfloat16 | float16)
DTYPES = {"float32": "float32", "fp32": "float32", "bfloat16": "bfloat16", "bf16": "bfloat16",
          "float16": "float16", "fp16": "float16"}


# ----------------------------------------------------------------------------- loading: device, precision, weights

def cpu_supports_bf16() -> bool:
    """True when the CPU has native bf16 matmul units (AMX or AVX512-BF16)."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "amx_bf16" in flags or "avx512_bf16" in flags


def dtype_name(dtype: str | None = "auto", device: str = "cpu") -> str:
    """The precision a model loads in — DAMC's one dtype policy (torch-free).

    Args:
        dtype: "auto" | "float32" | "bfloat16" | "float16" (or fp32/bf16/fp16). Anything but "auto" wins.
        device: where the model runs ("cpu", "cuda", "cuda:1", ...).

    Returns:
        "float32", "bfloat16" or "float16": the explicit `dtype`; else `$DAMC_DTYPE` when set (not "auto"); else
        bf16 on a GPU or on a CPU with bf16 units (`cpu_supports_bf16`), fp32 otherwise.

    Raises:
        ValueError: an unknown name in `dtype` or in `$DAMC_DTYPE` (the message says which).
    """
    if dtype not in (None, "", "auto"):
        if dtype not in DTYPES:
            raise ValueError(f"unknown dtype {dtype!r}; expected auto|" + "|".join(DTYPES))
        return DTYPES[dtype]
    env = os.environ.get(DTYPE_ENV, "").strip().lower()
    if env and env != "auto":
        if env not in DTYPES:
            raise ValueError(f"unknown dtype in ${DTYPE_ENV}={env!r}; expected auto|" + "|".join(DTYPES))
        return DTYPES[env]
    if str(device).startswith("cuda"):
        return "bfloat16"
    return "bfloat16" if cpu_supports_bf16() else "float32"


def pick_dtype(dtype: str | None = "auto", device: str = "cpu") -> Any:
    """`dtype_name` as a torch dtype."""
    from damc.extras import requires

    with requires("a torch dtype"):
        import torch

    return getattr(torch, dtype_name(dtype, device))


def pick_device(device: str = "auto") -> str:
    """"auto" → "cuda" when torch sees a GPU, else "cpu"; any other name as is."""
    from damc.extras import requires

    with requires("picking a torch device"):
        import torch

    if device != "auto":
        return device
    return "cuda" if torch.cuda.is_available() else "cpu"


def load_causal_lm(name_or_path: str, dtype: str = "auto", device: str = "auto") -> tuple[Any, Any]:
    """A causal LM (eval mode) and its tokenizer.

    Args:
        name_or_path: registry name (`damc.models.REGISTRY`), HF id or local path.
        dtype: "auto" (`dtype_name`) | "float32" | "bfloat16" | "float16".
        device: "auto" (cuda if available) | "cpu" | "cuda:0" ...
    """
    from damc.extras import requires

    with requires("loading a causal LM"):
        from transformers import AutoModelForCausalLM

    from damc.models import load_tokenizer, resolve_model

    device = pick_device(device)
    model = AutoModelForCausalLM.from_pretrained(resolve_model(name_or_path), dtype=pick_dtype(dtype, device))
    return model.to(device).eval(), load_tokenizer(name_or_path)


# ----------------------------------------------------------------------------- scoring

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


class LocalLLM:
    """A local Hugging Face causal LM: action log-probs with KV-cache prefix reuse, batched scoring, generation.

    Args:
        model: registry name ("smollm2-135m", "qwen2.5-coder-0.5b", ...), HF id or local path.
        dtype: "auto" (see `dtype_name`: `$DAMC_DTYPE`, else bf16 where the hardware has it, else fp32) |
            "float32" | "bfloat16" | "float16".
        device: "auto" (cuda if available) | "cpu" | "cuda:N".
        batch_size: sequences per forward pass (scoring and generation).
        max_context_tokens: model window in tokens; None reads `max_position_embeddings`.
        threads: torch CPU threads for this process (`torch.set_num_threads`; None leaves them as they are).

    Example:
        >>> llm = LocalLLM("smollm2-135m", dtype="float32")
        >>> float(llm.log_prob_many(msgs, ["ls(a=true)"])[0].sum())
    """

    def __init__(self, model: str = "smollm2-135m", dtype: str = "auto", device: str = "auto",
                 batch_size: int = 8, max_context_tokens: int | None = None, threads: int | None = None):
        if threads:
            import torch

            torch.set_num_threads(int(threads))
        lm, tokenizer = load_causal_lm(model, dtype=dtype, device=device)
        self._attach(str(model), lm, tokenizer, batch_size, max_context_tokens)

    @classmethod
    def from_loaded(cls, model: Any, tokenizer: Any, name: str | None = None, batch_size: int = 8,
                    max_context_tokens: int | None = None) -> "LocalLLM":
        """Wrap a model and tokenizer that are already loaded (no second copy of the weights)."""
        self = cls.__new__(cls)
        self._attach(name or getattr(model, "name_or_path", None) or type(model).__name__, model, tokenizer,
                     batch_size, max_context_tokens)
        return self

    def _attach(self, model_id: str, model: Any, tokenizer: Any, batch_size: int,
                max_context_tokens: int | None) -> None:
        self.model_id, self.model, self.tokenizer = model_id, model, tokenizer
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
        logger.info("local LLM %s on %s (%s), window %d", self.model_id, self.device, self.dtype,
                    self.max_context_tokens)

    # -- tokenization (per segment, cached: variants repeat the same segments many times)
    def encode(self, text: str) -> list[int]:
        """Token ids of a text (no special tokens), cached."""
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

    def count_tokens(self, text: str) -> int:
        """Token count of a text under the model's tokenizer."""
        return len(self.tokenizer.encode(text, add_special_tokens=False)) if text else 0

    # -- scoring: per-token log-probs of actions after contexts
    def log_prob_many(self, context_messages: Sequence[dict], actions: Sequence[str]) -> list[np.ndarray]:
        """Per-token log-probs `(n_action_tokens,)` of each action as the assistant's next message after the
        context (gold vs distractors): the context runs once, each action on top of its KV cache."""
        lps, _ = self.score_variant_actions([prompt_segments(self.tokenizer, list(context_messages))], actions)
        return [per_action[0] for per_action in lps]

    def score_segment_variants(self, variants: Sequence[Sequence[str]], action: str, *,
                               reuse: bool = True) -> tuple[list[np.ndarray], ScoreStats]:
        """Per-token log-probs of `action` after each variant (a list of prompt segments); `variants[0]` is the
        reference whose KV cache the others reuse for the prefix they share with it (`reuse`)."""
        act = self.encode(action)
        if not act:
            raise ValueError("the action is empty: nothing to score")
        rows = [(self.segment_ids(v) + act, len(act)) for v in variants]
        return self.score_rows(rows, reuse=reuse)

    def score_variant_actions(self, variants: Sequence[Sequence[str]], actions: Sequence[str]
                              ) -> tuple[list[list[np.ndarray]], ScoreStats]:
        """Per-token log-probs of every action after every variant: `out[a][v]` is `(n_tokens of action a,)`.
        Per variant, its context runs once (on top of the whole blocks it shares with the previous variant's)
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

    def score_rows(self, rows: Sequence[tuple[list[int], int]], *,
                   reuse: bool = True) -> tuple[list[np.ndarray], ScoreStats]:
        """Log-probs of the last `n_action` tokens of each row `(ids, n_action)` — the scoring engine.

        With `reuse`, row 0 runs once with a KV cache; every other row reuses the cache of the prefix
        it shares with row 0 (never past its own last context token) and runs only the rest, rows with
        similar prefixes batched together (a batch reuses its shortest prefix). Without `reuse`,
        every row runs in full (naive).
        """
        import torch

        for ids, n_act in rows:
            if len(ids) > self.max_context_tokens:
                raise ValueError(f"a sequence of {len(ids)} tokens exceeds the window of {self.model_id} "
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

    # -- generation
    def generate_many(self, conversations: Sequence[Sequence[dict]], max_new_tokens: int = 96,
                      batch_size: int | None = None) -> list[str]:
        """Greedy replies to several chats (each rendered with `format_prompt`), left-padded in batches of
        `batch_size` (default: the instance's); special tokens are dropped from the replies."""
        import torch

        tok, size = self.tokenizer, max(1, int(batch_size or self.batch_size))
        pad = tok.pad_token_id if tok.pad_token_id is not None else 0
        outs: list[str] = []
        for b in range(0, len(conversations), size):
            rows = [tok.encode(format_prompt(tok, list(c)), add_special_tokens=False) for c in conversations[b:b + size]]
            width = max(len(r) for r in rows)
            ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows], device=self.device)  # (batch, width)
            attn = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], device=self.device)
            with torch.no_grad():
                gen = self.model.generate(input_ids=ids, attention_mask=attn, max_new_tokens=max_new_tokens,
                                          do_sample=False, pad_token_id=pad)
            outs += [tok.decode(g[width:], skip_special_tokens=True) for g in gen]
        return outs

    def generate(self, context_messages: Sequence[dict], max_new_tokens: int = 96) -> str:
        """The greedy reply to one chat."""
        return self.generate_many([context_messages], max_new_tokens)[0]
