"""The architecture holds: the import rules of DESIGN.md ("Layout and import rules") and the code-shape limits.

Every `import` statement of a module counts — at module level or inside a function — and the rules are
checked transitively over the package (a runtime module importing a core module that imports the teacher
breaks the rule too). Each test names the offending module and the chain of imports that breaks it.
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "damc"
CORE = ("damc.cards", "damc.query", "damc.prompting", "damc.models", "damc.tokens", "damc.labels", "damc.llm")
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Absolute module names imported anywhere in a file (relative imports resolved)."""
    mod = _module_name(path)
    pkg = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            out.add(base)
            out |= {f"{base}.{a.name}" for a in node.names}  # `from damc.scorer import train` imports a module
    return out


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    """damc module -> the damc modules it imports (only names that are modules of the package)."""
    files = {_module_name(p): p for p in PKG.rglob("*.py")}
    return {m: {i for i in _imports(p) if i in files} for m, p in files.items()}


def _chains(graph: dict[str, set[str]], start: str, banned: tuple[str, ...]) -> list[list[str]]:
    """Import chains from `start` to any module under a `banned` prefix (breadth first, shortest first)."""
    seen, queue, hits = {start}, [[start]], []
    while queue:
        chain = queue.pop(0)
        for nxt in sorted(graph.get(chain[-1], ())):
            if nxt.startswith(banned):
                hits.append(chain + [nxt])
            elif nxt not in seen:
                seen.add(nxt)
                queue.append(chain + [nxt])
    return hits


RULES = [
    ("damc.runtime", ("damc.teacher", "damc.scorer.train", "damc.scorer.export", "damc.scorer.losses", "damc.eval")),
    ("damc.teacher", ("damc.scorer",)),
    (CORE, ("damc.runtime", "damc.eval", "damc.teacher", "damc.scorer")),
]


@pytest.mark.parametrize("sources,banned", RULES, ids=["runtime", "teacher", "core"])
def test_import_rules(graph, sources, banned):
    starts = [m for m in graph if m.startswith(sources)]
    assert starts, f"no modules under {sources}"
    broken = [" -> ".join(c) for m in starts for c in _chains(graph, m, banned)]
    assert not broken, "import rule broken:\n" + "\n".join(broken)


def test_the_library_never_imports_scripts():
    offenders = [str(p.relative_to(ROOT)) for p in PKG.rglob("*.py") if any(i == "scripts" or i.startswith("scripts.")
                                                                          for i in _imports(p))]
    assert not offenders


def test_the_checker_sees_a_broken_rule(tmp_path):
    """The rule test can fail: a runtime module importing the teacher is found, through a core module too."""
    g = {"damc.runtime.x": {"damc.cards"}, "damc.cards": {"damc.teacher.label"}, "damc.teacher.label": set()}
    assert _chains(g, "damc.runtime.x", RULES[0][1]) == [["damc.runtime.x", "damc.cards", "damc.teacher.label"]]
    f = tmp_path / "damc" / "runtime" / "y.py"
    f.parent.mkdir(parents=True)
    f.write_text("def f():\n    from damc.eval import harness\n")
    assert "damc.eval.harness" in _imports_of_file(f, tmp_path)


def _imports_of_file(path: Path, root: Path) -> set[str]:
    global ROOT
    old, ROOT = ROOT, root
    try:
        return _imports(path)
    finally:
        ROOT = old


def _oversized(root: Path) -> list[str]:
    """Modules over MAX_MODULE_LINES lines and functions over MAX_FUNCTION_LINES lines under `root`."""
    out = []
    for p in sorted(root.rglob("*.py")):
        src = p.read_text()
        if (n := len(src.splitlines())) > MAX_MODULE_LINES:
            out.append(f"{p.relative_to(root)}: {n} lines")
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if (n := node.end_lineno - node.lineno + 1) > MAX_FUNCTION_LINES:
                    out.append(f"{p.relative_to(root)}:{node.lineno} {node.name}: {n} lines")
    return out


def test_modules_and_functions_stay_small():
    """No module over ~500 lines and no function over ~80 (the shape a newcomer can read)."""
    offenders = _oversized(PKG)
    assert not offenders, "split these:\n" + "\n".join(offenders)


def test_the_shape_check_can_fail(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    (tmp_path / "big.py").write_text("def f():\n" + body + "\n" + "\n" * MAX_MODULE_LINES)
    assert [o.split(":")[0] for o in _oversized(tmp_path)] == ["big.py", "big.py"]
