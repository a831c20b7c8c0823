"""The `damc` command and the entry points behind `scripts/*.py`: every `main(cfg)` of the package under Hydra.

`damc COMMAND [KEY=VALUE ...]` (the console script, also `python -m damc.cli`) runs one step of the pipeline —
`make-data`, `label`, `train`, `export`, `evaluate`, `reproduce`, `demo` — with Hydra overrides forwarded to the same
`main(cfg)` that `scripts/<name>.py` calls, or `inspect STORE` (a memory's cards, scopes and the last context's
explanation). `damc --help` lists them; `damc COMMAND --help` says what one does, then Hydra's config help.

`scripts/<name>.py` and `python -m <module>` call `run(config_name, main)`, which composes
`damc/configs/<config_name>.yaml` (shipped inside the package, so a wheel install works without a checkout) with
the command-line overrides and calls `main(cfg)`. A required value left unset (`???`) stops with one usage line
naming the key and exit status 2, before any work; `--help` starts with what the command does.

Output stays readable: third-party INFO chatter (transformers weight reports, onnxruntime quantisation,
faiss loader, httpx, datasets) is silenced; `-v` / `--verbose` anywhere on the command line brings it back
(and DAMC's own DEBUG lines).

Example:
    $ damc label data.path=episodes.jsonl out_dir=labels
    $ damc inspect runs/mem --user alice
    $ python -m damc.teacher.label data.path=episodes.jsonl out_dir=labels
    $ python scripts/demo.py -v
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Sequence

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


@dataclass(frozen=True)
class Command:
    """One pipeline step of the `damc` command."""

    config: str            # the Hydra config it composes (damc/configs/<config>.yaml)
    target: str            # "module:function" called with the composed config
    summary: str           # the one line `damc --help` shows
    usage: str             # the required overrides, as a newcomer writes them
    after: str | None = None  # "module:function" printing a summary from (cfg, result)


COMMANDS: dict[str, Command] = {
    "make-data": Command("make_data", "damc.data.make:main", "build train/dev/test episode files (synthetic, "
                         "τ²-bench, BFCL)", "out_dir=DIR [source=synthetic] [n_episodes=200]"),
    "label": Command("label", "damc.teacher.label:main", "label which cards mattered for each decision "
                     "(teacher LLM, counterfactual deltas; resumable)", "data.path=EPISODES.jsonl out_dir=LABELS"),
    "train": Command("train", "damc.scorer.train:main", "train the card scorer (a small cross-encoder) on labels",
                     "data.labels=LABELS out_dir=RUN"),
    "export": Command("export", "damc.scorer.export:main", "export a training run to a scorer directory "
                      "(int8 ONNX + encoder: what the light runtime loads)", "run_dir=RUN out=SCORER"),
    "evaluate": Command("evaluate", "damc.eval.harness:main", "A/B evaluation of memory policies: decision "
                        "accuracy, prompt tokens, latency", "data.path=EPISODES.jsonl out_dir=DIR [scorer=SCORER] "
                        "[labels_path=LABELS]", after="damc.eval.harness:print_summary"),
    "reproduce": Command("study", "damc.pipeline.reproduce:run_study", "the study behind the README's results "
                         "(resumable; experiment=study_tau2_small for the reduced profile)", "[out_dir=DIR]"),
    "demo": Command("demo", "damc.pipeline.stages:main", "the whole pipeline on synthetic data in minutes "
                    "(data → labels → train → export → A/B)", "[out_dir=runs/demo]"),
}
INSPECT_SUMMARY = "a memory store: its cards, scopes and sessions, and the last context's explanation"
USAGE_OF = {c.config: c.usage for c in COMMANDS.values()}  # config name -> usage line (scripts reuse it)


def _load(ref: str) -> Callable[..., Any]:
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


def _help_requested(args: Sequence[str]) -> bool:
    return any(a in ("-h", "--help") for a in args)


def missing_values(config_name: str, overrides: Sequence[str]) -> list[str] | None:
    """The required keys (`???`) that `damc/configs/<config_name>.yaml` with `overrides` leaves unset; None when the
    config cannot be composed here (Hydra's own run then reports why)."""
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    try:
        GlobalHydra.instance().clear()
        with initialize_config_module(CONFIG_MODULE.removeprefix("pkg://"), version_base="1.3"):
            cfg = compose(config_name, overrides=list(overrides))
    except Exception:  # a bad override, an unknown group: Hydra's run reports it with its own message
        return None
    finally:
        GlobalHydra.instance().clear()
    return sorted(k for k in OmegaConf.missing_keys(cfg) if not k.startswith("hydra."))


def usage_line(prog: str, config_name: str, missing: Sequence[str] = ()) -> str:
    """`usage: PROG REQUIRED... [KEY=VALUE ...]`: the command's usage, or the missing keys themselves."""
    usage = USAGE_OF.get(config_name) or " ".join(f"{k}=..." for k in missing)
    return f"usage: {prog} {usage} [KEY=VALUE ...] [-v]".replace("  ", " ")


def run(config_name: str, main: Callable[[Any], Any], after: Callable[[Any, Any], None] | None = None, *,
        prog: str | None = None, doc: str | None = None) -> None:
    """Parse the command line with Hydra (`damc/configs/<config_name>.yaml`) and call `main(cfg)`.

    `--help` prints `doc` (default: the running script's docstring — what it does) and the usage line before
    Hydra's config help; a required value left unset exits with status 2 and one line naming the key.

    Args:
        config_name: the config file (without `.yaml`).
        main: the package function doing the work.
        after: optional `after(cfg, result)` printing a summary.
        prog: the command's name in messages (default: the script's file name).
        doc: what the command does (default: the `__main__` module's docstring).
    """
    from damc.extras import requires

    with requires(f"the `{config_name}` entry point (Hydra)"):
        import hydra

    verbose = verbose_requested()
    sys.argv = [sys.argv[0]] + [a for a in sys.argv[1:] if a not in ("-v", "--verbose")]
    prog = prog or os.path.basename(sys.argv[0])
    args = sys.argv[1:]
    if _help_requested(args):
        text = doc if doc is not None else (getattr(sys.modules.get("__main__"), "__doc__", None) or "")
        print(f"{text.strip()}\n\n{usage_line(prog, config_name)}\n", flush=True)
    elif not any(a.startswith("-") for a in args):  # Hydra's own flags (--cfg, -m, ...) go straight to Hydra
        missing = missing_values(config_name, args)
        if missing:
            noun = "value" if len(missing) == 1 else "values"
            keys = ", ".join(repr(k) for k in missing)
            print(f"{prog}: missing required {noun} {keys} — {usage_line(prog, config_name, missing)}",
                  file=sys.stderr)
            sys.exit(2)
    quiet_third_party(verbose)

    @hydra.main(config_path=CONFIG_MODULE, config_name=config_name, version_base="1.3")
    def _entry(cfg: Any) -> None:
        quiet_third_party(verbose)  # Hydra reconfigures logging when the job starts
        with requires(f"the `{config_name}` entry point"):
            result = main(cfg)
        if after is not None:
            after(cfg, result)

    _entry()


def overview() -> str:
    """`damc --help`: every command with its one line."""
    width = max(len(n) for n in [*COMMANDS, "inspect STORE"]) + 2
    lines = ["usage: damc COMMAND [KEY=VALUE ...] [-v]", "",
             "Decision-Aware Memory Cards: keep only the agent history that matters for the next decision.", "",
             "commands:"]
    lines += [f"  {name:<{width}}{c.summary}" for name, c in COMMANDS.items()]
    lines += [f"  {'inspect STORE':<{width}}{INSPECT_SUMMARY}", "",
              "KEY=VALUE are Hydra overrides of damc/configs/<command>.yaml (the same `main(cfg)` as scripts/*.py);",
              "`damc COMMAND --help` shows a command's usage and its configuration. -v: third-party logs too."]
    return "\n".join(lines)


def app(argv: Sequence[str] | None = None) -> None:
    """The `damc` console script: `damc COMMAND [KEY=VALUE ...]` (see `damc --help`)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(overview())
        sys.exit(0 if argv else 2)
    name, rest = argv[0], argv[1:]
    if name == "inspect":
        sys.exit(_load("damc.bench.explain:inspect_store")(rest))   # by name: the CLI sits below the bench
    if name not in COMMANDS:
        print(f"damc: unknown command {name!r}; choose from {', '.join([*COMMANDS, 'inspect'])} (damc --help)",
              file=sys.stderr)
        sys.exit(2)
    cmd = COMMANDS[name]
    main = _load(cmd.target)
    doc = f"damc {name}: {cmd.summary}.\n\n{(sys.modules[main.__module__].__doc__ or '').strip()}"
    sys.argv = [f"damc {name}", *rest]
    run(cmd.config, main, _load(cmd.after) if cmd.after else None, prog=f"damc {name}", doc=doc)


if __name__ == "__main__":  # python -m damc.cli --help
    app()
