"""The seed article's LLM judge: "how important is this fragment ... rate it 0 to 10", as a valuer.

`LLMJudgeValuer` reads the expected rating from the log-probs of "0".."10" under any local chat model
(`damc.llm.LocalLLM`: deterministic, one pass per card's prompt), or parses the reply of any text-only chat API.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from damc.cards import Card
from damc.query import card_document
from damc.runtime.valuers.base import Valuer

if TYPE_CHECKING:
    from damc.llm import LocalLLM

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
        model: registry name / HF id / path of a chat causal LM (loaded as a `damc.llm.LocalLLM` on the CPU),
            a loaded `LocalLLM` (shared, e.g. the harness's decision LLM), or a `(model, tokenizer)` pair;
            used in "logits" mode.
        complete: alternatively, any `messages -> str` chat function (e.g. an API client); its reply
            is parsed with `parse_rating` ("generate" mode). Unparseable replies get `default`.
        batch_size: sequences per forward pass of a model this valuer loads.
        max_card_chars: card rendering length in the prompt.
        default: value for unparseable ratings (in [0, 1]).
    """

    name = "llm_judge"

    def __init__(self, model: str | LocalLLM | tuple[Any, Any] = "smollm2-135m",
                 complete: Callable[[list[dict]], str] | None = None,
                 batch_size: int = 8, max_card_chars: int = 400, default: float = 0.5, dtype: str = "auto"):
        self.model_spec, self.complete = model, complete
        self.batch_size, self.max_card_chars, self.default, self.dtype = batch_size, max_card_chars, default, dtype
        self._llm: LocalLLM | None = None

    def messages(self, query: str, card: Card) -> list[dict[str, str]]:
        return [{"role": "user", "content": JUDGE_PROMPT.format(query=query, card=card_document(card, self.max_card_chars))}]

    def _load(self) -> LocalLLM:
        """The local model (`damc.llm.LocalLLM`): the one given, or loaded once on the CPU."""
        if self._llm is None:
            from damc.extras import requires
            from damc.llm import LocalLLM

            with requires("the LLM judge's local model (pass complete= to use any other LLM)"):
                import torch  # noqa: F401
            spec = self.model_spec
            if isinstance(spec, LocalLLM):
                self._llm = spec
            elif isinstance(spec, tuple):  # (model, tokenizer) already loaded
                self._llm = LocalLLM.from_loaded(*spec, batch_size=self.batch_size)
            else:
                self._llm = LocalLLM(spec, dtype=self.dtype, device="cpu", batch_size=self.batch_size)
        return self._llm

    def expected_ratings(self, query: str, cards: Sequence[Card]) -> np.ndarray:
        """E[rating] in [0, 10] per card from the model's log-probs of the ratings "0".."10" after the prompt.

        Each rating is scored as an action after the card's prompt (`LocalLLM.score_variant_actions`: the prompt
        runs once, the ratings on top of its KV cache). Single-token ratings read the first-step probabilities; a
        multi-token rating such as "10" (two tokens in most tokenizers) is P("1")·P("0" | "1"), and P("1") is
        reduced by the same continuation mass.
        """
        from damc.prompting import format_prompt

        llm = self._load()
        seqs = [llm.encode(str(r)) for r in range(11)]
        if any(len(s) > 2 for s in seqs):
            raise ValueError("ratings longer than two tokens are not supported by this tokenizer")
        # one variant per card: its whole prompt as a single segment (the tokens of the rendered text)
        variants = [[format_prompt(llm.tokenizer, self.messages(query, c))] for c in cards]
        lps, _ = llm.score_variant_actions(variants, [str(r) for r in range(11)])   # lps[rating][card]: (n_tok,)
        out = np.zeros(len(cards), dtype=np.float32)
        for i in range(len(cards)):
            probs = np.array([math.exp(float(lps[r][i].sum())) for r in range(11)])
            # a single-token rating that is also the prefix of a longer one ("1" vs "10"): remove the continuation mass
            for r, s in enumerate(seqs):
                if len(s) == 1:
                    cont = sum(math.exp(lps[t][i][1]) for t, u in enumerate(seqs) if len(u) == 2 and u[0] == s[0])
                    probs[r] *= max(0.0, 1.0 - cont)
            total = probs.sum()
            out[i] = float((probs * np.arange(11)).sum() / total) if total > 0 else self.default * 10
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


