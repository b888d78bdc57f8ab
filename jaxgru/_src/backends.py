"""Backend choice: which lowering a call uses, and the report behind ``jaxgru.backend_info()``.

``backend="auto"`` on JAX's CPU platform picks ``cpu`` (the native FFI kernels, native.py) where
the extension is built with fast kernels (AVX2 or AVX-512), whether or not a GPU is present: on
an NVIDIA H200 and its 16-core host the ``wgsl`` backend took 4.8x the native lowering's time in
the forward and 34x in a training step (geo-means over the benchmark suite, slower in all 45
cases; docs/wgsl.md). Without it, ``wgsl`` where a hardware GPU adapter exists (a software
adapter such as lavapipe is 20-40x slower than XLA on the same CPU), else ``xla``. float64 always
stays on ``xla`` (``backend="cpu"`` with float64 runs the ``xla`` lowering: the native kernels
are float32). The environment variable ``JAXGRU_BACKEND``
(``xla``, ``wgsl`` or ``cpu``) replaces the automatic choice; an explicit ``backend=`` argument
always wins.

Two moments decide: at trace time :func:`configure` resolves the call's backend into its
``RNNConfig`` (``backend``) and records whether the choice was automatic (``auto``); at lowering
time :func:`lowered` picks what the lowering emits: an automatic choice lowers as ``xla`` under
``jax.export`` (so an exported artifact is the same on every machine), an explicit ``wgsl``
refuses to be exported, and ``cpu`` exports as ``xla`` (an FFI call is not portable). ``auto``
asks wgpu for adapters (0.3-0.9 s: it loads the Vulkan drivers) only where it would pick a
hardware GPU's: not where the native lowering runs, and on Linux only where a GPU device node
exists (:func:`gpu_device_node`): without one only a software adapter could answer, and ``auto``
would not pick it.
"""

from __future__ import annotations

import functools
import glob
import os
import sys
import tempfile
from typing import TYPE_CHECKING

import jax
import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from numpy.typing import DTypeLike

    from jaxgru._src.options import RNNConfig

ENV = "JAXGRU_BACKEND"
HARDWARE_ADAPTERS = ("DiscreteGPU", "IntegratedGPU")
# Linux device nodes through which a hardware GPU driver is reached: DRM render/card nodes
# (Mesa: AMD, Intel, virtio-gpu, Mali/Adreno/Asahi under DRM), NVIDIA's proprietary driver, WSL's
# GPU paravirtualisation, and the non-DRM embedded drivers (Tegra, Mali, Adreno, Vivante,
# PowerVR). A Vulkan/GL adapter of a hardware GPU needs one of them; lavapipe needs none.
GPU_DEVICE_NODES = (
    "/dev/dri/renderD*", "/dev/dri/card*", "/dev/nvidia[0-9]*", "/dev/nvidiactl", "/dev/dxg",
    "/dev/nvhost-ctrl-gpu", "/dev/nvgpu*", "/dev/mali*", "/dev/kgsl-3d0", "/dev/galcore", "/dev/pvr*",
)


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


def gpu_device_node() -> str | None:
    """A device node of a hardware GPU on this Linux host, or None if there is none.

    Elsewhere (macOS: Metal; Windows: DX12/Vulkan) the answer is unknown without asking wgpu:
    returns ``"<platform>"`` so that ``auto`` probes. Costs a few ``glob`` calls (microseconds).
    """
    if not sys.platform.startswith("linux"):
        return f"<{sys.platform}>"
    for pattern in GPU_DEVICE_NODES:
        found = glob.glob(pattern)
        if found:
            return sorted(found)[0]
    return None


ENV_CHOICES = ("xla", "wgsl", "cpu")


def automatic() -> tuple[str, str]:
    """The backend ``"auto"`` resolves to, and why."""
    env = os.environ.get(ENV, "").strip().lower()
    if env:
        if env not in ENV_CHOICES:
            raise ValueError(f"jaxgru: {ENV} must be one of {ENV_CHOICES}; got {env!r}.")
        return env, f"{ENV}={env}"
    platform = jax.default_backend()
    if platform != "cpu":
        return "xla", f"JAX's default device is a {platform} device: XLA runs there"
    from jaxgru._src import native

    use, because = native.auto_choice()
    if use:  # ahead of wgsl on a GPU too (the module docstring): no adapter probe
        return "cpu", f"JAX runs on the CPU and {because}"

    def on_xla(why: str) -> tuple[str, str]:  # neither the native lowering nor a hardware GPU
        return "xla", f"{why}; {because}"

    if gpu_device_node() is None:
        # no hardware GPU can be reached: only a software adapter could exist, which auto never
        # picks, so skip the adapter probe (it loads every Vulkan/GL driver: 0.3-0.9 s)
        return on_xla("no GPU device node (" + ", ".join(GPU_DEVICE_NODES[:5]) + ", ...): "
                      "only a software WebGPU adapter could exist here")
    status = adapter_status()
    if not status["available"]:
        return on_xla("no WebGPU adapter found")
    adapter = status["adapter"]
    name = f"{adapter['name']} ({adapter['adapter_type']}, {adapter['backend_type']})"
    if adapter["adapter_type"] not in HARDWARE_ADAPTERS:
        return on_xla(f"the WebGPU adapter {name} is not a hardware GPU")
    return "wgsl", f"JAX runs on the CPU and {name} is a hardware GPU"


