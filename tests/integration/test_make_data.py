"""make_data: the real Hydra config, deterministic splits, the script end to end, the summary."""

import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize

from damc.data.make import main, summarize
from damc.data.synthetic import generate_episodes
from damc.episodes import load_episodes, split_episodes

ROOT = Path(__file__).resolve().parents[2]


def _cfg(out_dir, *overrides):
    with initialize(config_path="../../configs", version_base="1.3"):
        return compose(config_name="make_data", overrides=[f"out_dir={out_dir}", *overrides])


def test_out_dir_is_required():
    with initialize(config_path="../../configs", version_base="1.3"):
        cfg = compose(config_name="make_data")
    with pytest.raises(Exception, match="out_dir"):
        main(cfg)


def test_main_writes_deterministic_splits(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    res = main(_cfg(a, "n_episodes=20", "seed=1"))
    main(_cfg(b, "n_episodes=20", "seed=1"))
    for split, n in (("train", 16), ("dev", 2), ("test", 2)):
        assert (a / f"{split}.jsonl").read_bytes() == (b / f"{split}.jsonl").read_bytes()
        eps = load_episodes(a / f"{split}.jsonl")
        assert len(eps) == n == res["splits"][split]["episodes"]
    ids = [e.episode_id for s in ("train", "dev", "test") for e in load_episodes(a / f"{s}.jsonl")]
    assert len(ids) == len(set(ids)) == 20  # split by episode, nothing lost or duplicated
    s = res["splits"]["train"]
    assert 0 < s["decisions_with_key_cards"] <= s["decisions"]
    assert s["far_key_decisions"] <= s["decisions_with_key_cards"]
    assert s["mean_key_distance"] >= 10
    assert 0 < s["tool_error_rate"] < 0.5
    assert 40 <= s["messages"]["min"] <= s["messages"]["median"] <= s["messages"]["max"] <= 150


def test_split_fractions_are_checked_and_respected():
    eps = generate_episodes(10, seed=0, progress=False)
    sp = split_episodes(eps, {"train": 0.6, "dev": 0.2, "test": 0.2}, seed=0)
    assert [len(sp[s]) for s in ("train", "dev", "test")] == [6, 2, 2]
    with pytest.raises(ValueError):
        split_episodes(eps, {"train": 0.9, "dev": 0.2, "test": 0.1})


def test_summarize_counts(tmp_path):
    eps = generate_episodes(3, seed=2, progress=False)
    s = summarize(eps)
    assert s["episodes"] == 3
    assert s["messages"]["total"] == sum(len(e.messages) for e in eps)
    assert s["decisions"] == sum(m["role"] == "assistant" for e in eps for m in e.messages)
    assert s["decisions_with_key_cards"] == sum(len(e.metadata["key_card_ids"]) for e in eps)
    assert s["tool_results"] == sum(m["role"] == "tool" for e in eps for m in e.messages)
    assert 500 < s["approx_tokens"]["per_episode_median"] < 25000


def test_script_runs_via_hydra(tmp_path):
    out = tmp_path / "data"
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "make_data.py"), "source=synthetic",
                           "n_episodes=10", "seed=5", f"out_dir={out}", f"hydra.run.dir={tmp_path / 'hydra'}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "with key cards" in proc.stdout + proc.stderr
    assert [len(load_episodes(out / f"{s}.jsonl")) for s in ("train", "dev", "test")] == [8, 1, 1]
