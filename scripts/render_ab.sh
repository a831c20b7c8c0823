#!/bin/bash
# The render A/B behind docs/runtime.md "Field lines": template lines vs field lines through the runtime, on the
# splits, scorer and template records of `make reproduce PROFILE=study_cpu_full` (run that first). Resumable.
#   bash scripts/render_ab.sh            # outputs under runs/renders/ (selection/, ab/, qwen/), one renders.md each
set -e
cd "$(dirname "$0")/.."
PY=.venv/bin/python
S=runs/study_cpu_full
O=runs/renders
COMMON=("budgets=[1024]" "sweep.top_k=[4]" "sweep.threshold=[]" "sweep.threshold_for.damc=[0.05]" data.tool_calls_only=true
        progress=false "scorer=$S/scorer" "labels_path=$S/labels")
ALL="policies=[window,similarity,bm25,heuristic,damc,oracle]"
# 1. selection only (no decision LLM): what the prompts hold, both renderings, dev and test splits
for spec in synthetic/dev:300 tau2_retail/dev:null synthetic/test:200 tau2_retail/test:null tau2_airline/test:null bfcl_long_context/test:200; do
  set_split=${spec%%:*}; n=${spec##*:}; extra=()
  [[ $set_split == bfcl* ]] && extra=(filters.min_history_cards=3)
  $PY scripts/compare_renders.py $O/selection/${set_split/\//_} "data.path=$S/data/$set_split.jsonl" "$ALL" \
      "${COMMON[@]}" max_decisions=$n score=false "${extra[@]}" > /dev/null
  echo "[selection] $set_split done $(date +%T)"
done
# 2. accuracy: the study's template records reused, the fields arms scored
for spec in tau2_retail:null tau2_airline:null synthetic:200; do
  ds=${spec%%:*}; n=${spec##*:}
  mkdir -p $O/ab/$ds
  [ -f $O/ab/$ds/records.jsonl ] || cp $S/eval/$ds/test/records.jsonl $O/ab/$ds/records.jsonl
  $PY scripts/compare_renders.py $O/ab/$ds "data.path=$S/data/$ds/test.jsonl" "policies=[window,similarity,damc,oracle]" \
      "${COMMON[@]}" max_decisions=$n > /dev/null
  echo "[accuracy] $ds done $(date +%T)"
done
# 3. the same question for a larger decision LLM, on the decisions where memory matters (a seeded 40 of each)
for ds in tau2_retail tau2_airline; do
  $PY scripts/compare_renders.py $O/qwen/$ds "data.path=$S/data/$ds/test.jsonl" "policies=[window,damc,oracle]" \
      "budgets=[1024]" "sweep.top_k=[4]" "sweep.threshold=[]" "sweep.threshold_for.damc=[]" data.tool_calls_only=true \
      progress=false "scorer=$S/scorer" "labels_path=$S/labels" llm.model=qwen2.5-coder-0.5b filters.memory_only=true \
      max_decisions=40 > /dev/null
  echo "[qwen] $ds done $(date +%T)"
done
