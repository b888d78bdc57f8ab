"""The ``lax.scan`` ground truth: forward, tangent (jvp) and backward (vjp) of GRU and LSTM.

These are the ``xla`` lowerings of the primitives, written for one ensemble member with
every operand present (absent ones are zeros, see ``api.py``):

    GRU:  x, w, r, b, h0, lens          LSTM: x, w, r, b, p, h0, c0, lens

``x``, ``h0``, ``c0`` and the outputs are in the user's layout (ONNX ``layout`` 0 or 1).
Inside, every direction runs in *processing order*: step t of the reverse direction reads
x[len-1-t] of its sequence, so all directions share one loop (state ``[D, N, H]``, one
batched recurrent matmul per step) and one mask (t < len).

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
    del batch, hidden
    return max(1, min(length, 8))


# --------------------------------------------------------------------------------------
# small pieces
# --------------------------------------------------------------------------------------
def _clipped(a, clip):
    return a if clip is None else jnp.clip(a, -clip, clip)


def _apply(acts, a, clip, axis=0):
    """Activation of each direction (acts[d]) on ``a``, whose direction axis is ``axis``."""
    if all(act == acts[0] for act in acts):
        return acts[0](_clipped(a, clip))
    parts = [act(_clipped(jnp.take(a, d, axis=axis), clip)) for d, act in enumerate(acts)]
    return jnp.stack(parts, axis=axis)


def _apply_d(acts, a, clip, axis=0):
    """``_apply`` and its derivative with respect to ``a`` (0 where the clip is active)."""
    return jax.jvp(lambda v: _apply(acts, v, clip, axis), (a,), (jnp.ones_like(a),))


def _kth(cfg, k):
    """The k-th activation (f, g or h) of every direction."""
    return tuple(acts[k] for acts in cfg.activations)


def _mm(a, b):
    """Per-direction matmul: a [D, N, K] @ b [D, K, M] -> [D, N, M]."""
    return jnp.einsum("dnk,dkm->dnm", a, b)


def _proj(a, w):
    """Per-direction projection of a sequence: a [L, D, N, K] @ w[d]ᵀ (w [D, M, K])."""
    return jnp.einsum("ldnk,dmk->ldnm", a, w)


class _Time:
    """Conversions between time order and each direction's processing order, and the mask."""

    def __init__(self, cfg: RNNConfig, lens, length: int):
        self.cfg, self.length = cfg, length
        self.mask = self.idx = None
        if cfg.ragged:
            lens = jnp.clip(lens.astype(jnp.int32), 0, length)
            t = jnp.arange(length, dtype=jnp.int32)[:, None]
            valid = t < lens[None, :]
            self.mask = valid[:, None, :, None]  # [L, 1, N, 1]: broadcasts over D and H
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

    def stack(self, a):
        """``a [L, N, ...]`` (time order) -> ``[L, D, N, ...]`` in each direction's order."""
        return jnp.stack([self.proc(a, d) for d in range(self.cfg.num_directions)], axis=1)

    def unstack(self, a):
        """``a [L, D, N, ...]``: swap each direction between processing and time order."""
        if not any(self.cfg.reversed_dirs):
            return a
        return jnp.stack([self.proc(a[:, d], d) for d in range(a.shape[1])], axis=1)

    def select(self, new, old, m):
        return new if m is None else jnp.where(m, new, old)

    def zero(self, v, m):
        return v if m is None else jnp.where(m, v, jnp.zeros_like(v))


def _to_user_y(cfg, y):
    """``[L, D, N, H]`` -> Y in the user layout."""
    return y if cfg.layout == 0 else jnp.transpose(y, (2, 0, 1, 3))


def _from_user_y(cfg, y):
    return y if cfg.layout == 0 else jnp.transpose(y, (1, 2, 0, 3))


def _states(cfg, s):
    """A state in the user layout <-> ``[D, N, H]`` (the same swap both ways)."""
    return s if cfg.layout == 0 else jnp.swapaxes(s, 0, 1)


def _time_major(cfg, a):
    return a if cfg.layout == 0 else jnp.swapaxes(a, 0, 1)


def _split(a, k):
    return jnp.split(a, k, axis=-1)


def _unpack(cfg, operands):
    if cfg.cell == "gru":
        x, w, r, b, h0, lens = operands
        p = c0 = None
    else:
        x, w, r, b, p, h0, c0, lens = operands
    return x, w, r, b, p, h0, c0, lens


