"""The WGSL forward of GRU/LSTM: numpy operands in, numpy outputs out.

One call = one command buffer with one compute pass, one ``queue.submit`` and one mapped
read-back. Inside the pass, per job (ensemble member x batch chunk): the input projection
(one dispatch), then the recurrence (persistent: one dispatch per segment of up to
``PERSISTENT_SEGMENT_STEPS`` steps; stepwise and tiled: one dispatch per step, two for GRU lbr=0).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from functools import partial

import numpy as np
import wgpu

from jaxgru._src import shapes
from jaxgru._src.cells import batch_axis, spec
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


def forward(cfg: RNNConfig, operands, *, residuals: bool, ensemble: int = 0, variant: str = "auto",
            r_storage: str = "auto", out: Sequence[np.ndarray] | None = None) -> tuple[np.ndarray, ...]:
    """ONNX GRU/LSTM forward on the WebGPU device; the contract of ``reference.forward``.

    Args:
      cfg: the layer's options.
      operands: GRU ``(x, w, r, b, h0, lens)`` or LSTM ``(x, w, r, b, p, h0, c0, lens)``, numpy
        arrays, all present, x/h0/c0 in the user layout; each with a leading axis of size
        ``ensemble`` when ``ensemble > 0``.
      residuals: also return ``res [D, L, N, K]`` (float32, processing order).
      ensemble: number of independent members (0: no ensemble axis).
      variant: "auto", "persistent", "stepwise" or "tiled" (see plan.py).
      r_storage: "auto" (R's device copy in the storage type, or in f16 when
        ``cfg.recurrent_dtype`` is "float16": R's values are f16 already), "f32", or "f16": R in
        f16 where the device has ``shader-f16`` (``plan.module_storage``; accumulation stays f32).
      out: writable arrays of the outputs' shapes and dtypes (XLA's output buffers, from the
        callback): the results are copied once, from the mapped read-back straight into them.
        None allocates them.

    Returns:
      ``(y, y_h[, y_c][, res])`` as ``reference.forward`` (with the ensemble axis if any): the
      arrays of ``out`` when given.

    Raises:
      NotImplementedError: float64 operands.
      WGPUUnavailableError: no WebGPU adapter.
      ValueError: a shape beyond the device limits, or an impossible forced variant.
    """
    t0 = time.perf_counter()
    operands = [np.asarray(a) for a in operands]
    out_shapes = shapes.forward_shapes(cfg, _FNAME, operands, ensemble=ensemble, residuals=residuals)
    dtype = np.dtype(operands[0].dtype)
    if dtype == np.float64:
        raise NotImplementedError(
            f"{_FNAME}: WGSL has no float64; use backend='xla' for float64 or cast to float32."
        )
    if variant not in plan.VARIANTS:
        raise ValueError(f"{_FNAME}: variant must be one of {plan.VARIANTS}; got {variant!r}.")
    plan.module_storage("f32", r_storage, False)  # validates r_storage before any work
    if r_storage == "auto" and cfg.recurrent_dtype == "float16":
        r_storage = "f16"
    members = [operands] if not ensemble else [[a[e] for a in operands] for e in range(ensemble)]
    x0, r0 = members[0][0], members[0][2]
    # with a projection R is [D, G·H, P]: H from its rows, P from its columns
    hidden = r0.shape[1] // cfg.num_gates if cfg.proj else r0.shape[-1]
    proj_size = r0.shape[-1] if cfg.proj else 0
    # y and the states in the operands' dtype, res (if any) in float32
    dtypes = [dtype] * len(spec(cfg.cell).outputs) + [np.dtype(np.float32)]
    dests = list(out) if out is not None else [np.empty(s, dt) for s, dt in zip(out_shapes, dtypes)]
    if 0 in (x0.shape[0], x0.shape[1], hidden, r0.shape[-1]):  # no work: L, N, H or P is 0
        geo = plan.geometry(cfg, x0.shape, hidden, residuals, 4, proj_size=proj_size)
        for e, m in enumerate(members):
            for dst, value in zip(dests, host.trivial(cfg, m, geo, residuals), strict=True):
                np.copyto(dst[e] if ensemble else dst, value, casting="unsafe")
    else:
        has_f16 = runtime.runtime().has_f16
        storage = "f16" if dtype == np.float16 and has_f16 else "f32"
        module = plan.module_storage(storage, r_storage, has_f16)
        geo = plan.geometry(cfg, x0.shape, hidden, residuals, 2 if storage == "f16" else 4,
                            2 if module != "f32" else 4, proj_size)
        prepared = [host.member(cfg, m, geo, storage) for m in members]
        prepare_s = time.perf_counter() - t0

        def attempt(rt: runtime.Runtime) -> CallStats:
            call = _Call(rt, cfg, geo, storage, module, variant,
                         CallStats(calls=1, kind="forward", host_prepare_s=prepare_s))
            call.run(prepared, dests, ensemble > 0)
            return call.stats

        run_counted(t0, attempt)
    return tuple(dests)


def run_counted(t0: float, attempt: Callable[[runtime.Runtime], CallStats]) -> None:
    """Run ``attempt`` on the device and record the stats it returns, with the wall time since ``t0``.

    A lost device is retried once (``runtime.run``): the stats counted are those of the attempt
    that ran. Only its stats leave an attempt: its ``_Call`` holds the device, which must be
    freed once lost. Shared by the forward, the tangent and the backward.
    """
    stats = runtime.run(attempt)
    stats.host_total_s = time.perf_counter() - t0
    COUNTERS.record(stats)


def cell_constants(cfg: RNNConfig, hidden: int) -> dict[str, float]:
    """The override constants of a cell's options, shared by the forward and backward kernels:
    G, K, H, LAYOUT, the directions, clip, activations, the cell's flags and PEEPHOLES."""
    cell = spec(cfg.cell)
    # G and K come from the cell's table (cells.py): the kernels declare them without a default
    c: dict[str, float] = {"G": cell.num_gates, "K": cell.residuals(cfg), "H": hidden, "LAYOUT": cfg.layout}
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
    return c


