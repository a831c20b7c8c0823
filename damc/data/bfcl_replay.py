"""Executing BFCL ground truth on BFCL's own backends: package access, safe call parsing, dispatch.

`damc.data.bfcl` replays every ground-truth call string of a BFCL multi-turn entry through this module:
`parse_call`/`parse_calls` turn a string into `ParsedCall`s with `ast` (a single `name(arg, key=literal,
...)` call, literals only; nothing is ever `eval`-ed), and `BFCLBackends` runs them on fresh instances of
the entry's backend classes (file system, messaging, trading, travel, vehicle, tickets, math, posting),
returning JSON-safe results. The installed `bfcl_eval` package is located and imported so that it never
writes into site-packages.

Example:
    >>> be = BFCLBackends(["MathAPI"], {})
    >>> be.call(parse_call("add(a=2, b=3)"))
    ({'a': 2, 'b': 3}, {'result': 5}, None)
"""

from __future__ import annotations

import ast
import copy
import importlib
import importlib.util
import inspect
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class BFCLCallParseError(ValueError):
    """A ground-truth call string that is not a single `name(literal, key=literal, ...)` call."""


@dataclass(frozen=True)
class ParsedCall:
    """One parsed call string.

    Attributes:
        name: the called function's name.
        args: positional literal arguments.
        kwargs: keyword literal arguments, in source order.
    """

    name: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)


# ----------------------------------------------------------------------------- package access

def _bfcl_env() -> None:
    """Point BFCL's project root away from site-packages before anything of bfcl_eval is imported.

    `bfcl_eval.constants.eval_config` creates `result/`, `score/` and `.file_locks/` under
    `BFCL_PROJECT_ROOT` (default: site-packages itself) when imported. We never import it, but a
    transitive import by a future version must not write into the installed tree.
    """
    os.environ.setdefault("BFCL_PROJECT_ROOT", str(Path(tempfile.gettempdir()) / "damc-bfcl"))


def bfcl_package_dir() -> Path:
    """Directory of the installed `bfcl_eval` package (located without importing it).

    Raises:
        ImportError: when `bfcl-eval` is not installed (`pip install --no-deps bfcl-eval`).
    """
    spec = importlib.util.find_spec("bfcl_eval")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("bfcl-eval is not installed: pip install --no-deps bfcl-eval")
    return Path(next(iter(spec.submodule_search_locations)))


def _import_bfcl(module: str) -> Any:
    _bfcl_env()
    return importlib.import_module(module)


def _backend_config() -> Any:
    return _import_bfcl("bfcl_eval.constants.executable_backend_config")


# ----------------------------------------------------------------------------- parsing and dispatch

def parse_call(text: str) -> ParsedCall:
    """Parse one BFCL call string with `ast`, accepting only `name(literal, ..., key=literal, ...)`.

    Nothing is evaluated: the callee must be a bare name and every argument a Python literal
    (`ast.literal_eval` on its node), so `__import__('os').system('x')` or `f(g())` are rejected.

    Raises:
        BFCLCallParseError: the string is not such a call (the message says why).
    """
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as e:
        raise BFCLCallParseError(f"not a Python expression: {text[:200]!r} ({e.msg})") from None
    except (ValueError, RecursionError, MemoryError) as e:  # null bytes, nesting deeper than the parser goes
        raise BFCLCallParseError(f"not a Python expression: {text[:200]!r} ({type(e).__name__})") from None
    if not isinstance(node, ast.Call):
        raise BFCLCallParseError(f"not a function call: {text!r}")
    if not isinstance(node.func, ast.Name):
        raise BFCLCallParseError(f"callee must be a plain function name, got {ast.unparse(node.func)!r} in {text!r}")
    name = node.func.id
    if name.startswith("_"):
        raise BFCLCallParseError(f"private or dunder function {name!r} is not allowed: {text!r}")

    def literal(arg: ast.AST) -> Any:
        if isinstance(arg, ast.Starred):
            raise BFCLCallParseError(f"*args are not allowed: {text!r}")
        try:
            return ast.literal_eval(arg)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            raise BFCLCallParseError(f"argument {ast.unparse(arg)!r} is not a literal in {text!r}") from None

    args = tuple(literal(a) for a in node.args)
    kwargs: dict[str, Any] = {}
    for kw in node.keywords:
        if kw.arg is None:
            raise BFCLCallParseError(f"**kwargs are not allowed: {text!r}")
        kwargs[kw.arg] = literal(kw.value)
    return ParsedCall(name, args, kwargs)


