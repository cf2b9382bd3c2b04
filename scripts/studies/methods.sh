#!/usr/bin/env bash
# The issue-40 comparisons of docs/studies.md ("SEELE, SofT-GRPO and the noisy-verifier correction against GRPO"),
# on the SFT-warmed tiny Llama. Usage: scripts/studies/methods.sh [OUT=runs/studies]   (COVEY: the covey command)
# Stages (each skips what is done; the run folders are AdaStop's state): sft, the solution data, then three
# AdaStop comparisons (at most 10 seeds per method): grpo_sol vs seele_sol, grpo_sol vs soft_sol, grpo_noisy vs nv_forward.
set -u
OUT=${1:-runs/studies}; COVEY=${COVEY:-covey}; C=scripts/studies/configs; PY=${PY:-python}
mkdir -p "$OUT"
stamp() { echo "[$(date -u +%H:%M:%S)] $* | $(uptime | sed 's/.*load/load/')"; }
ADA="--runs-dir $OUT/ada --metric eval/accuracy --last 1 --n 5 --K 2 --seed 0 --train-override model.name=$OUT/sft-tiny"
SOL="--train-override task.params.path=$OUT/arith/train.jsonl --train-override task.params.eval_path=$OUT/arith/test.jsonl"
[ -f "$OUT/sft-tiny/config.json" ] || { stamp sft; $COVEY sft --model tiny-llama --task arithmetic --out "$OUT/sft-tiny" --seed 0; }
[ -f "$OUT/arith/test.jsonl" ] || $PY scripts/studies/arith_solutions.py "$OUT/arith"
stamp seele
$COVEY compare adastop --agent grpo_sol=$C/grpo_sol.yaml --agent seele_sol=$C/seele_sol.yaml $ADA $SOL --out "$OUT/seele" > "$OUT/seele.txt" 2> "$OUT/seele.log"
stamp soft
$COVEY compare adastop --agent grpo_sol=$C/grpo_sol.yaml --agent soft_sol=$C/soft_sol.yaml $ADA $SOL --out "$OUT/soft" > "$OUT/soft.txt" 2> "$OUT/soft.log"
stamp noisy
$COVEY compare adastop --agent grpo_noisy=$C/grpo_noisy.yaml --agent nv_forward=$C/nv_forward.yaml $ADA --out "$OUT/noisy" > "$OUT/noisy.txt" 2> "$OUT/noisy.log"
stamp done
