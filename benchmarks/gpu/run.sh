#!/usr/bin/env bash
# The prepared device run (about 8 minutes): on the device machine (an NVIDIA GPU through Vulkan, 16
# CPU cores), the WGSL tests and the WGSL benchmarks on that GPU with PyTorch CUDA (cuDNN) and the
# native CPU lowering as peers; then the native CPU lowering's tests and the full benchmark suite on
# its 16 cores (jaxgru-cpu / jaxgru-xla / onnxruntime / PyTorch); then the WGSL host path and the
# variant sweep (the planner's thresholds those timings would choose). JAX itself runs on the CPU
# (JAX_PLATFORMS=cpu): the WGSL path is for GPUs that JAX cannot use, and the CPU lowering is measured
# on the host's cores. Each step has its own time limit; benchmarks/run.py saves its rows after every
# case, so a step stopped at its limit keeps what it measured. Writes under $OUT when set (else
# benchmarks/results/): gpu_info.json, gpu_bench.json, gpu_cpu16_bench.json, gpu_wgsl_overhead.json,
# gpu_variants.json and gpu_run.log (everything printed).
#
#   bash benchmarks/gpu/run.sh            # from the repository root
#
# On the device machine (../.library/device/README.md) the Vulkan loader travels as .gl/*.deb, wgpu and
# its needs (not in that image) as .whl/*.whl, and a native extension built here against the stable
# ABI as .whl/_jaxgru_cpu.abi3.so (that image's Python is another minor version); the script unpacks,
# installs and uses them when present, and otherwise builds the extension there.
set -uo pipefail
cd "$(dirname "$0")/../.."
. benchmarks/gpu/setup.sh

main() {
machine
step "adapters and backend choice" timeout 30 $PY -m jaxgru info
$PY -m jaxgru info --json > "$RESULTS/gpu_info.json" || status=1
step "planner figures on this adapter" timeout 20 $PY -m jaxgru plan --limits device
step "WGSL tests" timeout 100 env XLA_FLAGS= $PY -m pytest -q --maxfail=5 -n 8 -p no:cacheprovider tests/test_webgpu_kernels.py \
    tests/test_wgsl_backend.py tests/test_webgpu_plan.py tests/test_wgsl_backward.py tests/test_wgsl_tangent.py \
    tests/test_webgpu_public.py
step "peers on the GPU (jaxgru wgsl, PyTorch CUDA; jaxgru cpu)" timeout 160 $PY benchmarks/run.py --full \
    --peers jaxgru-wgsl,torch-cuda,jaxgru-cpu --repeats 9 --budget 0.6 --out "$RESULTS/gpu_bench.json"
step "native CPU lowering tests ($(nproc) cores)" timeout 50 env XLA_FLAGS= $PY -m pytest -q --maxfail=5 -n 8 -p no:cacheprovider \
    tests/test_cpu_backend.py
step "CPU peers ($(nproc) cores)" timeout 140 $PY benchmarks/run.py --full \
    --peers jaxgru-xla,jaxgru-cpu,onnxruntime,torch --repeats 15 --budget 1.0 --out "$RESULTS/gpu_cpu16_bench.json"
step "host path and per-call costs" timeout 35 $PY benchmarks/wgsl_overhead.py --repeats 5 \
    --out "$RESULTS/gpu_wgsl_overhead.json"
step "variants and thresholds" timeout 35 $PY benchmarks/gpu/variants.py --repeats 3 --out "$RESULTS/gpu_variants.json"
$PY benchmarks/gpu/summary.py "$RESULTS"
echo "== done ($(date +%T)), status $status"
return $status
}

main 2>&1 | tee "$RESULTS/gpu_run.log"
exit "${PIPESTATUS[0]}"
