"""The WGSL tangent map (forward-mode derivative) of GRU/LSTM: numpy operands in, numpy out.

The contract of ``reference.tangent``: from the primals, the forward's ``y`` and residuals
``res`` and the tangents of the float operands, the tangents of ``(y, y_h[, y_c])``.

One call = one command buffer with one compute pass, one ``queue.submit`` and one mapped
read-back, like the forward (kernels.py, whose buffer, read-back and output plumbing this
reuses). Inside the pass:

1. prep dispatches lay out ``[W | dW]`` and ``[R | dR]`` (prep_t over 2·D directions), the bias
   tangents in xproj's ``xb`` layout, and ``[P | dP]`` (LSTM peepholes) or dRb (GRU lbr=1);
2. per job (ensemble member x batch chunk) the projection ``E = dx·Wᵀ + x·dWᵀ + db + h·dRᵀ``
   (tangent_proj.wgsl), one dispatch, h being the forward's state before each step
   (initial_h, then Y: nothing but ``res`` and Y is read of the forward); GRU's h-gate term of
   h·dRᵀ stays in the step (it is multiplied by r, or needs r⊙h);
3. the tangent recurrence, stepwise: one dispatch per step (two for GRU lbr=0), gru_tangent.wgsl
   / lstm_tangent.wgsl, each computing dh·Rᵀ (and GRU's h-gate term); a projected LSTM's step
   is two dispatches (lstm_tangent_step writes dm and m = o ⊙ h(c'), then lstm_tangent_proj
   computes dh' = dm·projᵀ + m·dprojᵀ), as the forward's lstm_step / lstm_proj.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence

import numpy as np

from jaxgru._src import shapes
from jaxgru._src.cells import batch_axis, spec
from jaxgru._src.options import RNNConfig
from jaxgru._src.webgpu import host, kernels, plan, runtime
from jaxgru._src.webgpu.counters import CallStats

_FNAME = "jaxgru wgsl tangent"
# State slots of the tangent kernels (wgsl/tangent_common.wgsl: S_DH, S_HP, S_A, S_B, S_C).
SLOTS = 7
S_DH, S_HP, S_A, S_B = 0, 2, 4, 5


@dataclasses.dataclass(frozen=True)
class Geometry(plan.Geometry):
    """A tangent call's sizes: the forward's, with ``K = 0`` (no residual output) and the
    device buffers of the tangent (more state slots, weights with their tangents, the forward's
    residuals and Y as an input).

    Attributes:
      res_blocks: residual blocks of H per step that the forward wrote (``CellSpec.residuals``).
    """

    res_blocks: int = 0

    @property
    def slots(self) -> int:
        return SLOTS

    @property
    def projt_offset(self) -> int:
        """vec4 offset of ``[projt | dprojt]`` in the rt buffer: after ``[Rᵀ | dRᵀ]`` (2·D directions)."""
        return 2 * super().projt_offset

    def row_bytes(self) -> dict[str, int]:
        out = super().row_bytes()
        # res, then Y as f32 (``out`` features), then initial_h (a state slot's row)
        out["aux"] = self.D * (self.L * (self.res_blocks * self.H + self.out) + 4 * self.S4) * 4
        return out

    def weight_bytes(self) -> dict[str, int]:
        out = super().weight_bytes()
        for name in ("wt", "rt", "pr"):  # the primal and its tangent side by side
            out[name] *= 2
        return out


def entries(cfg: RNNConfig) -> list[str]:
    """The tangent recurrence's entry points of one step, in order."""
    if cfg.cell == "gru" and not cfg.linear_before_reset:
        return ["gru_tangent_zr", "gru_tangent_step"]  # r ⊙ h needs all of r before the h-gate
    if cfg.cell == "lstm" and cfg.proj:
        return ["lstm_tangent_step", "lstm_tangent_proj"]  # dm·projᵀ needs all of dm
    return [f"{cfg.cell}_tangent_step"]


def _as_operands(cfg: RNNConfig, tangents: Sequence[np.ndarray], lens: np.ndarray) -> list[np.ndarray]:
    """The tangents as a full operand list (``sequence_lens`` at its place), for host.member."""
    it = iter(tangents)
    return [lens if o.kind == "lens" else next(it) for o in spec(cfg.cell).operands_for(cfg)]


