#!/bin/sh
# Install Mesa's lavapipe (a software Vulkan driver, hence a WebGPU adapter) when apt exists.
# Quiet no-op when it is already there or apt is not available (macOS, Windows, other distros).
set -u
if ls /usr/share/vulkan/icd.d/lvp_icd*.json >/dev/null 2>&1 && ldconfig -p 2>/dev/null | grep -q libvulkan.so.1; then
    exit 0
fi
exec sh "$(dirname "$0")/apt-install.sh" install-vulkan mesa-vulkan-drivers libvulkan1
