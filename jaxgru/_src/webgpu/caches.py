"""Bounded device caches: a pool of scratch buffers, a content-keyed LRU of small tables, and
the bind groups made of their buffers.

All are used only under the runtime's device lock.
"""

from __future__ import annotations

import collections
from collections.abc import Callable

import wgpu

# Scratch buffers kept idle for reuse, at most this many bytes in all ...
POOL_MAX_IDLE_BYTES = 256 << 20
# ... and this many per (size class, usage).
POOL_MAX_IDLE_PER_CLASS = 8
# Smallest size class; classes are powers of two from here (capped at the device's
# max buffer size, where the size is rounded up to this granularity instead).
POOL_MIN_CLASS = 256

# Small device tables (the per-dispatch schedules) kept between calls, keyed by what they are
# made of. Weights are not cached: they go up raw on every call and the prep kernels lay them
# out (hashing them on every call cost more than uploading them; see docs/wgsl.md).
TABLE_CACHE_MAX_BYTES = 16 << 20
TABLE_CACHE_MAX_ENTRIES = 64
# Bind groups kept between calls. A repeated call gets the same pooled buffers back
# (BufferPool.release_all), so its bind groups are the same too: creating
# one cost ~55 us on lavapipe, 6 per forward call (0.3 ms of a 2.4 ms host path).
BIND_GROUP_CACHE_MAX_ENTRIES = 256

Destroyed = Callable[[wgpu.GPUBuffer], None]


