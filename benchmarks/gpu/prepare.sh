#!/usr/bin/env bash
# Run on the CPU dev machine, in the repo, before using a lent GPU machine (the `device` tool):
# fetches the Python 3.12 wheels the GPU image lacks (or has at other versions than covey's pins)
# into .whl/, and SmolLM2-135M-Instruct's config and tokenizer (no weights: over the transfer limit;
# speed does not depend on them) into .gpu/smollm2/, and the SFT-warmed tiny model into .gpu/sft-tiny/. Both folders are git-ignored locally and
# travel with `carry: [".whl", ".gpu"]`; benchmarks/gpu/run.sh installs and uses them there.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
exclude="$(git rev-parse --git-dir)/info/exclude"
mkdir -p "$(dirname "$exclude")" && touch "$exclude"
for d in /.whl/ /.gpu/; do grep -qxF "$d" "$exclude" || echo "$d" >> "$exclude"; done
PY=${PY:-.venv/bin/python}
rm -rf .whl && mkdir -p .whl .gpu/smollm2
# The versions of pyproject.toml's pins, and their needs that the image lacks (its huggingface_hub 1.33 and
# pyarrow, pandas, fsspec, xxhash, accelerate serve: hub 2.x would need more packages carried).
$PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
  transformers==5.23.0 tokenizers==0.23.3 peft==0.21.2 \
  pydantic==2.14.3 pydantic_core==2.50.4 annotated-types==0.8.0 typing-inspection==0.4.5 \
  datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 trl==1.16.0 \
  math-verify==0.9.0 latex2sympy2_extended==1.11.0 antlr4-python3-runtime==4.13.2
src=$($PY -c "from covey.models import prepare; print(prepare('smollm2-135m-instruct'))")
cp "$src"/{config.json,generation_config.json,tokenizer.json,tokenizer_config.json,chat_template.jinja} .gpu/smollm2/
# The SFT-warmed tiny Llama, so the CUDA-vs-CPU quickstart comparison has rewards to compare.
[ -f runs/sft-tiny/model.safetensors ] || .venv/bin/covey sft --model tiny-llama --task arithmetic --out runs/sft-tiny
rm -rf .gpu/sft-tiny && cp -r runs/sft-tiny .gpu/sft-tiny
du -sh .whl .gpu
