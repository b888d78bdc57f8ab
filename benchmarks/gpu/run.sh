#!/usr/bin/env bash
# The prepared GPU run (at most ~8 minutes): the WGSL tests and the benchmarks on whatever WebGPU
# adapter is present (an NVIDIA GPU through Vulkan on the device machine), with PyTorch CUDA (cuDNN)
# and jaxgru-xla as peers where available. Writes benchmarks/results/gpu_*.json (or under $OUT when
# set) and prints the planner's figures (python -m jaxgru plan) and the thresholds the measured
# timings would choose (persistent / stepwise / tiled).
#
#   bash benchmarks/gpu/run.sh            # from the repository root
#
# On the device machine (see ../.library/device/README.md) the Vulkan loader travels as .gl/*.deb and
# wgpu (not in that image) as .whl/*.whl; this script unpacks / installs them when present.
set -uo pipefail
cd "$(dirname "$0")/../.."
RESULTS=${OUT:-benchmarks/results}
mkdir -p "$RESULTS"
export PYTHONUNBUFFERED=1 XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp}
if [ -d .gl ]; then for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig; fi
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
# jaxgru from this checkout, whatever jax the machine has (no install, so its pins do not apply)
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] && PY=${PYTHON:-.venv/bin/python}
status=0
step() { echo "== $1"; shift; "$@" || { echo "!! failed ($?): $*"; status=1; }; }

step "adapters and backend choice" timeout 60 $PY -m jaxgru info
$PY -m jaxgru info --json > "$RESULTS/gpu_info.json" || status=1
step "planner figures (discrete-GPU profile, then this adapter's limits)" timeout 60 $PY -m jaxgru plan
step "planner figures on this adapter" timeout 60 $PY -m jaxgru plan --limits device
step "WGSL tests" timeout 240 $PY -m pytest -q -x -p no:cacheprovider tests/test_webgpu_kernels.py \
    tests/test_wgsl_backend.py tests/test_webgpu_plan.py --junitxml="$RESULTS/gpu_tests.xml"
step "host path and per-call costs" timeout 90 $PY benchmarks/wgsl_overhead.py --repeats 7 --out "$RESULTS/gpu_wgsl_overhead.json"
step "variants and thresholds" timeout 90 $PY benchmarks/gpu/variants.py --repeats 5 --out "$RESULTS/gpu_variants.json"
step "peers (jaxgru wgsl / xla, PyTorch CUDA)" timeout 150 $PY benchmarks/run.py --peers jaxgru-xla,jaxgru-wgsl,torch-cuda \
    --repeats 7 --budget 1.0 --out "$RESULTS/gpu_bench.json"
exit $status
