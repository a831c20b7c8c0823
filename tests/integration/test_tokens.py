"""Token counting from tokenizer files only: the counts and prompts equal the Hugging Face tokenizer's on real
text, the GGUF header is read without the weights (and without torch), and the scorer/encoder inputs equal the
HF tokenizer's, truncation included."""

import json

import pytest
from conftest import SAMPLES, run_light

from damc.episodes import load_episodes
from damc.prompting import build_decision_messages, format_prompt
from damc.tokens import PairTokenizer, TokenCounter, load_token_counter, read_gguf_metadata


def _real_texts() -> list[str]:
    """Real text of every kind the runtime counts: tool results, user turns, docs prose, odd whitespace."""
    texts = []
    for name in ("tau2_retail_sample.jsonl", "bfcl_sample.jsonl", "synthetic_sample.jsonl"):
        for ep in load_episodes(SAMPLES / name)[:3]:
            texts += [m["content"] for m in ep.messages if isinstance(m.get("content"), str) and m["content"]]
    texts += ["  two  spaces\t\ttabs\n\n\nnewlines 1234567 ünïcödé 日本語 😀 <|im_start|>user\nhi<|im_end|>"]
    return texts


@pytest.fixture(scope="module")
def smollm2_hf():
    from damc.models import load_tokenizer

    return load_tokenizer("smollm2-135m")


def test_smollm2_counts_equal_the_hf_tokenizer_on_real_text(smollm2_hf):
    counter = load_token_counter("smollm2-135m")
    texts = _real_texts()
    want = smollm2_hf(texts, add_special_tokens=False)["input_ids"]
    got = counter(texts)["input_ids"]
    assert len(texts) > 50 and sum(map(len, want)) > 5000
    assert got == want
    assert [counter.count(t) for t in texts[:5]] == [len(ids) for ids in want[:5]]
    assert counter.encode("<|im_start|>") == [1]  # control tokens stay whole


def test_smollm2_chat_prompts_equal_the_hf_template(smollm2_hf):
    counter = load_token_counter("smollm2-135m")
    for ep in load_episodes(SAMPLES / "tau2_retail_sample.jsonl")[:3]:
        msgs = build_decision_messages(None, ep.tools, ep.messages[1:9], [], memory_lines=["[c1] ✓ get_order(...)"])
        assert format_prompt(counter, msgs) == format_prompt(smollm2_hf, msgs)
        assert counter.count_messages(msgs) == len(smollm2_hf.encode(format_prompt(smollm2_hf, msgs),
                                                                     add_special_tokens=False))


def test_gguf_metadata_equals_the_gguf_readers():
    gguf = pytest.importorskip("gguf")
    from damc.models import packaged_path

    path = packaged_path("smollm2-135m")
    meta = read_gguf_metadata(path)
    ref = gguf.GGUFReader(str(path))
    for key in ("tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.chat_template", "general.architecture"):
        assert meta[key] == ref.fields[key].contents()
    for key in ("tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.token_type"):
        assert meta[key] == ref.fields[key].contents(), key
    assert meta["tokenizer.ggml.eos_token_id"] == 2 and len(meta["tokenizer.ggml.tokens"]) == 49152


def test_small_gguf_written_by_gguf_round_trips(tmp_path):
    """Every value type the reader handles, from a file the reference writer wrote (no tensors at all)."""
    gguf = pytest.importorskip("gguf")
    path = tmp_path / "tiny.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tokenizer_model("gpt2")
    w.add_token_list(["<s>", "a", "b", "ab", "Ġ", "Ġab"])
    w.add_token_merges(["a b", "Ġ ab"])
    w.add_token_types([3, 1, 1, 1, 1, 1])
    w.add_bos_token_id(0)
    w.add_bool("test.flag", True)
    w.add_float32("test.f", 0.5)
    w.add_chat_template("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    meta = read_gguf_metadata(path)
    assert meta["tokenizer.ggml.tokens"][-1] == "Ġab" and meta["test.flag"] is True and meta["test.f"] == 0.5
    counter = TokenCounter.from_gguf(path)
    assert counter.encode("ab ab") == [3, 5] and counter.encode("<s>ab") == [0, 3]
    assert counter.apply_chat_template([{"role": "user", "content": "ab"}]) == "<user>ab"
    with pytest.raises(ValueError, match="not a GGUF"):
        read_gguf_metadata(SAMPLES / "bfcl_sample.jsonl")


def test_token_counter_needs_neither_torch_nor_transformers():
    out = run_light("""
import json, sys, time
from damc.tokens import load_token_counter
t = time.perf_counter()
c = load_token_counter("smollm2-135m")
n = c.count_messages([{"role": "system", "content": "You are a support agent."}, {"role": "user", "content": "Refund 88412"}])
print(json.dumps({"n": n, "s": time.perf_counter() - t, "torch": "torch" in sys.modules,
                  "transformers": "transformers" in sys.modules}))
""")
    res = json.loads(out.splitlines()[-1])
    assert res["n"] > 10 and not res["torch"] and not res["transformers"]
    assert res["s"] < 10  # the GGUF header only (~0.3 s); dequantising the 135M model took minutes


def test_non_bpe_gguf_falls_back_to_transformers_and_a_light_install_says_which_extra(tmp_path):
    gguf = pytest.importorskip("gguf")
    path = tmp_path / "sp.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tokenizer_model("llama")  # SentencePiece: no native path
    w.add_token_list(["<unk>", "<s>", "</s>", "▁a"])
    w.add_token_scores([0.0, 0.0, 0.0, -1.0])
    w.add_token_types([2, 3, 3, 1])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    out = run_light(f"""
from damc.extras import MissingExtraError
from damc.tokens import TokenCounter
try:
    TokenCounter.from_gguf({str(path)!r})
except MissingExtraError as e:
    print(e)
""")
    assert "pip install 'damc[train]'" in out and "'llama' GGUF tokenizer" in out


def test_pair_tokenizer_equals_the_hf_tokenizer_with_truncation():
    from transformers import AutoTokenizer

    from damc.models import resolve_model

    path = resolve_model("minilm-l6")
    hf = AutoTokenizer.from_pretrained(path)
    texts = _real_texts()
    pairs = [(texts[i], texts[-1 - i]) for i in range(20)]
    for max_length in (32, 256):
        tok = PairTokenizer.from_dir(path, max_length=max_length)
        enc = hf([a for a, _ in pairs], [b for _, b in pairs], truncation="longest_first", max_length=max_length)
        feats = tok.encode_pairs(pairs)
        assert [f["input_ids"] for f in feats] == enc["input_ids"]
        assert [f["token_type_ids"] for f in feats] == enc["token_type_ids"]
        assert max(len(f["input_ids"]) for f in feats) == max_length  # truncation did cut
        single = hf(texts[:10], truncation=True, max_length=max_length)["input_ids"]
        assert [f["input_ids"] for f in tok.encode_texts(texts[:10])] == single
    assert tok.pad_token_id == hf.pad_token_id


def test_tokenizer_dir_counts_equal_hf():
    from transformers import AutoTokenizer

    from damc.models import resolve_model

    hf = AutoTokenizer.from_pretrained(resolve_model("minilm-l6"))
    counter = load_token_counter("minilm-l6")
    texts = _real_texts()
    assert counter(texts)["input_ids"] == hf(texts, add_special_tokens=False)["input_ids"]