def tangent(cfg: RNNConfig, primals: Sequence, y, res, tangents: Sequence, *, ensemble: int = 0,
            out: Sequence[np.ndarray] | None = None) -> tuple[np.ndarray, ...]:
    """Tangents of ``(y, y_h[, y_c])`` on the WebGPU device; the contract of ``reference.tangent``.

    Args:
      cfg: the layer's options.
      primals: the forward's operands (``cells.CellSpec.operands_for(cfg)`` order), numpy arrays.
      y: the forward's Y (user layout).
      res: the forward's residuals ``[D, L, N, K·H]`` (processing order).
      tangents: tangents of the float operands, in operand order (``sequence_lens`` excluded).
      ensemble: number of independent members (0: no ensemble axis; else every array has a
        leading axis of that size).
      out: writable arrays of the outputs' shapes and dtypes (XLA's buffers), or None.

    Returns:
      ``(dy, dy_h[, dy_c])`` in the primals' dtype: the arrays of ``out`` when given.
    """
    t0 = time.perf_counter()
    primals = [np.asarray(a) for a in primals]
    tangents = [np.asarray(a) for a in tangents]
    y, res = np.asarray(y), np.asarray(res)
    out_shapes = shapes.forward_shapes(cfg, _FNAME, primals, ensemble=ensemble, residuals=False)
    dtype = np.dtype(primals[0].dtype)
    dests = list(out) if out is not None else [np.empty(s, dtype) for s in out_shapes]
    pick = (lambda a, e: a) if not ensemble else (lambda a, e: a[e])
    members = [([pick(a, e) for a in primals], pick(y, e), pick(res, e), [pick(a, e) for a in tangents])
               for e in range(max(ensemble, 1))]
    x0, r0 = members[0][0][0], members[0][0][2]
    # with a projection R is [D, G·H, P]: H from its rows, P from its columns (as kernels.forward)
    hidden = r0.shape[1] // cfg.num_gates if cfg.proj else r0.shape[-1]
    proj_size = r0.shape[-1] if cfg.proj else 0
    if 0 in (x0.shape[0], x0.shape[1], hidden, r0.shape[-1]):  # no work: dY = 0, final tangents = initial ones
        fwd = plan.geometry(cfg, x0.shape, hidden, False, 4, proj_size=proj_size)
        for e, (p, _, _, t) in enumerate(members):
            t_ops = _as_operands(cfg, t, spec(cfg.cell).unpack(p).lens)
            for dst, value in zip(dests, host.trivial(cfg, t_ops, fwd, False), strict=True):
                np.copyto(dst[e] if ensemble else dst, value, casting="unsafe")
        return tuple(dests)
    storage = "f16" if dtype == np.float16 and runtime.runtime().has_f16 else "f32"
    fwd = plan.geometry(cfg, x0.shape, hidden, False, 2 if storage == "f16" else 4, proj_size=proj_size)
    geo = Geometry(**dataclasses.asdict(fwd), res_blocks=spec(cfg.cell).residuals(cfg))
    prepared = [(host.member(cfg, p, geo, storage),
                 host.member(cfg, _as_operands(cfg, t, spec(cfg.cell).unpack(p).lens), geo, storage), yv, rv)
                for p, yv, rv, t in members]
    prepare_s = time.perf_counter() - t0

    def attempt(rt: runtime.Runtime) -> CallStats:
        call = _Call(rt, cfg, geo, storage, storage, "stepwise",
                     CallStats(calls=1, kind="tangent", host_prepare_s=prepare_s))
        call.run_tangent(prepared, dests, ensemble > 0)
        return call.stats

    kernels.run_counted(t0, attempt)
    return tuple(dests)


Prepared = tuple[host.Member, host.Member, np.ndarray, np.ndarray]  # primal, tangent, y, res


