"""The agent-loop example in docs/runtime.md runs as written."""

from __future__ import annotations

import re
from pathlib import Path


def test_runtime_doc_example_runs(capsys):
    text = Path("docs/runtime.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks, "docs/runtime.md has no python example"
    for code in blocks:
        exec(compile(code, "docs/runtime.md", "exec"), {"__name__": "__doc_example__"})
    out = capsys.readouterr().out
    assert "## Relevant history" in out and "failed: 500 Internal Server Error" in out and "KEPT" in out
