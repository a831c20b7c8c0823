#!/usr/bin/env bash
# The instrument study's GPU half (issue 31 item 5): Qwen2.5-Coder-1.5B deciding on every decision where memory
# matters of the five test splits, with the shipped default scorer, and as teacher on τ²-bench retail train
# (configs/experiment/device_study.yaml). Made for a GPU machine with this checkout's `make venv` done and the model
# package installed (docs/evaluation.md, "The device study"); bf16 there, fp32 on a CPU.
#
#   scripts/device_study.sh [HYDRA_OVERRIDE ...]          # e.g. decision_model=qwen2.5-coder-0.5b
#
# Environment:
#   OUT=runs/device_study   the study's out_dir (rerun the same command with the same OUT to resume)
#   LIMIT_S=540             stop after this many seconds (SIGINT: the records so far are kept; rerun to go on)
#   MERGE_WITH=""           space-separated out_dir roots of other runs of this profile (CPU shards, earlier GPU
#                           runs): each test split's records are merged with theirs into $OUT/merged/<dataset>/
#   ALLOW_CPU=0             1: run without a CUDA device (fp32; hours: use shard.index=I shard.count=N)
#   DRY_RUN=0               1: print what would run and check the profile composes; run nothing
#   PY=.venv/bin/python     the interpreter (python when there is no .venv)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python )}
OUT=${OUT:-runs/device_study}
LIMIT_S=${LIMIT_S:-540}
MERGE_WITH=${MERGE_WITH:-}
DATASETS=(synthetic bfcl_long_context tau2_airline tau2_telecom tau2_retail)
run=("$PY" scripts/reproduce.py experiment=device_study "out_dir=$OUT" "$@")

if [ "${DRY_RUN:-0}" = 1 ]; then
  "${run[@]}" dry_run=true
  echo "would run: timeout --signal=INT $LIMIT_S ${run[*]}"
  for d in "${DATASETS[@]}"; do
    echo "would merge: $PY scripts/merge_records.py $OUT/eval/$d/test$(for m in $MERGE_WITH; do printf ' %s' "$m/eval/$d/test"; done) --out $OUT/merged/$d"
  done
  exit 0
fi

if [ "${ALLOW_CPU:-0}" != 1 ] && ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
  echo "device_study: no CUDA device here (torch.cuda.is_available() is False); set ALLOW_CPU=1 to run in fp32 on" \
       "the CPU (hours: split it with shard.index=I shard.count=N across machines and merge)" >&2
  exit 2
fi

t0=$(date +%s)
set +e
timeout --signal=INT --kill-after=30 "$LIMIT_S" "${run[@]}"
rc=$?
set -e
echo "device_study: the study ran $(( $(date +%s) - t0 )) s (exit $rc)"
if [ "$rc" = 124 ] || [ "$rc" = 130 ]; then
  why=$([ "$rc" = 124 ] && echo "stopped at LIMIT_S=$LIMIT_S s" || echo "interrupted")
  echo "device_study: $why; every record so far is kept: rerun the same command to go on" >&2
elif [ "$rc" != 0 ]; then
  exit "$rc"
fi

for d in "${DATASETS[@]}"; do
  runs=()
  [ -s "$OUT/eval/$d/test/records.jsonl" ] && runs+=("$OUT/eval/$d/test")
  for m in $MERGE_WITH; do [ -s "$m/eval/$d/test/records.jsonl" ] && runs+=("$m/eval/$d/test"); done
  [ "${#runs[@]}" -gt 0 ] || continue
  "$PY" scripts/merge_records.py "${runs[@]}" --out "$OUT/merged/$d"
done
[ "$rc" = 0 ] || exit "$rc"
