#!/usr/bin/env bash
# The small-scale reproductions of docs/studies.md ("Reproductions"), on the SFT-warmed tiny Llama and the
# default arithmetic task. Usage: scripts/studies/repro.sh [OUT=runs/studies]   (COVEY: the covey command)
# Stages (each skips what is already done; the run folders are AdaStop's state):
#   sft     the warm start
#   ada-mc  MC-GRPO G=2 vs GRPO G=8 (AdaStop runs the seeds), and beside it: GRPO + dynamic sampling seeds 0-4,
#           the SFT base's pass@k samples, then dynamic-sampling seeds 5-9 (used only if AdaStop asks for them)
#   ada-ds  DAPO dynamic sampling vs GRPO G=8 (AdaStop; the runs exist by then)
#   passk   RLVR narrowing: pass@k, k <= 256, SFT base vs GRPO G=8 seed 0
# Measured 2026-11-24 on 2 shared cores, run as: nice -n 19 env OMP_NUM_THREADS=1 scripts/studies/repro.sh (docs/studies.md).
set -u
OUT=${1:-runs/studies}; COVEY=${COVEY:-covey}; C=scripts/studies/configs
mkdir -p "$OUT"
stamp() { echo "[$(date -u +%H:%M:%S)] $* | $(uptime | sed 's/.*load/load/')"; }
ADA="--runs-dir $OUT/ada --metric eval/accuracy --last 1 --n 5 --K 2 --seed 0 --train-override model.name=$OUT/sft-tiny"
P="--task arithmetic --n 256 --k pow2 --temperature 1.0 --max-new-tokens 8 --batch-prompts 25"
ds_seeds() {   # the same runs AdaStop would train for this agent
  for s in "$@"; do
    [ -d "$OUT/ada/grpo_ds-seed$s/final" ] || $COVEY train $C/grpo_ds.yaml seed=$s model.name=$OUT/sft-tiny \
        --run-dir "$OUT/ada/grpo_ds-seed$s" > "$OUT/ds-$s.log" 2>&1
  done
}

[ -f "$OUT/sft-tiny/config.json" ] || { stamp sft; $COVEY sft --model tiny-llama --task arithmetic --out "$OUT/sft-tiny" --seed 0; }
stamp "ada-mc; beside it ds 0-4, passk-base, ds 5-9"
$COVEY compare adastop --agent grpo_g8=$C/grpo_g8.yaml --agent mc_grpo_g2=$C/mc_grpo_g2.yaml $ADA \
    --out "$OUT/mc" > "$OUT/mc.txt" 2> "$OUT/mc.log" &
ds_seeds 0 1 2 3 4
stamp "passk-base"
$COVEY eval --model "$OUT/sft-tiny" $P --samples-out "$OUT/passk-base.jsonl" > "$OUT/passk-base.json" 2> "$OUT/passk-base.log"
stamp "ds 5-9"
ds_seeds 5 6 7 8 9
wait
stamp "ada-ds"
$COVEY compare adastop --agent grpo_g8=$C/grpo_g8.yaml --agent grpo_ds=$C/grpo_ds.yaml $ADA --out "$OUT/ds" > "$OUT/ds.txt" 2> "$OUT/ds.log"
stamp "passk"
$COVEY eval --run "$OUT/ada/grpo_g8-seed0" $P --samples-out "$OUT/passk-grpo.jsonl" > "$OUT/passk-grpo.json" 2> "$OUT/passk-grpo.log"
$COVEY compare passk "$OUT/passk-base.jsonl" "$OUT/passk-grpo.jsonl" --labels sft-base,grpo --out "$OUT/passk" > "$OUT/passk.txt"
$COVEY compare coverage "$OUT/passk-base.jsonl" "$OUT/passk-grpo.jsonl" --k 256 --out "$OUT/passk" > "$OUT/coverage.txt"
stamp done