def parse_calls(text: str) -> list[ParsedCall]:
    """Parse a call string holding one call or a list of calls (`[f(a=1), g(b=2)]`, BFCL's output format).

    Raises:
        BFCLCallParseError: any element is not an allowed call (see `parse_call`).
    """
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as e:
        raise BFCLCallParseError(f"not a Python expression: {text[:200]!r} ({e.msg})") from None
    except (ValueError, RecursionError, MemoryError) as e:  # null bytes, nesting deeper than the parser goes
        raise BFCLCallParseError(f"not a Python expression: {text[:200]!r} ({type(e).__name__})") from None
    if isinstance(node, (ast.List, ast.Tuple)):
        return [parse_call(ast.unparse(elt)) for elt in node.elts]
    return [parse_call(text)]


def _json_safe(value: Any) -> Any:
    """Round-trip through JSON (tuples -> lists); anything non-serialisable becomes its str()."""
    try:
        return json.loads(json.dumps(value, ensure_ascii=False, default=str))
    except (TypeError, ValueError):
        return str(value)


class BFCLBackends:
    """Fresh instances of the backend classes of one episode, and a safe dispatcher over them.

    Args:
        involved_classes: BFCL class names (e.g. `["GorillaFileSystem", "TwitterAPI"]`).
        initial_config: the entry's `initial_config` (deep-copied per class).
        long_context: passed to each class's `_load_scenario` (BFCL's long-context category).

    Example:
        >>> be = BFCLBackends(["MathAPI"], {})
        >>> be.call(parse_call("add(a=2, b=3)"))
        ({'a': 2, 'b': 3}, {'result': 5}, None)
    """

    def __init__(self, involved_classes: list[str], initial_config: dict[str, Any], long_context: bool = False):
        cfg = _backend_config()
        self.instances: dict[str, Any] = {}
        self.methods: dict[str, Any] = {}  # method name -> bound method (later classes win, as in BFCL)
        for cls_name in involved_classes:
            module = _import_bfcl(cfg.CLASS_FILE_PATH_MAPPING[cls_name])
            instance = getattr(module, cls_name)()
            if cls_name not in cfg.STATELESS_CLASSES:
                instance._load_scenario(copy.deepcopy(initial_config.get(cls_name, {})), long_context=long_context)
            self.instances[cls_name] = instance
            for name, method in inspect.getmembers(instance, predicate=inspect.ismethod):
                if not name.startswith("_"):
                    self.methods[name] = method

    def named_arguments(self, call: ParsedCall) -> dict[str, Any]:
        """The call's arguments by parameter name (positional ones named from the method signature)."""
        method = self.methods.get(call.name)
        if method is not None and call.args:
            try:
                return dict(inspect.signature(method).bind(*call.args, **call.kwargs).arguments)
            except TypeError:
                pass
        named = {f"arg{i}": a for i, a in enumerate(call.args)}
        named.update(call.kwargs)
        return named

    def call(self, call: ParsedCall) -> tuple[dict[str, Any], Any, str | None]:
        """Run one parsed call on the backend that owns it.

        Returns:
            (named arguments, JSON-safe result, error message or None). A raised exception or an
            unknown function gives result `{"error": "..."}` and the same message as error.
        """
        args = self.named_arguments(call)
        method = self.methods.get(call.name)
        if method is None:
            err = f"unknown function {call.name!r} for classes {', '.join(self.instances)}"
            return args, {"error": err}, err
        try:
            result = method(*call.args, **call.kwargs)
        except Exception as e:  # a backend bug or bad ground truth; recorded, never fatal
            err = f"{type(e).__name__}: {e}"
            return args, {"error": err}, err
        return args, _json_safe(result), None