class _Prepared:
    """Operands cast to the compute dtype, in per-direction, time-major form."""

    def __init__(self, cfg: RNNConfig, operands):
        x, w, r, b, p, h0, c0, lens = _unpack(cfg, operands)
        self.dtype = cdt = compute_dtype(x.dtype)
        cast = lambda a: None if a is None else a.astype(cdt)
        x, self.w, self.r, b, p, h0, c0 = map(cast, (x, w, r, b, p, h0, c0))
        xt = _time_major(cfg, x)
        self.length, self.batch = xt.shape[0], xt.shape[1]
        self.hidden = hidden = self.r.shape[-1]
        self.tm = _Time(cfg, lens, self.length)
        self.xd = self.tm.stack(xt)  # [L, D, N, I]
        self.h0 = _states(cfg, h0)
        self.c0 = None if c0 is None else _states(cfg, c0)
        self.xb, self.rb = _biases(cfg, b, hidden)
        # peepholes i, o, f as [D, 1, H] each
        self.peep = None if (p is None or not cfg.peepholes) else _split(p[:, None, :], 3)
        self.unroll = unroll_for(self.length, self.batch, hidden)


def _biases(cfg, b, hidden):
    """(bias folded into the input projection [D,1,G], bias added to H·Rᵀ [D,1,G] or None)."""
    g = cfg.num_gates * hidden
    wb, rb = b[:, None, :g], b[:, None, g:]
    if cfg.cell == "gru" and cfg.linear_before_reset:
        return wb, rb  # Rb stays with H·Rᵀ: the h-gate needs r ⊙ (H·Rhᵀ + Rbh)
    return wb + rb, None


# --------------------------------------------------------------------------------------
# cell steps (all directions, one time step)
# --------------------------------------------------------------------------------------
def _gru_step(cfg, rt, rb, xp_t, h):
    f, g = _kth(cfg, 0), _kth(cfg, 1)
    hidden = h.shape[-1]
    if cfg.linear_before_reset:
        gh = _mm(h, rt) + rb  # H·Rᵀ + Rb, all gates
        azr = xp_t[..., : 2 * hidden] + gh[..., : 2 * hidden]
        lin = gh[..., 2 * hidden :]
        z, r = jnp.split(_apply(f, azr, cfg.clip), 2, axis=-1)
        ah = xp_t[..., 2 * hidden :] + r * lin  # h~ = g(X·Whᵀ + r ⊙ (H·Rhᵀ + Rbh) + Wbh)
        res = (azr, ah, lin)
    else:
        azr = xp_t[..., : 2 * hidden] + _mm(h, rt[..., : 2 * hidden])
        z, r = jnp.split(_apply(f, azr, cfg.clip), 2, axis=-1)
        ah = xp_t[..., 2 * hidden :] + _mm(r * h, rt[..., 2 * hidden :])  # (r ⊙ H)·Rhᵀ
        res = (azr, ah)
    hh = _apply(g, ah, cfg.clip)
    h_new = hh + z * (h - hh)  # H' = (1 − z) ⊙ h~ + z ⊙ H
    return h_new, res


def _lstm_step(cfg, rt, peep, xp_t, h, c):
    f, g, hact = _kth(cfg, 0), _kth(cfg, 1), _kth(cfg, 2)
    ai, ao, af, ac = _split(xp_t + _mm(h, rt), 4)
    if peep is not None:
        ai = ai + peep[0] * c
        af = af + peep[2] * c
    i = _apply(f, ai, cfg.clip)
    fg = 1 - i if cfg.input_forget else _apply(f, af, cfg.clip)
    c_new = fg * c + i * _apply(g, ac, cfg.clip)  # C = f ⊙ C' + i ⊙ g(a_c)
    if peep is not None:
        ao = ao + peep[1] * c_new  # the output gate's peephole sees the new cell state
    o = _apply(f, ao, cfg.clip)
    h_new = o * _apply(hact, c_new, None)  # onnxruntime does not clip the input of h(C)
    return h_new, c_new, (ai, ao, af, ac, c_new)


