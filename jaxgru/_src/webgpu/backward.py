"""The WGSL backward of GRU/LSTM: numpy operands in, numpy operand cotangents out.

The contract of ``reference.backward``: from the forward's operands, its ``y`` and residuals
``res`` (uploaded as the forward returned them to XLA: see docs/wgsl.md for why they are not
recomputed) and the cotangents of (Y, Y_h[, Y_c]), the cotangents of every floating operand.

One call = one command buffer with one compute pass, one ``queue.submit`` and one mapped
read-back. Inside the pass, per job (ensemble member x batch chunk, the chunks of
``plan.batch_chunks`` over this module's :class:`Geometry`, as the forward's): the reverse-time
loop (per step, processing order L-1 .. 0: ``<cell>_bwd_gates``, ``gru_bwd_reset`` for GRU
lbr=0, ``<cell>_bwd_hidden``; wgsl/<cell>_backward.wgsl), then the tiled GEMMs of
wgsl/wgrad.wgsl: dW, dR, db (and dP), and the cotangent of x. A member's weight gradients are
sums over its batch rows: one buffer per member, which its first chunk's GEMMs write and the
later chunks' add into (``GDims.accum``); dx and the initial states' cotangents are per chunk.
Everything is computed in float32 and cast into the operands' dtypes.

A projected LSTM (``cfg.proj``) runs the same two kernels per step (``PROJ``: h, Y and dh have
P features; the gates kernel also saves dY_t + dh and m = o ⊙ h(c) per step) and one more GEMM,
d proj = Σ (dY_t + dh)ᵀ·m (:func:`_proj_gemm`). The carry and the initial states are uploaded
with rows of max(H, P) (:attr:`Sizes.W`), each state padded to it.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Sequence
from functools import partial

import numpy as np
import wgpu

from jaxgru._src import shapes
from jaxgru._src.cells import batch_axis, spec
from jaxgru._src.options import RNNConfig
from jaxgru._src.webgpu import host, kernels, plan, runtime
from jaxgru._src.webgpu.counters import CallStats

_FNAME = "jaxgru wgsl backward"
_BU = wgpu.BufferUsage
_INPUT = _BU.STORAGE | _BU.COPY_DST
_WORK = _BU.STORAGE | _BU.COPY_SRC | _BU.COPY_DST
_UNIFORM = _BU.UNIFORM | _BU.COPY_DST
STEP_WORKGROUP = 64  # invocations per workgroup of the reverse-time kernels
TILE = 64  # output tile side of wgrad.wgsl's GEMMs (its `const TP`)
COLSUM_WORKGROUP = 64  # invocations per workgroup of wgrad.wgsl's colsum
# The GEMMs stage their operands in workgroup memory (TILED) except on a software adapter: on
# lavapipe the barrier-free form of the same 4x4 blocking ran the GEMMs of GRU L=16 N=64 H=512
# in 10 s instead of 18 s (barriers cost per invocation there). None: by the adapter type;
# tests force either.
GEMM_TILED: bool | None = None
_ALIGN_ELEMENTS = 4  # region offsets inside a buffer: whole 16-byte blocks
_GDIMS = ("P", "Q", "KR", "N", "L", "I", "GH", "SA", "a_off", "SB", "b_off", "off_b", "bmode", "out_off", "outr",
          "row0", "off_w", "Z", "accum")  # wgrad.wgsl's GDims, in order


@dataclasses.dataclass(frozen=True)
class Sizes:
    """One member's sizes. E, B: blocks of H per step in ext and hb (wgsl/backward_common.wgsl)."""

    L: int
    N: int
    I: int  # noqa: E741
    H: int
    D: int
    G: int
    K: int
    S: int
    E: int
    B: int
    P: int = 0  # a projected LSTM's proj_size (features of h and Y), 0: none

    @property
    def GH(self) -> int:
        return self.G * self.H

    @property
    def O(self) -> int:  # noqa: E743
        """Features of h, Y and dh: P with a projection, else H."""
        return self.P or self.H

    @property
    def W(self) -> int:
        """Row width of the carry and the initial states on the device (max(H, P))."""
        return max(self.H, self.P)

    @property
    def M(self) -> int:
        return self.L * self.N


