"""The ``lax.scan`` ground truth: forward, tangent (jvp) and backward (vjp) of GRU and LSTM.

These are the ``xla`` lowerings of the primitives, written for one ensemble member with
every operand present (absent ones are zeros, see ``api.py``):

    GRU:  x, w, r, b, h0, lens          LSTM: x, w, r, b, p, h0, c0, lens

``x``, ``h0``, ``c0`` and the outputs are in the user's layout (ONNX ``layout`` 0 or 1).
Inside, every direction runs in *processing order*: step t of the reverse direction reads
x[len-1-t] of its sequence, so all directions share one loop and one mask (t < len). Each
direction keeps its own 2-D state and matmuls: on XLA:CPU that beats a batched matmul over
directions, and computing X·Wᵀ inside the loop beats one hoisted GEMM (the projection stays
in cache; see docs/performance.md).

Residuals for autodiff are the activation inputs before clipping, per direction and step
(processing order) ``res [D, L, N, K]``: GRU lbr=0: a_z, a_r, a_h (K = 3H); GRU lbr=1 also
the linear term Rh·h + Rbh (K = 4H); LSTM: a_i, a_o, a_f, a_c and the new cell state C
(K = 5H). Hidden states before each step are recovered from Y, so nothing else is stored.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from jaxgru._src.options import RNNConfig


def compute_dtype(dtype) -> jnp.dtype:
    """float16/bfloat16 compute in float32; float32/float64 compute in themselves."""
    dtype = jnp.dtype(dtype)
    return jnp.dtype(jnp.float32) if dtype.itemsize < 4 else dtype


def unroll_for(length: int, batch: int, hidden: int) -> int:
    """The ``lax.scan`` unroll factor for a shape (see docs/performance.md)."""
    del length, batch, hidden
    return 1


# --------------------------------------------------------------------------------------
# small pieces
# --------------------------------------------------------------------------------------
def _act(act, a, clip):
    """act(clip(a)): an activation at its (clipped) input."""
    return act(a if clip is None else jnp.clip(a, -clip, clip))


def _act_d(act, a, clip):
    """act(clip(a)) and its derivative with respect to a (0 where the clip is active)."""
    return jax.jvp(lambda v: _act(act, v, clip), (a,), (jnp.ones_like(a),))


def _wgrad(a, b):
    """Σ over steps and batch of aᵀ·b (a [L, N, G], b [L, N, K]) -> [G, K]: a weight gradient.

    Replicated when the batch axis is explicitly sharded (the contraction is an all-reduce).
    """
    mesh = jax.typeof(a).sharding.mesh
    explicit = any(t == jax.sharding.AxisType.Explicit for t in mesh.axis_types)
    out = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec()) if explicit else None
    return jnp.einsum("lng,lnk->gk", a, b, out_sharding=out)


def _sum_ln(a):
    return a.sum((0, 1))


def _split(a, k):
    return jnp.split(a, k, axis=-1)


class _Time:
    """Conversions between time order and each direction's processing order, and the mask."""

    def __init__(self, cfg: RNNConfig, lens, length: int):
        self.cfg = cfg
        self.mask = self.idx = None
        if cfg.ragged:
            lens = jnp.clip(lens.astype(jnp.int32), 0, length)
            t = jnp.arange(length, dtype=jnp.int32)[:, None]
            valid = t < lens[None, :]
            self.mask = valid[..., None]  # [L, N, 1]
            # t -> len-1-t inside the sequence, identity on padding: an involution
            self.idx = jnp.where(valid, lens[None, :] - 1 - t, t)  # [L, N]

    def proc(self, a, d: int):
        """Reorder ``a [L, N, ...]`` between time order and direction d's processing order."""
        if not self.cfg.reversed_dirs[d]:
            return a
        if self.idx is None:
            return jnp.flip(a, 0)
        idx = self.idx.reshape(self.idx.shape + (1,) * (a.ndim - 2))
        return jnp.take_along_axis(a, idx, axis=0)

    @staticmethod
    def select(new, old, m):
        return new if m is None else jnp.where(m, new, old)

    @staticmethod
    def zero(v, m):
        return v if m is None else jnp.where(m, v, jnp.zeros_like(v))


def _time_major(cfg, a):
    return a if cfg.layout == 0 else jnp.swapaxes(a, 0, 1)


