#!/usr/bin/env bash
# The device machine's follow-up (about 3 minutes), after run.sh: on its 16 cores, the native CPU
# lowering's thread choice (its default against one thread, onnxruntime with its threads and with
# one) and its AVX-512 against its AVX2 kernels at batch 1, where run.sh found it behind
# onnxruntime; then where a WGSL training step's time goes on the GPU (wgsl_backward.py, at the
# suite's GRU L=100 N=64 I=H=128). Writes gpu_cpu16_threads.json, gpu_cpu16_isa.json,
# gpu_wgsl_backward.json and gpu_cpu16.log under $OUT (else benchmarks/results/).
#
#   bash benchmarks/gpu/cpu16.sh            # from the repository root
set -uo pipefail
cd "$(dirname "$0")/../.."
. benchmarks/gpu/setup.sh

main() {
machine
step "threads: default / one thread / onnxruntime" timeout 100 $PY benchmarks/cpu_threads.py --repeats 21 \
    --out "$RESULTS/gpu_cpu16_threads.json"
step "AVX-512 / AVX2 kernels at batch 1" timeout 70 $PY benchmarks/cpu_isa.py --only "N=1 " --isas avx512,avx2 \
    --repeats 9 --out "$RESULTS/gpu_cpu16_isa.json"
step "WGSL training step on the GPU" timeout 60 $PY benchmarks/wgsl_backward.py --L 100 --N 64 --I 128 --H 128 \
    --repeats 3 --no-residuals --out "$RESULTS/gpu_wgsl_backward.json"
echo "== done ($(date +%T)), status $status"
return $status
}

main 2>&1 | tee "$RESULTS/gpu_cpu16.log"
exit "${PIPESTATUS[0]}"
