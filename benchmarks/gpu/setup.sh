# Sourced by the device scripts (run.sh, cpu16.sh) from the repository root: the environment, the
# carried Vulkan loader (.gl/*.deb) and wheels (.whl/*.whl), jaxgru from this checkout (whatever jax
# the machine has: no install, so its pins do not apply) and its native extension (the carried
# stable-ABI build .whl/_jaxgru_cpu.abi3.so, else built there), and `step` to run one timed step.
RESULTS=${OUT:-benchmarks/results}
mkdir -p "$RESULTS"
export PYTHONUNBUFFERED=1 XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp} JAX_PLATFORMS=cpu
if [ -d .gl ]; then for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig; fi
# the NVIDIA Vulkan driver's manifest where the loader does not find it by itself (the device machine)
nv_icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
[ -f "$nv_icd" ] && export VK_DRIVER_FILES=${VK_DRIVER_FILES:-$nv_icd}
if compgen -G ".whl/*.whl" > /dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] && PY=${PYTHON:-.venv/bin/python}
status=0
step() { echo "== $1 ($(date +%T))"; shift; "$@" || { echo "!! failed ($?): $*"; status=1; }; }
native() { $PY -c "from jaxgru import _jaxgru_cpu" 2>/dev/null; }
machine() {
    $PY -c "import sys, jax, numpy; print(sys.version.split()[0], 'jax', jax.__version__, 'numpy', numpy.__version__)"
    echo "$(nproc) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"
    # the VM hides the model; whether its cores are hyperthreads, and their caches, bear on the threads' plans
    echo "topology: $(lscpu 2>/dev/null | grep -E '^(Thread|Core|Socket|NUMA node\(s\)|L1d|L2|L3)' | tr -s ' ' | paste -sd ';')"
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader 2>/dev/null
    native || { [ -f .whl/_jaxgru_cpu.abi3.so ] && cp .whl/_jaxgru_cpu.abi3.so jaxgru/; }
    native || step "build the native CPU lowering" timeout 120 $PY -m jaxgru build-native
}
