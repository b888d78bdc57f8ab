# jaxgru: `make demo` and `make test` each create .venv if missing and install what they need.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.jaxgru-installed
# torch is a test/benchmark oracle only; this exact CPU build is what the machines carry.
TORCH  ?= torch==2.13.0
export XDG_RUNTIME_DIR ?= /tmp
PYTEST_WORKERS ?= 2

.PHONY: all test demo lint bench bench-quick docs fuzz vulkan dawn arm64 env clean

all: test

env: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "$(TORCH)"
	$(PY) -m pip install --quiet -e ".[test,bench,docs]"
	@# the jax2onnx plugin's test: jax2onnx's own pins would downgrade orbax-checkpoint, so its few
	@# import-time needs are installed without them (see docs/converters.md, "Whole JAX models")
	$(PY) -m pip install --quiet --no-deps "jax2onnx==0.17.1" "onnx-ir==1.1.0" "einops>=0.8" "dm-pix>=0.4"
	@touch $@

# The lavapipe Vulkan driver (software WebGPU adapter) where apt is available.
vulkan:
	@sh .ci/install-vulkan.sh

# Dawn (Chrome's WebGPU) for tests/test_dawn.py: npm's `webgpu` in tests/dawn, EGL/Mesa via apt.
dawn:
	@sh .ci/install-dawn.sh

# An aarch64 cross compiler and qemu for tests/test_cpu_portable_arm64.py (the NEON kernels).
arm64:
	@sh .ci/install-arm64.sh

lint: $(STAMP)
	$(PY) -m ruff check jaxgru tests benchmarks
	$(PY) -m pyright

test: $(STAMP) vulkan dawn arm64 lint
	$(PY) -m pytest -n $(PYTEST_WORKERS) --durations=15

# e.g. make demo DEMO_ARGS="--steps 300 --seed 1"
demo: $(STAMP) vulkan
	$(PY) -m jaxgru demo $(DEMO_ARGS)

# The documentation site (mkdocs.yml) into site/: open site/index.html. Warnings are errors.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --site-dir site

# Long fuzzing: hypothesis profile "fuzz" (2000 examples per test instead of CI's few dozen;
# about 45 minutes on two cores). e.g. make fuzz FUZZ_ARGS="-k malformed"
fuzz: $(STAMP) vulkan
	HYPOTHESIS_PROFILE=fuzz $(PY) -m pytest -n $(PYTEST_WORKERS) tests/test_reliability_fuzz.py $(FUZZ_ARGS)

bench: $(STAMP) vulkan
	$(PY) -m jaxgru bench --full

bench-quick: $(STAMP) vulkan
	$(PY) -m jaxgru bench

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis site build dist