class _Call(kernels._Call):
    """The device side of one tangent call (the forward's buffers, read-back and sinks)."""

    geo: Geometry

    def _pair(self, a: np.ndarray, b: np.ndarray) -> tuple:
        """``[a | b]`` in one buffer: two uploads, or one host copy where a's bytes are not whole words."""
        if a.nbytes % 4:
            return self._upload(np.concatenate([a.reshape(-1), b.reshape(-1)]))
        buf, size = self._scratch(a.nbytes + b.nbytes, kernels._INPUT)
        for offset, part in ((0, a), (a.nbytes, b)):
            if part.size:
                self._write(buf, offset, part)
        return buf, size

    def _tangent_weights(self, pm: host.Member, tm: host.Member, preps: list[kernels._Prep]) -> dict:
        """Upload a member's weights with their tangents and queue the prep dispatches.

        Returns:
          The device layouts: wt ``[2, D, I, G, H4]`` (Wᵀ, dWᵀ), rt ``[2, D, PP, G, H4]``
          (Rᵀ, dRᵀ; a projected LSTM's ``[2, D, HP, P4]`` projt, dprojt after them, at
          ``geo.projt_offset``), xb (bias tangents folded as the forward's xb), pr (``[P | dP]``,
          dRb, or unused).
        """
        geo, cfg = self.geo, self.cfg
        d2 = 2 * geo.D
        wb = geo.weight_bytes()
        dev = {name: self._scratch(max(wb[name], 16)) for name in ("wt", "rt")}
        base = {"G": geo.G, "H": geo.H, "D": d2, "WG": plan.PREP_WORKGROUP}
        for name, a, b, k_in, k_out in (("wt", pm.w, tm.w, geo.I, geo.I), ("rt", pm.r, tm.r, geo.out, geo.PP)):
            preps.append(kernels._Prep("prep_t", {**base, "KIN": k_in, "KOUT": k_out}, self._pair(a, b), dev[name],
                                       d2 * k_out * geo.G * geo.H4, self.storage))
        if pm.proj is not None and tm.proj is not None:  # [projt | dprojt] after [Rᵀ | dRᵀ], as the forward's
            consts: dict[str, float] = {**base, "G": 1, "H": geo.P, "KIN": geo.H, "KOUT": geo.HP,
                                        "OUT_OFF": geo.projt_offset}
            preps.append(kernels._Prep("prep_t", consts, self._pair(pm.proj, tm.proj), dev["rt"],
                                       d2 * geo.HP * geo.PP // 4, self.storage))
        layouts = host.bias_layouts(cfg, geo)
        tb = self._upload(tm.b)
        dev["xb"] = self._scratch(geo.D * geo.G * geo.HP * 4)
        preps.append(kernels._Prep("prep_bias", {**base, "D": geo.D, **layouts["xb"].constants}, tb, dev["xb"],
                                   geo.D * geo.G * geo.H4, self.storage))
        if pm.p is not None and tm.p is not None:  # LSTM peepholes: P and dP as 2·D directions
            dev["pr"] = self._scratch(wb["pr"])
            preps.append(kernels._Prep("prep_bias", {**base, **layouts["pr"].constants}, self._pair(pm.p, tm.p),
                                       dev["pr"], d2 * 3 * geo.H4, self.storage))
        elif cfg.cell == "gru" and cfg.linear_before_reset:  # dRb
            dev["pr"] = self._scratch(wb["pr"] // 2)
            preps.append(kernels._Prep("prep_bias", {**base, "D": geo.D, **layouts["pr"].constants}, tb, dev["pr"],
                                       geo.D * 3 * geo.H4, self.storage))
        else:  # not read
            dev["pr"] = self._scratch(16)
        return dev

    def _tangent_job(self, index: int, item: Prepared, w: dict, n0: int, n1: int, sched) -> kernels._Job:
        """Upload one chunk's operands, allocate its buffers, build its bind groups."""
        geo, rt, plan_ = self.geo, self.rt, self.plan
        pm, tm, y, res = item
        n = n1 - n0
        rows = slice(n0, n1)
        m_rows = geo.L * n
        x_ax, y_ax = batch_axis("x", geo.layout), batch_axis("y", geo.layout)
        assert x_ax is not None and y_ax is not None
        x_buf = self._upload(kernels._take(pm.x, x_ax, rows))
        dx_buf = self._upload(kernels._take(tm.x, x_ax, rows))
        lens = self._upload(pm.lens[rows])
        slot = geo.D * n * geo.S4 * 16
        state = self._scratch(SLOTS * slot, kernels._INPUT)
        initial = [(S_DH, tm.h0), (S_HP, pm.h0 if self.cfg.cell == "gru" else None), (S_A, tm.c0), (S_B, pm.c0)]
        for s, value in initial:
            if value is not None:
                self._write(state[0], s * slot, value[:, rows])
        # the forward's residuals, its Y as f32, initial_h (tangent_common.wgsl, tangent_proj.wgsl)
        parts = [np.ascontiguousarray(res[:, :, rows], np.float32),
                 np.ascontiguousarray(kernels._take(y, y_ax, rows), np.float32), pm.h0[:, rows]]
        aux = self._scratch(sum(p.nbytes for p in parts), kernels._INPUT)
        offset = 0
        for part in parts:
            if part.size:
                self._write(aux[0], offset, part)
            offset += part.nbytes
        e = self._scratch(geo.D * m_rows * geo.G * geo.HP * 4)
        outputs = [self._scratch(geo.L * geo.D * n * geo.out * geo.itemsize, kernels._OUTPUT),
                   self._scratch(sum(geo.final_widths) * geo.D * n * geo.itemsize, kernels._OUTPUT)]
        row_blocks = -(-m_rows // 4)
        xdims = np.array([m_rows, n, geo.L, geo.I, geo.D, row_blocks, 0, 0], np.uint32)
        proj = rt.bind_group("tangent_proj", {
            0: x_buf, 1: dx_buf, 2: w["wt"], 3: w["xb"], 4: e, 5: w["rt"], 6: aux, 7: lens,
            8: self._upload(xdims, kernels._UNIFORM),
        })
        recur = rt.bind_group("recurrence", {
            0: e, 1: w["rt"], 2: w["pr"], 3: lens, 4: state, 5: outputs[0], 6: outputs[1], 7: aux,
            8: self._upload(np.array([geo.L, n, geo.D, 0], np.uint32), kernels._UNIFORM), 9: sched,
        })
        x_threads = geo.D * row_blocks * geo.G * geo.H4
        xgrid = plan.grid2d(-(-x_threads // plan.XPROJ_WORKGROUP), self.max_dim)
        threads = geo.D * -(-n // plan_.nb) * geo.S4  # lstm_tangent_proj: P4 per row block
        rgrid = plan.grid2d(-(-threads // plan.STEPWISE_WORKGROUP), self.max_dim)
        return kernels._Job(index, n0, n, proj, xgrid, recur, rgrid, outputs)

    def run_tangent(self, items: list[Prepared], dests: list[np.ndarray], ensemble: bool) -> None:
        """Upload, record, submit once, read back once into ``dests`` (see :func:`tangent`)."""
        try:
            self._record(items, dests, ensemble)
        finally:
            self.rt.pool.release_all(self.acquired)
            self.acquired.clear()
            self.rt.finish_call()

    def _record(self, items: list[Prepared], dests: list[np.ndarray], ensemble: bool) -> None:
        rt, stats, geo = self.rt, self.stats, self.geo
        t0 = time.perf_counter()
        cfg = self.cfg
        pc: dict[str, float] = {
            "C4": geo.G * geo.H4, "H": geo.H, "HG": geo.G if cfg.cell == "lstm" else 2, "K": geo.res_blocks,
            "LAYOUT": cfg.layout, "REV0": int(cfg.reversed_dirs[0]), "WG": plan.XPROJ_WORKGROUP,
        }
        if geo.P:  # only then: an unprojected call's pipeline keeps its constants
            pc.update(P=geo.P, S4=geo.S4)
        proj = rt.pipeline("tangent_proj", "tangent_proj", self.storage, pc)
        consts = self._recurrence_constants()
        recur = [rt.pipeline(f"{self.cfg.cell}_tangent", e, self.storage, consts) for e in entries(self.cfg)]
        sched = self._schedule()
        jobs: list[kernels._Job] = []
        preps: list[kernels._Prep] = []
        for i, item in enumerate(items):
            w = self._tangent_weights(item[0], item[1], preps)
            jobs += [self._tangent_job(i, item, w, n0, n1, sched) for n0, n1 in self.plan.chunks]
        prep_groups = self._prep_groups(preps)  # every prep in self.storage (the tangent keeps R as stored)
        t1 = time.perf_counter()
        encoder = rt.device.create_command_encoder()
        self._record_pass(encoder.begin_compute_pass(), prep_groups, proj, recur, jobs)
        readbacks = self._copy_out(encoder, [o for job in jobs for o in job.outputs])
        t2 = time.perf_counter()
        rt.queue.submit([encoder.finish()])
        stats.submits += 1
        t3 = self._read(readbacks, self._sinks(jobs, dests, ensemble))
        t4 = time.perf_counter()
        stats.host_upload_s += t1 - t0
        stats.host_record_s += t2 - t1
        stats.host_wait_s += t3 - t2
        stats.host_readback_s += t4 - t3
