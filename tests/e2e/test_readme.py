"""The README's Python blocks run verbatim in the light install (no torch, transformers, sentence-transformers or
hydra importable), and the README stays the short front door issue 29 asked for."""

from __future__ import annotations

import json
import re

from conftest import ROOT, run_light

README = (ROOT / "README.md").read_text()
BLOCKS = re.findall(r"```python\n(.*?)```", README, re.S)


def test_readme_is_short_and_names_the_two_commands():
    assert len(README.splitlines()) <= 150
    assert "make demo" in README and "make test" in README
    for link in re.findall(r"\]\(((?:docs|notebooks)/[^)#]+)", README):
        assert (ROOT / link).exists(), f"README links to a missing file: {link}"


def test_readme_python_blocks_run_verbatim_in_the_light_install(tmp_path):
    assert BLOCKS, "the README lost its agent snippet"
    code = f"import os\nos.chdir({str(tmp_path)!r})\n" + "\n".join(BLOCKS) + """
import sys
roles = [m["role"] for m in ctx.messages]
memory_text = "\\n".join(str(m.get("content")) for m in ctx.messages if "<memory_records>" in str(m.get("content")))
print("RESULT", json.dumps({"roles": roles, "memory": memory_text, "session": ctx.session_id,
      "heavy": sorted(m for m in ("torch", "transformers", "sentence_transformers", "hydra") if m in sys.modules)}))
"""
    out = run_light("import json\n" + code)
    res = json.loads(out.split("RESULT ", 1)[1].splitlines()[0])
    assert res["heavy"] == []
    # the caller's format: its own system message first, no system message after a user message, the current
    # turn last and verbatim
    assert res["roles"][0] == "system" and "system" not in res["roles"][res["roles"].index("user"):]
    assert res["roles"][-1] == "user"
    assert "88412" in res["memory"] and "DHL" in res["memory"]      # the earlier order and its status came back
    assert "KEPT" in out and (tmp_path / "memory_dir" / "cards.db").exists()
