"""The seed article's LLM judge: "how important is this fragment ... rate it 0 to 10", as a valuer.

`LLMJudgeValuer` reads the expected rating from the next-token distribution over "0".."10" of any local
chat model (deterministic, one forward pass per card), or parses the reply of any text-only chat API.
"""

from __future__ import annotations

import math
import re
from typing import Any, Callable, Sequence

import numpy as np

from damc.cards import Card
from damc.query import card_document
from damc.runtime.valuers.base import Valuer

JUDGE_PROMPT = ("Given the current task:\n{query}\n\nHow important is the following history fragment for making "
                "the right decision? Rate it from 0 to 10 (0 = irrelevant, 10 = essential).\n\n"
                "Fragment:\n{card}\n\nAnswer with a single number.")


def parse_rating(text: str) -> float | None:
    """The first 0–10 rating in a completion ("7", "Rating: 8/10", "**9** out of 10"), None when absent."""
    if not text:
        return None
    m = re.search(r"(?<![\d.])(\d+(?:\.\d+)?)\s*(?:/|out of)\s*10\b", text)
    if m and 0 <= float(m.group(1)) <= 10:
        return float(m.group(1))
    for m in re.finditer(r"(?<![\d.])(\d+(?:\.\d+)?)(?![\d])", text):
        x = float(m.group(1))
        if 0 <= x <= 10:
            return x
    return None


class LLMJudgeValuer(Valuer):
    """The seed's 0–10 importance rating with a chat model, as an expected rating / 10.

    Args:
        model: registry name / HF id / path of a chat causal LM (loaded with `load_causal_lm`), used
            in "logits" mode.
        complete: alternatively, any `messages -> str` chat function (e.g. an API client); its reply
            is parsed with `parse_rating` ("generate" mode). Unparseable replies get `default`.
        batch_size: prompts per forward pass.
        max_card_chars: card rendering length in the prompt.
        default: value for unparseable ratings (in [0, 1]).
    """

    name = "llm_judge"

    def __init__(self, model: str | tuple[Any, Any] = "smollm2-135m", complete: Callable[[list[dict]], str] | None = None,
                 batch_size: int = 8, max_card_chars: int = 400, default: float = 0.5, dtype: str = "auto"):
        self.model_spec, self.complete = model, complete
        self.batch_size, self.max_card_chars, self.default, self.dtype = batch_size, max_card_chars, default, dtype
        self._model: Any = None
        self._tok: Any = None

    def messages(self, query: str, card: Card) -> list[dict[str, str]]:
        return [{"role": "user", "content": JUDGE_PROMPT.format(query=query, card=card_document(card, self.max_card_chars))}]

    def _load(self) -> None:
        if self._model is None:
            if isinstance(self.model_spec, tuple):
                self._model, self._tok = self.model_spec
            else:
                from damc.models import load_causal_lm

                self._model, self._tok = load_causal_lm(self.model_spec, dtype=self.dtype, device="cpu")

    def _rating_tokens(self) -> list[list[int]]:
        return [self._tok.encode(str(r), add_special_tokens=False) for r in range(11)]

    def expected_ratings(self, query: str, cards: Sequence[Card]) -> np.ndarray:
        """E[rating] in [0, 10] per card from the next-token distribution over "0".."10".

        Single-token ratings read the first-step probabilities; a multi-token rating such as "10"
        (two tokens in most tokenizers) costs one more position: P("10") = P("1")·P("0" | "1"), and
        P("1") is reduced by the same mass.
        """
        from damc.extras import requires

        with requires("the LLM judge's local model"):
            import torch

        from damc.prompting import format_prompt

        self._load()
        tok, model = self._tok, self._model
        seqs = self._rating_tokens()
        multi = [s for s in seqs if len(s) > 1]
        if any(len(s) > 2 for s in multi):
            raise ValueError("ratings longer than two tokens are not supported by this tokenizer")
        # prefixes needing a second step: the first token of each two-token rating
        prefixes = sorted({s[0] for s in multi})
        out = np.zeros(len(cards), dtype=np.float32)
        device = next(model.parameters()).device
        for b in range(0, len(cards), self.batch_size):
            chunk = cards[b:b + self.batch_size]
            base = [tok.encode(format_prompt(tok, self.messages(query, c)), add_special_tokens=False) for c in chunk]
            rows = [ids for ids in base] + [ids + [p] for ids in base for p in prefixes]
            width = max(len(r) for r in rows)
            pad = tok.pad_token_id if tok.pad_token_id is not None else 0
            input_ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows], device=device)
            attn = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], device=device)
            pos = (attn.cumsum(-1) - 1).clamp(min=0)
            with torch.no_grad():
                logits = model(input_ids=input_ids, attention_mask=attn, position_ids=pos).logits[:, -1, :]
            logp = torch.log_softmax(logits.float(), dim=-1).cpu().numpy()
            n = len(chunk)
            for i in range(n):
                probs = np.zeros(11)
                for r, s in enumerate(seqs):
                    p = math.exp(logp[i, s[0]])
                    if len(s) == 2:
                        k = prefixes.index(s[0])
                        p *= math.exp(logp[n + i * len(prefixes) + k, s[1]])
                    probs[r] = p
                # a single-token rating that is also the prefix of a longer one ("1" vs "10"): remove the continuation mass
                for r, s in enumerate(seqs):
                    if len(s) == 1 and s[0] in prefixes:
                        k = prefixes.index(s[0])
                        cont = sum(math.exp(logp[n + i * len(prefixes) + k, t[1]]) for t in multi if t[0] == s[0])
                        probs[r] *= max(0.0, 1.0 - cont)
                total = probs.sum()
                out[b + i] = float((probs * np.arange(11)).sum() / total) if total > 0 else self.default * 10
        return out

    def value(self, query: str, cards: Sequence[Card], now: float | None = None) -> np.ndarray:
        if not cards:
            return np.zeros(0, dtype=np.float32)
        if self.complete is not None:
            vals = []
            for c in cards:
                r = parse_rating(self.complete(self.messages(query, c)))
                vals.append(self.default if r is None else r / 10.0)
            return np.asarray(vals, dtype=np.float32)
        return np.clip(self.expected_ratings(query, cards) / 10.0, 0.0, 1.0).astype(np.float32)


