"""The one local LLM backend (`damc.llm.LocalLLM`) with the real smollm2-135m in fp32: its log-probs are a plain
full forward's, prefix reuse changes nothing but the cost, generation is deterministic greedy decoding, the judge and
the teacher read the same numbers, and the dtype policy (`dtype_name`, `$DAMC_DTYPE`) is honoured."""

import subprocess
import sys

import numpy as np
import pytest
from conftest import ROOT, small_episode

from damc.llm import DTYPE_ENV, LocalLLM, cpu_supports_bf16, dtype_name, load_causal_lm, pick_dtype
from damc.prompting import format_prompt, prompt_segments

MSGS = [{"role": "system", "content": "You are a support agent. Call tools as name(arg=value)."},
        {"role": "user", "content": "Hi, my order 88412 never arrived."},
        {"role": "assistant", "content": 'get_order(order_id="88412")'},
        {"role": "user", "content": '{"status": "error", "code": 500}'},
        {"role": "user", "content": "Can you try again please?"}]
ACTIONS = ['get_order(order_id="88412")', 'get_order(order_id="77301")', "Sorry, the system is down."]


@pytest.fixture(scope="module")
def llm():
    return LocalLLM("smollm2-135m", dtype="float32", device="cpu", batch_size=4)


def _direct(llm, messages, action):
    """Per-token log-probs of `action` after `messages` from one plain full forward of the whole model."""
    import torch

    ctx = [t for s in prompt_segments(llm.tokenizer, messages) for t in llm.tokenizer.encode(s, add_special_tokens=False)]
    act = llm.tokenizer.encode(action, add_special_tokens=False)
    with torch.inference_mode():
        logits = llm.model(torch.tensor([ctx + act])).logits[0].float()        # (seq, vocab)
    lp = torch.log_softmax(logits[len(ctx) - 1: len(ctx) + len(act) - 1], -1)  # positions predicting the action
    return lp.gather(1, torch.tensor(act)[:, None])[:, 0].numpy()


def test_log_probs_equal_a_direct_full_forward(llm):
    got = llm.log_prob_many(MSGS, ACTIONS)
    for action, lp in zip(ACTIONS, got):
        want = _direct(llm, MSGS, action)
        assert lp.shape == want.shape == (len(llm.encode(action)),)
        np.testing.assert_allclose(lp, want, atol=1e-4)
    assert got[0].sum() > got[1].sum()       # the order id of the conversation beats another one


def test_prefix_reuse_gives_the_values_of_no_reuse_for_less(llm):
    """Variants that drop one message each (leave-one-out): reusing the full context's KV cache for the prefix each
    variant shares with it gives the naive values, running fewer tokens; across calls too (whole blocks only)."""
    full = prompt_segments(llm.tokenizer, MSGS)
    variants = [full] + [full[:i] + full[i + 1:] for i in range(1, len(full) - 1)]
    naive, st_naive = llm.score_segment_variants(variants, ACTIONS[0], reuse=False)
    reuse, st_reuse = llm.score_segment_variants(variants, ACTIONS[0], reuse=True)
    for a, b in zip(naive, reuse):
        np.testing.assert_allclose(a, b, atol=1e-4)
    assert st_reuse.n_forward == st_naive.n_forward == len(variants)
    assert st_reuse.n_forward_tokens < st_naive.n_forward_tokens == st_naive.n_naive_tokens
    # the next call's reference row starts from the previous call's cache, at a block boundary
    llm.prefix_block, llm._last = 16, None
    try:
        cold = llm.score_segment_variants(variants[1:2], ACTIONS[1])[0][0]
        llm.score_segment_variants(variants[:1], ACTIONS[1])
        warm = llm.score_segment_variants(variants[1:2], ACTIONS[1])[0][0]
        reused = len(llm.segment_ids(variants[1])) + len(llm.encode(ACTIONS[1])) - llm._base_tokens_run
        assert reused > 0 and reused % 16 == 0                # the system prompt's whole blocks did not run again
    finally:
        llm.prefix_block = 256
    np.testing.assert_allclose(warm, cold, atol=1e-4)


def test_rows_longer_than_the_window_are_refused(llm):
    with pytest.raises(ValueError, match="exceeds the window of smollm2-135m"):
        llm.score_rows([(list(range(llm.max_context_tokens + 1)), 1)])
    with pytest.raises(ValueError, match="action is empty"):
        llm.log_prob_many(MSGS, [""])


