"""The WGSL forward of GRU/LSTM: numpy operands in, numpy outputs out.

One call = one command buffer with one compute pass, one ``queue.submit`` and one mapped
read-back. Inside the pass, per job (ensemble member x batch chunk): the input projection
(one dispatch), then the recurrence (persistent: one dispatch per segment of up to
``PERSISTENT_SEGMENT_STEPS`` steps; stepwise: one dispatch per step, two for GRU lbr=0).
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import wgpu

from jaxgru._src import shapes
from jaxgru._src.cells import spec
from jaxgru._src.options import RNNConfig, flags_for
from jaxgru._src.webgpu import host, plan, runtime
from jaxgru._src.webgpu.counters import COUNTERS, CallStats

_FNAME = "jaxgru wgsl forward"
_BU = wgpu.BufferUsage
_SCRATCH = _BU.STORAGE
_INPUT = _BU.STORAGE | _BU.COPY_DST
_OUTPUT = _BU.STORAGE | _BU.COPY_SRC
_UNIFORM = _BU.UNIFORM | _BU.COPY_DST
_READBACK = _BU.MAP_READ | _BU.COPY_DST
_ROLES = ("F", "G", "H")  # activation roles per direction: f, g[, h]


def forward(cfg: RNNConfig, operands, *, residuals: bool, ensemble: int = 0, variant: str = "auto"
            ) -> tuple[np.ndarray, ...]:
    """ONNX GRU/LSTM forward on the WebGPU device; the contract of ``reference.forward``.

    Args:
      cfg: the layer's options.
      operands: GRU ``(x, w, r, b, h0, lens)`` or LSTM ``(x, w, r, b, p, h0, c0, lens)``, numpy
        arrays, all present, x/h0/c0 in the user layout; each with a leading axis of size
        ``ensemble`` when ``ensemble > 0``.
      residuals: also return ``res [D, L, N, K]`` (float32, processing order).
      ensemble: number of independent members (0: no ensemble axis).
      variant: "auto", "persistent" or "stepwise" (see plan.py).

    Returns:
      ``(y, y_h[, y_c][, res])`` as ``reference.forward`` (with the ensemble axis if any).

    Raises:
      NotImplementedError: float64 operands.
      WGPUUnavailableError: no WebGPU adapter.
      ValueError: a shape beyond the device limits, or an impossible forced variant.
    """
    t0 = time.perf_counter()
    operands = [np.asarray(a) for a in operands]
    shapes.check_operands(cfg, _FNAME, operands, ensemble=ensemble)
    dtype = np.dtype(operands[0].dtype)
    if dtype == np.float64:
        raise NotImplementedError(
            f"{_FNAME}: WGSL has no float64; use backend='xla' for float64 or cast to float32."
        )
    if variant not in plan.VARIANTS:
        raise ValueError(f"{_FNAME}: variant must be one of {plan.VARIANTS}; got {variant!r}.")
    members = [operands] if not ensemble else [[a[e] for a in operands] for e in range(ensemble)]
    x0, r0 = members[0][0], members[0][2]
    if 0 in (x0.shape[0], x0.shape[1], r0.shape[-1]):  # no work: L, N or H is 0
        geo = plan.geometry(cfg, x0.shape, r0.shape[-1], residuals, 4)
        outs = [host.trivial(cfg, m, geo, residuals) for m in members]
    else:
        storage = "f16" if dtype == np.float16 and runtime.runtime().has_f16 else "f32"
        geo = plan.geometry(cfg, x0.shape, r0.shape[-1], residuals, 2 if storage == "f16" else 4)
        prepared = [host.member(cfg, m, geo, storage) for m in members]
        prepare_s = time.perf_counter() - t0
        # a lost device is retried: count the attempt that ran. Only its stats are kept (a
        # _Call holds its device, which must be freed once lost)
        attempts: list[CallStats] = []

        def attempt(rt: runtime.Runtime) -> list[list[tuple]]:
            call = _Call(rt, cfg, geo, storage, variant, CallStats(calls=1, host_prepare_s=prepare_s))
            attempts[:] = [call.stats]
            return call.run(prepared)

        chunks = runtime.run(attempt)
        outs = [host.assemble(cfg, geo, c, dtype, residuals) for c in chunks]
        attempts[-1].host_total_s = time.perf_counter() - t0
        COUNTERS.record(attempts[-1])
    if not ensemble:
        return outs[0]
    return tuple(np.stack(parts) for parts in zip(*outs, strict=True))


@dataclasses.dataclass
class _Job:
    """One member's batch chunk [n0, n1): its bind groups, grids and output buffers."""

    member: int
    n: int
    xproj: wgpu.GPUBindGroup
    xproj_grid: tuple[int, int]
    recur: wgpu.GPUBindGroup
    recur_grid: tuple[int, int]
    outputs: list[tuple[wgpu.GPUBuffer, int]]  # (buffer, bytes): y, yfinal[, res]