def sizes(cfg: RNNConfig, x: np.ndarray, r: np.ndarray) -> Sizes:
    """The :class:`Sizes` of one member's call."""
    length, batch, isize, hidden, d = shapes.sizes(cfg, x, r)
    cell = spec(cfg.cell)
    lbr = cfg.cell == "gru" and cfg.linear_before_reset
    ext = 3 if lbr or (cfg.cell == "lstm" and cfg.peepholes) else 0
    hb = 2 if cfg.cell == "gru" and not lbr else 1
    proj = int(r.shape[-1]) if cfg.proj else 0
    return Sizes(length, batch, isize, hidden, d, cell.num_gates, cell.residuals(cfg), cell.num_states, ext, hb,
                 proj)


@dataclasses.dataclass(frozen=True)
class Geometry(plan.Geometry):
    """A backward call's device buffers and grids, for ``plan.batch_chunks`` (the forward's
    sizes with the buffers of :meth:`_Call._job`; ``K``: the residual blocks uploaded).

    Attributes:
      E, B: blocks of H per step in ext and hb (:class:`Sizes`).
      peepholes: an LSTM's P (and its gradient) is on the device.
    """

    E: int = 0
    B: int = 1
    peepholes: bool = False

    def row_bytes(self) -> dict[str, int]:
        """Bytes per batch row of each buffer of a chunk (named as in the limit errors)."""
        L, I, H, D, s, S = self.L, self.I, self.H, self.D, self.itemsize, self.finals  # noqa: E741
        O, W = self.out, max(self.H, self.P)  # noqa: E741  (h's features; the carry's row width)
        return {
            "residuals": (D * L * self.K * H + S * D * W) * 4,  # res | h0, c0 (| P)
            "y": 2 * L * D * O * s,  # Y | dY (| R | proj)
            "x": L * I * s,  # x (| W)
            "lens": 4,
            "state": (S * W + 2 * H) * D * 4,  # carry | gh | drh
            "gate cotangent": D * L * self.G * H * 4,
            # ext | hb (| ghs | m: a projected LSTM's dY_t + dh and o ⊙ h(c))
            "weight-gradient operand": D * L * (self.E * H + self.B * O + (self.P + H if self.P else 0)) * 4,
            "dx": L * I * 4,
        }

    def fixed_bytes(self) -> dict[str, int]:
        """The weights beside the rows (P, R, W), and room to align each region (16 bytes)."""
        w = self.weight_bytes()
        return {"residuals": w["P"] + 3 * 16, "y": w["R"] + w["proj"] + 4 * 16, "x": w["W"] + 2 * 16,
                "state": 3 * 16, "weight-gradient operand": 4 * 16}

    def weight_bytes(self) -> dict[str, int]:
        """R, W, P and proj as uploaded, and a member's weight gradients (dW | dR | db | dP | dproj)."""
        return {"R": self.D * self.G * self.H * self.out * self.itemsize,
                "proj": self.D * self.P * self.H * self.itemsize,
                "W": self.D * self.G * self.H * self.I * self.itemsize,
                "P": self.D * 3 * self.H * 4 if self.peepholes else 0,
                "weight gradients": _layout(list(_weight_parts(self).values()))[1] * 4}

    def row_grids(self, max_dim: int) -> dict[str, tuple[int, int]]:
        """The step kernels' 2-D grids (one invocation per unit of a row), and dx's GEMM (its
        rows L·n in tiles of ``TILE`` along y)."""
        return {"steps": (self.D * max(self.H, self.P), max_dim * max_dim * STEP_WORKGROUP),
                "dx": (self.L, max_dim * TILE)}


def geometry(cfg: RNNConfig, sz: Sizes, itemsize: int) -> Geometry:
    """The :class:`Geometry` of a call of :class:`Sizes` ``sz``, ``itemsize`` bytes per stored element."""
    return Geometry(cfg.cell, cfg.layout, sz.L, sz.N, sz.I, sz.H, sz.D, itemsize, sz.K, P=sz.P, E=sz.E, B=sz.B,
                    peepholes=cfg.cell == "lstm" and cfg.peepholes)


def _weight_parts(geo: Geometry) -> dict[str, int]:
    """Elements of each region of a member's weight-gradient buffer (dP: 0 without peepholes,
    dproj: 0 without a projection)."""
    gh = geo.G * geo.H
    return {"dw": geo.D * gh * geo.I, "dr": geo.D * gh * geo.out, "db": geo.D * 2 * gh,
            "dp": geo.D * 3 * geo.H if geo.peepholes else 0, "dproj": geo.D * geo.P * geo.H}