def test_generation_is_the_greedy_decoding_of_the_prompt(llm):
    import torch

    a = llm.generate(MSGS, max_new_tokens=12)
    assert a and a == llm.generate(MSGS, max_new_tokens=12)        # deterministic
    ids = torch.tensor([llm.tokenizer.encode(format_prompt(llm.tokenizer, MSGS), add_special_tokens=False)])
    with torch.no_grad():
        ref = llm.model.generate(input_ids=ids, max_new_tokens=12, do_sample=False,
                                 pad_token_id=llm.tokenizer.pad_token_id)
    assert a == llm.tokenizer.decode(ref[0, ids.shape[1]:], skip_special_tokens=True)
    many = llm.generate_many([MSGS, MSGS[:2]], max_new_tokens=12, batch_size=2)   # left-padded batch
    assert len(many) == 2 and many[0] == a


def test_the_teacher_and_the_judge_read_the_same_forward(llm):
    """`HFTeacher` is the backend with the teacher interface; the LLM judge's expected rating is the one a plain
    next-token forward gives (P("10") = P("1")·P("0" | "1"), P("1") less that continuation)."""
    import torch

    from damc.cards import encode_episode
    from damc.runtime.valuers import LLMJudgeValuer
    from damc.teacher.backends import HFTeacher, Teacher

    teacher = HFTeacher.from_loaded(llm.model, llm.tokenizer, name="smollm2-135m")
    assert isinstance(teacher, Teacher) and isinstance(teacher, LocalLLM)
    np.testing.assert_allclose(teacher.log_prob(MSGS, ACTIONS[0]), llm.log_prob_many(MSGS, ACTIONS[:1])[0], atol=1e-6)

    cards = encode_episode(small_episode())[:3]
    judge = LLMJudgeValuer(llm)
    got = judge.expected_ratings("user: what happened with order 88412?", cards)
    tok = llm.tokenizer
    digits = [tok.encode(str(r), add_special_tokens=False) for r in range(11)]
    assert [len(d) for d in digits] == [1] * 10 + [2]
    for card, g in zip(cards, got):
        ids = tok.encode(format_prompt(tok, judge.messages("user: what happened with order 88412?", card)),
                         add_special_tokens=False)
        with torch.inference_mode():
            first = torch.log_softmax(llm.model(torch.tensor([ids])).logits[0, -1].float(), -1)
            after1 = torch.log_softmax(llm.model(torch.tensor([ids + digits[1]])).logits[0, -1].float(), -1)
        p = np.array([first[d[0]].exp().item() for d in digits[:10]] + [0.0])
        p10 = p[1] * after1[digits[10][1]].exp().item()
        p[1] *= 1 - after1[digits[10][1]].exp().item()
        p[10] = p10
        assert abs(g - (p * np.arange(11)).sum() / p.sum()) < 1e-3


def test_the_dtype_policy_and_its_override(monkeypatch):
    import torch

    monkeypatch.delenv(DTYPE_ENV, raising=False)
    assert dtype_name("auto", "cpu") == ("bfloat16" if cpu_supports_bf16() else "float32")
    assert dtype_name("auto", "cuda:0") == "bfloat16" and dtype_name("fp32", "cuda") == "float32"
    assert pick_dtype("float32") == torch.float32
    with pytest.raises(ValueError, match="unknown dtype 'int3'"):
        pick_dtype("int3")
    monkeypatch.setenv(DTYPE_ENV, "float32")               # the override of `auto`, on every device ...
    assert dtype_name("auto", "cpu") == dtype_name("auto", "cuda") == dtype_name(None) == "float32"
    assert dtype_name("bfloat16") == "bfloat16"             # ... but never of an explicit dtype
    monkeypatch.setenv(DTYPE_ENV, "int3")
    with pytest.raises(ValueError, match=r"\$DAMC_DTYPE='int3'"):
        dtype_name("auto")
    monkeypatch.setenv(DTYPE_ENV, "bf16")                   # honoured by the loader: bf16 on a CPU without bf16 units
    model, _ = load_causal_lm("smollm2-135m", device="cpu")
    assert model.dtype == torch.bfloat16
    monkeypatch.setenv(DTYPE_ENV, "float32")
    assert LocalLLM("smollm2-135m", device="cpu").dtype == torch.float32


def test_load_causal_lm_scores_text():
    import torch

    model, tok = load_causal_lm("smollm2-135m", dtype="float32", device="cpu")
    assert model.dtype == torch.float32
    ids = tok("The capital of France is Paris", return_tensors="pt").input_ids
    with torch.inference_mode():
        loss = model(ids, labels=ids).loss.item()
    assert 0.5 < loss < 8.0  # a real language model, not random weights (random ≈ ln(49152) ≈ 10.8)


def test_importing_the_backend_imports_no_torch():
    code = "import sys, damc.llm, damc.runtime.valuers.judge, damc.runtime.compress; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
