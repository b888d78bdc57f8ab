"""The WebGPU runtime of the ``wgsl`` backend: adapters, the shared device, counters and limits.

Use it to see which WebGPU adapters wgpu finds and which one jaxgru picks (``adapters_info``,
``adapter_status``, ``is_available``), to read the per-call counters (``counters``,
``reset_counters``) and GPU timestamps (``set_timestamps``), to inspect or drop the shared
device's caches (``stats``, ``reset``), to lower device limits in tests (``limit_override``),
to see the kernels' plan for a shape under a limit profile without a GPU (``plan_for``),
and to catch ``WGPUUnavailableError``. Importing this module needs no adapter and creates no
device: the device is created lazily by the first ``backend="wgsl"`` call or by ``stats`` /
``set_timestamps(True)``. See docs/wgsl.md.
"""

from jaxgru._src.webgpu.counters import counters as counters
from jaxgru._src.webgpu.counters import reset_counters as reset_counters
from jaxgru._src.webgpu.plan import plan_for as plan_for
from jaxgru._src.webgpu.runtime import WGPUUnavailableError as WGPUUnavailableError
from jaxgru._src.webgpu.runtime import adapter_status as adapter_status
from jaxgru._src.webgpu.runtime import adapters_info as adapters_info
from jaxgru._src.webgpu.runtime import is_available as is_available
from jaxgru._src.webgpu.runtime import limit_override as limit_override
from jaxgru._src.webgpu.runtime import reset as reset
from jaxgru._src.webgpu.runtime import set_timestamps as set_timestamps
from jaxgru._src.webgpu.runtime import stats as stats
from jaxgru._src.webgpu.runtime import timestamps_enabled as timestamps_enabled

__all__ = [
    "WGPUUnavailableError",
    "adapter_status",
    "adapters_info",
    "counters",
    "is_available",
    "limit_override",
    "plan_for",
    "reset",
    "reset_counters",
    "set_timestamps",
    "stats",
    "timestamps_enabled",
]