def _states(cfg, s):
    """A state in the user layout <-> ``[D, N, H]`` (the same swap both ways)."""
    return s if cfg.layout == 0 else jnp.swapaxes(s, 0, 1)


def _y_dir(cfg, y, d):
    """Direction d of Y (user layout) as ``[L, N, H]`` in time order."""
    return y[:, d] if cfg.layout == 0 else jnp.swapaxes(y[:, :, d], 0, 1)


def _assemble_y(cfg, ys):
    """Per-direction time-order ``[L, N, H]`` -> Y in the user layout."""
    return jnp.stack(ys, axis=1) if cfg.layout == 0 else jnp.stack([jnp.swapaxes(y, 0, 1) for y in ys], 2)


def _unpack(cfg, operands):
    if cfg.cell == "gru":
        x, w, r, b, h0, lens = operands
        p = c0 = None
    else:
        x, w, r, b, p, h0, c0, lens = operands
    return x, w, r, b, p, h0, c0, lens


def _biases(cfg, b, hidden):
    """Per direction: (bias of X·Wᵀ [1, G], bias of H·Rᵀ [1, G] or None)."""
    g = cfg.num_gates * hidden
    out = []
    for bd in b:
        wb, rb = bd[None, :g], bd[None, g:]
        if cfg.cell == "gru" and cfg.linear_before_reset:
            out.append((wb, rb))  # Rb stays with H·Rᵀ: the h-gate needs r ⊙ (H·Rhᵀ + Rbh)
        else:
            out.append((wb + rb, None))
    return out


class _Prepared:
    """Operands cast to the compute dtype, split per direction, time-major, processing order."""

    def __init__(self, cfg: RNNConfig, operands):
        x, w, r, b, p, h0, c0, lens = _unpack(cfg, operands)
        self.dtype = cdt = compute_dtype(x.dtype)
        cast = lambda a: None if a is None else a.astype(cdt)
        x, w, r, b, p, h0, c0 = map(cast, (x, w, r, b, p, h0, c0))
        xt = _time_major(cfg, x)
        self.length, self.batch = xt.shape[0], xt.shape[1]
        self.hidden = r.shape[-1]
        self.dirs = range(cfg.num_directions)
        self.tm = _Time(cfg, lens, self.length)
        self.x = [self.tm.proc(xt, d) for d in self.dirs]  # [L, N, I] per direction
        self.w, self.r = list(w), list(r)  # [G, I], [G, H]
        self.wt = [a.T for a in w]  # the layouts the loop body consumes, prepared once
        self.rt = [a.T for a in r]
        self.bias = _biases(cfg, b, self.hidden)
        self.h0 = list(_states(cfg, h0))
        self.c0 = None if c0 is None else list(_states(cfg, c0))
        # peepholes (i, o, f) per direction, each [1, H]
        self.peep = [_split(pd[None], 3) for pd in p] if (p is not None and cfg.peepholes) else None
        self.unroll = unroll_for(self.length, self.batch, self.hidden)


# --------------------------------------------------------------------------------------
# the forward's loop: layout plan, cell steps on per-gate arrays
# --------------------------------------------------------------------------------------
def plan_for(cell: str, batch: int, hidden: int, residuals: bool) -> tuple[bool, bool]:
    """(feature_major, hoist) for the forward loop of a shape; measured on XLA:CPU.

    * hoist: X·Wᵀ for all steps as one GEMM per gate before the loop (each gate its own
      array: a scan input sliced at lane offsets inside a fusion compiles to slow code).
      Wins up to batch 64 (H <= 256), where re-reading W every step dominates; loses at 256.
    * feature_major: the state is ``[H, N]`` and the matmul is ``R·hᵀ``, so XLA packs the small
      state instead of the weights on every step. Wins at batch 1-2, for H >= 512, and at
      large batch with H >= 256.
    The thresholds come from benchmarks/loop_layouts.py (results/loop_layouts.json).
    The autodiff residuals are batch-major (the tangent/backward loops are).
    """
    if not isinstance(batch, int):  # a symbolic batch (jax.export): plan for a large one
        batch = 64
    del cell  # the same rules measured best for GRU and LSTM
    hoist = batch <= 16 or (hidden <= 256 and batch <= 64)
    feature_major = not residuals and (batch <= 2 or hidden >= 512 or (batch >= 128 and hidden >= 256))
    return feature_major, hoist


