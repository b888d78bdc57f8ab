"""The WebGPU runtime: adapter choice, one shared device, pipelines, and the device lock.

One device is created lazily on first use and shared by every call; a lock serialises all
device work (several threads may call at once). A lost or destroyed device is dropped and
recreated on the next call. Pipelines, scratch buffers and cached weights live with the device
and go with it.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import gc
import os
import threading
from collections.abc import Callable, Iterator
from typing import TypeVar

import wgpu

from jaxgru._src.webgpu import plan, shaders
from jaxgru._src.webgpu.caches import BindGroupCache, BufferPool, DeviceCache

T = TypeVar("T")

ADAPTER_ENV = "JAXGRU_WGPU_ADAPTER"
# Requested when the adapter has them; the kernels adapt to what the device got.
OPTIONAL_FEATURES = ("shader-f16", "subgroup", "timestamp-query")
# Requested at the adapter's maximum (WebGPU devices otherwise get the small defaults).
REQUESTED_LIMITS = (
    "max-storage-buffer-binding-size",
    "max-buffer-size",
    "max-compute-workgroup-storage-size",
    "max-compute-invocations-per-workgroup",
    "max-compute-workgroup-size-x",
    "max-compute-workgroups-per-dimension",
    "max-storage-buffers-per-shader-stage",
)
PIPELINE_CACHE_SIZE = 256
# Adapter preference: hardware before software, native APIs before OpenGL.
_TYPE_RANK = {"DiscreteGPU": 0, "IntegratedGPU": 1, "VirtualGPU": 2, "CPU": 3}
_BACKEND_RANK = {"Vulkan": 0, "Metal": 0, "D3D12": 0}

_HOW_TO = (
    "To get one: on Debian/Ubuntu `apt-get install mesa-vulkan-drivers libvulkan1` (a software "
    "Vulkan adapter, lavapipe) or your GPU's Vulkan driver; on macOS Metal works out of the box; "
    "on Windows install current GPU drivers (DX12 or Vulkan). "
    f"Set {ADAPTER_ENV} to an adapter index or a name substring to choose one; "
    "jaxgru.webgpu.adapters_info() lists them. Or use backend='xla'."
)


class WGPUUnavailableError(RuntimeError):
    """No usable WebGPU adapter; the message says how to get one.

    A ``RuntimeError``, raised at trace time by ``backend="wgsl"`` calls (and by
    ``jaxgru.webgpu.stats`` / ``jaxgru.webgpu.set_timestamps``) when wgpu finds no
    adapter, ``JAXGRU_WGPU_ADAPTER`` matches none, or the chosen adapter cannot open a device.

    Args:
      reason: the short cause, e.g. ``"wgpu found no adapter"``.

    Attributes:
      reason: the short cause, without the installation hints of the message.
    """

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"jaxgru: no usable WebGPU adapter ({reason}). {_HOW_TO}")


# --------------------------------------------------------------------------------------
# adapters
# --------------------------------------------------------------------------------------
def _enumerate() -> list[wgpu.GPUAdapter]:
    try:
        adapters = list(wgpu.gpu.enumerate_adapters_sync())
    except Exception as e:  # wgpu raises various errors when no backend loads
        raise WGPUUnavailableError(f"wgpu could not enumerate adapters: {e}") from e
    if not adapters:
        raise WGPUUnavailableError("wgpu found no adapter")
    return adapters


def _describe(index: int, adapter: wgpu.GPUAdapter) -> dict:
    info = adapter.info
    return {
        "index": index,
        "name": info.get("device", ""),
        "vendor": info.get("vendor", ""),
        "description": info.get("description", ""),
        "adapter_type": info.get("adapter_type", ""),
        "backend_type": info.get("backend_type", ""),
        "device": info.get("device_id", 0),
        "features": sorted(adapter.features),
        "limits": {k: adapter.limits[k] for k in REQUESTED_LIMITS if k in adapter.limits},
    }


def _rank(record: dict) -> tuple[int, int, int]:
    return (
        _TYPE_RANK.get(record["adapter_type"], 4),
        _BACKEND_RANK.get(record["backend_type"], 1),
        record["index"],
    )


def _choose(records: list[dict]) -> dict:
    """The adapter to use: the one ``JAXGRU_WGPU_ADAPTER`` names, else the best ranked."""
    wanted = os.environ.get(ADAPTER_ENV, "").strip()
    if not wanted:
        return min(records, key=_rank)
    if wanted.isdigit():
        matches = [r for r in records if r["index"] == int(wanted)]
    else:
        text = lambda r: " ".join(str(r[k]) for k in ("name", "vendor", "description", "backend_type"))
        matches = [r for r in records if wanted.lower() in text(r).lower()]
    if not matches:
        names = "; ".join(f"{r['index']}: {r['name']} ({r['backend_type']})" for r in records)
        raise WGPUUnavailableError(f"{ADAPTER_ENV}={wanted!r} matches none of the adapters [{names}]")
    return min(matches, key=_rank)


def adapters_info() -> list[dict]:
    """Every adapter wgpu sees, best first by jaxgru's preference.

    Enumerates the adapters but creates no device, and never raises for a missing adapter.
    The preference is: the one ``JAXGRU_WGPU_ADAPTER`` names (an index or a name substring),
    else discrete GPU > integrated > virtual > CPU, Vulkan/Metal/D3D12 before OpenGL.

    Returns:
      A list with one dict per adapter: ``index``, ``name``, ``vendor``, ``description``,
        ``adapter_type``, ``backend_type``, ``device`` (id), ``features`` (sorted list),
        ``limits`` (those jaxgru requests) and ``selected`` (True for the one jaxgru uses).
        Empty when there is none.

    Examples:
      >>> import jaxgru.webgpu
      >>> adapters = jaxgru.webgpu.adapters_info()
      >>> isinstance(adapters, list)
      True
      >>> all("backend_type" in a and "selected" in a for a in adapters)
      True
    """
    try:
        adapters = _enumerate()
    except WGPUUnavailableError:
        return []
    records = [_describe(i, a) for i, a in enumerate(adapters)]
    try:
        chosen = _choose(records)["index"]
    except WGPUUnavailableError:
        chosen = -1
    for r in records:
        r["selected"] = r["index"] == chosen
    return sorted(records, key=_rank)


def adapter_status() -> dict:
    """Whether a usable adapter exists and which one jaxgru uses.

    Enumerates the adapters (honouring ``JAXGRU_WGPU_ADAPTER``) but creates no device, and
    never raises for a missing adapter.

    Returns:
      ``{"available": bool, "adapter": dict | None, "error": str | None, "reason": str | None}``;
        ``adapter`` is the chosen entry of ``adapters_info()``, ``error`` the
        ``WGPUUnavailableError`` text and ``reason`` its short cause (both None when
        available).

    Examples:
      >>> import jaxgru.webgpu
      >>> status = jaxgru.webgpu.adapter_status()
      >>> sorted(status)
      ['adapter', 'available', 'error', 'reason']
      >>> status["available"] == (status["adapter"] is not None)
      True
    """
    try:
        records = [_describe(i, a) for i, a in enumerate(_enumerate())]
        return {"available": True, "adapter": _choose(records), "error": None, "reason": None}
    except WGPUUnavailableError as e:
        return {"available": False, "adapter": None, "error": str(e), "reason": e.reason}


def is_available() -> bool:
    """Whether a WebGPU adapter is usable, i.e. whether ``backend="wgsl"`` can run here.

    Creates no device. ``backend="auto"`` picks ``wgsl`` only for a hardware GPU adapter, so
    True here does not mean that ``auto`` uses it (see ``jaxgru.backend_info()``).

    Returns:
      ``adapter_status()["available"]``.

    Examples:
      >>> import jaxgru.webgpu
      >>> isinstance(jaxgru.webgpu.is_available(), bool)
      True
    """
    return adapter_status()["available"]


# --------------------------------------------------------------------------------------
# the device
# --------------------------------------------------------------------------------------
class Runtime:
    """One device with its pipelines, scratch-buffer pool, schedule-table cache and bind groups.

    Args:
      adapter: the adapter to open.
      record: its :func:`adapters_info` entry.
    """

    def __init__(self, adapter: wgpu.GPUAdapter, record: dict) -> None:
        self.adapter_info = record
        features = [f for f in OPTIONAL_FEATURES if f in adapter.features]
        limits = {k: adapter.limits[k] for k in REQUESTED_LIMITS if k in adapter.limits}
        self.device = adapter.request_device_sync(required_features=features, required_limits=limits)
        self.queue = self.device.queue
        self.features = frozenset(self.device.features)
        self.limits: dict[str, int] = dict(self.device.limits)
        self.has_f16 = "shader-f16" in self.features
        self.has_timestamps = "timestamp-query" in self.features
        self.timestamp_period = _timestamp_period(self.queue) if self.has_timestamps else 1.0
        self.groups = BindGroupCache()
        self.pool = BufferPool(self.device, self.limits["max-buffer-size"], on_destroy=self.groups.forget)
        # schedule tables (uniforms), keyed by what they are made of
        self.tables = DeviceCache(on_destroy=self.groups.forget)
        self._modules: dict[tuple[str, str], wgpu.GPUShaderModule] = {}
        self._layouts: dict[str, tuple[wgpu.GPUBindGroupLayout, wgpu.GPUPipelineLayout]] = {}
        self._pipelines: collections.OrderedDict[tuple, wgpu.GPUComputePipeline] = (
            collections.OrderedDict()
        )
        self._query_set: wgpu.GPUQuerySet | None = None

    def limit(self, name: str) -> int:
        """The device limit ``name`` (hyphenated WebGPU spelling), lowered by any override."""
        value = self.limits[name]
        return min(value, _LIMIT_OVERRIDES.get(name, value))

    def plan_limits(self) -> dict[str, int]:
        """The limits the planner sees: every device limit (lowered by any override), the target
        workgroups per dispatch of this adapter type (``plan.target_workgroups``) and whether
        the device has subgroups (``plan.SUBGROUPS``; ``limit_override(subgroups=0)`` hides them)."""
        limits = {name: self.limit(name) for name in self.limits}
        target = plan.target_workgroups(self.adapter_info.get("adapter_type", ""))
        limits[plan.TARGET] = min(target, _LIMIT_OVERRIDES.get(plan.TARGET, target))
        limits[plan.SUBGROUPS] = min(int("subgroup" in self.features), _LIMIT_OVERRIDES.get(plan.SUBGROUPS, 1))
        return limits

    def layout(self, family: str) -> tuple[wgpu.GPUBindGroupLayout, wgpu.GPUPipelineLayout]:
        """Bind-group and pipeline layouts of a kernel family, from ``shaders.BINDINGS``."""
        if family not in self._layouts:
            entries = []
            for binding, kind in shaders.BINDINGS[family].items():
                dynamic = kind == shaders.UNIFORM_DYNAMIC
                entries.append({
                    "binding": binding,
                    "visibility": wgpu.ShaderStage.COMPUTE,
                    "buffer": {"type": shaders.UNIFORM if dynamic else kind, "has_dynamic_offset": dynamic},
                })
            bgl = self.device.create_bind_group_layout(entries=entries)
            self._layouts[family] = (bgl, self.device.create_pipeline_layout(bind_group_layouts=[bgl]))
        return self._layouts[family]

    def pipeline(self, kernel: str, entry: str, storage: str, constants: dict[str, float]
                 ) -> wgpu.GPUComputePipeline:
        """A compute pipeline, cached by (kernel, entry point, storage type, constants).

        Args:
          kernel: a .wgsl file name without extension.
          entry: the entry point.
          storage: "f32" or "f16".
          constants: values of the WGSL ``override`` constants (bools as 0/1).
        """
        key = (kernel, entry, storage, tuple(sorted(constants.items())))
        pipe = self._pipelines.get(key)
        if pipe is not None:
            self._pipelines.move_to_end(key)
            return pipe
        mkey = (kernel, storage)
        if mkey not in self._modules:
            self._modules[mkey] = self.device.create_shader_module(code=shaders.source(kernel, storage))
        pipe = self.device.create_compute_pipeline(
            layout=self.layout(shaders.FAMILY[kernel])[1],
            compute={"module": self._modules[mkey], "entry_point": entry, "constants": dict(constants)},
        )
        self._pipelines[key] = pipe
        while len(self._pipelines) > PIPELINE_CACHE_SIZE:
            self._pipelines.popitem(last=False)
        return pipe

    def bind_group(self, family: str, resources: dict[int, tuple[wgpu.GPUBuffer, int]]
                   ) -> wgpu.GPUBindGroup:
        """A bind group of ``family``'s layout; resources map binding -> (buffer, bytes bound).

        Cached (:class:`~jaxgru._src.webgpu.caches.BindGroupCache`): a repeated call binds the
        same pooled buffers and gets its bind groups back without creating them.
        """
        bindings = tuple((b, buf, size) for b, (buf, size) in sorted(resources.items()))

        def create() -> wgpu.GPUBindGroup:
            entries = [{"binding": b, "resource": {"buffer": buf, "offset": 0, "size": size}}
                       for b, buf, size in bindings]
            return self.device.create_bind_group(layout=self.layout(family)[0], entries=entries)

        return self.groups.get(family, bindings, create)

    def query_set(self) -> wgpu.GPUQuerySet:
        """Two timestamp queries (start and end of a pass), created once."""
        if self._query_set is None:
            self._query_set = self.device.create_query_set(type="timestamp", count=2)
        return self._query_set

    def finish_call(self) -> None:
        """After a call's work has completed: evict cached tables beyond the bounds."""
        self.tables.trim()

    def stats(self) -> dict:
        """Sizes of the pipeline cache, scratch pool, table cache and bind groups, with their bounds."""
        return {
            "pipelines": len(self._pipelines),
            "max_pipelines": PIPELINE_CACHE_SIZE,
            "pool": self.pool.stats(),
            "tables": self.tables.stats(),
            "bind_groups": self.groups.stats(),
        }

    def close(self) -> None:
        """Destroy the device (a no-op error if it is already lost)."""
        with contextlib.suppress(Exception):
            self.device.destroy()