def entries(cfg: RNNConfig) -> list[str]:
    """The reverse-time loop's entry points of one step, in order."""
    if cfg.cell == "gru":
        return ["gru_bwd_gates"] + ([] if cfg.linear_before_reset else ["gru_bwd_reset"]) + ["gru_bwd_hidden"]
    return [f"{cfg.cell}_bwd_gates", f"{cfg.cell}_bwd_hidden"]


def backward(cfg: RNNConfig, operands, *, ensemble: int = 0, out: Sequence[np.ndarray] | None = None
             ) -> tuple[np.ndarray, ...]:
    """Operand cotangents on the WebGPU device; the contract of ``reference.backward``.

    Args:
      cfg: the layer's options.
      operands: the backward primitive's operands, numpy arrays: the forward's operands (in
        ``cells.CellSpec.operands_for(cfg)`` order, all present), ``y``, ``res``, then the cotangents of
        (Y, Y_h[, Y_c]); each with a leading axis of size ``ensemble`` when ``ensemble > 0``.
      ensemble: number of independent members (0: no ensemble axis).
      out: writable arrays of the results' shapes and dtypes (XLA's output buffers, from the
        callback); None allocates them.

    Returns:
      The cotangents of every operand but ``sequence_lens``, in operand order, each in its
      operand's dtype (the arrays of ``out`` when given).

    Raises:
      WGPUUnavailableError: no WebGPU adapter.
      ValueError: a single batch row, the weights or a weight-gradient GEMM's grid beyond the
        device limits (a larger batch runs in chunks).
    """
    t0 = time.perf_counter()
    cell = spec(cfg.cell)
    operands = [np.asarray(a) for a in operands]
    table = cell.operands_for(cfg)
    n = len(table)
    float_ops = [o for o in table if o.kind != "lens"]
    dests = (list(out) if out is not None else
             [np.empty(operands[i].shape, operands[i].dtype) for i, o in enumerate(table) if o.kind != "lens"])
    members = [operands] if not ensemble else [[a[e] for a in operands] for e in range(ensemble)]
    own = lambda e: {o.field: (d[e] if ensemble else d) for o, d in zip(float_ops, dests, strict=True)}
    primals0 = cell.unpack(members[0][:n])
    sz = sizes(cfg, primals0.x, primals0.r)
    if 0 in (sz.L, sz.N, sz.H):  # no work: the final states' cotangents pass through
        for e, m in enumerate(members):
            _trivial(cfg, m, own(e))
        return tuple(dests)
    dtype = np.dtype(primals0.x.dtype)
    storage = "f16" if dtype == np.float16 and runtime.runtime().has_f16 else "f32"
    prepared = [_member(cfg, m, sz, storage) for m in members]
    prepare_s = time.perf_counter() - t0

    def attempt(rt: runtime.Runtime) -> CallStats:
        call = _Call(rt, cfg, sz, storage, CallStats(calls=1, kind="backward", host_prepare_s=prepare_s))
        call.run(prepared, [own(e) for e in range(len(members))])
        return call.stats

    kernels.run_counted(t0, attempt)
    return tuple(dests)


def _states(cfg: RNNConfig, s: np.ndarray) -> np.ndarray:
    """A state in the user layout <-> [D, N, H] (the same swap both ways)."""
    return s if cfg.layout == 0 else np.swapaxes(s, 0, 1)


def _trivial(cfg: RNNConfig, member: list[np.ndarray], dst: dict[str, np.ndarray]) -> None:
    """L, N or H is 0: zero weight and input cotangents; the states' cotangents pass through."""
    cell = spec(cfg.cell)
    cts = member[len(cell.operands_for(cfg)) + 2 :]
    for a in dst.values():
        a[...] = 0
    for o, ct in zip(cell.state_operands, cts[1:], strict=True):
        np.copyto(dst[o.field], ct, casting="unsafe")


