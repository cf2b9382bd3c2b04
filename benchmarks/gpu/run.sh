#!/usr/bin/env bash
# The GPU checks (issue 33), one prepared script for a lent GPU machine (the `device` tool): at most
# 7 minutes in all, each part under its own time limit, each result written to $OUT the moment it exists
# (so a timeout still brings back what was done). First, on the CPU dev machine:
#     benchmarks/gpu/prepare.sh
# then one device `run`, carry [".whl", ".gpu"], timeout_s 480:
#     benchmarks/gpu/run.sh                 # every part, in this order (the newest checks first):
#   offload    the fsdp2 learner with runtime.fsdp_offload (shards and AdamW state in CPU memory), as fsdp2
#   fsdp2      the fsdp2 learner, 1 rank on CUDA (bf16 gathers, fp32 reduction) vs the plain learner, 8 x 8 x 256
#   tests      pytest tests/gpu
#   steps      one covey step vs one TRL step, 8 prompts x 8 x 256 new (SmolLM2's architecture)
#   generate   covey's engine vs HF generate (dynamic and static cache), SmolLM2's architecture, 64 x 256 new, bf16
#   quick      the quickstart (SFT-warmed tiny Llama) for 4 steps on CUDA and on the CPU, fp32, metrics side by side
#     benchmarks/gpu/run.sh generate steps  # only those parts (a rerun of what timed out)
# $OUT (else ./gpu-out) receives at most 8 files (the device tool's limit): machine.txt, results.jsonl
# (one JSON line per measured figure, and one {"part", "rc", "seconds"} line per part), log.txt (every
# part's output), pytest_gpu.txt, quickstart_compare.txt.
# SMOKE=1 runs every part at toy sizes on the CPU (tests/bench/test_gpu_script.py, in CI), to check this script.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
PY=${PY:-python3}
if [ -d .whl ] && [ -z "${SMOKE:-}" ]; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD/src
else
  export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
fi
covey() { $PY -c "import sys; from covey.cli import app; sys.argv[0] = 'covey'; app()" "$@"; }
if [ -n "${SMOKE:-}" ]; then DEV=cpu; MODEL=tiny-llama; NEW=8; REP=1; THREADS=1; T=1; SBUDGET=200
else DEV=cuda; MODEL=/tmp/smollm2; NEW=256; REP=3; THREADS=4; T=0; SBUDGET=50; fi
QUICK=$( [ -d .gpu/sft-tiny ] && echo "$PWD/.gpu/sft-tiny" || echo tiny-llama )  # SFT-warmed tiny model (prepare.sh)
RUNS=/tmp/covey-gpu-runs
rm -rf "$RUNS"
PARTS=${*:-offload fsdp2 tests steps generate quick}
RESULTS="$OUT/results.jsonl"
LOG="$OUT/log.txt"

# part NAME LIMIT_S: run the function part_NAME under `timeout`, log its output, record rc and seconds.
part() {
  local name=$1 limit=$2 t0=$SECONDS rc
  echo "=== $name (limit ${limit}s) $(date -u +%T)" >> "$LOG"
  if [ "$T" = 1 ]; then limit=$((limit * 4)); fi  # the CPU smoke run is slower per part than the GPU
  timeout -k 5 "$limit" bash -c "part_$name" >> "$LOG" 2>&1; rc=$?
  echo "{\"part\": \"$name\", \"rc\": $rc, \"seconds\": $((SECONDS - t0))}" | tee -a "$RESULTS"
}
export -f covey
export PY DEV MODEL NEW REP THREADS QUICK RUNS OUT RESULTS SMOKE T SBUDGET

{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null
  $PY -c "import torch, transformers, covey; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), 'transformers', transformers.__version__)"
  lscpu 2>/dev/null | grep -m1 'Model name'
} | tee "$OUT/machine.txt"

if [ -z "${SMOKE:-}" ] && [ ! -f /tmp/smollm2/model.safetensors ]; then  # SmolLM2's architecture, random weights
  $PY - <<'EOF' >> "$LOG" 2>&1 || exit 1
