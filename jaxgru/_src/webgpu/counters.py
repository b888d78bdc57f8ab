"""Per-call and cumulative counters of the WebGPU backend (for tests and benchmarks)."""

from __future__ import annotations

import dataclasses
import threading

_INT_FIELDS = ("calls", "dispatches", "passes", "submits", "bytes_uploaded", "bytes_read_back")
_TIME_FIELDS = ("host_prepare_s", "host_upload_s", "host_record_s", "host_wait_s", "host_readback_s",
                "host_total_s")


@dataclasses.dataclass
class CallStats:
    """What one call (or, summed, many calls) did.

    Attributes:
      calls: number of calls counted (1 for a single call).
      kind: what the call computed: ``"forward"`` or ``"tangent"`` (the forward-mode derivative).
      dispatches: compute dispatches recorded.
      passes: compute passes recorded.
      submits: ``queue.submit`` calls (1 per call by design).
      bytes_uploaded: bytes written to the device (operands, weights on a cache miss, uniforms).
      bytes_read_back: bytes mapped back to the host.
      gpu_ns: GPU time between the start and the end of the compute pass, from timestamp
        queries; None when timestamps are off or the adapter has no ``timestamp-query``.
      host_prepare_s: host conversions before the device lock.
      host_upload_s: ``write_buffer`` calls, buffer and bind-group set-up, and pipeline creation
        the first time a specialisation is used.
      host_record_s: command encoding.
      host_wait_s: from submit until the read-back buffer is mapped (includes GPU time).
      host_readback_s: copying mapped bytes out and assembling the outputs.
      host_total_s: wall time of the whole call.
      variant: the recurrence variant used ("persistent", "stepwise" or "tiled").
    """

    calls: int = 0
    kind: str = "forward"
    dispatches: int = 0
    passes: int = 0
    submits: int = 0
    bytes_uploaded: int = 0
    bytes_read_back: int = 0
    gpu_ns: int | None = None
    host_prepare_s: float = 0.0
    host_upload_s: float = 0.0
    host_record_s: float = 0.0
    host_wait_s: float = 0.0
    host_readback_s: float = 0.0
    host_total_s: float = 0.0
    variant: str = ""

    def add(self, other: CallStats) -> None:
        """Accumulate ``other`` into self."""
        for f in _INT_FIELDS + _TIME_FIELDS:
            setattr(self, f, getattr(self, f) + getattr(other, f))
        if other.gpu_ns is not None:
            self.gpu_ns = (self.gpu_ns or 0) + other.gpu_ns
        self.variant = other.variant
        self.kind = other.kind


class Counters:
    """Thread-safe record of the last call, of the running totals, and of the totals per kind."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last = CallStats()
        self._total = CallStats()
        self._by_kind: dict[str, CallStats] = {}

    def record(self, stats: CallStats) -> None:
        """Make ``stats`` the last call and add it to the totals (overall and of its kind)."""
        with self._lock:
            self._last = dataclasses.replace(stats)
            self._total.add(stats)
            self._by_kind.setdefault(stats.kind, CallStats(kind=stats.kind)).add(stats)

    def snapshot(self) -> dict[str, dict]:
        """Copies of the last call, the totals and the totals per kind as dicts."""
        with self._lock:
            return {"last": dataclasses.asdict(self._last), "total": dataclasses.asdict(self._total),
                    "by_kind": {k: dataclasses.asdict(v) for k, v in sorted(self._by_kind.items())}}

    def reset(self) -> None:
        """Forget everything."""
        with self._lock:
            self._last, self._total, self._by_kind = CallStats(), CallStats(), {}


COUNTERS = Counters()


def counters() -> dict[str, dict]:
    """The counters of the last ``wgsl`` call and the totals since start (or the last reset),
    overall and per kind of call (the forward, the tangent of ``jax.jvp`` / ``jax.linearize``).

    Reading them touches no device: without an adapter, or before any ``wgsl`` call, every
    count is zero.

    Returns:
      ``{"last": {...}, "total": {...}, "by_kind": {kind: {...}}}``: dicts with the same keys
        (``by_kind`` holds one per kind of call made: ``"forward"``, ``"tangent"``): ``calls``, ``kind``,
        ``dispatches``, ``passes``, ``submits``, ``bytes_uploaded``, ``bytes_read_back``,
        ``gpu_ns`` (None unless ``jaxgru.webgpu.set_timestamps`` turned timestamps on), the
        host times ``host_prepare_s``, ``host_upload_s``, ``host_record_s``, ``host_wait_s``,
        ``host_readback_s``, ``host_total_s`` (seconds), and ``variant`` (``"persistent"``, ``"tiled"`` or
        ``"stepwise"``; the tangent always runs stepwise). They are copies: later calls do not
        change them.

    Examples:
      >>> import jaxgru.webgpu
      >>> c = jaxgru.webgpu.counters()
      >>> sorted(c)
      ['by_kind', 'last', 'total']
      >>> "dispatches" in c["last"] and c["total"]["calls"] >= 0
      True
    """
    return COUNTERS.snapshot()


def reset_counters() -> None:
    """Zero the totals and forget the last call, so that ``counters()`` starts afresh.

    Touches no device. Returns None.

    Examples:
      >>> import jaxgru.webgpu
      >>> jaxgru.webgpu.reset_counters()
      >>> jaxgru.webgpu.counters()["total"]["calls"]
      0
    """
    COUNTERS.reset()