def _timestamp_period(queue: wgpu.GPUQueue) -> float:
    """Nanoseconds per timestamp tick (wgpu-native returns raw ticks; lavapipe's are ns)."""
    try:  # not in wgpu-py's public API
        from wgpu.backends.wgpu_native._ffi import lib

        # cffi's stubs type a dlopen()ed library as a `Lib` without its C functions
        return float(lib.wgpuQueueGetTimestampPeriod(queue._internal))  # pyright: ignore[reportAttributeAccessIssue]
    except Exception:
        return 1.0


_LOCK = threading.RLock()
_RUNTIME: Runtime | None = None
_LIMIT_OVERRIDES: dict[str, int] = {}
_TIMESTAMPS = False


def _get() -> Runtime:
    global _RUNTIME, _EXIT_HOOK
    if _RUNTIME is None:
        adapters = _enumerate()
        record = _choose([_describe(i, a) for i, a in enumerate(adapters)])
        try:
            _RUNTIME = Runtime(adapters[record["index"]], record)
        except WGPUUnavailableError:
            raise
        except Exception as e:
            raise WGPUUnavailableError(f"could not open {record['name']!r}: {e}") from e
        if not _EXIT_HOOK:  # registered after jax's own exit hooks, so it runs before them
            atexit.register(_finish_pending_work)
            _EXIT_HOOK = True
    return _RUNTIME