def resolve(backend: str, fname: str, dtype: DTypeLike = np.float32) -> str:
    """Resolve "auto" and check that the chosen backend can run this call.

    Args:
      backend: "auto", "xla", "wgsl" or "cpu" (already validated).
      fname: the public function name, for messages.
      dtype: the call's storage dtype.

    Returns:
      "xla", "wgsl" or "cpu" (float64 on "cpu" resolves to "xla": the native kernels are float32).

    Raises:
      NotImplementedError: float64 on wgsl.
      WGPUUnavailableError: wgsl without a usable adapter (the message says how to get one).
      NativeUnavailableError: cpu without the native extension built.
    """
    f64 = np.dtype(dtype) == np.float64
    if backend == "auto":
        backend = automatic()[0]
        if f64:
            return "xla"
    if backend == "cpu":
        if f64:
            return "xla"
        require_native(fname)
    if backend == "wgsl":
        if f64:
            raise NotImplementedError(
                f"{fname}: backend='wgsl' has no float64 (WGSL has no 64-bit floats); use backend='xla'."
            )
        require_adapter(fname)
    return backend


def require_adapter(fname: str) -> None:
    """Raise ``WGPUUnavailableError`` unless a WebGPU adapter is usable (cached probe)."""
    status = adapter_status()
    if not status["available"]:
        from jaxgru._src.webgpu.runtime import WGPUUnavailableError

        raise WGPUUnavailableError(f"{fname}, backend='wgsl': {status['reason']}")


class NativeUnavailableError(RuntimeError):
    """``backend="cpu"`` where jaxgru's native CPU extension is not built."""


def require_native(fname: str) -> None:
    """Raise ``NativeUnavailableError`` unless the native CPU lowering is built."""
    from jaxgru._src import native

    if not native.available():
        raise NativeUnavailableError(
            f"{fname}, backend='cpu': {native.status()['reason']}. Use backend='xla' or 'auto'."
        )


def configure(cfg: RNNConfig, fname: str, dtype: DTypeLike) -> RNNConfig:
    """The call's config with its backend resolved at trace time (``api._layer``).

    An explicit backend is checked now (float64, the adapter): its errors come at trace time.
    ``"auto"`` is resolved (``automatic()``) and marked ``auto=True``; where it resolves to
    ``wgsl`` the adapter is checked when the call is lowered, so that ``jax.export`` (which
    lowers it as ``xla``) works on every machine.
    """
    if cfg.backend != "auto":
        return cfg.replace(backend=resolve(cfg.backend, fname, dtype))
    backend = "xla" if np.dtype(dtype) == np.float64 else automatic()[0]
    return cfg.replace(backend=backend, auto=True)


def lowered(cfg: RNNConfig, for_export: bool) -> str:
    """The backend a lowering of ``cfg`` emits: what ``configure`` chose, except under export.

    Args:
      cfg: the primitive's config (``backend`` resolved, ``auto`` whether automatically).
      for_export: whether the module is lowered for ``jax.export`` (which cannot serialise the
        ``wgsl`` backend's host callback).

    Raises:
      NotImplementedError: an explicit ``backend="wgsl"`` under ``jax.export``.
      WGPUUnavailableError: ``auto`` resolved to wgsl (``JAXGRU_BACKEND=wgsl``) and no adapter.
      NativeUnavailableError: ``auto`` resolved to cpu (``JAXGRU_BACKEND=cpu``) and it is not built.
    """
    fname = f"jaxgru.{cfg.cell}"
    if for_export:
        if cfg.auto or cfg.backend == "cpu":
            # portable: the same artifact whatever this machine would pick (the native CPU
            # lowering's FFI call has no compatibility guarantee: it exports as its reference)
            return "xla"
        if cfg.backend == "wgsl":
            raise NotImplementedError(
                f"{fname}: backend='wgsl' cannot be exported: jax.export cannot serialise its host "
                "callback into the WebGPU kernels. Use backend='xla' (or backend='auto', which "
                "exports as xla) in functions you export."
            )
    elif cfg.auto and cfg.backend == "wgsl":
        require_adapter(fname)
    elif cfg.auto and cfg.backend == "cpu":
        require_native(fname)
    return cfg.backend


def backend_info() -> dict:
    """What jaxgru can run on here and what ``backend="auto"`` chooses.

    Returns:
      A dict with ``jax_default_backend``, ``jax_devices``, ``adapters`` (every WebGPU adapter:
      name, adapter_type, backend_type, vendor, features, limits, selected), ``cpu_native`` (the
      native CPU lowering: available, isa, module, reason), ``auto`` (the automatic choice),
      ``reason`` and the relevant environment variables.

    Example:
      >>> import jaxgru
      >>> info = jaxgru.backend_info()
      >>> info["auto"] in ("xla", "wgsl", "cpu")
      True
    """
    _quiet_mesa()
    from jaxgru._src import native
    from jaxgru._src.webgpu import runtime

    choice, reason = automatic()
    return {
        "jax_default_backend": jax.default_backend(),
        "jax_devices": [str(d) for d in jax.devices()],
        "adapters": runtime.adapters_info(),
        "cpu_native": native.status(),
        "auto": choice,
        "reason": reason,
        "env": {k: os.environ.get(k) for k in (ENV, runtime.ADAPTER_ENV, native.ISA_ENV, native.THREADS_ENV)},
    }
