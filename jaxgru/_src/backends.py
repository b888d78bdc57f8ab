"""Backend choice: which lowering a call uses, and the report behind ``jaxgru.backend_info()``.

``backend="auto"`` picks ``wgsl`` only when JAX's default device is the CPU and a hardware GPU
adapter exists (a software adapter such as lavapipe is 20-40x slower than XLA on the same
CPU); float64 always stays on ``xla``. The environment variable ``JAXGRU_BACKEND`` (``xla`` or
``wgsl``) replaces the automatic choice; an explicit ``backend=`` argument always wins.
"""

from __future__ import annotations

import functools
import os
import sys
import tempfile
from typing import TYPE_CHECKING

import jax
import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from numpy.typing import DTypeLike

ENV = "JAXGRU_BACKEND"
HARDWARE_ADAPTERS = ("DiscreteGPU", "IntegratedGPU")


def _quiet_mesa() -> None:
    # Mesa's Vulkan loader complains on stderr when this is unset (headless Linux, CI).
    if sys.platform.startswith("linux"):
        os.environ.setdefault("XDG_RUNTIME_DIR", tempfile.gettempdir())


@functools.lru_cache(maxsize=8)
def _adapter_status(selector: str) -> dict:
    del selector  # part of the cache key: JAXGRU_WGPU_ADAPTER changes the answer
    _quiet_mesa()
    from jaxgru._src.webgpu import runtime

    return runtime.adapter_status()


def adapter_status() -> dict:
    """``{"available", "adapter", "error"}`` for the adapter jaxgru would use (cached)."""
    from jaxgru._src.webgpu.runtime import ADAPTER_ENV

    return _adapter_status(os.environ.get(ADAPTER_ENV, ""))


def automatic() -> tuple[str, str]:
    """The backend ``"auto"`` resolves to, and why."""
    env = os.environ.get(ENV, "").strip().lower()
    if env:
        if env not in ("xla", "wgsl"):
            raise ValueError(f"jaxgru: {ENV} must be 'xla' or 'wgsl'; got {env!r}.")
        return env, f"{ENV}={env}"
    platform = jax.default_backend()
    if platform != "cpu":
        return "xla", f"JAX's default device is a {platform} device: XLA runs there"
    status = adapter_status()
    if not status["available"]:
        return "xla", "no WebGPU adapter found"
    adapter = status["adapter"]
    name = f"{adapter['name']} ({adapter['adapter_type']}, {adapter['backend_type']})"
    if adapter["adapter_type"] not in HARDWARE_ADAPTERS:
        return "xla", f"the WebGPU adapter {name} is not a hardware GPU: XLA on the CPU is faster"
    return "wgsl", f"JAX runs on the CPU and {name} is a hardware GPU"


def resolve(backend: str, fname: str, dtype: DTypeLike = np.float32) -> str:
    """Resolve "auto" and check that the chosen backend can run this call.

    Args:
      backend: "auto", "xla" or "wgsl" (already validated).
      fname: the public function name, for messages.
      dtype: the call's storage dtype.

    Returns:
      "xla" or "wgsl".

    Raises:
      NotImplementedError: float64 on wgsl.
      WGPUUnavailableError: wgsl without a usable adapter (the message says how to get one).
    """
    f64 = np.dtype(dtype) == np.float64
    if backend == "auto":
        backend = automatic()[0]
        if f64:
            return "xla"
    if backend == "wgsl":
        if f64:
            raise NotImplementedError(
                f"{fname}: backend='wgsl' has no float64 (WGSL has no 64-bit floats); use backend='xla'."
            )
        status = adapter_status()
        if not status["available"]:
            from jaxgru._src.webgpu.runtime import WGPUUnavailableError

            raise WGPUUnavailableError(f"{fname}, backend='wgsl': {status['reason']}")
    return backend


def backend_info() -> dict:
    """What jaxgru can run on here and what ``backend="auto"`` chooses.

    Returns:
      A dict with ``jax_default_backend``, ``jax_devices``, ``adapters`` (every WebGPU adapter:
      name, adapter_type, backend_type, vendor, features, limits, selected), ``auto`` (the
      automatic choice), ``reason`` and the relevant environment variables.

    Example:
      >>> import jaxgru
      >>> info = jaxgru.backend_info()
      >>> info["auto"] in ("xla", "wgsl")
      True
    """
    _quiet_mesa()
    from jaxgru._src.webgpu import runtime

    choice, reason = automatic()
    return {
        "jax_default_backend": jax.default_backend(),
        "jax_devices": [str(d) for d in jax.devices()],
        "adapters": runtime.adapters_info(),
        "auto": choice,
        "reason": reason,
        "env": {k: os.environ.get(k) for k in (ENV, runtime.ADAPTER_ENV)},
    }
