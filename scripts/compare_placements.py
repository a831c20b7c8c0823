"""A/B of where the memory lines go: their own fenced message (`placement=message`, the default) vs inside the
system message (`placement=system`), every other setting equal, on the same decisions.

    python scripts/compare_placements.py OUT_DIR data.path=TEST.jsonl scorer=SCORER labels_path=LABELS \
        'policies=[window,bm25,heuristic,damc,oracle]' budgets=[1024] max_decisions=40 data.tool_calls_only=true

Runs the A/B harness (`damc.eval.harness.main`) once per placement (`OUT_DIR/message`, `OUT_DIR/system`; each
resumable) and prints, per policy@setting, both accuracies and the paired difference message − system with a
cluster-bootstrap (episodes) 95 % interval. Every other argument is an override of configs/evaluate.yaml.

    python scripts/compare_placements.py --pool DIR1 DIR2 ...      # finished A/Bs pooled (dataset × episode clusters)
"""

from __future__ import annotations

import sys
from pathlib import Path


def compare(out_dir: Path, overrides: list[str]) -> str:
    from hydra import compose, initialize_config_module

    from damc.eval.harness import main

    for placement in ("message", "system"):
        with initialize_config_module("damc.configs", version_base="1.3"):
            cfg = compose("evaluate", overrides=[*overrides, f"memory.placement={placement}",
                                                 f"out_dir={out_dir / placement}"])
        main(cfg)
    table = pooled([out_dir], head="policy@setting", digits=2)
    (out_dir / "placements.md").write_text(table + "\n")
    return table


def pooled(out_dirs: list[Path], head: str | None = None, digits: int = 3) -> str:
    """Per policy@setting, both accuracies and the paired difference message − system over the decisions of the
    finished A/Bs in `out_dirs` together (cluster bootstrap; clusters: dataset × episode). A policy only one of
    the placements evaluated (an earlier run's records in the same dir) is left out."""
    from damc.eval.records import records_by_key
    from damc.ranking import paired_bootstrap

    runs = [(d.name, records_by_key(d / "message"), records_by_key(d / "system")) for d in out_dirs]
    keys = sorted({k for _, m, _ in runs for k, _ in m})
    head = head or f"pooled: {', '.join(n for n, _, _ in runs)}"
    lines = [f"| {head} | n | accuracy, message | accuracy, system | message − system [95 % CI] |",
             "|---|---:|---:|---:|---|"]
    for key in keys:
        a, b, clusters = [], [], []
        for name, m, s in runs:
            ids = sorted(d for k, d in m if k == key and (k, d) in s)
            a += [float(m[(key, d)]["correct"]) for d in ids]
            b += [float(s[(key, d)]["correct"]) for d in ids]
            clusters += [f"{name}:{d.split('@')[0]}" for d in ids]
        if a:
            p = paired_bootstrap(a, b, clusters=clusters, n_boot=2000)
            lines.append(f"| {key} | {len(a)} | {sum(a) / len(a):.{digits}f} | {sum(b) / len(b):.{digits}f} | "
                         f"{p['delta']:+.{digits}f} [{p['ci'][0]:+.{digits}f}, {p['ci'][1]:+.{digits}f}] |")
    return "\n".join(lines)


if __name__ == "__main__":
    if any(a in ("-h", "--help") for a in sys.argv[1:]):
        print(__doc__)
        sys.exit(0)
    if len(sys.argv) > 2 and sys.argv[1] == "--pool":   # compare_placements.py --pool DIR1 DIR2 ...
        print(pooled([Path(x) for x in sys.argv[2:]]))
        sys.exit(0)
    if len(sys.argv) < 2 or sys.argv[1].startswith("-") or "=" in sys.argv[1]:
        sys.exit(__doc__)
    print(compare(Path(sys.argv[1]), sys.argv[2:]))
