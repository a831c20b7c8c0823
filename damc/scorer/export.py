"""Export a training run to a self-contained scorer directory: `main(cfg)` behind `scripts/export.py`.

By default the directory holds only what inference reads — the light runtime (`pip install damc`: onnxruntime +
tokenizers) runs all of it, and the training checkpoint stays in the run directory:

* `model_int8.onnx` — the scorer as ONNX (legacy TorchScript exporter, dynamic batch and sequence axes; the fp32
  graph is checked against PyTorch on a probe batch first), with onnxruntime's dynamic int8 quantisation of the
  linear layers (`int8=true`, the default; `int8=false` ships the fp32 `model.onnx` instead);
* the tokenizer files and `damc_scorer.json` (`damc.runtime.scorer.ScorerMetadata`: render version, label
  normalisation, max length, dev-chosen threshold and floor `k_min`, teacher, base model, dev metrics), `combiner.json` when the run
  fitted one;
* `encoder/` — the retrieval encoder as weight-only int8 ONNX, checked against sentence-transformers by cosine.

`fp32=true` adds the fp32 copies: `model.safetensors` + `config.json` (the torch backend: GPUs, bf16,
`scripts/bench_scorer.py`) and `model.onnx`; `onnx=false` writes the torch weights only.

Example:
    $ python scripts/export.py run_dir=runs/scorer out=artifacts/scorer
    >>> CardScorer.from_pretrained("artifacts/scorer").score(query, cards)     # int8 ONNX, no torch
"""

from __future__ import annotations

import contextlib
import json
import logging
import warnings
from pathlib import Path
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)

_PROBE = [("user: my order 88412 never arrived\ntools: get_order, refund",
           "[tool_error] get_order(order_id=88412) failed: 500 Internal Server Error"),
          ("user: book a flight to Paris", "[user] I prefer window seats"),
          ("q", "a much longer card text " * 20)]


def export_onnx(model: Any, tokenizer: Any, path: Path, opset: int = 17) -> Path:
    """Write `model` (HF sequence classifier, fp32) as ONNX with dynamic (batch, seq) axes."""
    import torch

    enc = tokenizer([p[0] for p in _PROBE[:2]], [p[1] for p in _PROBE[:2]], return_tensors="pt", padding=True)
    names = [k for k in ("input_ids", "attention_mask", "token_type_ids") if k in enc]
    model = model.float().eval()
    # SDPA's mask code is traced with the probe's sequence length baked in; eager attention exports the
    # padding mask as a real graph input, so dynamic batch/sequence shapes stay correct.
    if hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation("eager")
    else:  # pragma: no cover - older transformers
        model.config._attn_implementation = "eager"

    class _Wrapper(torch.nn.Module):  # positional inputs -> logits, so the graph has exactly these I/O
        def __init__(self, m: Any) -> None:
            super().__init__()
            self.m = m

        def forward(self, *args: Any) -> Any:
            return self.m(**dict(zip(names, args))).logits

    axes = {n: {0: "batch", 1: "seq"} for n in names} | {"logits": {0: "batch"}}
    with torch.inference_mode(), _no_tracer_warnings():  # eval mode: export restores the inner model's mode
        torch.onnx.export(_Wrapper(model).eval(), tuple(enc[n] for n in names), str(path), input_names=names,
                          output_names=["logits"], dynamic_axes=axes, opset_version=opset, dynamo=False)
    model.eval()
    return path


def _verbose() -> bool:
    """`-v` was given (`damc.cli.quiet_third_party(verbose=True)` puts the damc logger at DEBUG)."""
    return logging.getLogger("damc").level == logging.DEBUG


@contextlib.contextmanager
def _no_tracer_warnings() -> Any:
    """Mute the tracer's notes on Hugging Face masking code during ONNX export (`-v` shows them)."""
    import torch

    with warnings.catch_warnings():
        if not _verbose():
            warnings.simplefilter("ignore", torch.jit.TracerWarning)
        yield


