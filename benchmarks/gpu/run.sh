#!/usr/bin/env bash
# The GPU checks of issue 11, for a session lent a GPU machine (the `device` tool). First, here:
#     benchmarks/gpu/prepare.sh
# then one device `run` per part (each ends well inside the 10-minute limit), carry [".whl", ".gpu"]:
#     benchmarks/gpu/run.sh tests      # pytest tests/gpu; the quickstart on CUDA and on CPU (tiny-llama), compared
#     benchmarks/gpu/run.sh generate   # covey vs HF generate (dynamic and static cache), SmolLM2 batch 64 x 256 new
#     benchmarks/gpu/run.sh steps      # step-vs-trl 8 x 8 x 256 (SmolLM2), then 32 x 8 x 256 (TRL may run out of memory)
# Results (JSON lines, logs) go to $OUT (the device tool brings them back), else ./gpu-out.
# SMOKE=1 runs every part at toy sizes on any machine (device cpu), to check this script.
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
if [ -n "${SMOKE:-}" ]; then DEV=cpu; MODEL=tiny-llama; NEW=8; BIG=4; REP=1; THREADS=1
else DEV=cuda; MODEL=/tmp/smollm2; NEW=256; BIG=32; REP=3; THREADS=4; fi
QUICK=$( [ -d .gpu/sft-tiny ] && echo "$PWD/.gpu/sft-tiny" || echo tiny-llama )  # SFT-warmed tiny model (prepare.sh)
rm -rf /tmp/covey-gpu-runs

{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null
  $PY -c "import torch, transformers, covey; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), 'transformers', transformers.__version__)"
} | tee "$OUT/machine.txt"

if [ -z "${SMOKE:-}" ] && [ ! -f /tmp/smollm2/model.safetensors ]; then  # SmolLM2's architecture, random weights
  $PY - <<'EOF' || exit 1
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

case "${1:-}" in
tests)
  if [ -z "${SMOKE:-}" ]; then $PY -m pytest tests/gpu -q -p no:cacheprovider -o addopts="" 2>&1 | tee "$OUT/pytest_gpu.txt"; fi
  for run in "gpu $DEV" "cpu cpu"; do  # the same run on both devices (fp32 pinned: the quickstart's auto would
    set -- $run                        # give bf16 on the GPU, maybe fp32 on the CPU): metrics agree up to rounding
    covey train examples/quickstart.yaml model.name=$QUICK steps=4 eval.size=20 device=$2 threads=$THREADS \
      model.dtype=fp32 engine.dtype=fp32 \
      --run-dir "/tmp/covey-gpu-runs/quick-$1" > "$OUT/quickstart_$1.log" 2>&1 || echo "quickstart on $2 failed (see quickstart_$1.log)"
  done
  $PY - <<'EOF' | tee "$OUT/quickstart_compare.txt"
import json
rows = {d: [json.loads(l) for l in open(f"/tmp/covey-gpu-runs/quick-{d}/metrics.jsonl")] for d in ("gpu", "cpu")}
for key in ("reward/mean", "learn/loss", "learn/grad_norm", "eval/accuracy", "memory/peak_gb", "time/step"):
    print(key, {d: [round(r[key], 5) for r in rs if key in r] for d, rs in rows.items()})
EOF
  if [ -z "${SMOKE:-}" ]; then  # SmolLM2's architecture trains on the GPU (random weights: speed, not accuracy)
    covey train examples/quickstart.yaml model.name=/tmp/smollm2 steps=3 eval.size=0 device=cuda \
      --run-dir /tmp/covey-gpu-runs/quick-smollm2 > "$OUT/quickstart_smollm2.log" 2>&1
    cp /tmp/covey-gpu-runs/quick-smollm2/metrics.jsonl "$OUT/quickstart_smollm2_metrics.jsonl" 2>/dev/null
  fi
  ;;
generate)
  for b in 64 256; do
    covey bench generate --model "$MODEL" --batch $b --prompt-tokens 32 --new-tokens $NEW --dtype bf16 \
      --repeats $REP --device $DEV --hf-static yes 2>>"$OUT/generate.log" | tee -a "$OUT/generate.jsonl"
  done
  ;;
steps)
  for p in 8 $BIG; do
    covey bench step-vs-trl --model "$MODEL" --prompts $p --group-size 8 --new-tokens $NEW --steps 3 --device $DEV \
      2>>"$OUT/steps.log" | tee -a "$OUT/steps.jsonl" || echo "step-vs-trl $p x 8 x $NEW failed (see steps.log)"
  done
  ;;
*)
  echo "usage: benchmarks/gpu/run.sh tests|generate|steps" >&2
  exit 2
  ;;
esac