import shutil, torch
from transformers import AutoConfig, AutoModelForCausalLM
torch.manual_seed(0)
model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(".gpu/smollm2"), dtype=torch.float32)
model.save_pretrained("/tmp/smollm2")
for f in ("generation_config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
    shutil.copy(f".gpu/smollm2/{f}", "/tmp/smollm2/")
print("built /tmp/smollm2:", sum(p.numel() for p in model.parameters()), "parameters")
EOF
fi

part_tests() {
  if [ -n "${SMOKE:-}" ]; then echo "SMOKE: tests/gpu skip without CUDA"; return 0; fi
  $PY -m pytest tests/gpu -q -p no:cacheprovider -o addopts="" -x --timeout 60 2>&1 | tee "$OUT/pytest_gpu.txt"
}

part_quick() {  # the same run on both devices, fp32 pinned (the quickstart's auto would give bf16 on the GPU)
  for run in "gpu $DEV" "cpu cpu"; do
    set -- $run
    covey train examples/quickstart.yaml model.name=$QUICK steps=4 eval.size=20 device=$2 threads=$THREADS \
      model.dtype=fp32 engine.dtype=fp32 --run-dir "$RUNS/quick-$1" || echo "quickstart on $2 failed"
  done
  $PY - <<'EOF' | tee "$OUT/quickstart_compare.txt"
import json, os
runs = os.environ["RUNS"]
rows = {d: [json.loads(l) for l in open(f"{runs}/quick-{d}/metrics.jsonl")] for d in ("gpu", "cpu")}
for key in ("reward/mean", "learn/loss", "learn/grad_norm", "eval/accuracy", "memory/peak_gb", "time/step"):
    print(key, {d: [round(r[key], 5) for r in rs if key in r] for d, rs in rows.items()})
with open(os.environ["RESULTS"], "a") as f:
    for d, rs in rows.items():
        steps = [r for r in rs if "time/step" in r]
        f.write(json.dumps({"quickstart": d, "steps": len(steps), "time_step": [round(r["time/step"], 3) for r in steps],
                            "peak_gb": max((r.get("memory/peak_gb", 0) for r in rs), default=None)}) + "\n")
EOF
}

part_generate() {  # HF static cache compiles its decode step on CUDA (in the untimed warm-up): its runs get
  # their own process and at most SBUDGET seconds, after the covey/HF-dynamic pair (phases logged to stderr)
  covey bench generate --model "$MODEL" --batch 64 --prompt-tokens 32 --new-tokens $NEW --dtype bf16 \
    --repeats $REP --device $DEV --hf-static yes --hf-static-budget $SBUDGET | tee -a "$RESULTS"
}

part_steps() {
  covey bench step-vs-trl --model "$MODEL" --prompts 8 --group-size 8 --new-tokens $NEW --steps 3 --device $DEV --dtypes bf16 \
    | tee -a "$RESULTS"
}

part_fsdp2() {  # the sharded learner's device path, 1 rank (NCCL on CUDA: bf16 gathers, fp32 reduction) vs the plain
  # learner in the same process; bucketed gather and a sharded checkpoint round trip (benchmarks/gpu/fsdp2_smoke.py)
  if [ -n "${SMOKE:-}" ]; then ARGS="$MODEL cpu 2 2 8 1"; else ARGS="$MODEL cuda:0 8 8 $NEW 3"; fi
  $PY benchmarks/gpu/fsdp2_smoke.py $ARGS | tee -a "$RESULTS"
}
part_offload() {  # the same with runtime.fsdp_offload: shards and AdamW state in CPU memory (CPUOffloadPolicy)
  if [ -n "${SMOKE:-}" ]; then ARGS="$MODEL cpu 2 2 8 1"; else ARGS="$MODEL cuda:0 8 8 $NEW 3"; fi
  OFFLOAD=1 $PY benchmarks/gpu/fsdp2_smoke.py $ARGS | tee -a "$RESULTS"
}
export -f part_tests part_quick part_generate part_steps part_fsdp2 part_offload

declare -A LIMIT=([tests]=60 [quick]=90 [generate]=110 [steps]=100 [fsdp2]=60 [offload]=60)
for p in $PARTS; do
  [ -n "${LIMIT[$p]:-}" ] || { echo "usage: benchmarks/gpu/run.sh [tests quick generate steps fsdp2 offload]" >&2; exit 2; }
  part "$p" "${LIMIT[$p]}"
done
