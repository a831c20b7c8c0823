"""Command-line entry points: every `main(cfg)` of the package behind `@hydra.main`, with the configs it ships.

`scripts/<name>.py` and `python -m <module>` both call `run(config_name, main)`, which composes
`damc/configs/<config_name>.yaml` (shipped inside the package, so a wheel install works without a checkout)
with the command-line overrides and calls `main(cfg)`.

Output stays readable: third-party INFO chatter (transformers weight reports, onnxruntime quantisation,
faiss loader, httpx, datasets) is silenced; `-v` / `--verbose` anywhere on the command line brings it back
(and DAMC's own DEBUG lines).

Example:
    $ python -m damc.teacher.label data.path=episodes.jsonl out_dir=labels
    $ python scripts/demo.py -v
"""

from __future__ import annotations

import logging
import os
import sys
import warnings
from typing import Any, Callable

CONFIG_MODULE = "pkg://damc.configs"
NOISY_LOGGERS = ("transformers", "sentence_transformers", "onnxruntime", "onnx", "faiss", "faiss.loader", "httpx",
                 "datasets", "huggingface_hub", "accelerate", "urllib3", "matplotlib", "hydra", "torch",
                 "numexpr", "wandb")


def verbose_requested(argv: list[str] | None = None) -> bool:
    """True when `-v`/`--verbose` is on the command line or `DAMC_VERBOSE=1` is set."""
    argv = sys.argv if argv is None else argv
    return os.environ.get("DAMC_VERBOSE", "") not in ("", "0") or any(a in ("-v", "--verbose") for a in argv[1:])


def quiet_third_party(verbose: bool = False) -> None:
    """Silence third-party INFO logs and warnings (keep errors); `verbose=True` leaves everything on."""
    if verbose:
        logging.getLogger("damc").setLevel(logging.DEBUG)
        return
    for name in NOISY_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("ORT_LOG_SEVERITY_LEVEL", "3")
    warnings.filterwarnings("ignore", category=UserWarning)
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    try:  # transformers keeps its own verbosity setting (weight-loading reports go through it)
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
    except ImportError:
        pass


def run(config_name: str, main: Callable[[Any], Any], after: Callable[[Any, Any], None] | None = None) -> None:
    """Parse the command line with Hydra (`damc/configs/<config_name>.yaml`) and call `main(cfg)`.

    Args:
        config_name: the config file (without `.yaml`).
        main: the package function doing the work.
        after: optional `after(cfg, result)` printing a summary.
    """
    from damc.extras import requires

    with requires(f"the `{config_name}` entry point (Hydra)"):
        import hydra

    verbose = verbose_requested()
    sys.argv = [sys.argv[0]] + [a for a in sys.argv[1:] if a not in ("-v", "--verbose")]
    quiet_third_party(verbose)

    @hydra.main(config_path=CONFIG_MODULE, config_name=config_name, version_base="1.3")
    def _entry(cfg: Any) -> None:
        quiet_third_party(verbose)  # Hydra reconfigures logging when the job starts
        with requires(f"the `{config_name}` entry point"):
            result = main(cfg)
        if after is not None:
            after(cfg, result)

    _entry()