# --------------------------------------------------------------------------------------
# forward
# --------------------------------------------------------------------------------------
def forward(cfg: RNNConfig, *operands, residuals: bool = False):
    """ONNX GRU/LSTM forward. Returns (y, y_h[, y_c]) and, if ``residuals``, res last."""
    pr = _Prepared(cfg, operands)
    tm = pr.tm
    xp = _proj(pr.xd, pr.w) + pr.xb[None]  # input projection of all steps: one GEMM
    rt = jnp.swapaxes(pr.r, 1, 2)  # [D, H, G]: the layout the loop body consumes
    keep = (lambda res: jnp.concatenate(res, axis=-1)) if residuals else (lambda res: None)

    if cfg.cell == "gru":

        def step(h, inp):
            xp_t, m = inp
            h_new, res = _gru_step(cfg, rt, pr.rb, xp_t, h)
            return tm.select(h_new, h, m), (tm.zero(h_new, m), keep(res))

        carry0 = pr.h0
    else:

        def step(hc, inp):
            (h, c), (xp_t, m) = hc, inp
            h_new, c_new, res = _lstm_step(cfg, rt, pr.peep, xp_t, h, c)
            carry = (tm.select(h_new, h, m), tm.select(c_new, c, m))
            return carry, (tm.zero(h_new, m), keep(res))

        carry0 = (pr.h0, pr.c0)
    last, (ys, res) = lax.scan(step, carry0, (xp, tm.mask), unroll=pr.unroll)
    out_dtype = operands[0].dtype
    y = _to_user_y(cfg, tm.unstack(ys))
    states = (last,) if cfg.cell == "gru" else last
    outs = [y] + [_states(cfg, s) for s in states]
    outs = [o.astype(out_dtype) for o in outs]
    if residuals:
        outs.append(jnp.swapaxes(res, 0, 1))  # [D, L, N, K]
    return tuple(outs)


def _h_prev(cfg, pr, y):
    """Hidden state before each step, processing order ``[L, D, N, H]``."""
    hs = pr.tm.unstack(_from_user_y(cfg, y.astype(pr.dtype)))
    return jnp.concatenate([pr.h0[None], hs[:-1]], axis=0)


def _gru_residuals(cfg, res, hidden):
    """(a_zr, a_h, lin) as [L, D, N, ...]; lin is None for lbr=0."""
    res = jnp.swapaxes(res, 0, 1)
    azr, ah = res[..., : 2 * hidden], res[..., 2 * hidden : 3 * hidden]
    lin = res[..., 3 * hidden :] if cfg.linear_before_reset else None
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
    tm, hidden = pr.tm, pr.hidden
    tx, tw, tr, tb, tp, th0, tc0 = _unpack(cfg, (*tangents, None))[:7]
    cast = lambda a: None if a is None else a.astype(pr.dtype)
    tx, tw, tr, tb, tp, th0, tc0 = map(cast, (tx, tw, tr, tb, tp, th0, tc0))
    txd = tm.stack(_time_major(cfg, tx))
    txb, trb = _biases(cfg, tb, hidden)
    txp = _proj(txd, pr.w) + _proj(pr.xd, tw) + txb[None]  # tangent of the input projection
    hp = _h_prev(cfg, pr, y)
    rt = jnp.swapaxes(pr.r, 1, 2)
    res = res.astype(pr.dtype)
    f = _kth(cfg, 0)

    if cfg.cell == "gru":
        g = _kth(cfg, 1)
        azr, ah, lin = _gru_residuals(cfg, res, hidden)
        if cfg.linear_before_reset:
            ext = _proj(hp, tr) + trb[None]  # the part of d(H·Rᵀ + Rb) not involving dH
        else:
            r_ = _split(_apply(f, azr, cfg.clip, axis=1), 2)[1]
            ext = jnp.concatenate(
                [_proj(hp, tr[:, : 2 * hidden]), _proj(r_ * hp, tr[:, 2 * hidden :])], axis=-1
            )

        def step(dh, inp):
            txp_t, ext_t, azr, ah, lin, hp_t, m = inp
            zr, dzr_ = _apply_d(f, azr, cfg.clip)
            z, r_ = _split(zr, 2)
            hh, dhh_ = _apply_d(g, ah, cfg.clip)
            if cfg.linear_before_reset:
                dgh = _mm(dh, rt) + ext_t
                dzr = dzr_ * (txp_t[..., : 2 * hidden] + dgh[..., : 2 * hidden])
                dr = dzr[..., hidden:]
                dah = txp_t[..., 2 * hidden :] + dr * lin + r_ * dgh[..., 2 * hidden :]
            else:
                dzr = dzr_ * (txp_t[..., : 2 * hidden] + _mm(dh, rt[..., : 2 * hidden])
                              + ext_t[..., : 2 * hidden])
                dr = dzr[..., hidden:]
                dah = (txp_t[..., 2 * hidden :] + _mm(dr * hp_t + r_ * dh, rt[..., 2 * hidden :])
                       + ext_t[..., 2 * hidden :])
            dz = dzr[..., :hidden]
            dhh = dhh_ * dah
            dh_new = dhh + dz * (hp_t - hh) + z * (dh - dhh)
            return tm.select(dh_new, dh, m), tm.zero(dh_new, m)

        lin_xs = lin if lin is not None else jnp.zeros_like(ah)
        last, dys = lax.scan(step, _states(cfg, th0), (txp, ext, azr, ah, lin_xs, hp, tm.mask),
                             unroll=pr.unroll)
        d_states = (last,)
    else:
        g, hact = _kth(cfg, 1), _kth(cfg, 2)
        res = jnp.swapaxes(res, 0, 1)
        ai, ao, af, ac, cs = _split(res, 5)
        cp = jnp.concatenate([pr.c0[None], cs[:-1]], axis=0)
        ext = _proj(hp, tr)
        peep = pr.peep
        tpeep = _split(tp[:, None, :], 3) if peep is not None else None

        def step(carry, inp):
            dh, dc = carry
            txp_t, ext_t, ai, ao, af, ac, c, cp_t, m = inp
            dai, dao, daf, dac = _split(txp_t + ext_t + _mm(dh, rt), 4)
            if peep is not None:
                dai = dai + tpeep[0] * cp_t + peep[0] * dc
                daf = daf + tpeep[2] * cp_t + peep[2] * dc
            i, di_ = _apply_d(f, ai, cfg.clip)
            di = di_ * dai
            if cfg.input_forget:
                fg, dfg = 1 - i, -di
            else:
                fg, df_ = _apply_d(f, af, cfg.clip)
                dfg = df_ * daf
            cc, dcc_ = _apply_d(g, ac, cfg.clip)
            dc_new = dfg * cp_t + fg * dc + di * cc + i * dcc_ * dac
            if peep is not None:
                dao = dao + tpeep[1] * c + peep[1] * dc_new
            o, do_ = _apply_d(f, ao, cfg.clip)
            hc, dhc_ = _apply_d(hact, c, None)
            dh_new = do_ * dao * hc + o * dhc_ * dc_new
            new = (tm.select(dh_new, dh, m), tm.select(dc_new, dc, m))
            return new, tm.zero(dh_new, m)

        carry0 = (_states(cfg, th0), _states(cfg, tc0))
        d_states, dys = lax.scan(step, carry0, (txp, ext, ai, ao, af, ac, cs, cp, tm.mask),
                                 unroll=pr.unroll)
    out_dtype = primals[0].dtype
    outs = [_to_user_y(cfg, tm.unstack(dys))] + [_states(cfg, s) for s in d_states]
    return tuple(o.astype(out_dtype) for o in outs)