@dataclasses.dataclass
class _Member:
    """One member's host arrays, ready to upload (regions of one buffer each, see below)."""

    fdata: list[np.ndarray]  # float32: res | h0, c0 [S, D, N, W] | P [D, 3H] (LSTM)
    sdata: list[np.ndarray]  # storage dtype: y | dY | R | proj (projected LSTM)
    sx: list[np.ndarray]  # storage dtype: x | W
    lens: np.ndarray
    carry: np.ndarray  # float32 [S, D, N, W]: the cotangents of the final states

    def rows(self, layout: int, n0: int, n1: int) -> _Member:
        """The batch rows [n0, n1) of the per-row parts (views); the weights whole."""
        rows = slice(n0, n1)
        y_ax, x_ax = batch_axis("y", layout), batch_axis("x", layout)
        assert y_ax is not None and x_ax is not None
        fdata = [a[:, :, rows] for a in self.fdata[:2]] + self.fdata[2:]  # res, h0/c0 | P
        sdata = [kernels._take(a, y_ax, rows) for a in self.sdata[:2]] + self.sdata[2:]  # y, dY | R
        return _Member(fdata, sdata, [kernels._take(self.sx[0], x_ax, rows), *self.sx[1:]], self.lens[rows],
                       self.carry[:, :, rows])


def _member(cfg: RNNConfig, operands: list[np.ndarray], sz: Sizes, storage: str) -> _Member:
    cell = spec(cfg.cell)
    n = len(cell.operands_for(cfg))
    ops = cell.unpack(operands[:n])
    y, res, cts = operands[n], operands[n + 1], operands[n + 2 :]
    st = host.STORAGE_DTYPES[storage]
    f32 = lambda a: np.ascontiguousarray(a, dtype=np.float32)
    stor = lambda a: np.ascontiguousarray(a, dtype=st)
    init = np.stack([_padded(f32(_states(cfg, getattr(ops, o.field))), sz.W) for o in cell.state_operands])
    fdata = [f32(res), init]
    if cfg.cell == "lstm" and cfg.peepholes:
        fdata.append(f32(ops.p))
    if cfg.ragged:
        lens = np.clip(np.asarray(ops.lens, np.int64), 0, sz.L).astype(np.int32)
    else:
        lens = np.full((sz.N,), sz.L, np.int32)
    carry = np.stack([_padded(f32(_states(cfg, c)), sz.W) for c in cts[1:]])
    sdata = [stor(y), stor(cts[0]), stor(ops.r)] + ([stor(ops.proj)] if cfg.proj else [])
    return _Member(fdata, sdata, [stor(ops.x), stor(ops.w)], lens, carry)


def _padded(state: np.ndarray, width: int) -> np.ndarray:
    """A state [D, N, F] with rows zero-padded to ``width`` (h0 has P features, c0 H)."""
    if state.shape[-1] == width:
        return state
    return np.pad(state, [(0, 0)] * (state.ndim - 1) + [(0, width - state.shape[-1])])