class _Orient:
    """Batch-major (``[N, H]``) or feature-major (``[H, N]``) per-step arrays."""

    def __init__(self, feature_major: bool):
        self.fm = feature_major
        self.axis = 0 if feature_major else -1

    def gates(self, a, k):
        return jnp.split(a, k, axis=self.axis)

    def cat(self, parts):
        return jnp.concatenate(parts, axis=self.axis)

    def weight(self, m):
        """A weight block m [K, H] in the layout ``mm`` consumes: prepared once, outside the loop
        (a transpose inside the loop body is redone on every step)."""
        return m if self.fm else m.T

    def mm(self, h, m):
        """h·mᵀ for a prepared weight block: ``m @ h`` feature-major, ``h @ m`` batch-major."""
        return m @ h if self.fm else h @ m

    def vec(self, v):
        """A per-feature vector [K] shaped to broadcast over the batch."""
        return v[:, None] if self.fm else v[None, :]

    def state(self, s):
        """[N, H] <-> this orientation (the same transpose both ways)."""
        return s.T if self.fm else s

    def seq(self, a):
        """[L, N, K] <-> [L, K, N] when feature-major."""
        return jnp.swapaxes(a, 1, 2) if self.fm else a


def _gru_step(cfg, d, o, ax, w_r, rb, h):
    """One GRU step on per-gate arrays. ``ax``: X·Wᵀ + b per gate (z, r, h); ``w_r``: R
    prepared by ``o.weight`` (lbr=1) or its (z r, h) row blocks, each prepared (lbr=0)."""
    f, g = cfg.activations[d][0], cfg.activations[d][1]
    if cfg.linear_before_reset:
        gz, gr, lin = o.gates(o.mm(h, w_r) + rb, 3)  # H·Rᵀ + Rb, all gates
        az, ar = ax[0] + gz, ax[1] + gr
        r = _act(f, ar, cfg.clip)
        ah = ax[2] + r * lin  # h~ = g(X·Whᵀ + r ⊙ (H·Rhᵀ + Rbh) + Wbh)
        res = (az, ar, ah, lin)
    else:
        w_zr, w_h = w_r
        gz, gr = o.gates(o.mm(h, w_zr), 2)
        az, ar = ax[0] + gz, ax[1] + gr
        r = _act(f, ar, cfg.clip)
        ah = ax[2] + o.mm(r * h, w_h)  # h~ = g(X·Whᵀ + (r ⊙ H)·Rhᵀ + b)
        res = (az, ar, ah)
    z = _act(f, az, cfg.clip)
    hh = _act(g, ah, cfg.clip)
    return hh + z * (h - hh), res  # H' = (1 − z) ⊙ h~ + z ⊙ H


def _lstm_step(cfg, d, o, ax, w_r, peep, h, c):
    """One LSTM step on per-gate arrays. ``ax``: X·Wᵀ + b per gate (i, o, f, c)."""
    f, g, hact = cfg.activations[d]
    ai, ao, af, ac = (a + b for a, b in zip(ax, o.gates(o.mm(h, w_r), 4)))
    if peep is not None:
        pi, po, pf = peep
        ai = ai + pi * c
        af = af + pf * c
    i = _act(f, ai, cfg.clip)
    fg = 1 - i if cfg.input_forget else _act(f, af, cfg.clip)
    c_new = fg * c + i * _act(g, ac, cfg.clip)  # C = f ⊙ C' + i ⊙ g(a_c)
    if peep is not None:
        ao = ao + po * c_new  # the output gate's peephole sees the new cell state
    out = _act(f, ao, cfg.clip)
    h_new = out * hact(c_new)  # onnxruntime does not clip the input of h(C)
    return h_new, c_new, (ai, ao, af, ac, c_new)


