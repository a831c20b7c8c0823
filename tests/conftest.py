"""Shared test settings: offline, deterministic, small thread counts (CI has 2 cores)."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("OMP_NUM_THREADS", "2")
# Idle OpenMP threads sleep instead of spinning: with another process on the 2 cores (a subprocess test, DDP's two
# workers, other jobs on the box) spinning threads took the cores from the ones doing the work — a SmolLM2 forward
# of 256 tokens took 4.0 s with the default policy and 0.8 s with PASSIVE under load (docs/benchmarks.md).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

import damc.configs  # noqa: E402,F401  (the Hydra config schemas: a file-based `initialize` needs them)
from damc.extras import extra_of  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "data" / "samples"


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def samples_dir() -> Path:
    return SAMPLES


def small_episode(n_msgs: int = 13):
    """A real synthetic support episode cut after a few decisions, tools trimmed to those it uses."""
    from damc.data.synthetic import generate_episodes
    from damc.episodes import Episode

    ep = generate_episodes(1, seed=0)[0]
    msgs = ep.messages[:n_msgs]
    used = {c["function"]["name"] for m in msgs for c in m.get("tool_calls") or []}
    tools = [t for t in ep.tools if t["function"]["name"] in used]
    keys = {k: v for k, v in ep.metadata.get("key_card_ids", {}).items() if int(k) < n_msgs}
    return Episode(ep.episode_id, msgs, ep.domain, tools, {}, {"key_card_ids": keys})


LABEL_SAMPLE = SAMPLES / "scorer_labels_sample.jsonl"  # real SmolLM2-135M leave-one-in labels of runtime candidates


def label_sample_rows() -> list[dict]:
    """The rows of the real teacher label sample."""
    import json

    return [json.loads(x) for x in LABEL_SAMPLE.read_text().splitlines()]


# A tiny scorer run (trainer=tiny: 2 steps of 96-token pairs) on the label sample: train overrides shared by the tests
TINY_TRAIN = ("trainer=tiny", "model.max_length=96", "data.max_cards=8", "device=cpu", "data.dev_fraction=0.34")


@pytest.fixture(scope="session")
def sample_run(tmp_path_factory) -> Path:
    """One scorer training run on the real teacher label sample (Hydra `train`, `TINY_TRAIN`, W&B offline into the
    run directory), shared by every test that needs a trained run and does not test training itself:
    test_scorer_pipeline checks it (metrics, split, W&B, resume, export), test_evaluate exports it for the harness.
    Tests copy it before changing anything in it."""
    from damc.pipeline.stages import compose_stage
    from damc.scorer.train import main

    out = tmp_path_factory.mktemp("sample_run")
    os.environ["WANDB_MODE"] = "offline"
    main(compose_stage("train", [f"data.labels={LABEL_SAMPLE}", f"out_dir={out}", *TINY_TRAIN, "logger=wandb"]))
    return out


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    """Write label-like rows as JSONL (a label set the readers accept) and return the path."""
    import json

    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


# Modules a light install (`pip install damc`, no extras) does not have: the extras' modules, read from the
# package metadata (damc.extras.extra_of), but requests, which the base install brings too (tokenizers ->
# huggingface-hub -> requests).
ALSO_IN_LIGHT = ("requests",)
NOT_IN_LIGHT = tuple(m for m in extra_of() if m not in ALSO_IN_LIGHT)

_HIDE = """
import importlib.machinery, sys
_HIDDEN = set({hidden!r})

class _Hide(importlib.machinery.PathFinder):
    # the packages are 'not installed': imports fail and find_spec returns None, as in a light install
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name.split(".")[0] in _HIDDEN:
            return None
        return importlib.machinery.PathFinder.find_spec(name, path, target)

sys.meta_path = [_Hide if f is importlib.machinery.PathFinder else f for f in sys.meta_path]
"""


def run_light(code: str, hidden: tuple[str, ...] = NOT_IN_LIGHT, timeout: float = 600) -> str:
    """Run `code` in a fresh interpreter where the `hidden` packages look uninstalled; returns stdout.

    The code runs after the hiding preamble; it fails the test (with its stderr) when it exits non-zero.
    """
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", _HIDE.format(hidden=hidden) + code], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT)
    assert proc.returncode == 0, f"light-mode subprocess failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    return proc.stdout


# A real PostgreSQL + pgvector server for the store tests (pgserver, or DAMC_PG_URL): tests/pg_fixtures.py
from pg_fixtures import pg_server, pg_url  # noqa: E402,F401
