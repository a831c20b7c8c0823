"""The architecture holds: the floors of docs/ARCHITECTURE.md, their import rules, and no import circle.

Every `import` statement of a module counts — at module level or inside a function — and the rules are
checked transitively over the package (a runtime module importing a core module that imports the teacher
breaks the rule too). Each test names the offending module and the chain of imports that breaks it.
A module is split when it holds two concepts, not when it crosses a line count (ruff keeps lines short).
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "damc"
# The ground floor: contracts every layer shares; it imports nothing above itself.
GROUND = ("damc.episodes", "damc.facts", "damc.ranking", "damc.extras", "damc.assets")
CORE = ("damc.cards", "damc.query", "damc.templates", "damc.prompting", "damc.models", "damc.tokens", "damc.labels",
        "damc.llm", *GROUND)
ABOVE_CORE = ("damc.runtime", "damc.eval", "damc.teacher", "damc.scorer", "damc.pipeline", "damc.bench", "damc.data")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    """ids of the statements inside `if TYPE_CHECKING:` blocks (never executed: annotations only)."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            out |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return out


def _imports(path: Path, type_checking: bool = True) -> set[str]:
    """Absolute module names imported anywhere in a file (relative imports resolved); `type_checking=False`
    leaves out the imports under `if TYPE_CHECKING:` (they never run, so they cannot close an import circle)."""
    mod = _module_name(path)
    pkg = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    out: set[str] = set()
    tree = ast.parse(path.read_text())
    skip = set() if type_checking else _type_checking_nodes(tree)
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
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


BELOW_ROOF = ("damc.cards", "damc.query", "damc.templates", "damc.prompting", "damc.models", "damc.tokens",
              "damc.labels", "damc.cli", "damc.episodes", "damc.facts", "damc.ranking", "damc.extras", "damc.data",
              "damc.runtime", "damc.teacher", "damc.scorer", "damc.eval")
RULES = [
    ("damc.runtime", ("damc.teacher", "damc.scorer.train", "damc.scorer.export", "damc.scorer.losses", "damc.eval",
                      "damc.pipeline", "damc.bench", "damc.configs")),  # the Hydra schemas sit above the runtime
    ("damc.teacher", ("damc.scorer", "damc.eval", "damc.pipeline", "damc.bench")),  # siblings: teacher ↛ scorer
    ("damc.scorer", ("damc.teacher", "damc.eval", "damc.pipeline", "damc.bench")),  # scorer ↛ teacher
    ("damc.eval", ("damc.pipeline", "damc.bench")),
    (CORE, ABOVE_CORE),
    (BELOW_ROOF, ("damc.pipeline", "damc.bench")),  # only the roof (and the tools beside it) run the pipeline
]


@pytest.mark.parametrize("sources,banned", RULES, ids=["runtime", "teacher", "scorer", "eval", "core", "below-roof"])
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


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Import circles among the package's modules (strongly connected components of more than one module, and
    modules importing themselves), each sorted, the list sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in graph.get(v, ()):
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


# Circles tolerated for now (none): an entry here fails the test once its circle is gone, so the list cannot rot.
KNOWN_CIRCLES: list[list[str]] = []


def test_no_import_circles():
    """No two damc modules import each other, directly or through others (module- and function-level imports;
    an import under `if TYPE_CHECKING:` never runs and is left out here, though the layer rules above count it)."""
    files = {_module_name(p): p for p in PKG.rglob("*.py")}
    graph = {m: {i for i in _imports(p, type_checking=False) if i in files} for m, p in files.items()}
    circles = [c for c in _circles(graph) if c not in KNOWN_CIRCLES]
    assert not circles, "import circles:\n" + "\n".join(" <-> ".join(c) for c in circles)
    healed = [c for c in KNOWN_CIRCLES if c not in _circles(graph)]
    assert not healed, f"these circles are gone: remove them from KNOWN_CIRCLES: {healed}"


def test_the_circle_check_can_fail():
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert _circles(g) == [["a", "b", "c"], ["e"]]


def test_every_module_sits_on_a_floor(graph):
    """Each module is on a floor the rules know: ground/core, data, runtime, teacher, scorer, eval, the roof,
    the tools beside it — a new top-level module must be placed (and ruled) before it lands."""
    floors = (*CORE, *ABOVE_CORE, "damc.cli", "damc.configs")
    unplaced = [m for m in graph if m != "damc" and not m.startswith(floors)]
    assert not unplaced, f"modules on no floor: {unplaced}"


def test_one_llm_config_group():
    """The teacher's configs are the `llm` group's (placed under `teacher:`), so the two cannot drift apart: a
    teacher config names at most its class (`_target_`, the LLM with the estimators' interface), no setting."""
    import yaml

    for f in sorted((PKG / "configs" / "teacher").glob("*.yaml")):
        cfg = yaml.safe_load(f.read_text())
        cfg.pop("_target_", None)
        assert cfg == {"defaults": [f"/llm/{f.stem}@_here_"]}, f"{f.name} holds settings of its own: {cfg}"
        assert (PKG / "configs" / "llm" / f.name).exists()


def test_no_yaml_repeats_a_dataclass_default():
    """The dataclass configs registered in Hydra's ConfigStore (`damc.configs`) are the one home of their defaults:
    a YAML file setting one of their fields holds an override (a value that differs from the dataclass's), never a
    copy; `configs/memory/default.yaml` and `make_data.yaml` compose the schemas, and no other top config spells
    a `memory:` section."""
    import dataclasses

    import yaml

    from damc.configs import MemorySettings
    from damc.data.tau2 import Tau2Config

    def copies(node: dict, schema: type) -> dict:
        defaults = {f.name: f.default for f in dataclasses.fields(schema)}
        return {k: v for k, v in node.items() if k in defaults and defaults[k] == v}

    memory = yaml.safe_load((PKG / "configs" / "memory" / "default.yaml").read_text()) or {}
    assert memory.pop("defaults") == ["base_memory", "_self_"]
    assert not copies(memory, MemorySettings), f"memory/default.yaml repeats defaults: {copies(memory, MemorySettings)}"
    for f in sorted((PKG / "configs").rglob("*.yaml")):
        cfg = yaml.safe_load(f.read_text()) or {}
        assert not copies(cfg.get("memory") or {}, MemorySettings), f"{f.name}'s memory: repeats MemoryConfig defaults"
        assert not copies(cfg.get("tau2") or {}, Tau2Config), f"{f.name}'s tau2: repeats Tau2Config defaults"
    make_data = yaml.safe_load((PKG / "configs" / "make_data.yaml").read_text())
    assert "base_tau2@tau2" in make_data["defaults"]


def test_the_encoder_name_has_one_home():
    """The retrieval encoder's registry name is spelled once, as `damc.models.DEFAULT_ENCODER`: no signature in the
    package defaults to the literal (the registry, the packaged-file maps and docstrings may name it)."""
    offenders = []
    for f in sorted(PKG.rglob("*.py")):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                args = node.args
                defaults = [*args.defaults, *(d for d in args.kw_defaults if d is not None)]
                if any(isinstance(d, ast.Constant) and d.value == "minilm-l6" for d in defaults):
                    offenders.append(f"{f.relative_to(ROOT)}:{node.lineno} {node.name}")
            elif isinstance(node, ast.AnnAssign) and isinstance(node.value, ast.Constant) \
                    and node.value.value == "minilm-l6":
                offenders.append(f"{f.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, f"defaults spelling the encoder name instead of DEFAULT_ENCODER: {offenders}"