# --------------------------------------------------------------------------------------
# forward
# --------------------------------------------------------------------------------------
def forward(cfg: RNNConfig, *operands, residuals: bool = False, plan: tuple[bool, bool] | None = None):
    """ONNX GRU/LSTM forward. Returns (y, y_h[, y_c]) and, if ``residuals``, res last.

    ``plan`` = (feature_major, hoist) overrides ``plan_for`` (tests run every variant).
    """
    pr = _Prepared(cfg, operands)
    tm, lstm, n_gates = pr.tm, cfg.cell == "lstm", cfg.num_gates
    feature_major, hoist = plan or plan_for(cfg.cell, pr.batch, pr.hidden, residuals)
    o = _Orient(feature_major)
    keep = (lambda res: jnp.concatenate(res, axis=-1)) if residuals else (lambda res: None)
    # per direction: the input terms (hoisted per gate, or x for the loop), weights in the
    # layout the loop consumes, biases, peepholes
    xs, xbias, rbias, peeps, wx, wr = [], [], [], [], [], []
    for d in pr.dirs:
        wx.append(o.weight(pr.w[d]))
        if cfg.cell == "gru" and not cfg.linear_before_reset:
            wr.append((o.weight(pr.r[d][: 2 * pr.hidden]), o.weight(pr.r[d][2 * pr.hidden :])))
        else:
            wr.append(o.weight(pr.r[d]))
        wb, rb = pr.bias[d]
        xbias.append(o.gates(o.vec(wb[0]), n_gates))
        rbias.append(None if rb is None else o.vec(rb[0]))
        peeps.append(None if pr.peep is None else [o.vec(v[0]) for v in pr.peep[d]])
        if hoist:  # one GEMM per gate over all steps
            blocks = jnp.split(pr.w[d], n_gates)
            xs.append(tuple(o.seq(pr.x[d] @ wg.T) + bg[None] for wg, bg in zip(blocks, xbias[d])))
        else:
            xs.append(o.seq(pr.x[d]))
    mask = None if tm.mask is None else (jnp.swapaxes(tm.mask, 1, 2) if o.fm else tm.mask)

    def step(carry, inp):
        x_t, m = inp
        new, ys, rs = [], [], []
        for d in pr.dirs:
            ax = x_t[d] if hoist else [a + b for a, b in zip(o.gates(o.mm(x_t[d], wx[d]), n_gates), xbias[d])]
            if lstm:
                h, c = carry[d]
                h_new, c_new, res = _lstm_step(cfg, d, o, ax, wr[d], peeps[d], h, c)
                new.append((tm.select(h_new, h, m), tm.select(c_new, c, m)))
            else:
                h = carry[d]
                h_new, res = _gru_step(cfg, d, o, ax, wr[d], rbias[d], h)
                new.append(tm.select(h_new, h, m))
            ys.append(tm.zero(h_new, m))
            rs.append(keep(res))
        return tuple(new), (tuple(ys), tuple(rs))

    h0 = [o.state(h) for h in pr.h0]
    carry0 = tuple(zip(h0, [o.state(c) for c in pr.c0])) if lstm else tuple(h0)
    last, (ys, rs) = lax.scan(step, carry0, (tuple(xs), mask), unroll=pr.unroll)
    out_dtype = operands[0].dtype
    y = _assemble_y(cfg, [tm.proc(o.seq(y), d) for d, y in enumerate(ys)])
    hs = [o.state(s[0]) for s in last] if lstm else [o.state(s) for s in last]
    outs = [y, _states(cfg, jnp.stack(hs))]
    if lstm:
        outs.append(_states(cfg, jnp.stack([o.state(s[1]) for s in last])))
    outs = [a.astype(out_dtype) for a in outs]
    if residuals:
        outs.append(jnp.stack(rs))  # [D, L, N, K]
    return tuple(outs)


def _before(first, states):
    """The state before each step: ``first``, then ``states`` shifted by one (``[L, N, H]``;
    L = 0 stays empty)."""
    return jnp.concatenate([first[None], states], axis=0)[: states.shape[0]]


def _h_prev(cfg, pr, y, d):
    """Direction d's hidden state before each step, processing order ``[L, N, H]``."""
    return _before(pr.h0[d], pr.tm.proc(_y_dir(cfg, y.astype(pr.dtype), d), d))


def _gru_residuals(cfg, res_d, hidden):
    """(a_zr, a_h, lin) as [L, N, ...]; lin is zeros for lbr=0 (unused there)."""
    azr, ah = res_d[..., : 2 * hidden], res_d[..., 2 * hidden : 3 * hidden]
    lin = res_d[..., 3 * hidden :] if cfg.linear_before_reset else jnp.zeros_like(ah)
    return azr, ah, lin


