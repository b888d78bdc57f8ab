#!/bin/sh
# Install Mesa's lavapipe (a software Vulkan driver, hence a WebGPU adapter) when apt exists.
# Quiet no-op when it is already there or apt is not available (macOS, Windows, other distros).
set -u
if ls /usr/share/vulkan/icd.d/lvp_icd*.json >/dev/null 2>&1 && ldconfig -p 2>/dev/null | grep -q libvulkan.so.1; then
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "install-vulkan: apt-get not found; install a Vulkan/Metal/DX12 driver to use backend='wgsl'."
    exit 0
fi
SUDO=""
if [ "$(id -u)" != "0" ]; then
    if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
        echo "install-vulkan: not root and no sudo; run: apt-get install -y mesa-vulkan-drivers libvulkan1"
        exit 0
    fi
fi
echo "install-vulkan: installing mesa-vulkan-drivers libvulkan1"
$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq mesa-vulkan-drivers libvulkan1 >/dev/null \
    || echo "install-vulkan: apt-get failed; WGSL tests will not find an adapter."