@dataclasses.dataclass
class _Prep:
    """One prep dispatch (prep.wgsl): a kernel, its constants, source and destination, and its size."""

    kernel: str
    constants: dict[str, float]
    src: tuple[wgpu.GPUBuffer, int]
    dst: tuple[wgpu.GPUBuffer, int]
    count: int  # destination vec4s (one invocation each)
    storage: str  # the module's storage key (rt's prep_t converts to R's type)


@dataclasses.dataclass
class _Job:
    """One member's batch chunk [n0, n1): its bind groups, grids and output buffers."""

    member: int
    n0: int
    n: int
    xproj: wgpu.GPUBindGroup
    xproj_grid: tuple[int, int]
    recur: wgpu.GPUBindGroup
    recur_grid: tuple[int, int]
    outputs: list[tuple[wgpu.GPUBuffer, int]]  # (buffer, bytes): y, yfinal[, res]


class _Call:
    """The device side of one call: set-up, recording, submit and read-back."""

    def __init__(self, rt: runtime.Runtime, cfg: RNNConfig, geo: plan.Geometry, storage: str, module: str,
                 variant: str, stats: CallStats) -> None:
        # storage: x, W and the outputs; module: the modules that read or write R (shaders.STORAGES)
        self.rt, self.cfg, self.geo, self.storage, self.module = rt, cfg, geo, storage, module
        limits = rt.plan_limits()
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
        """A device buffer keyed by what it is made from (schedule tables), uploaded on a miss."""
        buf = self.rt.tables.get(key)
        if buf is None:
            data = build()
            # at least one vec4 (16 bytes): weights bind as array<vec4<...>>, even when empty
            buf = self.rt.device.create_buffer(size=_words(max(data.nbytes, 16)), usage=usage)
            self._write(buf, 0, data)
            self.rt.tables.put(key, buf)
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
        geo = self.geo
        c = cell_constants(self.cfg, geo.H)
        c["RESIDUALS"] = int(geo.K > 0)
        if geo.P:  # only then: an unprojected call's pipelines keep their constants
            c.update(PROJ=1, P=geo.P, S4=geo.S4, PROJ_OFF=geo.projt_offset)
        c["NB"] = self.plan.nb
        tile = self.plan.tile
        if self.plan.variant == "persistent":
            bpw = self.plan.bpw
            c.update(PERSISTENT=1, BPW=bpw, WG_P=bpw // self.plan.nb * geo.H4, HS_LEN=geo.hs_rows * bpw * geo.H4)
        elif tile is not None:
            c.update(TR=tile.rows, TU=tile.units4, KS=tile.split, KT4=tile.kt4, WG_T=tile.invocations,
                     TS_LEN=tile.shared_vec4s(geo.G))
        else:
            c["WG_STEP"] = plan.STEPWISE_WORKGROUP
        return c

    def _pipelines(self) -> tuple[wgpu.GPUComputePipeline, list[wgpu.GPUComputePipeline]]:
        """The projection pipeline and the recurrence pipelines of one step/segment, in order."""
        geo = self.geo
        xc: dict[str, float] = {"C4": geo.G * geo.H4, "LAYOUT": self.cfg.layout}
        if self.plan.xproj == "xproj_tiled":
            xc.update(plan.XPROJ_TILE)
        else:
            xc["WG"] = plan.XPROJ_WORKGROUP
        xproj = self.rt.pipeline("xproj", self.plan.xproj, self.storage, xc)
        entries = plan.recurrence_entries(self.cfg, self.plan.variant)
        consts = self._recurrence_constants()
        kernel = plan.recurrence_kernel(self.cfg, self.plan)
        return xproj, [self.rt.pipeline(kernel, e, self.module, consts) for e in entries]

    # ---- weights -----------------------------------------------------------------------
    def _weights(self, m: host.Member, preps: list[_Prep]) -> dict[str, tuple[wgpu.GPUBuffer, int]]:
        """Upload a member's raw weights and queue the prep dispatches that lay them out.

        Returns:
          The device layouts wt, rt, xb, pr (see recurrence_common.wgsl), written by ``preps``.
        """
        geo = self.geo
        raw = {"w": self._upload(m.w), "r": self._upload(m.r), "b": self._upload(m.b)}
        raw["p"] = raw["b"] if m.p is None else self._upload(m.p)
        # at least one vec4 (16 bytes): the kernels bind them as array<vec4<...>>, even when empty
        dev = {name: self._scratch(max(n, 16)) for name, n in geo.weight_bytes().items()}
        base = {"G": geo.G, "H": geo.H, "D": geo.D, "WG": plan.PREP_WORKGROUP}
        for name, src, k_in, k_out in (("wt", "w", geo.I, geo.I), ("rt", "r", geo.out, geo.PP)):
            preps.append(_Prep("prep_t", {**base, "KIN": k_in, "KOUT": k_out}, raw[src], dev[name],
                               geo.D * k_out * geo.G * geo.H4, self.module if name == "rt" else self.storage))
        if m.proj is not None:  # projt [D, HP, P4] after rt, in rt's type: prep_t with one "gate" of P rows
            consts: dict[str, float] = {**base, "G": 1, "H": geo.P, "KIN": geo.H, "KOUT": geo.HP,
                                        "OUT_OFF": geo.projt_offset}
            preps.append(_Prep("prep_t", consts, self._upload(m.proj), dev["rt"], geo.D * geo.HP * geo.PP // 4,
                               self.module))
        for name, lay in host.bias_layouts(self.cfg, geo).items():
            preps.append(_Prep("prep_bias", {**base, **lay.constants}, raw[lay.src], dev[name],
                               geo.D * int(lay.constants["NQ"]) * geo.H4, self.storage))
        return dev

    # ---- jobs --------------------------------------------------------------------------
    def _job(self, index: int, m: host.Member, w: dict, n0: int, n1: int, sched) -> _Job:
        """Upload one chunk's operands, allocate its buffers, build its bind groups."""
        geo, rt, plan_ = self.geo, self.rt, self.plan
        n = n1 - n0
        m_rows = geo.L * n
        x_buf = self._upload(m.x[:, n0:n1] if geo.layout == 0 else m.x[n0:n1])
        lens = self._upload(m.lens[n0:n1])
        slot = geo.D * n * geo.S4 * 16
        state = self._scratch(geo.slots * slot, _INPUT)
        self._write(state[0], 0, m.h0[:, n0:n1])
        if m.c0 is not None:
            self._write(state[0], 2 * slot, m.c0[:, n0:n1])
        xp = self._scratch(geo.D * m_rows * geo.G * geo.HP * 4)
        units = geo.D * n * geo.H
        outputs = [self._scratch(geo.L * geo.D * n * geo.out * geo.itemsize, _OUTPUT),
                   self._scratch(sum(geo.final_widths) * geo.D * n * geo.itemsize, _OUTPUT)]
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
        xgrid = plan.grid2d(plan.xproj_workgroups(geo, n, plan_.xproj), self.max_dim)
        if plan_.variant == "persistent":
            rgrid = (-(-n // plan_.bpw), geo.D)
        elif plan_.tile is not None:
            rgrid = plan.grid2d(plan_.tile.workgroups(geo, n), self.max_dim)
        else:
            threads = geo.D * -(-n // plan_.nb) * max(geo.H4, geo.PP // 4)  # lstm_proj: P4 per row block
            rgrid = plan.grid2d(-(-threads // plan.STEPWISE_WORKGROUP), self.max_dim)
        return _Job(index, n0, n, xproj, xgrid, recur, rgrid, outputs)

    # ---- the call ----------------------------------------------------------------------
    def run(self, members: list[host.Member], dests: list[np.ndarray], ensemble: bool) -> None:
        """Upload, record, submit once, read back once into ``dests`` (see :func:`forward`)."""
        try:
            self._run(members, dests, ensemble)
        finally:
            self.rt.pool.release_all(self.acquired)
            self.acquired.clear()
            self.rt.finish_call()

    def _run(self, members: list[host.Member], dests: list[np.ndarray], ensemble: bool) -> None:
        rt, stats = self.rt, self.stats
        t0 = time.perf_counter()
        xproj, recur = self._pipelines()
        sched = self._schedule()
        jobs: list[_Job] = []
        preps: list[_Prep] = []
        for i, m in enumerate(members):
            w = self._weights(m, preps)
            jobs += [self._job(i, m, w, n0, n1, sched) for n0, n1 in self.plan.chunks]
        prep_groups = self._prep_groups(preps)
        t1 = time.perf_counter()
        encoder = rt.device.create_command_encoder()
        timed = runtime.timestamps_enabled() and rt.has_timestamps
        stamps = {}
        if timed:
            stamps["timestamp_writes"] = {
                "query_set": rt.query_set(), "beginning_of_pass_write_index": 0, "end_of_pass_write_index": 1,
            }
        self._record_pass(encoder.begin_compute_pass(**stamps), prep_groups, xproj, recur, jobs)
        sources = [out for job in jobs for out in job.outputs]
        sinks = self._sinks(jobs, dests, ensemble)
        stamps_out: list[int] = []
        if timed:
            resolve = self._buffer(16, _BU.QUERY_RESOLVE | _BU.COPY_SRC)
            encoder.resolve_query_set(rt.query_set(), 0, 2, resolve, 0)
            sources.append((resolve, 16))
            sinks.append(lambda raw: stamps_out.extend(int(v) for v in np.frombuffer(raw, np.uint64, count=2)))
        readbacks = self._copy_out(encoder, sources)
        t2 = time.perf_counter()
        rt.queue.submit([encoder.finish()])
        stats.submits += 1
        t3 = self._read(readbacks, sinks)  # mapping waits for the submitted work
        if timed:
            start, end = stamps_out
            stats.gpu_ns = int((end - start) * rt.timestamp_period)
        t4 = time.perf_counter()
        stats.host_upload_s += t1 - t0
        stats.host_record_s += t2 - t1
        stats.host_wait_s += t3 - t2
        stats.host_readback_s += t4 - t3

    def _prep_groups(self, preps: list[_Prep]) -> list[tuple[wgpu.GPUComputePipeline, wgpu.GPUBindGroup, tuple]]:
        """The prep dispatches of ``preps`` (the empty ones left out): pipeline, bind group, grid."""
        rt = self.rt
        return [(rt.pipeline(q.kernel, q.kernel, q.storage, q.constants), rt.bind_group("prep", {0: q.src, 1: q.dst}),
                 plan.grid2d(-(-q.count // plan.PREP_WORKGROUP), self.max_dim)) for q in preps if q.count]

    def _record_pass(self, cp, prep_groups: list, first: wgpu.GPUComputePipeline, recur: list[wgpu.GPUComputePipeline],
                jobs: list[_Job]) -> None:
        """Record the call's one compute pass and count its dispatches: the weights' device layouts,
        each job's projection (``first``: the input projection, or the tangent's), then the
        recurrence's segments, step-major over the jobs (independent jobs' dispatches of one step
        may overlap on a GPU)."""
        for pipe, group, grid in prep_groups:
            cp.set_pipeline(pipe)
            cp.set_bind_group(0, group)
            cp.dispatch_workgroups(*grid)
        cp.set_pipeline(first)
        for job in jobs:
            cp.set_bind_group(0, job.xproj)
            cp.dispatch_workgroups(*job.xproj_grid)
        for k in range(len(self.plan.segments)):
            for pipe in recur:
                cp.set_pipeline(pipe)
                for job in jobs:
                    cp.set_bind_group(0, job.recur, [k * self.align])
                    cp.dispatch_workgroups(*job.recur_grid)
        cp.end()
        self.stats.dispatches += len(prep_groups) + len(jobs) * (1 + len(self.plan.segments) * len(recur))
        self.stats.passes += 1

    def _copy_out(self, encoder, sources: list[tuple[wgpu.GPUBuffer, int]]
                  ) -> list[tuple[wgpu.GPUBuffer, list[int]]]:
        """:func:`copy_out` into this call's pooled buffers."""
        return copy_out(encoder, sources, self.rt.limit("max-buffer-size"), self._buffer)

    def _read(self, readbacks: list[tuple[wgpu.GPUBuffer, list[int]]], sinks: list[Sink]) -> float:
        """:func:`read_back`, counted in this call's stats."""
        return read_back(readbacks, sinks, self.stats)

    def _sinks(self, jobs: list[_Job], dests: list[np.ndarray], ensemble: bool) -> list[Sink]:
        """Per output buffer of each job, in order: a function copying its bytes into ``dests``
        (the batch rows of its chunk, cast to the destination's dtype)."""
        geo, st = self.geo, host.STORAGE_DTYPES[self.storage]
        y_ax, s_ax = batch_axis("y", geo.layout), batch_axis("state", geo.layout)
        assert y_ax is not None and s_ax is not None
        sinks: list[Sink] = []
        for job in jobs:
            rows = slice(job.n0, job.n0 + job.n)
            own = [d[job.member] if ensemble else d for d in dests]
            finals = own[1 : 1 + geo.finals]
            sinks.append(partial(_put, _take(own[0], y_ax, rows), st, host.y_shape(geo, job.n)))
            sinks.append(partial(_put_finals, [_take(f, s_ax, rows) for f in finals], st,
                                 host.state_shapes(geo, job.n)))
            if geo.K:
                sinks.append(partial(_put, own[-1][:, :, rows], np.dtype(np.float32),
                                     (geo.D, geo.L, job.n, geo.K * geo.H)))
        return sinks


Sink = Callable[[np.ndarray], None]


def copy_out(encoder, sources: list[tuple[wgpu.GPUBuffer, int]], cap: int,
             acquire: Callable[[int, int], wgpu.GPUBuffer]) -> list[tuple[wgpu.GPUBuffer, list[int]]]:
    """Copy every output into as few read-back buffers of at most ``cap`` bytes as it takes.

    Shared by the forward, the tangent and the backward.

    Args:
      encoder: the call's command encoder (the copies follow its compute pass).
      sources: (buffer, bytes) of each output, copied from offset 0.
      cap: the device's max-buffer-size.
      acquire: ``acquire(nbytes, usage)``, a buffer of the call (released with it).

    Returns:
      Per read-back buffer: the buffer and the byte sizes of the outputs it holds, in order
      (each at an 8-aligned offset).
    """
    groups: list[list[tuple[wgpu.GPUBuffer, int]]] = [[]]
    for src in sources:
        if groups[-1] and sum(_eights(n) for _, n in groups[-1]) + _eights(src[1]) > cap:
            groups.append([])
        groups[-1].append(src)
    readbacks = []
    for group in groups:
        dst = acquire(sum(_eights(n) for _, n in group), _READBACK)
        offset = 0
        for buf, size in group:
            encoder.copy_buffer_to_buffer(buf, 0, dst, offset, size)
            offset += _eights(size)
        readbacks.append((dst, [size for _, size in group]))
    return readbacks


def read_back(readbacks: list[tuple[wgpu.GPUBuffer, list[int]]], sinks: list[Sink], stats: CallStats) -> float:
    """Map each read-back buffer of :func:`copy_out` once and hand each output's bytes to its
    sink (in ``sources`` order) while mapped; count the bytes in ``stats``.

    Returns:
      The time (``perf_counter``) when the first buffer was mapped: the end of the wait.
    """
    it = iter(sinks)
    mapped_at = None
    for buf, sizes in readbacks:
        total = sum(_eights(n) for n in sizes)
        buf.map_sync(wgpu.MapMode.READ, 0, total)
        mapped_at = mapped_at or time.perf_counter()
        try:  # a view of the mapped memory: each sink copies out of it once
            blob = np.asarray(buf.read_mapped(0, total, copy=False), dtype=np.uint8)
            offset = 0
            for size in sizes:
                next(it)(blob[offset : offset + size])
                offset += _eights(size)
        finally:
            buf.unmap()
        stats.bytes_read_back += total
    return mapped_at or time.perf_counter()


def _take(a: np.ndarray, axis: int, rows: slice) -> np.ndarray:
    """A view of ``a``'s ``rows`` along ``axis``."""
    index: list[slice] = [slice(None)] * a.ndim
    index[axis] = rows
    return a[tuple(index)]


def _put(dst: np.ndarray, dtype: np.dtype, shape: tuple[int, ...], raw: np.ndarray) -> None:
    """Copy read-back bytes of ``shape`` elements of ``dtype`` into ``dst``, once (cast included)."""
    # float32 -> float16 beyond 65504 is ±inf, as XLA's cast gives it: expected, not a warning
    with np.errstate(over="ignore"):
        np.copyto(dst, np.frombuffer(raw, dtype, count=math.prod(shape)).reshape(shape), casting="unsafe")


def _put_finals(dsts: list[np.ndarray], dtype: np.dtype, shapes_: list[tuple[int, ...]], raw: np.ndarray) -> None:
    """The final states [Y_h | Y_c] of one chunk (each of its own shape), each into its destination."""
    offset = 0
    for dst, shape in zip(dsts, shapes_, strict=True):
        nbytes = math.prod(shape) * dtype.itemsize
        _put(dst, dtype, shape, raw[offset : offset + nbytes])
        offset += nbytes


def _words(nbytes: int) -> int:
    """``nbytes`` rounded up to whole 4-byte words (copy and binding granularity)."""
    return -(-nbytes // 4) * 4


def _eights(nbytes: int) -> int:
    """``nbytes`` rounded up to 8 (map offsets must be multiples of 8)."""
    return -(-nbytes // 8) * 8
