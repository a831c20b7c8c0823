#!/usr/bin/env bash
# Three students, one recipe (issue 32 item 3; docs/results.md "Three students, one recipe"): the teacher's labels,
# grounded labels and hybrid labels of the SAME training decisions, one student each with the shipped scorer's
# recipe, every student beside the retrieval baselines and the shipped scorer on the dev and test splits (selection
# only: key hit at four cards, no decision LLM). Made for the splits of `make reproduce PROFILE=default_scorer`
# (run that first; the airline and BFCL test splits come from the device-study profile's recipes, never trained on).
# Every stage resumes: a label run from its shards, a student or an evaluation skipped when its output exists.
#
#   bash scripts/three_students.sh            # outputs under $OUT (default runs/three)
#
# Environment: OUT=runs/three · PER_EPISODE=2 (synthetic train decisions labelled per episode; retail: all) ·
# LAMBDAS="auto 1.0" (one hybrid student per λ: `auto` is the proxy of damc.teacher.hybrid.choose_lambda, a number is
# fixed; the student's dev key hit chooses among them) · SPLITS=runs/default_scorer/data · UNSEEN=runs/device_study/data
# (the profile's airline and BFCL long_context test splits) · DRY_RUN=1 prints the commands and runs none.
# Times on a 2-core AMX box (bf16): teacher labels 53 min (synthetic 320 decisions 44 min, retail 9 min), grounded
# labels 2 min, each student ~6 min, the evaluations ~20 min.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python )}
OUT=${OUT:-runs/three}
PER_EPISODE=${PER_EPISODE:-2}
LAMBDAS=${LAMBDAS:-auto 1.0}
SPLITS=${SPLITS:-runs/default_scorer/data}
UNSEEN=${UNSEEN:-runs/device_study/data}
L=$OUT/labels
export OMP_WAIT_POLICY=PASSIVE TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
run() { if [ "${DRY_RUN:-0}" = 1 ]; then echo "$*"; else "$@"; fi; }

for f in "$SPLITS/synthetic/train.jsonl" "$SPLITS/tau2_retail/train.jsonl"; do
  [ -f "$f" ] || [ "${DRY_RUN:-0}" = 1 ] || { echo "three_students: $f is missing: run 'make reproduce PROFILE=default_scorer' first (or set SPLITS)" >&2; exit 2; }
done

# 1. labels of the same decisions: the teacher (SmolLM2-135M, loi) and the grounded targets (no model)
for est in teacher grounded; do
  e=(); [ "$est" = grounded ] && e=(estimator=grounded)
  run "$PY" scripts/label.py "data.path=$SPLITS/tau2_retail/train.jsonl" data.tool_calls_only=true "${e[@]}" "out_dir=$L/${est}_retail"
  run "$PY" scripts/label.py "data.path=$SPLITS/synthetic/train.jsonl" data.tool_calls_only=true "per_episode=$PER_EPISODE" \
      "${e[@]}" "out_dir=$L/${est}_syn"
done
# 2. hybrid labels: teacher + λ · grounded, row by row (one set per λ)
students=(grounded teacher)
for lam in $LAMBDAS; do
  name=hybrid; [ "$lam" = auto ] || name="hybrid_l$lam"
  students+=("$name")
  for d in syn retail; do
    [ -f "$L/${name}_$d/summary.json" ] || run "$PY" scripts/hybrid_labels.py --teacher "$L/teacher_$d" \
        --grounded "$L/grounded_$d" --out "$L/${name}_$d" --lam "$lam"
  done
done
# 3. one student per label kind: the shipped profile's recipe (damc/configs/experiment/default_scorer.yaml) with two
#    passes instead of one (a tenth of its decisions)
recipe=(seed=0 experiment=synthetic_l3 logger=none trainer.epochs=2 data.dev_fraction=0.2 data.max_cards=8
        data.sampling=informative 'data.domain_repeat=[1,10]' combiner.max_fit_decisions=1000
        'combiner.features=rank:student+cosine' model.max_length=128)
for s in "${students[@]}"; do
  [ -f "$OUT/scorer_$s/damc_scorer.json" ] && continue
  run "$PY" scripts/train.py "data.labels=[$L/${s}_syn,$L/${s}_retail]" "out_dir=$OUT/run_$s" "${recipe[@]}"
  run "$PY" scripts/export.py "run_dir=$OUT/run_$s" "out=$OUT/scorer_$s" onnx=true int8=true encoder=minilm-l6
done
# 4. selection only, four cards, budget 1,024: every student beside the baselines and the shipped scorer
pol="similarity,bm25,rrf,heuristic,damc_ship"
opts=("+policy_options.damc_ship={policy:damc,scorer:damc/assets/scorer}")
for s in "${students[@]}"; do
  v=${s//./_}; pol="$pol,damc_$v"; opts+=("+policy_options.damc_$v={policy:damc,scorer:$OUT/scorer_$s}")
done
for spec in syn_dev:$SPLITS/synthetic/dev.jsonl retail_dev:$SPLITS/tau2_retail/dev.jsonl \
            syn:$SPLITS/synthetic/test.jsonl retail:$SPLITS/tau2_retail/test.jsonl \
            airline:$UNSEEN/tau2_airline/test.jsonl bfcl_lc:$UNSEEN/bfcl_long_context/test.jsonl; do
  name=${spec%%:*}; episodes=${spec#*:}
  [ -f "$OUT/eval/$name/results.json" ] && continue
  run "$PY" scripts/evaluate.py "data.path=$episodes" data.tool_calls_only=true score=false 'budgets=[1024]' \
      'sweep.top_k=[4]' n_boot=200 progress=false max_decisions=null "policies=[$pol,oracle]" "${opts[@]}" \
      "out_dir=$OUT/eval/$name"
  run "$PY" scripts/keyhit_table.py "$OUT/eval/$name"
done
