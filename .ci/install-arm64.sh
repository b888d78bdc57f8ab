#!/bin/sh
# Install an aarch64 cross compiler (GCC, and Clang with its aarch64 target) and qemu's user-mode
# emulator when apt exists: tests/test_cpu_portable_arm64.py builds the portable kernels for
# aarch64 (NEON) and runs their checks under qemu. Quiet no-op when they are already there or apt
# is not available (macOS, Windows, other distros).
set -u
if command -v aarch64-linux-gnu-g++ >/dev/null 2>&1 && command -v qemu-aarch64 >/dev/null 2>&1 \
    && command -v clang++ >/dev/null 2>&1; then
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "install-arm64: apt-get not found; the aarch64 kernel checks will skip."
    exit 0
fi
SUDO=""
if [ "$(id -u)" != "0" ]; then
    if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
        echo "install-arm64: not root and no sudo; run: apt-get install -y g++-aarch64-linux-gnu qemu-user clang"
        exit 0
    fi
fi
echo "install-arm64: installing g++-aarch64-linux-gnu qemu-user clang"
$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq g++-aarch64-linux-gnu qemu-user clang >/dev/null \
    || echo "install-arm64: apt-get failed; the aarch64 kernel checks will skip."