# --------------------------------------------------------------------------------------
# tangent (linear in the tangents given the primals and the forward's outputs)
# --------------------------------------------------------------------------------------
def tangent(cfg: RNNConfig, primals, y, res, tangents):
    """Forward-mode derivative: tangents of (y, y_h[, y_c]) from tangents of the operands.

    Args:
      cfg: the layer's options.
      primals: the forward's operands (see module docstring).
      y: the forward's Y (user layout).
      res: the forward's residuals ``[D, L, N, K]``.
      tangents: tangents of the floating operands, in operand order (lens excluded).
    """
    pr = _Prepared(cfg, primals)
    tm, hidden, lstm = pr.tm, pr.hidden, cfg.cell == "lstm"
    tx, tw, tr, tb, tp, th0, tc0 = _unpack(cfg, (*tangents, None))[:7]
    cast = lambda a: None if a is None else a.astype(pr.dtype)
    tx, tw, tr, tb, tp, th0, tc0 = map(cast, (tx, tw, tr, tb, tp, th0, tc0))
    txt = _time_major(cfg, tx)
    tbias = _biases(cfg, tb, hidden)
    res = res.astype(pr.dtype)
    h2 = 2 * hidden
    per_dir = []  # scan inputs of each direction
    for d in pr.dirs:
        f = cfg.activations[d][0]
        hp = _h_prev(cfg, pr, y, d)
        # everything of the tangent that does not depend on the carried dH (dC), hoisted
        txp = tm.proc(txt, d) @ pr.wt[d] + pr.x[d] @ tw[d].T + tbias[d][0][None]
        if lstm:
            ai, ao, af, ac, cs = _split(res[d], 5)
            cp = _before(pr.c0[d], cs)
            ext = txp + hp @ tr[d].T
            per_dir.append((ext, ai, ao, af, ac, cs, cp))
        else:
            azr, ah, lin = _gru_residuals(cfg, res[d], hidden)
            if cfg.linear_before_reset:
                ext = hp @ tr[d].T + tbias[d][1][None]  # d(H·Rᵀ + Rb) without dH
            else:
                r_ = _act(f, azr, cfg.clip)[..., hidden:]
                ext = jnp.concatenate([hp @ tr[d][:h2].T, (r_ * hp) @ tr[d][h2:].T], axis=-1)
            per_dir.append((txp, ext, azr, ah, lin, hp))
    tpeep = [_split(tpd[None], 3) for tpd in tp] if pr.peep is not None else None

    def gru_dir(d, dh, txp_t, ext_t, azr, ah, lin, hp_t):
        f, g = cfg.activations[d][0], cfg.activations[d][1]
        rt = pr.rt[d]
        zr, dzr_ = _act_d(f, azr, cfg.clip)
        z, r_ = zr[:, :hidden], zr[:, hidden:]
        hh, dhh_ = _act_d(g, ah, cfg.clip)
        if cfg.linear_before_reset:
            dgh = dh @ rt + ext_t
            dzr = dzr_ * (txp_t[:, :h2] + dgh[:, :h2])
            dah = txp_t[:, h2:] + dzr[:, hidden:] * lin + r_ * dgh[:, h2:]
        else:
            dzr = dzr_ * (txp_t[:, :h2] + dh @ rt[:, :h2] + ext_t[:, :h2])
            dah = txp_t[:, h2:] + (dzr[:, hidden:] * hp_t + r_ * dh) @ rt[:, h2:] + ext_t[:, h2:]
        dhh = dhh_ * dah
        return dhh + dzr[:, :hidden] * (hp_t - hh) + z * (dh - dhh)

    def lstm_dir(d, dh, dc, ext_t, ai, ao, af, ac, c, cp_t):
        f, g, hact = cfg.activations[d]
        dai, dao, daf, dac = _split(ext_t + dh @ pr.rt[d], 4)
        if pr.peep is not None:
            (pi, po, pf), (tpi, tpo, tpf) = pr.peep[d], tpeep[d]
            dai = dai + tpi * cp_t + pi * dc
            daf = daf + tpf * cp_t + pf * dc
        i, di_ = _act_d(f, ai, cfg.clip)
        di = di_ * dai
        if cfg.input_forget:
            fg, dfg = 1 - i, -di
        else:
            fg, df_ = _act_d(f, af, cfg.clip)
            dfg = df_ * daf
        cc, dcc_ = _act_d(g, ac, cfg.clip)
        dc_new = dfg * cp_t + fg * dc + di * cc + i * dcc_ * dac
        if pr.peep is not None:
            dao = dao + tpo * c + po * dc_new
        o, do_ = _act_d(f, ao, cfg.clip)
        hc, dhc_ = _act_d(hact, c, None)
        return do_ * dao * hc + o * dhc_ * dc_new, dc_new

    def step(carry, inp):
        xs, m = inp
        new, dys = [], []
        for d in pr.dirs:
            if lstm:
                dh, dc = carry[d]
                dh_new, dc_new = lstm_dir(d, dh, dc, *xs[d])
                new.append((tm.select(dh_new, dh, m), tm.select(dc_new, dc, m)))
            else:
                dh = carry[d]
                dh_new = gru_dir(d, dh, *xs[d])
                new.append(tm.select(dh_new, dh, m))
            dys.append(tm.zero(dh_new, m))
        return tuple(new), tuple(dys)

    th0 = list(_states(cfg, th0))
    carry0 = tuple(zip(th0, _states(cfg, tc0))) if lstm else tuple(th0)
    last, dys = lax.scan(step, carry0, (tuple(per_dir), tm.mask), unroll=pr.unroll)
    outs = [_assemble_y(cfg, [tm.proc(dy, d) for d, dy in enumerate(dys)])]
    outs.append(_states(cfg, jnp.stack([s[0] for s in last] if lstm else list(last))))
    if lstm:
        outs.append(_states(cfg, jnp.stack([s[1] for s in last])))
    return tuple(o.astype(primals[0].dtype) for o in outs)


