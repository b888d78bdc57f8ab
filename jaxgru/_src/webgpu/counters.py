"""Per-call and cumulative counters of the WebGPU backend (for tests and benchmarks): every
call, and the totals of the forward and of the backward calls apart."""

from __future__ import annotations

import dataclasses
import threading

KINDS = ("forward", "tangent", "backward")  # what a call ran: kernels.forward, tangent.tangent, backward.backward
_INT_FIELDS = ("calls", "dispatches", "passes", "submits", "bytes_uploaded", "bytes_read_back")
_TIME_FIELDS = ("host_prepare_s", "host_upload_s", "host_record_s", "host_wait_s", "host_readback_s",
                "host_total_s")


@dataclasses.dataclass
class CallStats:
    """What one call (or, summed, many calls) did.

    Attributes:
      calls: number of calls counted (1 for a single call).
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
      variant: the forward's recurrence variant ("persistent", "stepwise" or "tiled"; the tangent:
        "stepwise"; "" for a backward).
      kind: what the call computed: "forward" (``kernels.forward``), "tangent" (``tangent.tangent``,
        the forward-mode derivative) or "backward" (``backward.backward``).
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
        self._kinds = {k: CallStats(kind=k) for k in KINDS}

    def record(self, stats: CallStats) -> None:
        """Make ``stats`` the last call and add it to the totals (and to its kind's)."""
        with self._lock:
            self._last = dataclasses.replace(stats)
            self._total.add(stats)
            if stats.kind in self._kinds:
                self._kinds[stats.kind].add(stats)

    def snapshot(self) -> dict[str, dict]:
        """Copies of the last call, the totals and each kind's totals as dicts."""
        with self._lock:
            out = {"last": dataclasses.asdict(self._last), "total": dataclasses.asdict(self._total)}
            out.update({k: dataclasses.asdict(v) for k, v in self._kinds.items()})
            return out

    def reset(self) -> None:
        """Forget everything."""
        with self._lock:
            self._last, self._total = CallStats(), CallStats()
            self._kinds = {k: CallStats(kind=k) for k in KINDS}


COUNTERS = Counters()


def counters() -> dict[str, dict]:
    """The counters of the last ``wgsl`` call and the totals since start (or the last reset),
    overall and per kind of call (the forward, the tangent of ``jax.jvp`` / ``jax.linearize``).

    A ``jax.grad`` of a ``wgsl`` layer makes two calls: the forward (with residuals) and the
    backward; ``"forward"`` and ``"backward"`` hold the totals of each kind apart.
    Reading them touches no device: without an adapter, or before any ``wgsl`` call, every
    count is zero.

    Returns:
      ``{"last": {...}, "total": {...}, "forward": {...}, "tangent": {...}, "backward": {...}}``:
        the last call, the totals and each kind's totals, dicts with the same keys: ``calls``, ``kind``,
        ``dispatches``, ``passes``, ``submits``, ``bytes_uploaded``, ``bytes_read_back``,
        ``gpu_ns`` (None unless ``jaxgru.webgpu.set_timestamps`` turned timestamps on), the
        host times ``host_prepare_s``, ``host_upload_s``, ``host_record_s``, ``host_wait_s``,
        ``host_readback_s``, ``host_total_s`` (seconds), and ``variant`` (``"persistent"``, ``"tiled"`` or
        ``"stepwise"``; the tangent always runs stepwise; "" for a backward). They are copies: later
        calls do not change them.

    Examples:
      >>> import jaxgru.webgpu
      >>> c = jaxgru.webgpu.counters()
      >>> sorted(c)
      ['backward', 'forward', 'last', 'tangent', 'total']
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
