#!/usr/bin/env bash
# A device run for a change in the native CPU lowering (3-4 minutes): builds of the extension
# side by side on the device machine's 16 cores. Each build is carried as .whl/NAME.abi3.so (made
# here against the stable ABI: `CMAKE_CXX_FLAGS=-DPy_LIMITED_API=0x030A0000`, renamed), and
# .whl/_jaxgru_cpu.abi3.so is the candidate that the tests and the thread caps run on. Steps: the
# native lowering's tests; benchmarks/cpu_native_ab.py --wall over the suite's cases (every build
# with its default threads against onnxruntime and PyTorch, rounds shuffled, a throwaway copy
# of the first build listed first); then the candidate's thread caps at batch 1 (cpu_threads.py).
# Writes gpu_cpu16_ab.log (everything printed) and gpu_cpu16_ab_caps.json under $OUT (else
# benchmarks/results/).
#
#   [REPEATS=9] bash benchmarks/gpu/cpu16_ab.sh head cand   # from the repository root: .whl/head.abi3.so, ...
set -uo pipefail
cd "$(dirname "$0")/../.."
. benchmarks/gpu/setup.sh

main() {
machine
builds=("throwaway=/tmp/throwaway.abi3.so")
cp ".whl/$1.abi3.so" /tmp/throwaway.abi3.so
for name in "$@"; do builds+=("$name=.whl/$name.abi3.so"); done
step "native CPU lowering tests ($(nproc) cores)" timeout 60 env XLA_FLAGS= $PY -m pytest -q --maxfail=5 -n 8 \
    -p no:cacheprovider tests/test_cpu_backend.py
step "builds side by side: the suite's cases" timeout "${AB_TIMEOUT:-330}" $PY benchmarks/cpu_native_ab.py "${builds[@]}" \
    --full --wall --repeats "${REPEATS:-9}"
step "the candidate's thread caps at batch 1" timeout 70 $PY benchmarks/cpu_threads.py --only "N=1 " \
    --caps 2,4,8 --repeats 15 --out "$RESULTS/gpu_cpu16_ab_caps.json"
echo "== done ($(date +%T)), status $status"
return $status
}

main "$@" 2>&1 | tee "$RESULTS/gpu_cpu16_ab.log"
exit "${PIPESTATUS[0]}"