def _layout(parts: Sequence[int]) -> tuple[list[int], int]:
    """Element offsets of consecutive regions of ``parts`` elements (16-byte aligned), and the total."""
    offsets, total = [], 0
    for size in parts:
        offsets.append(total)
        total += -(-size // _ALIGN_ELEMENTS) * _ALIGN_ELEMENTS
    return offsets, total


@dataclasses.dataclass
class _Gemm:
    """One wgrad.wgsl dispatch: entry point, A buffer, uniform fields and grid (P, Q, Z)."""

    entry: str  # "wgrad", "dx" or "colsum"
    a: str  # "dg" or "aux"
    fields: dict[str, int]
    grid: tuple[int, int, int]  # (Q, P, Z): columns, rows, slices


class _Call:
    """The device side of one backward call: set-up, recording, submit and read-back."""

    def __init__(self, rt: runtime.Runtime, cfg: RNNConfig, sz: Sizes, storage: str, stats: CallStats) -> None:
        self.rt, self.cfg, self.sz, self.storage, self.stats = rt, cfg, sz, storage, stats
        self.itemsize = host.STORAGE_DTYPES[storage].itemsize
        self.align = max(16, rt.limits["min-uniform-buffer-offset-alignment"])
        self.max_dim = rt.limit("max-compute-workgroups-per-dimension")
        self.max_bind = min(rt.limit("max-storage-buffer-binding-size"), rt.limit("max-buffer-size"))
        self.geo = geometry(cfg, sz, self.itemsize)
        self.chunks = plan.batch_chunks(self.geo, rt.plan_limits())  # raises where one row does not fit
        self.acquired: list[wgpu.GPUBuffer] = []

    # ---- buffers -----------------------------------------------------------------------
    def _buffer(self, nbytes: int, usage: int, what: str = "") -> tuple[wgpu.GPUBuffer, int]:
        size = max(16, -(-nbytes // 4) * 4)
        # the chunks are planned so that every bound buffer fits (Geometry.row_bytes)
        assert not what or size <= self.max_bind, f"the {what} buffer ({size} bytes) exceeds {self.max_bind}"
        buf = self.rt.pool.acquire(size, usage)
        self.acquired.append(buf)
        return buf, size

    def _write(self, buf: wgpu.GPUBuffer, offset_bytes: int, data: np.ndarray) -> None:
        raw = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        if not raw.size:
            return
        if raw.size % 4:  # write_buffer wants whole words (regions are 16-byte aligned)
            raw = np.concatenate([raw, np.zeros(4 - raw.size % 4, np.uint8)])
        self.rt.queue.write_buffer(buf, offset_bytes, raw)
        self.stats.bytes_uploaded += raw.size

    def _regions(self, parts: list[np.ndarray], itemsize: int, usage: int, what: str
                 ) -> tuple[tuple[wgpu.GPUBuffer, int], list[int]]:
        """One buffer holding ``parts`` at aligned element offsets (uploaded); the offsets."""
        offsets, total = _layout([a.size for a in parts])
        buf = self._buffer(total * itemsize, usage, what)
        for off, a in zip(offsets, parts, strict=True):
            self._write(buf[0], off * itemsize, a)
        return buf, offsets

    def _uniform(self, values: Sequence[int]) -> tuple[wgpu.GPUBuffer, int]:
        data = np.zeros(-(-len(values) // 4) * 4, np.uint32)
        data[: len(values)] = values
        buf = self._buffer(data.nbytes, _UNIFORM)
        self._write(buf[0], 0, data)
        return buf

    def _schedule(self) -> tuple[wgpu.GPUBuffer, int]:
        """One Sched {t} per step, L-1 down to 0, ``align`` bytes apart (dynamic offsets)."""
        key = ("bwd-sched", self.sz.L, self.align)
        buf = self.rt.tables.get(key)
        if buf is None:
            table = np.zeros((self.sz.L, self.align // 4), np.uint32)
            table[:, 0] = np.arange(self.sz.L - 1, -1, -1)
            buf = self.rt.device.create_buffer(size=table.nbytes, usage=_UNIFORM)
            self._write(buf, 0, table)
            self.rt.tables.put(key, buf)
        return buf, 16

    # ---- the plan of one member ----------------------------------------------------------
    def _gemms(self, sz: Sizes, off: dict[str, int]) -> list[_Gemm]:
        """The weight-gradient and dx dispatches of a chunk of sizes ``sz``, with their uniform
        fields (wgrad.wgsl GDims; ``accum`` is the job's)."""
        cfg = self.cfg
        H, GH = sz.H, sz.GH
        lbr = cfg.cell == "gru" and cfg.linear_before_reset
        base = {"N": sz.N, "L": sz.L, "I": sz.I, "GH": GH, "off_b": off["hb"], "off_w": off["w"], "Z": sz.D}
        out: list[_Gemm] = []

        def wg(a: str, sa: int, a_off: int, p: int, q: int, bmode: int, out_off: int, outr: int, row0: int,
               b_off: int = 0) -> None:
            fields = {**base, "P": p, "Q": q, "KR": sz.M, "SA": sa, "a_off": a_off, "SB": sz.B * sz.O,
                      "b_off": b_off, "bmode": bmode, "out_off": out_off, "outr": outr, "row0": row0}
            out.append(_Gemm("colsum" if bmode == 2 else "wgrad", a, fields, (q, p, sz.D)))

        wg("dg", GH, 0, GH, sz.I, 1, off["dw"], GH, 0)  # dW = dgᵀ·x
        if cfg.cell == "lstm":
            wg("dg", GH, 0, GH, sz.O, 0, off["dr"], GH, 0)  # ·h_prev (P features with a projection)
        elif lbr:
            wg("aux", 3 * H, 0, GH, H, 0, off["dr"], GH, 0)  # d(H·Rᵀ + Rb)ᵀ·h_prev
        else:
            wg("dg", GH, 0, 2 * H, H, 0, off["dr"], GH, 0)  # z, r blocks: ·h_prev
            wg("dg", GH, 2 * H, H, H, 0, off["dr"], GH, 2 * H, b_off=H)  # h block: ·(r⊙h_prev)
        wg("dg", GH, 0, GH, 1, 2, off["db"], 2 * GH, 0)  # Σ d(X·Wᵀ + Wb)
        wg("aux" if lbr else "dg", GH, 0, GH, 1, 2, off["db"], 2 * GH, GH)  # Σ d(H·Rᵀ + Rb)
        if cfg.cell == "lstm" and cfg.peepholes:
            wg("aux", 3 * H, 0, 3 * H, 1, 2, off["dp"], 3 * H, 0)
        fields = {**base, "P": sz.M, "Q": sz.I, "KR": sz.D * GH, "SA": GH, "a_off": 0, "SB": 0, "b_off": 0,
                  "bmode": 0, "out_off": off["dx"], "outr": 0, "row0": 0}
        out.append(_Gemm("dx", "dg", fields, (sz.I, sz.M, 1)))
        if cfg.proj:
            out.append(_proj_gemm(sz, base, off))
        return [g for g in out if g.grid[0] and g.grid[1]]

    def _grid(self, g: _Gemm) -> tuple[int, int, int]:
        q, p, z = g.grid
        if g.entry == "colsum":
            return (*plan.grid2d(-(-z * p // COLSUM_WORKGROUP), self.max_dim), 1)
        grid = (-(-q // TILE), -(-p // TILE), z)
        if max(grid) > self.max_dim:
            raise ValueError(
                f"{_FNAME}: a weight-gradient GEMM needs a grid of {grid} workgroups, beyond the device "
                f"limit max-compute-workgroups-per-dimension={self.max_dim}; use backend='xla' for this size."
            )
        return grid

    # ---- the call ----------------------------------------------------------------------
    def run(self, members: list[_Member], dests: list[dict[str, np.ndarray]]) -> None:
        try:
            self._run(members, dests)
        finally:
            self.rt.pool.release_all(self.acquired)
            self.acquired.clear()
            self.rt.finish_call()

    def _run(self, members: list[_Member], dests: list[dict[str, np.ndarray]]) -> None:
        rt, cfg, sz, stats = self.rt, self.cfg, self.sz, self.stats
        t0 = time.perf_counter()
        consts = kernels.cell_constants(cfg, sz.H)
        consts["WG_STEP"] = STEP_WORKGROUP
        if cfg.proj:  # only then: an unprojected call's pipelines keep their constants
            consts.update(PROJ=1, P=sz.P)
        kernel = f"{cfg.cell}_backward"
        step_pipes = [rt.pipeline(kernel, e, self.storage, consts) for e in entries(cfg)]
        tiled = GEMM_TILED if GEMM_TILED is not None else rt.adapter_info.get("adapter_type") != "CPU"
        gconsts = {"LAYOUT": cfg.layout, "REV0": consts["REV0"], "TILED": int(tiled)}
        sched = self._schedule()
        w_parts = _weight_parts(self.geo)
        w_offsets, w_total = _layout(list(w_parts.values()))
        w_off = dict(zip(w_parts, w_offsets, strict=True))
        jobs: list[_Job] = []
        sources: list[tuple[wgpu.GPUBuffer, int]] = []
        sinks: list[kernels.Sink] = []
        for m, dst in zip(members, dests, strict=True):
            wout = self._buffer(w_total * 4, _WORK, "weight gradients")  # summed over the member's chunks
            sources.append((wout[0], w_total * 4))
            sinks.append(partial(self._deliver, w_off, w_parts, dst))
            for c, (n0, n1) in enumerate(self.chunks):
                whole = len(self.chunks) == 1
                job = self._job(dataclasses.replace(sz, N=n1 - n0), m if whole else m.rows(cfg.layout, n0, n1),
                                wout, w_off, sched, gconsts, accum=c > 0)
                jobs.append(job)
                sources += job.outputs
                sinks += self._chunk_sinks(dst, n0, n1)
        t1 = time.perf_counter()
        encoder = rt.device.create_command_encoder()
        cp = encoder.begin_compute_pass()
        for k in range(sz.L):  # processing steps L-1 .. 0 (the schedule's order)
            for p, pipe in enumerate(step_pipes):
                cp.set_pipeline(pipe)
                for job in jobs:
                    cp.set_bind_group(0, job.steps, [k * self.align])
                    cp.dispatch_workgroups(*job.grids[p])
        for job in jobs:  # a member's chunks in order: the first stores its weight gradients, the rest add
            for pipe, group, grid in job.gemms:
                cp.set_pipeline(pipe)
                cp.set_bind_group(0, group)
                cp.dispatch_workgroups(*grid)
        cp.end()
        stats.dispatches += len(jobs) * (sz.L * len(step_pipes)) + sum(len(j.gemms) for j in jobs)
        stats.passes += 1
        readbacks = kernels.copy_out(encoder, sources, rt.limit("max-buffer-size"),
                                     lambda nbytes, usage: self._buffer(nbytes, usage)[0])
        t2 = time.perf_counter()
        rt.queue.submit([encoder.finish()])
        stats.submits += 1
        t3 = kernels.read_back(readbacks, sinks, stats)
        t4 = time.perf_counter()
        stats.host_upload_s += t1 - t0
        stats.host_record_s += t2 - t1
        stats.host_wait_s += t3 - t2
        stats.host_readback_s += t4 - t3

    def _job(self, sz: Sizes, m: _Member, wout: tuple[wgpu.GPUBuffer, int], w_off: dict[str, int], sched,
             gconsts: dict[str, float], accum: bool) -> _Job:
        """Upload one chunk (sizes ``sz``, rows ``m``), allocate its buffers, build its bind groups.

        Its GEMMs write (``accum`` False: the member's first chunk) or add into ``wout``.
        """
        rt, cfg = self.rt, self.cfg
        fdata, foff = self._regions(m.fdata, 4, _INPUT, "residuals")
        sdata, soff = self._regions(m.sdata, self.itemsize, _INPUT, "y")
        sx, xoff = self._regions(m.sx, self.itemsize, _INPUT, "x")
        lens = self._buffer(m.lens.nbytes, _INPUT, "lens")
        self._write(lens[0], 0, m.lens)
        state_n = sz.D * sz.N * sz.H
        carry_n = sz.S * sz.D * sz.N * sz.W
        st_offsets, st_total = _layout([carry_n, state_n, state_n])
        aux_offsets, aux_total = _layout([sz.D * sz.M * sz.E * sz.H, sz.D * sz.M * sz.B * sz.O, *_proj_aux(sz)])
        st = self._buffer(st_total * 4, _WORK, "state")
        self._write(st[0], 0, m.carry)
        dg = self._buffer(sz.D * sz.M * sz.GH * 4, _WORK, "gate cotangent")
        aux = self._buffer(aux_total * 4, _WORK, "weight-gradient operand")
        dx = self._buffer(sz.M * sz.I * 4, _WORK, "dx")
        dims = self._uniform([sz.L, sz.N, sz.D, sz.E, sz.B, foff[1], foff[2] if len(foff) > 2 else 0,
                              soff[1], soff[2], st_offsets[1], st_offsets[2], aux_offsets[1],
                              soff[3] if cfg.proj else 0, *(aux_offsets[2:] if cfg.proj else (0, 0))])
        steps = rt.bind_group("backward", {0: fdata, 1: sdata, 2: lens, 3: st, 4: dg, 5: aux, 6: dims, 7: sched})
        # elementwise kernels: one invocation per unit; mat-vec kernels: per 4 rows x 4 units
        units = sz.D * sz.N * sz.W
        blocks = sz.D * -(-sz.N // 4) * -(-sz.O // 4)
        grids = [plan.grid2d(-(-(units if e.endswith("_gates") else blocks) // STEP_WORKGROUP), self.max_dim)
                 for e in entries(cfg)]
        gemms = []
        for g in self._gemms(sz, {**w_off, "dx": 0, "hb": aux_offsets[1], "w": xoff[1], **_proj_offsets(aux_offsets)}):
            fields = {**g.fields, "accum": int(accum and g.entry != "dx")}
            group = rt.bind_group("wgrad", {0: dg if g.a == "dg" else aux, 1: aux, 2: sx, 3: lens,
                                            4: dx if g.entry == "dx" else wout,
                                            5: self._uniform([fields[k] for k in _GDIMS])})
            gemms.append((rt.pipeline("wgrad", g.entry, self.storage, gconsts), group, self._grid(g)))
        outputs = [(st[0], carry_n * 4)]  # the initial states' cotangents: the carry at the end
        if sz.I:
            outputs.insert(0, (dx[0], sz.M * sz.I * 4))
        return _Job(steps, grids, gemms, outputs)

    def _chunk_sinks(self, dst: dict[str, np.ndarray], n0: int, n1: int) -> list[kernels.Sink]:
        """Sinks of a chunk's outputs (:meth:`_job`): dx (where I > 0), then the carry."""
        cfg, sz = self.cfg, dataclasses.replace(self.sz, N=n1 - n0)
        rows = slice(n0, n1)
        x_ax, s_ax = batch_axis("x", cfg.layout), batch_axis("state", cfg.layout)
        assert x_ax is not None and s_ax is not None
        x_shape = (sz.L, sz.N, sz.I) if cfg.layout == 0 else (sz.N, sz.L, sz.I)
        f32 = np.dtype(np.float32)
        cell = spec(cfg.cell)
        states = [kernels._take(dst[o.field], s_ax, rows) for o in cell.state_operands]

        def carry(raw: np.ndarray) -> None:
            values = np.frombuffer(raw, np.float32, count=sz.S * sz.D * sz.N * sz.W).reshape(sz.S, sz.D, sz.N, sz.W)
            with np.errstate(over="ignore"):  # float32 -> float16 beyond 65504 is ±inf, as XLA's cast
                for k, (o, view) in enumerate(zip(cell.state_operands, states, strict=True)):
                    width = cell.state_size(o.field, sz.H, sz.O)  # each state's own features of the padded rows
                    np.copyto(view, _states(cfg, values[k][..., :width]), casting="unsafe")

        out: list[kernels.Sink] = [partial(kernels._put, kernels._take(dst["x"], x_ax, rows), f32, x_shape)]
        return ([] if not sz.I else out) + [carry]

    def _deliver(self, off: dict[str, int], parts: dict[str, int], dst: dict[str, np.ndarray], raw: np.ndarray
                 ) -> None:
        """Copy each weight gradient from the mapped bytes into its destination, once (cast included)."""
        sz = self.sz
        grads = np.frombuffer(raw, np.float32)
        shaped = {"w": (sz.D, sz.GH, sz.I), "r": (sz.D, sz.GH, sz.O), "b": (sz.D, 2 * sz.GH), "p": (sz.D, 3 * sz.H),
                  "proj": (sz.D, sz.P, sz.H)}
        region = {"w": "dw", "r": "dr", "b": "db", "p": "dp", "proj": "dproj"}
        with np.errstate(over="ignore"):  # float32 -> float16 beyond 65504 is ±inf, as XLA's cast
            for field, shape in shaped.items():
                if field not in dst:
                    continue
                name = region[field]
                if not parts[name]:  # P without peepholes: no gradient (the reference's zeros)
                    dst[field][...] = 0
                    continue
                count = math.prod(shape)
                np.copyto(dst[field], grads[off[name] : off[name] + count].reshape(shape), casting="unsafe")


def _proj_aux(sz: Sizes) -> list[int]:
    """The projected LSTM's regions after ext | hb in aux: ghs [D, L, N, P] (dY_t + dh) and m
    [D, L, N, H] (o ⊙ h(c)); none without a projection."""
    return [sz.D * sz.M * sz.P, sz.D * sz.M * sz.H] if sz.P else []


def _proj_offsets(aux_offsets: list[int]) -> dict[str, int]:
    """The element offsets of ghs and m in aux (``_proj_aux``), by name; none without them."""
    return dict(zip(("ghs", "m"), aux_offsets[2:], strict=True)) if len(aux_offsets) > 2 else {}


def _proj_gemm(sz: Sizes, base: dict[str, int], off: dict[str, int]) -> _Gemm:
    """d proj [D, P, H] = Σ_m ghs[d, m]ᵀ·m[d, m] over every step and row (both in aux; zero on
    padding steps): wgrad.wgsl's wgrad with A = ghs, B = m (BMODE 0)."""
    fields = {**base, "P": sz.P, "Q": sz.H, "KR": sz.M, "SA": sz.P, "a_off": off["ghs"], "SB": sz.H, "b_off": 0,
              "off_b": off["m"], "bmode": 0, "out_off": off["dproj"], "outr": sz.P, "row0": 0}
    return _Gemm("wgrad", "aux", fields, (sz.H, sz.P, sz.D))


@dataclasses.dataclass
class _Job:
    """One member's batch chunk: its step bind group and grids, its GEMMs, its outputs to read back."""

    steps: wgpu.GPUBindGroup
    grids: list[tuple[int, int]]  # per entry point of a step
    gemms: list[tuple[wgpu.GPUComputePipeline, wgpu.GPUBindGroup, tuple[int, int, int]]]
    outputs: list[tuple[wgpu.GPUBuffer, int]]  # dx (where I > 0), the carry