_EXIT_HOOK = False


def _finish_pending_work() -> None:
    """At interpreter exit: wait for every dispatched computation, so that a ``wgsl`` callback
    still in flight finishes while wgpu's polling thread runs. Left to the interpreter's
    finalisation, such a callback waits forever for its read-back buffer (the polling thread
    is stopped) or aborts the process ("PyGILState_Release ... finalizing")."""
    try:
        import jax

        arrays = jax.live_arrays()
    except Exception:  # jax already torn down: nothing of ours can be in flight
        return
    for a in arrays:
        with contextlib.suppress(Exception):  # deleted or failed arrays: nothing to wait for
            a.block_until_ready()


def _is_device_lost(exc: BaseException) -> bool:
    text = str(exc).lower()
    return "lost" in text or "destroyed" in text


def run(fn: Callable[[Runtime], T]) -> T:
    """Run ``fn(runtime)`` holding the device lock; recreate a lost device and retry once.

    Raises:
      WGPUUnavailableError: no usable adapter.
    """
    global _RUNTIME
    with _LOCK:
        for attempt in range(2):
            rt = _get()
            try:
                return fn(rt)
            except Exception as e:
                if attempt or not _is_device_lost(e):
                    raise
                rt.close()
                _RUNTIME = None
            rt = None  # the lost device must be unreachable before it is collected
            _collect_dropped_device()
    raise AssertionError("unreachable")