class _Call:
    """The device side of one call: set-up, recording, submit and read-back."""

    def __init__(self, rt: runtime.Runtime, cfg: RNNConfig, geo: plan.Geometry, storage: str,
                 variant: str, stats: CallStats) -> None:
        self.rt, self.cfg, self.geo, self.storage = rt, cfg, geo, storage
        limits = {name: rt.limit(name) for name in rt.limits}
        self.plan = plan.make_plan(geo, limits, variant)
        self.stats = stats
        stats.variant = self.plan.variant
        self.max_dim = limits["max-compute-workgroups-per-dimension"]
        self.align = max(16, rt.limits["min-uniform-buffer-offset-alignment"])
        self.acquired: list[wgpu.GPUBuffer] = []

    # ---- buffers -----------------------------------------------------------------------
    def _buffer(self, nbytes: int, usage: int) -> wgpu.GPUBuffer:
        buf = self.rt.pool.acquire(nbytes, usage)
        self.acquired.append(buf)
        return buf

    def _write(self, buf: wgpu.GPUBuffer, offset: int, data: np.ndarray) -> None:
        raw = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        if not raw.size:  # e.g. the weights of input_size 0: nothing to upload
            return
        if raw.size % 4:  # write_buffer wants whole words
            raw = np.concatenate([raw, np.zeros(4 - raw.size % 4, np.uint8)])
        self.rt.queue.write_buffer(buf, offset, raw)
        self.stats.bytes_uploaded += raw.size

    def _scratch(self, nbytes: int, usage: int = _SCRATCH) -> tuple[wgpu.GPUBuffer, int]:
        """A pooled buffer and the byte size to bind (whole words; bindings cannot be empty)."""
        size = _words(max(nbytes, 4))
        return self._buffer(size, usage), size

    def _upload(self, data: np.ndarray, usage: int = _INPUT) -> tuple[wgpu.GPUBuffer, int]:
        buf, size = self._scratch(data.nbytes, usage)
        if data.size:
            self._write(buf, 0, data)
        return buf, size

    def _cached(self, key: tuple, build, usage: int = _INPUT) -> tuple[wgpu.GPUBuffer, int]:
        """A content-keyed device buffer (weights, schedules), uploaded on a miss."""
        buf = self.rt.weights.get(key)
        if buf is None:
            data = build()
            # at least one vec4 (16 bytes): weights bind as array<vec4<...>>, even when empty
            buf = self.rt.device.create_buffer(size=_words(max(data.nbytes, 16)), usage=usage)
            self._write(buf, 0, data)
            self.rt.weights.put(key, buf)
        return buf, buf.size

    def _schedule(self) -> tuple[wgpu.GPUBuffer, int]:
        """One Sched {t0, t1, last} per dispatch, ``align`` bytes apart (dynamic offsets)."""
        segs = self.plan.segments

        def build() -> np.ndarray:
            table = np.zeros((len(segs), self.align // 4), np.uint32)
            table[:, :2] = segs
            table[:, 2] = [t1 == self.geo.L for _, t1 in segs]
            return table

        step = segs[0][1] - segs[0][0]
        buf, _ = self._cached(("sched", self.geo.L, step, self.align), build, _UNIFORM)
        return buf, 16

    # ---- pipelines ---------------------------------------------------------------------
    def _recurrence_constants(self) -> dict[str, float]:
        cfg, geo = self.cfg, self.geo
        cell = spec(cfg.cell)
        # G and K come from the cell's table (cells.py): the kernels declare them without a default
        c: dict[str, float] = {"G": geo.G, "K": cell.residuals(cfg), "H": geo.H, "LAYOUT": cfg.layout,
                               "RESIDUALS": int(geo.K > 0)}
        c["REV0"] = int(cfg.reversed_dirs[0])
        if cfg.clip is not None:
            c.update(HAS_CLIP=1, CLIP=cfg.clip)
        for d, acts in enumerate(cfg.activations):
            for role, a in zip(_ROLES, acts, strict=False):
                c[f"ACT_{role}{d}"] = a.kind_id
                c[f"ALPHA_{role}{d}"] = a.alpha
                c[f"BETA_{role}{d}"] = a.beta
        for o in flags_for(cfg.cell):  # the cell's boolean options, each its override constant
            assert o.wgsl is not None, o.name
            c[o.wgsl] = int(getattr(cfg, o.name))
        if cell.peepholes:
            c["PEEPHOLES"] = int(cfg.peepholes)
        c["NB"] = self.plan.nb
        if self.plan.variant == "persistent":
            bpw = self.plan.bpw
            c.update(PERSISTENT=1, BPW=bpw, WG_P=bpw // self.plan.nb * geo.H4, HS_LEN=2 * bpw * geo.H4)
        else:
            c["WG_STEP"] = plan.STEPWISE_WORKGROUP
        return c

    def _pipelines(self) -> tuple[wgpu.GPUComputePipeline, list[wgpu.GPUComputePipeline]]:
        """The projection pipeline and the recurrence pipelines of one step/segment, in order."""
        geo, cell = self.geo, self.cfg.cell
        xproj = self.rt.pipeline("xproj", "xproj", self.storage, {
            "C4": geo.G * geo.H4, "LAYOUT": self.cfg.layout, "WG": plan.XPROJ_WORKGROUP,
        })
        if self.plan.variant == "persistent":
            entries = [f"{cell}_persistent"]
        elif cell == "gru" and not self.cfg.linear_before_reset:
            entries = ["gru_gates_zr", "gru_step"]
        else:
            entries = [f"{cell}_step"]
        consts = self._recurrence_constants()
        return xproj, [self.rt.pipeline(cell, e, self.storage, consts) for e in entries]

    # ---- jobs --------------------------------------------------------------------------
    def _job(self, index: int, m: host.Member, w: dict, n0: int, n1: int, sched) -> _Job:
        """Upload one chunk's operands, allocate its buffers, build its bind groups."""
        geo, rt, plan_ = self.geo, self.rt, self.plan
        n = n1 - n0
        m_rows = geo.L * n
        x_buf = self._upload(m.x[:, n0:n1] if geo.layout == 0 else m.x[n0:n1])
        lens = self._upload(m.lens[n0:n1])
        slot = geo.D * n * geo.HP * 4
        state = self._scratch(geo.slots * slot, _INPUT)
        self._write(state[0], 0, m.h0[:, n0:n1])
        if m.c0 is not None:
            self._write(state[0], 2 * slot, m.c0[:, n0:n1])
        xp = self._scratch(geo.D * m_rows * geo.G * geo.HP * 4)
        units = geo.D * n * geo.H
        outputs = [self._scratch(geo.L * units * geo.itemsize, _OUTPUT),
                   self._scratch(geo.finals * units * geo.itemsize, _OUTPUT)]
        if geo.K:
            outputs.append(self._scratch(geo.L * units * geo.K * 4, _OUTPUT))
        res = outputs[2] if geo.K else self._scratch(4)
        row_blocks = -(-m_rows // 4)
        xdims = np.array([m_rows, n, geo.L, geo.I, geo.D, row_blocks, 0, 0], np.uint32)
        xproj = rt.bind_group("xproj", {
            0: x_buf, 1: w["wt"], 2: w["xb"], 3: xp, 4: self._upload(xdims, _UNIFORM),
        })
        recur = rt.bind_group("recurrence", {
            0: xp, 1: w["rt"], 2: w["pr"], 3: lens, 4: state, 5: outputs[0], 6: outputs[1], 7: res,
            8: self._upload(np.array([geo.L, n, geo.D, 0], np.uint32), _UNIFORM), 9: sched,
        })
        x_threads = geo.D * row_blocks * geo.G * geo.H4
        xgrid = plan.grid2d(-(-x_threads // plan.XPROJ_WORKGROUP), self.max_dim)
        if plan_.variant == "persistent":
            rgrid = (-(-n // plan_.bpw), geo.D)
        else:
            threads = geo.D * -(-n // plan_.nb) * geo.H4
            rgrid = plan.grid2d(-(-threads // plan.STEPWISE_WORKGROUP), self.max_dim)
        return _Job(index, n, xproj, xgrid, recur, rgrid, outputs)

    # ---- the call ----------------------------------------------------------------------
    def run(self, members: list[host.Member]) -> list[list[tuple]]:
        """Upload, record, submit once, read back once.

        Returns:
          Per member, per batch chunk: (y, finals, res or None) as numpy arrays.
        """
        try:
            return self._run(members)
        finally:
            for buf in self.acquired:
                self.rt.pool.release(buf)
            self.acquired.clear()
            self.rt.finish_call()

    def _run(self, members: list[host.Member]) -> list[list[tuple]]:
        rt, stats = self.rt, self.stats
        t0 = time.perf_counter()
        xproj, recur = self._pipelines()
        sched = self._schedule()
        jobs = []
        for i, m in enumerate(members):
            w = {wt.name: self._cached(wt.key, wt.build) for wt in m.weights}
            jobs += [self._job(i, m, w, n0, n1, sched) for n0, n1 in self.plan.chunks]
        t1 = time.perf_counter()
        encoder = rt.device.create_command_encoder()
        timed = runtime.timestamps_enabled() and rt.has_timestamps
        stamps = {}
        if timed:
            stamps["timestamp_writes"] = {
                "query_set": rt.query_set(), "beginning_of_pass_write_index": 0, "end_of_pass_write_index": 1,
            }
        cp = encoder.begin_compute_pass(**stamps)
        cp.set_pipeline(xproj)
        for job in jobs:
            cp.set_bind_group(0, job.xproj)
            cp.dispatch_workgroups(*job.xproj_grid)
        # step-major over jobs: independent jobs' dispatches of one step may overlap on a GPU
        for k in range(len(self.plan.segments)):
            for pipe in recur:
                cp.set_pipeline(pipe)
                for job in jobs:
                    cp.set_bind_group(0, job.recur, [k * self.align])
                    cp.dispatch_workgroups(*job.recur_grid)
        cp.end()
        stats.dispatches += len(jobs) * (1 + len(self.plan.segments) * len(recur))
        stats.passes += 1
        sources = [out for job in jobs for out in job.outputs]
        if timed:
            resolve = self._buffer(16, _BU.QUERY_RESOLVE | _BU.COPY_SRC)
            encoder.resolve_query_set(rt.query_set(), 0, 2, resolve, 0)
            sources.append((resolve, 16))
        readbacks = self._copy_out(encoder, sources)
        t2 = time.perf_counter()
        rt.queue.submit([encoder.finish()])
        stats.submits += 1
        arrays = self._read(readbacks)  # mapping waits for the submitted work
        t3 = time.perf_counter()
        if timed:
            start, end = np.frombuffer(arrays.pop(), np.uint64)[:2]
            stats.gpu_ns = int((int(end) - int(start)) * rt.timestamp_period)
        out = self._unpack(jobs, arrays, len(members))
        t4 = time.perf_counter()
        stats.host_upload_s += t1 - t0
        stats.host_record_s += t2 - t1
        stats.host_wait_s += t3 - t2
        stats.host_readback_s += t4 - t3
        return out

    def _copy_out(self, encoder, sources: list[tuple[wgpu.GPUBuffer, int]]
                  ) -> list[tuple[wgpu.GPUBuffer, list[int]]]:
        """Copy every output into as few read-back buffers as the max buffer size allows.

        Returns:
          Per read-back buffer: the buffer and the byte sizes of the outputs it holds, in order
          (each at an 8-aligned offset).
        """
        cap = self.rt.limit("max-buffer-size")
        groups: list[list[tuple[wgpu.GPUBuffer, int]]] = [[]]
        for src in sources:
            if groups[-1] and sum(_eights(n) for _, n in groups[-1]) + _eights(src[1]) > cap:
                groups.append([])
            groups[-1].append(src)
        readbacks = []
        for group in groups:
            dst = self._buffer(sum(_eights(n) for _, n in group), _READBACK)
            offset = 0
            for buf, size in group:
                encoder.copy_buffer_to_buffer(buf, 0, dst, offset, size)
                offset += _eights(size)
            readbacks.append((dst, [size for _, size in group]))
        return readbacks

    def _read(self, readbacks: list[tuple[wgpu.GPUBuffer, list[int]]]) -> list[np.ndarray]:
        """Map each read-back buffer once; the bytes of every output, in order."""
        out = []
        for buf, sizes in readbacks:
            total = sum(_eights(n) for n in sizes)
            buf.map_sync(wgpu.MapMode.READ, 0, total)
            blob = np.asarray(buf.read_mapped(0, total, copy=True), dtype=np.uint8)  # bytes, not copied again
            buf.unmap()
            self.stats.bytes_read_back += total
            offset = 0
            for size in sizes:
                out.append(blob[offset : offset + size])
                offset += _eights(size)
        return out

    def _unpack(self, jobs: list[_Job], arrays: list[np.ndarray], n_members: int) -> list[list[tuple]]:
        geo, st = self.geo, host.STORAGE_DTYPES[self.storage]
        out: list[list[tuple]] = [[] for _ in range(n_members)]
        it = iter(arrays)
        for job in jobs:
            n = job.n
            y = np.frombuffer(next(it), st, count=geo.L * geo.D * n * geo.H).reshape(host.y_shape(geo, n))
            finals = np.frombuffer(next(it), st, count=geo.finals * geo.D * n * geo.H)
            finals = finals.reshape((geo.finals, *host.state_shape(geo, n)))
            res = None
            if geo.K:
                res = np.frombuffer(next(it), np.float32).reshape(geo.D, geo.L, n, geo.K * geo.H)
            out[job.member].append((y, finals, res))
        return out


def _words(nbytes: int) -> int:
    """``nbytes`` rounded up to whole 4-byte words (copy and binding granularity)."""
    return -(-nbytes // 4) * 4


def _eights(nbytes: int) -> int:
    """``nbytes`` rounded up to 8 (map offsets must be multiples of 8)."""
    return -(-nbytes // 8) * 8
