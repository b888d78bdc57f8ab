#!/bin/sh
# What tests/test_dawn.py needs: Node.js with npm's `webgpu` 0.6.2 (Dawn's Node bindings,
# prebuilt dawn.node) in tests/dawn/node_modules, and on Debian/Ubuntu what dawn.node's OpenGL ES
# backend loads: libEGL.so (it dlopens the unversioned name, shipped by libegl-dev), Mesa's EGL
# and llvmpipe (libegl-mesa0, libgl1-mesa-dri).
# Quiet no-op when all is there. Never fails: without apt or npm the test skips (fails under CI=true).
set -u
cd "$(dirname "$0")/../tests/dawn" || exit 0

have_gles() {
    ldconfig -p 2>/dev/null | grep -Eq '[[:space:]]libEGL\.so \(' &&
        ldconfig -p 2>/dev/null | grep -Eq '[[:space:]]libEGL_mesa\.so\.0 ' &&
        for f in /usr/lib/*/dri/swrast_dri.so /usr/lib/dri/swrast_dri.so; do [ -e "$f" ] && return 0; done
    return 1
}

debs=""
if [ "$(uname -s)" = "Linux" ] && ! have_gles; then debs=" libegl-dev libegl-mesa0 libgl1-mesa-dri"; fi
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then debs="$debs nodejs npm"; fi
if [ -n "$debs" ]; then
    SUDO=""
    if [ "$(id -u)" != "0" ] && command -v sudo >/dev/null 2>&1; then SUDO="sudo"; fi
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "install-dawn: apt-get not found; the Dawn check needs:$debs (or their equivalents)."
    elif [ "$(id -u)" != "0" ] && [ -z "$SUDO" ]; then
        echo "install-dawn: not root and no sudo; run: apt-get install -y$debs"
    else
        echo "install-dawn: installing$debs"
        # shellcheck disable=SC2086
        $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $debs >/dev/null \
            || echo "install-dawn: apt-get failed; tests/test_dawn.py will skip (fail under CI=true)."
    fi
fi

if ! command -v npm >/dev/null 2>&1; then
    echo "install-dawn: npm not found; install Node.js to run the Dawn check."
    exit 0
fi
# up to date: npm writes node_modules/.package-lock.json on every install
if [ node_modules/.package-lock.json -nt package-lock.json ] && [ -f node_modules/webgpu/package.json ]; then
    exit 0
fi
npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >/dev/null \
    || echo "install-dawn: npm ci failed in tests/dawn; tests/test_dawn.py will skip (fail under CI=true)."