def quantize_int8(src: Path, dst: Path) -> Path:
    """Dynamic int8 quantisation of an ONNX model's weights (onnxruntime)."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    # onnxruntime's quantizer logs one INFO line per tensor through the *root* logger: muted unless -v
    root, level = logging.getLogger(), logging.getLogger().level
    if not _verbose():
        root.setLevel(max(level, logging.ERROR))
    try:
        # DefaultTensorType: fused contrib ops (Attention, SkipLayerNormalization) defeat ONNX shape inference.
        quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8,
                         extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
    finally:
        root.setLevel(level)
    return dst


def quantize_weights_int8(src: Path, dst: Path, min_elements: int = 4096) -> Path:
    """Weight-only int8: every 2-D fp32 initializer of ≥ `min_elements` (linear weights, embedding tables) is stored
    as int8 with symmetric fp32 scales — one per output channel (a MatMul weight's column, an embedding table's
    row) — and dequantised in the graph (`Cast` + `Mul`, folded by onnxruntime at load): the file is 4x smaller
    and activations stay fp32. Dynamic int8 (`quantize_int8`) costs MiniLM's sentence embeddings too much
    (cosine 0.90-0.97 to sentence-transformers on real cards, 0.999 here)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    model = onnx.load(str(src))
    graph = model.graph
    tables = {n.input[0] for n in graph.node if n.op_type == "Gather"}  # embedding lookups: one scale per row
    keep, dequant = [], []
    for init in graph.initializer:
        w = numpy_helper.to_array(init)
        if w.dtype != np.float32 or w.ndim != 2 or w.size < min_elements:
            keep.append(init)
            continue
        axis = 1 if init.name in tables else 0  # reduce over the input dim: (rows, 1) or (1, cols) scales
        scale = (np.maximum(np.abs(w).max(axis=axis, keepdims=True), 1e-12) / 127.0).astype(np.float32)
        q = np.clip(np.round(w / scale), -127, 127).astype(np.int8)                     # (rows, cols)
        keep += [numpy_helper.from_array(q, f"{init.name}_int8"), numpy_helper.from_array(scale, f"{init.name}_scale")]
        dequant += [helper.make_node("Cast", [f"{init.name}_int8"], [f"{init.name}_fp32"], to=TensorProto.FLOAT),
                    helper.make_node("Mul", [f"{init.name}_fp32", f"{init.name}_scale"], [init.name])]
    nodes = dequant + list(graph.node)  # dequantisation first keeps the graph topologically sorted
    del graph.initializer[:], graph.node[:]
    graph.initializer.extend(keep)
    graph.node.extend(nodes)
    onnx.save(model, str(dst))
    return dst


def export_encoder(spec: str, out: Path, opset: int = 17, min_cosine: float = 0.99) -> dict[str, Any]:
    """Write the retrieval encoder `spec` (a sentence-transformers BERT, e.g. `minilm-l6`) to `out/` as weight-only
    int8 ONNX (`model_int8.onnx`: last hidden state; pooling and norm run in numpy) with its tokenizer files and
    `damc_encoder.json`, so a light install embeds cards with onnxruntime (`damc.runtime.encoder.OnnxEncoder`).

    Raises:
        RuntimeError: the int8 embeddings of the probe texts fall below `min_cosine` of sentence-transformers'.
    """
    import shutil
    import tempfile

    import torch
    from transformers import AutoModel

    from damc.models import load_sentence_encoder, resolve_model
    from damc.runtime.encoder import ENCODER_META, ENCODER_ONNX, OnnxEncoder, pad_batch
    from damc.runtime.scorer import TOKENIZER_FILES
    from damc.tokens import PairTokenizer

    src = Path(resolve_model(spec))
    st_conf = src / "sentence_bert_config.json"
    max_length = int(json.loads(st_conf.read_text()).get("max_seq_length", 256)) if st_conf.exists() else 256
    out.mkdir(parents=True, exist_ok=True)
    model = AutoModel.from_pretrained(str(src), attn_implementation="eager").float().eval()
    names = ["input_ids", "attention_mask", "token_type_ids"]
    # a padded probe batch: with an all-ones mask the exporter would bake "no padding" into the graph
    probe = {n: torch.from_numpy(v) for n, v in pad_batch(PairTokenizer.from_dir(src, max_length).encode_texts(
        [_PROBE[0][1], _PROBE[2][1]]), 0).items()}

    class _Hidden(torch.nn.Module):  # positional inputs -> last hidden state (batch, seq, dim)
        def __init__(self, m: Any) -> None:
            super().__init__()
            self.m = m

        def forward(self, *args: Any) -> Any:
            return self.m(**dict(zip(names, args))).last_hidden_state

    with tempfile.TemporaryDirectory() as tmp, torch.inference_mode(), _no_tracer_warnings():
        fp32 = Path(tmp) / "model.onnx"
        torch.onnx.export(_Hidden(model).eval(), tuple(probe[n] for n in names), str(fp32), input_names=names,
                          output_names=["last_hidden_state"], opset_version=opset, dynamo=False,
                          dynamic_axes={n: {0: "batch", 1: "seq"} for n in names + ["last_hidden_state"]})
        quantize_weights_int8(fp32, out / ENCODER_ONNX)
    for name in TOKENIZER_FILES:
        if (src / name).exists():
            shutil.copy2(src / name, out / name)
    meta = {"name": f"{spec}-onnx-int8", "source": spec, "max_length": max_length, "pooling": "mean",
            "normalize": True, "onnx_file": ENCODER_ONNX, "dim": int(model.config.hidden_size)}
    (out / ENCODER_META).write_text(json.dumps(meta, indent=2))
    ref = load_sentence_encoder(spec).encode([p[1] for p in _PROBE] + [p[0] for p in _PROBE], normalize_embeddings=True)
    got = OnnxEncoder.from_dir(out).encode([p[1] for p in _PROBE] + [p[0] for p in _PROBE])
    cosine = float((np.asarray(ref) * got).sum(axis=1).min())
    if cosine < min_cosine:
        raise RuntimeError(f"the int8 ONNX encoder's embeddings reach cosine {cosine:.4f} < {min_cosine} of {spec}'s")
    return {"encoder": str(out), "encoder_min_cosine": cosine}