def size_class(nbytes: int, max_buffer_size: int) -> int:
    """The pooled size for a request of ``nbytes`` (power of two, capped at the device limit)."""
    size = POOL_MIN_CLASS
    while size < nbytes:
        size *= 2
    if size > max_buffer_size:
        size = -(-nbytes // POOL_MIN_CLASS) * POOL_MIN_CLASS
    return size


class BufferPool:
    """Scratch buffers by (size class, usage); idle ones are bounded, the rest destroyed."""

    def __init__(self, device: wgpu.GPUDevice, max_buffer_size: int,
                 max_idle_bytes: int = POOL_MAX_IDLE_BYTES,
                 max_idle_per_class: int = POOL_MAX_IDLE_PER_CLASS, on_destroy: Destroyed | None = None
                 ) -> None:
        self._device = device
        self._on_destroy = on_destroy
        self._max_buffer_size = max_buffer_size
        self.max_idle_bytes = max_idle_bytes
        self.max_idle_per_class = max_idle_per_class
        self._idle: dict[tuple[int, int], list[wgpu.GPUBuffer]] = collections.defaultdict(list)
        self.idle_bytes = 0
        self.created = 0
        self.reused = 0

    def acquire(self, nbytes: int, usage: int) -> wgpu.GPUBuffer:
        """A buffer of at least ``nbytes`` bytes with exactly ``usage``."""
        key = (size_class(max(nbytes, 4), self._max_buffer_size), int(usage))
        free = self._idle[key]
        if free:
            self.reused += 1
            self.idle_bytes -= key[0]
            return free.pop()
        self.created += 1
        return self._device.create_buffer(size=key[0], usage=usage)

    def release(self, buf: wgpu.GPUBuffer) -> None:
        """Return a buffer; kept for reuse within the bounds, destroyed otherwise."""
        key = (buf.size, int(buf.usage))
        free = self._idle[key]
        if len(free) < self.max_idle_per_class and self.idle_bytes + buf.size <= self.max_idle_bytes:
            free.append(buf)
            self.idle_bytes += buf.size
        else:
            _destroy(buf, self._on_destroy)

    def release_all(self, bufs: list[wgpu.GPUBuffer]) -> None:
        """Return a call's buffers, given in the order it acquired them.

        Released last first, so the idle stacks are as they were before the call: the same call
        next time gets the same buffers in the same roles, and its bind groups from the cache.
        """
        for buf in reversed(bufs):
            self.release(buf)

    def stats(self) -> dict[str, int]:
        """Idle buffers and bytes, buffers created and reused, and the bounds."""
        return {
            "idle_buffers": sum(len(v) for v in self._idle.values()),
            "idle_bytes": self.idle_bytes,
            "created": self.created,
            "reused": self.reused,
            "max_idle_bytes": self.max_idle_bytes,
            "max_idle_per_class": self.max_idle_per_class,
        }


class DeviceCache:
    """Device buffers keyed by content, least recently used evicted beyond the bounds.

    ``trim`` is separate from ``put`` so that nothing a call has recorded is destroyed before
    the call's command buffer has run: the runtime trims after each call.
    """

    def __init__(self, max_bytes: int = TABLE_CACHE_MAX_BYTES,
                 max_entries: int = TABLE_CACHE_MAX_ENTRIES, on_destroy: Destroyed | None = None) -> None:
        self._on_destroy = on_destroy
        self.max_bytes = max_bytes
        self.max_entries = max_entries
        self._entries: collections.OrderedDict[tuple, wgpu.GPUBuffer] = collections.OrderedDict()
        self.nbytes = 0
        self.hits = 0
        self.misses = 0

    def get(self, key: tuple) -> wgpu.GPUBuffer | None:
        """The buffer cached under ``key`` (now most recently used), or None."""
        buf = self._entries.get(key)
        if buf is None:
            self.misses += 1
            return None
        self.hits += 1
        self._entries.move_to_end(key)
        return buf

    def put(self, key: tuple, buf: wgpu.GPUBuffer) -> None:
        """Cache ``buf`` under ``key`` (bounds are enforced by ``trim``)."""
        self._entries[key] = buf
        self.nbytes += buf.size

    def trim(self) -> None:
        """Evict least recently used entries until both bounds hold."""
        while self._entries and (self.nbytes > self.max_bytes or len(self._entries) > self.max_entries):
            _, buf = self._entries.popitem(last=False)
            self.nbytes -= buf.size
            _destroy(buf, self._on_destroy)

    def stats(self) -> dict[str, int]:
        """Entries, bytes, hits, misses and the bounds."""
        return {
            "entries": len(self._entries),
            "bytes": self.nbytes,
            "hits": self.hits,
            "misses": self.misses,
            "max_bytes": self.max_bytes,
            "max_entries": self.max_entries,
        }


def _destroy(buf: wgpu.GPUBuffer, on_destroy: Destroyed | None) -> None:
    """Destroy ``buf``, first telling ``on_destroy`` (which drops the bind groups using it)."""
    if on_destroy is not None:
        on_destroy(buf)
    buf.destroy()


BindingKey = tuple[int, wgpu.GPUBuffer, int]  # (binding, buffer, bytes bound)


class BindGroupCache:
    """Bind groups keyed by their layout family and resources, least recently used evicted.

    A bind group refers to buffers, not to their contents, so reusing one for the same buffers
    and ranges is exact whatever the call wrote into them. Keys hold the buffer objects
    themselves (never ``id()``, which a new object could reuse); a buffer that is destroyed
    takes its bind groups with it (:meth:`forget`, the pool's and table cache's ``on_destroy``).
    """

    def __init__(self, max_entries: int = BIND_GROUP_CACHE_MAX_ENTRIES) -> None:
        self.max_entries = max_entries
        self._entries: collections.OrderedDict[tuple[str, tuple[BindingKey, ...]], wgpu.GPUBindGroup] = (
            collections.OrderedDict())
        self.hits = 0
        self.misses = 0

    def get(self, family: str, bindings: tuple[BindingKey, ...],
            create: Callable[[], wgpu.GPUBindGroup]) -> wgpu.GPUBindGroup:
        """The bind group of ``family`` over ``bindings``, made by ``create`` on a miss."""
        key = (family, bindings)
        group = self._entries.get(key)
        if group is not None:
            self.hits += 1
            self._entries.move_to_end(key)
            return group
        self.misses += 1
        group = self._entries[key] = create()
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)
        return group

    def forget(self, buf: wgpu.GPUBuffer) -> None:
        """Drop every bind group that uses ``buf`` (about to be destroyed)."""
        for key in [k for k in self._entries if any(b is buf for _, b, _ in k[1])]:
            del self._entries[key]

    def clear(self) -> None:
        """Drop every bind group."""
        self._entries.clear()

    def stats(self) -> dict[str, int]:
        """Entries, hits, misses and the bound."""
        return {"entries": len(self._entries), "hits": self.hits, "misses": self.misses,
                "max_entries": self.max_entries}