def _collect_dropped_device() -> None:
    """Free a dropped device now: wgpu's device and queue reference each other, so without a
    collection each lost or reset device (megabytes of driver memory) lives until the next full
    garbage collection, and repeated losses grow the process."""
    gc.collect()


def runtime() -> Runtime:
    """The shared runtime (created on first use). Use :func:`run` for device work."""
    with _LOCK:
        return _get()


def reset() -> None:
    """Destroy the shared device and every cache; the next call creates a new one.

    A no-op when no device exists (it never creates one). Useful after changing
    ``JAXGRU_WGPU_ADAPTER`` or to free the device's memory. Returns None.
    """
    global _RUNTIME
    with _LOCK:
        if _RUNTIME is not None:
            _RUNTIME.close()
            _RUNTIME = None
            _collect_dropped_device()


def stats() -> dict:
    """Sizes of the runtime's caches (pipelines, scratch pool, weights) and their bounds.

    Creates the shared device if there is none yet.

    Returns:
      ``{"pipelines": int, "max_pipelines": int, "pool": dict, "tables": dict}``: the number
        of cached compute pipelines and its bound; the scratch-buffer pool's idle buffers and
        bytes, buffers created and reused, and its bounds; the schedule-table cache's entries,
        bytes, hits, misses and bounds.

    Raises:
      WGPUUnavailableError: no usable adapter.
    """
    with _LOCK:
        return _get().stats()


