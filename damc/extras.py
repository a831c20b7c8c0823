"""Optional dependencies: which extra brings a module, and a clear error when it is missing.

`pip install damc` carries only what the runtime needs; training, labelling and evaluation need the extras
(`[train]`, `[eval]`, `[langchain]`, `[postgres]`: psycopg 3, psycopg-pool, pgvector for
`damc.runtime.pgstore`). The extras are declared once, in pyproject.toml; this module reads them
from the installed package's metadata (`importlib.metadata`), so a dependency added there is known here.

Import sites of those modules sit inside `with requires(what):`; a missing module then raises
`MissingExtraError` (an `ImportError`) that names the extra and the command to install it, instead of a bare
"No module named 'torch'".

Example:
    >>> with requires("the torch scorer backend"):
    ...     import torch
    MissingExtraError: the torch scorer backend needs torch, which a light install (`pip install damc`) does
    not have; install it with:  pip install 'damc[train]'
    >>> extra_of()["hydra"]
    ('hydra-core', 'train')
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import re
from typing import Iterator

RUNTIME_EXTRAS = ("train", "eval", "langchain", "postgres")  # the extras that bring library code paths (not `dev`: tests)
# Distributions whose import name is not their name with "-" -> "_".
IMPORT_NAME = {"hydra-core": "hydra", "scikit-learn": "sklearn", "faiss-cpu": "faiss"}
# Modules an extra brings through one of its distributions, imported directly by DAMC (module -> distribution).
BROUGHT_BY = {"safetensors": "transformers"}

_REQ = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)[^;]*;\s*extra\s*==\s*[\"']([^\"']+)[\"']")


@functools.cache
def extra_of() -> dict[str, tuple[str, str]]:
    """Top-level module -> (PyPI distribution, extra that brings it), for the extras in `RUNTIME_EXTRAS`.

    Read from the installed `damc` metadata (`Requires-Dist: torch>=2.3; extra == "train"`); empty when DAMC
    runs from a checkout that was never installed (then `requires` lets import errors through unchanged).
    """
    try:
        reqs = importlib.metadata.requires("damc") or []
    except importlib.metadata.PackageNotFoundError:
        return {}
    out: dict[str, tuple[str, str]] = {}
    for req in reqs:
        m = _REQ.match(req)
        if m and m.group(2) in RUNTIME_EXTRAS:
            dist = m.group(1)
            out[IMPORT_NAME.get(dist.lower(), dist.lower().replace("-", "_"))] = (dist, m.group(2))
    for module, via in BROUGHT_BY.items():
        if via in out:
            out[module] = (module, out[via][1])
    return out


class MissingExtraError(ImportError):
    """A module of an optional extra is not installed (the message names the `pip install` command)."""


def install_hint(extra: str) -> str:
    """The command that installs an extra."""
    return f"pip install 'damc[{extra}]'"


@contextlib.contextmanager
def requires(what: str) -> Iterator[None]:
    """Turn a missing optional module inside the block into a `MissingExtraError` naming its extra.

    Only modules of an extra (`extra_of()`) are translated; any other import error (a broken install, a bug in DAMC)
    propagates unchanged.

    Args:
        what: what needs the module, for the message ("the torch scorer backend").
    """
    try:
        yield
    except ModuleNotFoundError as e:
        top = (e.name or "").split(".")[0]
        if top not in extra_of():
            raise
        dist, extra = extra_of()[top]
        raise MissingExtraError(
            f"{what} needs {dist}, which a light install (`pip install damc`) does not have; install it with:  "
            f"{install_hint(extra)}", name=e.name) from e
