"""Optional dependencies: which extra brings a module, and a clear error when it is missing.

`pip install damc` carries only what the runtime needs (numpy, faiss-cpu, onnxruntime, tokenizers, jinja2,
tqdm). Training, labelling and evaluation need the extras:

| extra         | brings                                                                                  |
| ------------- | --------------------------------------------------------------------------------------- |
| `[train]`     | torch, transformers, sentence-transformers, accelerate, datasets, wandb, hydra-core, scikit-learn, gguf, onnx, ... |
| `[eval]`      | matplotlib, scipy, bm25s                                                                 |
| `[langchain]` | langchain-core                                                                           |
| `[postgres]`  | psycopg 3, psycopg-pool, pgvector (the PostgreSQL backend, `damc.runtime.pgstore`)         |

Import sites of those modules sit inside `with requires(what):`; a missing module then raises
`MissingExtraError` (an `ImportError`) that names the extra and the command to install it, instead of a bare
"No module named 'torch'".

Example:
    >>> with requires("the torch scorer backend"):
    ...     import torch
    MissingExtraError: the torch scorer backend needs torch, which a light install (`pip install damc`) does
    not have; install it with:  pip install 'damc[train]'
"""

from __future__ import annotations

import contextlib
from typing import Iterator

# top-level module -> (PyPI distribution, extra that brings it)
EXTRA_OF: dict[str, tuple[str, str]] = {
    "torch": ("torch", "train"),
    "transformers": ("transformers", "train"),
    "sentence_transformers": ("sentence-transformers", "train"),
    "accelerate": ("accelerate", "train"),
    "datasets": ("datasets", "train"),
    "wandb": ("wandb", "train"),
    "hydra": ("hydra-core", "train"),
    "omegaconf": ("omegaconf", "train"),
    "sklearn": ("scikit-learn", "train"),
    "gguf": ("gguf", "train"),
    "safetensors": ("safetensors", "train"),
    "onnx": ("onnx", "train"),
    "pandas": ("pandas", "train"),
    "pyarrow": ("pyarrow", "train"),
    "requests": ("requests", "train"),
    "matplotlib": ("matplotlib", "eval"),
    "scipy": ("scipy", "eval"),
    "bm25s": ("bm25s", "eval"),
    "langchain_core": ("langchain-core", "langchain"),
    "psycopg": ("psycopg[binary]", "postgres"),
    "psycopg_pool": ("psycopg-pool", "postgres"),
}


class MissingExtraError(ImportError):
    """A module of an optional extra is not installed (the message names the `pip install` command)."""


def install_hint(extra: str) -> str:
    """The command that installs an extra."""
    return f"pip install 'damc[{extra}]'"


@contextlib.contextmanager
def requires(what: str) -> Iterator[None]:
    """Turn a missing optional module inside the block into a `MissingExtraError` naming its extra.

    Only modules listed in `EXTRA_OF` are translated; any other import error (a broken install, a bug in DAMC)
    propagates unchanged.

    Args:
        what: what needs the module, for the message ("the torch scorer backend").
    """
    try:
        yield
    except ModuleNotFoundError as e:
        top = (e.name or "").split(".")[0]
        if top not in EXTRA_OF:
            raise
        dist, extra = EXTRA_OF[top]
        raise MissingExtraError(
            f"{what} needs {dist}, which a light install (`pip install damc`) does not have; install it with:  "
            f"{install_hint(extra)}", name=e.name) from e