# --------------------------------------------------------------------------------------
# backward (the transpose of ``tangent``)
# --------------------------------------------------------------------------------------
def backward(cfg: RNNConfig, primals, y, res, cotangents):
    """Reverse-mode derivative: cotangents of the floating operands from those of the outputs.

    Returns:
      Cotangents of (x, w, r, b, h0) for GRU or (x, w, r, b, p, h0, c0) for LSTM.
    """
    pr = _Prepared(cfg, primals)
    tm, hidden, lstm = pr.tm, pr.hidden, cfg.cell == "lstm"
    h2 = 2 * hidden
    gy = cotangents[0].astype(pr.dtype)
    g_states = [_states(cfg, c.astype(pr.dtype)) for c in cotangents[1:]]
    res = res.astype(pr.dtype)
    per_dir, hps = [], []
    for d in pr.dirs:
        hp = _h_prev(cfg, pr, y, d)
        hps.append(hp)
        gyd = tm.proc(_y_dir(cfg, gy, d), d)
        if lstm:
            ai, ao, af, ac, cs = _split(res[d], 5)
            cp = _before(pr.c0[d], cs)
            per_dir.append((gyd, ai, ao, af, ac, cs, cp))
        else:
            per_dir.append((gyd, *_gru_residuals(cfg, res[d], hidden), hp))

    def gru_dir(d, dh, gy_t, azr, ah, lin, hp_t, m):
        f, g = cfg.activations[d][0], cfg.activations[d][1]
        r = pr.r[d]
        gh = tm.zero(gy_t, m) + dh
        zr, dzr_ = _act_d(f, azr, cfg.clip)
        z, r_ = zr[:, :hidden], zr[:, hidden:]
        hh, dhh_ = _act_d(g, ah, cfg.clip)
        dah = gh * (1 - z) * dhh_
        daz = gh * (hp_t - hh) * dzr_[:, :hidden]
        if cfg.linear_before_reset:
            dar = dah * lin * dzr_[:, hidden:]
            dgh = jnp.concatenate([daz, dar, dah * r_], axis=-1)  # d(H·Rᵀ + Rb)
            dh_prev = gh * z + dgh @ r
        else:
            drh = dah @ r[h2:]  # d(r ⊙ H)
            dar = drh * hp_t * dzr_[:, hidden:]
            dgh = None
            dh_prev = gh * z + drh * r_ + jnp.concatenate([daz, dar], -1) @ r[:h2]
        dgx = jnp.concatenate([daz, dar, dah], axis=-1)  # d(X·Wᵀ + b)
        return tm.select(dh_prev, gh, m), (tm.zero(dgx, m), None if dgh is None else tm.zero(dgh, m))

    def lstm_dir(d, dh, dc, gy_t, ai, ao, af, ac, c, cp_t, m):
        f, g, hact = cfg.activations[d]
        gh = tm.zero(gy_t, m) + dh
        i, di_ = _act_d(f, ai, cfg.clip)
        o, do_ = _act_d(f, ao, cfg.clip)
        cc, dcc_ = _act_d(g, ac, cfg.clip)
        hc, dhc_ = _act_d(hact, c, None)
        dao = gh * hc * do_
        dcell = dc + gh * o * dhc_
        if pr.peep is not None:
            pi, po, pf = pr.peep[d]
            dcell = dcell + dao * po
        di = dcell * cc
        if cfg.input_forget:
            fg = 1 - i
            di = di - dcell * cp_t
            daf = jnp.zeros_like(dao)
        else:
            fg, df_ = _act_d(f, af, cfg.clip)
            daf = dcell * cp_t * df_
        dai = di * di_
        dcp = dcell * fg
        if pr.peep is not None:
            dcp = dcp + dai * pi + daf * pf
        dg = jnp.concatenate([dai, dao, daf, dcell * i * dcc_], axis=-1)
        return (tm.select(dg @ pr.r[d], gh, m), tm.select(dcp, dc, m)), (tm.zero(dg, m), None)

    def step(carry, inp):
        xs, m = inp
        new, emits = [], []
        for d in pr.dirs:
            if lstm:
                c_new, emit = lstm_dir(d, *carry[d], *xs[d], m)
            else:
                c_new, emit = gru_dir(d, carry[d], *xs[d], m)
            new.append(c_new)
            emits.append(emit)
        return tuple(new), tuple(emits)

    carry0 = tuple(zip(*g_states)) if lstm else tuple(g_states[0])
    first, emits = lax.scan(step, carry0, (tuple(per_dir), tm.mask), reverse=True, unroll=pr.unroll)

    g_x = 0
    g_w, g_r, g_b, g_p = [], [], [], []
    for d in pr.dirs:
        dgx, dgh = emits[d]
        hp = hps[d]
        g_w.append(_wgrad(dgx, pr.x[d]))
        g_x = g_x + tm.proc(dgx @ pr.w[d], d)
        sb = _sum_ln(dgx)
        if lstm:
            g_r.append(_wgrad(dgx, hp))
            g_b.append(jnp.concatenate([sb, sb]))
            cs, cp = per_dir[d][5], per_dir[d][6]
            dai, dao, daf = dgx[..., :hidden], dgx[..., hidden:h2], dgx[..., h2 : 3 * hidden]
            g_p.append(jnp.concatenate([_sum_ln(dai * cp), _sum_ln(dao * cs), _sum_ln(daf * cp)]))
        elif cfg.linear_before_reset:
            g_r.append(_wgrad(dgh, hp))
            g_b.append(jnp.concatenate([sb, _sum_ln(dgh)]))
        else:
            r_ = _act(cfg.activations[d][0], per_dir[d][1], cfg.clip)[..., hidden:]
            g_r.append(jnp.concatenate([_wgrad(dgx[..., :h2], hp), _wgrad(dgx[..., h2:], r_ * hp)]))
            g_b.append(jnp.concatenate([sb, sb]))

    x, w0, r0, b0, p0, h00, c00, _ = _unpack(cfg, primals)
    out = [_time_major(cfg, g_x).astype(x.dtype), jnp.stack(g_w).astype(w0.dtype),
           jnp.stack(g_r).astype(r0.dtype), jnp.stack(g_b).astype(b0.dtype)]
    if lstm:
        out.append((jnp.stack(g_p) if pr.peep is not None else jnp.zeros_like(p0)).astype(p0.dtype))
        out.append(_states(cfg, jnp.stack([s[0] for s in first])).astype(h00.dtype))
        out.append(_states(cfg, jnp.stack([s[1] for s in first])).astype(c00.dtype))
    else:
        out.append(_states(cfg, jnp.stack(list(first))).astype(h00.dtype))
    return tuple(out)