@contextlib.contextmanager
def limit_override(**limits: int) -> Iterator[None]:
    """Lower device limits as jaxgru sees them (for tests of chunking and fallbacks).

    A context manager: inside it, jaxgru plans ``wgsl`` calls as if the device's limits were
    at most the given values (it never raises them); on exit the previous overrides return.
    Creates no device.

    Args:
      **limits: limit names with ``_`` for ``-`` (``max_storage_buffer_binding_size=1 << 16``),
        and the planner's ``target_workgroups`` (workgroups per step dispatch it aims for) and
        ``subgroups`` (0: plan as if the device had no subgroups).

    Returns:
      A context manager yielding None.

    Examples:
      >>> import jaxgru.webgpu
      >>> with jaxgru.webgpu.limit_override(max_storage_buffer_binding_size=1 << 16):
      ...     pass  # wgsl calls here are split into smaller batch chunks
    """
    saved = dict(_LIMIT_OVERRIDES)
    _LIMIT_OVERRIDES.update({k.replace("_", "-"): int(v) for k, v in limits.items()})
    try:
        yield
    finally:
        _LIMIT_OVERRIDES.clear()
        _LIMIT_OVERRIDES.update(saved)


def set_timestamps(enabled: bool) -> bool:
    """Turn GPU timestamp queries on or off (when the adapter supports them).

    With timestamps on, ``jaxgru.webgpu.counters()`` reports ``gpu_ns``, the GPU time of each
    call's compute pass. Turning them on creates the shared device if there is none yet (to
    ask the device whether it supports them); turning them off touches no device.

    Args:
      enabled: True to record timestamps, False to stop.

    Returns:
      Whether timestamps will actually be recorded (False when off, or when the adapter has no
        ``timestamp-query`` feature).

    Raises:
      WGPUUnavailableError: ``enabled`` is True and there is no usable adapter.
    """
    global _TIMESTAMPS
    _TIMESTAMPS = bool(enabled)
    return _TIMESTAMPS and runtime().has_timestamps


def timestamps_enabled() -> bool:
    """Whether ``set_timestamps`` turned GPU timestamps on.

    Creates no device.

    Returns:
      The last value given to ``set_timestamps`` (False initially), whether or not the
        adapter supports timestamps.

    Examples:
      >>> import jaxgru.webgpu
      >>> isinstance(jaxgru.webgpu.timestamps_enabled(), bool)
      True
    """
    return _TIMESTAMPS