def main(cfg: Any) -> dict[str, Any]:
    """Export `cfg.run_dir` to `cfg.out`; returns `{"out", "files", "onnx_max_abs_diff"?, "encoder"?, ...}`.

    Example:
        >>> main(OmegaConf.create({"run_dir": "runs/t", "out": "artifacts/s", "onnx": True, "int8": True,
        ...                        "fp32": False, "encoder": None, "opset": 17, "check_tolerance": 1e-3}))
    """
    import shutil
    import tempfile

    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from damc.runtime.combiner import COMBINER_FILE
    from damc.runtime.scorer import META_FILE, ONNX_FILE, ONNX_INT8_FILE, CardScorer, ScorerMetadata

    run_dir, out = Path(cfg.run_dir), Path(cfg.out)
    if not (run_dir / "model" / "config.json").exists():
        raise FileNotFoundError(f"{run_dir}/model is missing: train first (scripts/train.py out_dir={run_dir})")
    onnx, int8, fp32 = bool(cfg.get("onnx", True)), bool(cfg.get("int8", True)), bool(cfg.get("fp32", False))
    meta = ScorerMetadata.from_training_run(run_dir)
    model = AutoModelForSequenceClassification.from_pretrained(str(run_dir / "model")).float().eval()
    tokenizer = AutoTokenizer.from_pretrained(str(run_dir / "model"))
    scorer = CardScorer(model, tokenizer, meta)
    out.mkdir(parents=True, exist_ok=True)
    if (out / META_FILE).exists():  # re-export into an old scorer directory: no stale weights left beside the new ones
        for name in ("model.safetensors", "config.json", ONNX_FILE, ONNX_INT8_FILE, COMBINER_FILE):
            (out / name).unlink(missing_ok=True)
    tokenizer.save_pretrained(str(out))
    meta.save(out)
    if fp32 or not onnx:  # the torch backend's weights (the run directory keeps them either way)
        model.save_pretrained(str(out), safe_serialization=True)
    if (run_dir / COMBINER_FILE).exists():  # the learned combiner travels with the scorer
        shutil.copy2(run_dir / COMBINER_FILE, out / COMBINER_FILE)
    result: dict[str, Any] = {"out": str(out)}
    if onnx:
        with tempfile.TemporaryDirectory() as tmp:
            # the fp32 graph is checked against PyTorch, then quantised; it ships only with int8=false or fp32=true
            work = out if (fp32 or not int8) else Path(tmp)
            export_onnx(model, tokenizer, work / ONNX_FILE, int(cfg.get("opset", 17)))
            if work != out:  # the check loads `work` as a scorer directory: metadata and tokenizer beside the graph
                for f in out.iterdir():
                    if f.is_file():
                        shutil.copy2(f, work / f.name)
            ref = scorer.predict(_PROBE)
            got = CardScorer.from_pretrained(work, backend="onnx").predict(_PROBE)
            diff = float(np.abs(ref - got).max())
            result["onnx_max_abs_diff"] = diff
            if diff > float(cfg.get("check_tolerance", 1e-3)):
                raise RuntimeError(f"ONNX scores differ from PyTorch by {diff:.2e} on the probe batch")
            if int8:
                quantize_int8(work / ONNX_FILE, out / ONNX_INT8_FILE)
    if onnx and cfg.get("encoder"):  # the retrieval encoder beside the scorer: all of the runtime runs without torch
        from damc.runtime.encoder import ENCODER_DIR

        result |= export_encoder(str(cfg.encoder), out / ENCODER_DIR, int(cfg.get("opset", 17)))
    result["files"] = sorted(p.name for p in out.iterdir())
    result["size_mb"] = round(sum(f.stat().st_size for f in out.rglob("*") if f.is_file()) / 1e6, 1)
    logger.info("exported %s -> %s (%s; %.1f MB)", run_dir, out, ", ".join(result["files"]), result["size_mb"])
    return result


if __name__ == "__main__":  # python -m damc.scorer.export KEY=VALUE ...  (configs: damc/configs/export.yaml)
    from damc.cli import run

    run("export", main)