# --------------------------------------------------------------------------------------
# backward (the transpose of ``tangent``)
# --------------------------------------------------------------------------------------
def backward(cfg: RNNConfig, primals, y, res, cotangents):
    """Reverse-mode derivative: cotangents of the floating operands from those of the outputs.

    Returns:
      Cotangents of (x, w, r, b, h0) for GRU or (x, w, r, b, p, h0, c0) for LSTM.
    """
    pr = _Prepared(cfg, primals)
    tm, hidden = pr.tm, pr.hidden
    gy = tm.unstack(_from_user_y(cfg, cotangents[0].astype(pr.dtype)))  # processing order
    g_states = [_states(cfg, c.astype(pr.dtype)) for c in cotangents[1:]]
    hp = _h_prev(cfg, pr, y)
    r = pr.r
    res = res.astype(pr.dtype)
    f = _kth(cfg, 0)
    sum_ln = lambda a: a.sum((0, 2))  # over steps and batch -> [D, ...]

    if cfg.cell == "gru":
        g = _kth(cfg, 1)
        azr, ah, lin = _gru_residuals(cfg, res, hidden)

        def step(dh, inp):
            gy_t, azr, ah, lin, hp_t, m = inp
            gh = tm.zero(gy_t, m) + dh
            zr, dzr_ = _apply_d(f, azr, cfg.clip)
            z, r_ = _split(zr, 2)
            dz_, dr_ = _split(dzr_, 2)
            hh, dhh_ = _apply_d(g, ah, cfg.clip)
            dah = gh * (1 - z) * dhh_
            daz = gh * (hp_t - hh) * dz_
            if cfg.linear_before_reset:
                dar = dah * lin * dr_
                dgh = jnp.concatenate([daz, dar, dah * r_], axis=-1)  # d(H·Rᵀ + Rb)
                dh_prev = gh * z + _mm(dgh, r)
            else:
                drh = _mm(dah, r[:, 2 * hidden :])  # d(r ⊙ H)
                dar = drh * hp_t * dr_
                dgh = None
                dh_prev = gh * z + drh * r_ + _mm(jnp.concatenate([daz, dar], -1), r[:, : 2 * hidden])
            dgx = jnp.concatenate([daz, dar, dah], axis=-1)  # d(input projection)
            emit = (tm.zero(dgx, m), None if dgh is None else tm.zero(dgh, m))
            return tm.select(dh_prev, gh, m), emit

        lin_xs = lin if lin is not None else jnp.zeros_like(ah)
        dh0, (dgx, dgh) = lax.scan(step, g_states[0], (gy, azr, ah, lin_xs, hp, tm.mask),
                                   reverse=True, unroll=pr.unroll)
        if cfg.linear_before_reset:
            g_r = jnp.einsum("ldng,ldnh->dgh", dgh, hp)
            g_b = jnp.concatenate([sum_ln(dgx), sum_ln(dgh)], axis=-1)
        else:
            r_ = _split(_apply(f, azr, cfg.clip, axis=1), 2)[1]
            g_r = jnp.concatenate([
                jnp.einsum("ldng,ldnh->dgh", dgx[..., : 2 * hidden], hp),
                jnp.einsum("ldng,ldnh->dgh", dgx[..., 2 * hidden :], r_ * hp),
            ], axis=1)
            sb = sum_ln(dgx)
            g_b = jnp.concatenate([sb, sb], axis=-1)
        grads_state = (dh0,)
        g_p = None
    else:
        g, hact = _kth(cfg, 1), _kth(cfg, 2)
        ai, ao, af, ac, cs = _split(jnp.swapaxes(res, 0, 1), 5)
        cp = jnp.concatenate([pr.c0[None], cs[:-1]], axis=0)
        peep = pr.peep

        def step(carry, inp):
            dh, dc = carry
            gy_t, ai, ao, af, ac, c, cp_t, m = inp
            gh = tm.zero(gy_t, m) + dh
            i, di_ = _apply_d(f, ai, cfg.clip)
            o, do_ = _apply_d(f, ao, cfg.clip)
            cc, dcc_ = _apply_d(g, ac, cfg.clip)
            hc, dhc_ = _apply_d(hact, c, None)
            dao = gh * hc * do_
            dcell = dc + gh * o * dhc_
            if peep is not None:
                dcell = dcell + dao * peep[1]
            di = dcell * cc
            if cfg.input_forget:
                fg = 1 - i
                di = di - dcell * cp_t
                daf = jnp.zeros_like(dao)
            else:
                fg, df_ = _apply_d(f, af, cfg.clip)
                daf = dcell * cp_t * df_
            dai = di * di_
            dac = dcell * i * dcc_
            dcp = dcell * fg
            if peep is not None:
                dcp = dcp + dai * peep[0] + daf * peep[2]
            dg = jnp.concatenate([dai, dao, daf, dac], axis=-1)
            new = (tm.select(_mm(dg, r), gh, m), tm.select(dcp, dc, m))
            return new, (tm.zero(dg, m), None)

        (dh0, dc0), (dgx, _) = lax.scan(step, tuple(g_states), (gy, ai, ao, af, ac, cs, cp, tm.mask),
                                        reverse=True, unroll=pr.unroll)
        g_r = jnp.einsum("ldng,ldnh->dgh", dgx, hp)
        sb = sum_ln(dgx)
        g_b = jnp.concatenate([sb, sb], axis=-1)
        dai, dao, daf = dgx[..., :hidden], dgx[..., hidden : 2 * hidden], dgx[..., 2 * hidden : 3 * hidden]
        g_p = jnp.concatenate([sum_ln(dai * cp), sum_ln(dao * cs), sum_ln(daf * cp)], axis=-1)
        grads_state = (dh0, dc0)
    g_w = jnp.einsum("ldng,ldni->dgi", dgx, pr.xd)
    gxd = tm.unstack(jnp.einsum("ldng,dgi->ldni", dgx, pr.w))
    g_x = _time_major(cfg, gxd.sum(1))

    x, w0, r0, b0, p0, h00, c00, _ = _unpack(cfg, primals)
    out = [g_x.astype(x.dtype), g_w.astype(w0.dtype), g_r.astype(r0.dtype), g_b.astype(b0.dtype)]
    if cfg.cell == "lstm":
        out.append((g_p if cfg.peepholes else jnp.zeros_like(p0)).astype(p0.dtype))
    out += [_states(cfg, s).astype(a.dtype) for s, a in zip(grads_state, (h00, c00))]
    return tuple(out)
