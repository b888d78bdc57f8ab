#!/usr/bin/env bash
# Makes here, before a device session, what its runs carry (setup.sh unpacks it there): the device
# image has the NVIDIA driver but no Vulkan loader, no wgpu, and another Python minor version.
#   .gl/*.deb                  the Vulkan loader (libvulkan1)
#   .whl/*.whl                 wgpu and the needs of it the image lacks (cffi, pycparser,
#                              rendercanvas), at this environment's versions, for CPython $DEVICE_PY
#   .whl/_jaxgru_cpu.abi3.so   this checkout's native extension, built against the stable ABI
#                              (Py_LIMITED_API 3.10), so that any CPython >= 3.10 loads it
#   .whl/NAME.abi3.so          the same of git revision REV, for each NAME=REV given (the builds
#                              cpu16_ab.sh compares; name the checkout's own build there too)
# Then one device call runs everything (../.library/device/README.md), e.g.
#   run(command="bash benchmarks/gpu/run.sh", carry=[".gl", ".whl"], timeout_s=540)
#
#   bash benchmarks/gpu/prepare.sh [head=HEAD cand=my-branch ...]   # from the repository root
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] && PY=${PYTHON:-.venv/bin/python}
DEVICE_PY=${DEVICE_PY:-3.12}  # the device image's (../.library/device/KINDS.md)
rm -rf .gl .whl
mkdir -p .gl .whl

# the loader, for amd64 (the device machine's processor), through apt's own lists in a scratch folder
lists=$(mktemp -d)
apt_opts=(-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 "-oDir::State::Lists=$lists" -oAPT::Sandbox::User=root -qq)
mkdir -p "$lists/partial"
apt-get "${apt_opts[@]}" update
(cd .gl && apt-get "${apt_opts[@]}" download libvulkan1)
rm -rf "$lists"

# wgpu and its needs at the versions this environment runs the tests with
for name in wgpu cffi pycparser rendercanvas; do
    version=$($PY -c "import importlib.metadata as m; print(m.version('$name'))")
    $PY -m pip download -q --no-deps --only-binary=:all: --python-version "$DEVICE_PY" --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        -d .whl "$name==$version"
done

# stable-ABI builds of the native extension: build-native with the limited API, into a scratch
# folder (by default it builds the checkout jaxgru is imported from into that checkout's jaxgru/)
abi3() {  # abi3 SOURCE_ROOT OUT.so
    local build
    build=$(mktemp -d)
    mkdir "$build/out"
    $PY -m jaxgru build-native --source "$1" --build-dir "$build" --dest "$build/out" --jobs "$(nproc)" \
        --define CMAKE_CXX_FLAGS=-DPy_LIMITED_API=0x030A0000 > "$build.log" 2>&1 || { cat "$build.log"; return 1; }
    mv "$build"/out/_jaxgru_cpu*.so "$2"
    rm -rf "$build" "$build.log"
}
abi3 . .whl/_jaxgru_cpu.abi3.so
for spec in "$@"; do
    name=${spec%%=*} rev=${spec#*=}
    tree=$(mktemp -d)
    git worktree add -q --detach "$tree" "$rev"
    abi3 "$tree" ".whl/$name.abi3.so"
    git worktree remove --force "$tree"
done
ls -l .gl .whl
