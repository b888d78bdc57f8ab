"""Gate for tests that need a WebGPU adapter: skip without one, but fail under ``CI=true``.

Use from a test module::

    @pytest.fixture(scope="module", autouse=True)
    def adapter():
        return wgsl_support.require_adapter()
"""

from __future__ import annotations

import os

from ci_gate import skip_or_fail

# Mesa prints warnings without a runtime dir; keep test output clean.
os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")


def require_adapter() -> dict:
    """The adapter the WGSL backend will use, or skip the calling tests (fail when CI=true).

    Returns:
      The chosen adapter's entry of ``runtime.adapters_info()``.
    """
    from jaxgru._src.webgpu import runtime

    try:
        return runtime.runtime().adapter_info  # opens the device: usable, not just listed
    except runtime.WGPUUnavailableError as e:
        skip_or_fail(f"no WebGPU adapter: {e}")
