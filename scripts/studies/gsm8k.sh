#!/usr/bin/env bash
# GSM8K study (docs/studies.md, "GSM8K"): held-out eval of SmolLM2-135M-Instruct before and after
# TRAIN_S seconds of examples/gsm8k.yaml. Usage: scripts/studies/gsm8k.sh [OUT=runs/gsm8k] [TRAIN_S=3000]
# Env: COVEY (the covey command, default `covey`), LIMIT (first test problems, default 200),
#      PK_LIMIT / PK_N (pass@k subset and samples, default 40 / 8).
# On a shared 2-core machine the evaluations run beside training / beside each other (in 2 shards):
# the work is the same, the wall time shorter. Results: OUT/*.json (covey eval's stdout; the greedy
# accuracy after training is over both shards: covey compare passk OUT/base-greedy.jsonl
# OUT/post-greedy-0.jsonl,OUT/post-greedy-1.jsonl gives both at k = 1). A rerun resumes every eval.
set -u
OUT=${1:-runs/gsm8k}; TRAIN_S=${2:-3000}
COVEY=${COVEY:-covey}; LIMIT=${LIMIT:-200}; PK_LIMIT=${PK_LIMIT:-40}; PK_N=${PK_N:-8}
mkdir -p "$OUT"
stamp() { echo "[$(date -u +%H:%M:%S)] $* | $(uptime | sed 's/.*load/load/')"; }
greedy() { $COVEY eval "$@" --limit "$LIMIT" --max-new-tokens 256 --batch-prompts 50; }
passk() { $COVEY eval "$@" --limit "$PK_LIMIT" --n "$PK_N" --k pow2 --temperature 0.8 --max-new-tokens 256 --batch-prompts 10; }
BASE="--model smollm2-135m-instruct --task gsm8k"

stamp "start: base greedy beside training for ${TRAIN_S}s"
greedy $BASE --samples-out "$OUT/base-greedy.jsonl" > "$OUT/base-greedy.json" &
# SIGINT at the time limit: the trainer writes a checkpoint and stops.
timeout -s INT -k 120 "$TRAIN_S" $COVEY train examples/gsm8k.yaml --run-dir "$OUT/train" > "$OUT/train.log" 2>&1
stamp "trained"
for i in 0 1; do
  greedy --run "$OUT/train" --shard $i/2 --samples-out "$OUT/post-greedy-$i.jsonl" > "$OUT/post-greedy-$i.json" &
done
passk $BASE --samples-out "$OUT/base-passk.jsonl" > "$OUT/base-passk.json" &
passk --run "$OUT/train" --samples-out "$OUT/post-passk.jsonl" > "$OUT/post-passk.json" &
wait
stamp "evaluated"
$COVEY compare passk "$OUT/base-passk.jsonl" "$OUT/post-passk.jsonl" --labels base,trained --out "$OUT/compare" > "$OUT/compare-passk.txt"
stamp "done"
