"""The command line a newcomer finds: `damc --help` (the `[project.scripts]` console script, also
`python -m damc.cli`), scripts whose `--help` starts with what they do, one usage line for a missing value."""

import ast
import importlib
import os
import subprocess
import sys

import pytest
import tomllib
from conftest import ROOT, SAMPLES

ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}  # scripts/ import this checkout's damc
COMMANDS = ("label", "train", "export", "evaluate", "reproduce", "demo", "inspect STORE")


def _run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=timeout)


def test_damc_help_lists_every_command_with_one_line():
    proc = _run("-m", "damc.cli", "--help")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    for name in COMMANDS:
        hits = [line for line in lines if line.strip().startswith(name + " ")]
        assert len(hits) == 1 and len(hits[0].split(name, 1)[1].strip()) > 10, (name, proc.stdout)
    unknown = _run("-m", "damc.cli", "lable")
    assert unknown.returncode == 2 and "unknown command 'lable'" in unknown.stderr


def test_the_console_script_is_declared_and_resolves():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    module, _, name = scripts["damc"].partition(":")
    assert callable(getattr(importlib.import_module(module), name))


def _first_doc_line(path) -> str:
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    return doc.strip().splitlines()[0].split(":")[0].strip("`. ")


@pytest.mark.parametrize("script", sorted(p.name for p in (ROOT / "scripts").glob("*.py")
                                          if "run(" not in p.read_text()))
def test_argparse_scripts_help_says_what_they_do(script):
    proc = _run(str(ROOT / "scripts" / script), "--help", timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    head = " ".join(proc.stdout.split("options:")[0].split())  # argparse: usage, what it does, then the options
    assert _first_doc_line(ROOT / "scripts" / script)[:30] in head, (script, proc.stdout[:600])


@pytest.mark.parametrize("script", ["label.py", "export.py"])
def test_hydra_scripts_help_starts_with_what_they_do(script):
    """On main: "cli is powered by Hydra" first; now the script's docstring, then the usage line, then Hydra's."""
    proc = _run(str(ROOT / "scripts" / script), "--help")
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = ast.get_docstring(ast.parse((ROOT / "scripts" / script).read_text()))
    assert proc.stdout.startswith(doc.splitlines()[0]), proc.stdout[:300]
    assert f"usage: {script} " in proc.stdout and proc.stdout.index("usage:") < proc.stdout.index("powered by Hydra")


def test_a_missing_required_value_is_one_usage_line_and_exit_2():
    proc = _run(str(ROOT / "scripts" / "label.py"), "data.tool_calls_only=true")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        "label.py: missing required values 'data.path', 'out_dir' — usage: label.py data.path=EPISODES.jsonl "
        "out_dir=LABELS [KEY=VALUE ...] [-v]"]
    proc = _run("-m", "damc.cli", "export", "run_dir=runs/x")
    assert proc.returncode == 2 and proc.stderr.strip() == (
        "damc export: missing required value 'out' — usage: damc export run_dir=RUN out=SCORER [KEY=VALUE ...] [-v]")


def test_a_mistyped_memory_override_stops_before_any_work_naming_the_key(tmp_path):
    """`memory:` is the MemoryConfig schema (damc.configs): a value of the wrong type is Hydra's error, naming the
    key and the type expected, before the label run creates anything."""
    proc = _run("-m", "damc.cli", "label", f"data.path={SAMPLES / 'synthetic_sample.jsonl'}",
                f"out_dir={tmp_path / 'labels'}", "memory.top_n=abc")
    assert proc.returncode == 1 and not (tmp_path / "labels").exists()
    assert "Value 'abc' of type 'str' could not be converted to Integer" in proc.stderr
    assert "full_key: memory.top_n" in proc.stderr


def test_damc_command_help_names_the_command_and_its_usage():
    proc = _run("-m", "damc.cli", "train", "--help")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("damc train: train the card scorer")
    assert "usage: damc train data.labels=LABELS out_dir=RUN" in proc.stdout and "== Config ==" in proc.stdout


def test_inspect_shows_cards_scopes_and_the_last_context(tmp_path):
    from damc import DecisionAwareMemory
    from damc.episodes import load_episodes

    ep = load_episodes(SAMPLES / "synthetic_sample.jsonl")[0]
    with DecisionAwareMemory(tmp_path / "mem", user_id="alice", context_window=4096) as mem:
        mem.build_context(ep.messages[:13], tools=ep.tools, session_id="s1")
        n = mem.store.count()
    proc = _run("-m", "damc.cli", "inspect", str(tmp_path / "mem"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout
    assert f"{n} cards" in out and "1 scope(s), 1 session(s)" in out and "user=alice agent=-" in out
    assert "newest cards" in out and "last context (user=alice agent=-):" in out and "KEPT" in out
    missing = _run("-m", "damc.cli", "inspect", str(tmp_path / "nothing"))
    assert missing.returncode == 2 and "no DAMC store at" in missing.stderr
