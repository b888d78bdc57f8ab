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
exec sh "$(dirname "$0")/apt-install.sh" install-arm64 g++-aarch64-linux-gnu qemu-user clang
