"""The ONNX LSTM cell (gates i, o, f, c; peepholes i, o, f): forward, tangent and backward
steps, weight gradients.

    a = X·Wᵀ + H·Rᵀ + Wb + Rb  (blocks a_i, a_o, a_f, a_c);  peepholes: a_i += Pi ⊙ C, a_f += Pf ⊙ C
    i = f(a_i),  f_t = f(a_f)  (input_forget: f_t = 1 − i),  C' = f_t ⊙ C + i ⊙ g(a_c)
    a_o += Po ⊙ C' (the output gate's peephole sees the new cell state),  H' = f(a_o) ⊙ h(C')

Residuals per step (``cells.LSTM.residuals``): a_i, a_o, a_f, a_c and C'. The scan drivers are
in scan.py; the WGSL twin is wgsl/lstm.wgsl.
"""

from __future__ import annotations

import jax.numpy as jnp

from jaxgru._src.cells import LSTM, Operands
from jaxgru._src.options import RNNConfig
from jaxgru._src.reference.layout import Array, Orient, Prepared, Time, act, act_d, before, split, sum_ln, wgrad

SPEC = LSTM
Peepholes = list[Array] | None  # (i, o, f), each broadcastable to [N, H]


# --------------------------------------------------------------------------------------
# forward
# --------------------------------------------------------------------------------------
def loop_weights(cfg: RNNConfig, o: Orient, pr: Prepared, d: int) -> tuple[Array, Peepholes]:
    """R in the layout the loop consumes, and the peepholes (or None)."""
    del cfg
    peep = None if pr.peep is None else [o.vec(v[0]) for v in pr.peep[d]]
    return o.weight(pr.r[d]), peep


def step(cfg: RNNConfig, d: int, o: Orient, ax: list[Array], weights: tuple[Array, Peepholes],
         state: tuple[Array, ...]) -> tuple[tuple[Array, Array], tuple[Array, ...]]:
    """One step on per-gate arrays: ``ax`` is X·Wᵀ + b per gate (i, o, f, c).

    Returns:
      ``((H', C'), residuals)``.
    """
    f, g, hact = cfg.activations[d]
    w_r, peep = weights
    h, c = state
    ai, ao, af, ac = (a + b for a, b in zip(ax, o.gates(o.mm(h, w_r), 4)))
    if peep is not None:
        pi, _, pf = peep
        ai = ai + pi * c
        af = af + pf * c
    i = act(f, ai, cfg.clip)
    fg = 1 - i if cfg.input_forget else act(f, af, cfg.clip)
    c_new = fg * c + i * act(g, ac, cfg.clip)  # C = f ⊙ C' + i ⊙ g(a_c)
    if peep is not None:
        ao = ao + peep[1] * c_new  # the output gate's peephole sees the new cell state
    out = act(f, ao, cfg.clip)
    h_new = out * hact(c_new)  # onnxruntime does not clip the input of h(C)
    return (h_new, c_new), (ai, ao, af, ac, c_new)


# --------------------------------------------------------------------------------------
# tangent (linear in the tangents)
# --------------------------------------------------------------------------------------
def tangent_inputs(cfg: RNNConfig, pr: Prepared, d: int, res_d: Array, hp: Array, txp: Array, t: Operands,
                   tbias: list[tuple[Array, Array | None]]) -> tuple[tuple[Array, ...], Peepholes]:
    """Direction d's per-step scan inputs (everything but the carried dH, dC, hoisted) and the
    peepholes' tangents. ``txp`` = d(X·Wᵀ + b) and ``hp`` the previous H."""
    del tbias  # LSTM folds every bias into txp
    ai, ao, af, ac, cs = split(res_d, 5)
    cp = before(pr.states[1][d], cs)
    tpeep = split(t.p[d][None], 3) if pr.peep is not None else None
    return (txp + hp @ t.r[d].T, ai, ao, af, ac, cs, cp), tpeep


def tangent_step(cfg: RNNConfig, pr: Prepared, d: int, aux: Peepholes, carry: tuple[Array, ...],
                 xs: tuple[Array, ...]) -> tuple[Array, Array]:
    """(dH', dC') from (dH, dC) and one step's :func:`tangent_inputs`."""
    f, g, hact = cfg.activations[d]
    dh, dc = carry
    ext_t, ai, ao, af, ac, c, cp_t = xs
    dai, dao, daf, dac = split(ext_t + dh @ pr.rt[d], 4)
    if pr.peep is not None:
        assert aux is not None
        (pi, _, pf), (tpi, _, tpf) = pr.peep[d], aux
        dai = dai + tpi * cp_t + pi * dc
        daf = daf + tpf * cp_t + pf * dc
    i, di_ = act_d(f, ai, cfg.clip)
    di = di_ * dai
    if cfg.input_forget:
        fg, dfg = 1 - i, -di
    else:
        fg, df_ = act_d(f, af, cfg.clip)
        dfg = df_ * daf
    cc, dcc_ = act_d(g, ac, cfg.clip)
    dc_new = dfg * cp_t + fg * dc + di * cc + i * dcc_ * dac
    if pr.peep is not None:
        assert aux is not None
        dao = dao + aux[1] * c + pr.peep[d][1] * dc_new  # the output gate's peephole sees C'
    o, do_ = act_d(f, ao, cfg.clip)
    hc, dhc_ = act_d(hact, c, None)
    return do_ * dao * hc + o * dhc_ * dc_new, dc_new


# --------------------------------------------------------------------------------------
# backward (the transpose of the tangent)
# --------------------------------------------------------------------------------------
def backward_inputs(cfg: RNNConfig, pr: Prepared, d: int, gy_d: Array, res_d: Array, hp: Array
                    ) -> tuple[Array, ...]:
    """Direction d's per-step scan inputs of the backward (processing order)."""
    del cfg, hp
    ai, ao, af, ac, cs = split(res_d, 5)
    return (gy_d, ai, ao, af, ac, cs, before(pr.states[1][d], cs))


def backward_step(cfg: RNNConfig, pr: Prepared, d: int, carry: tuple[Array, ...], xs: tuple[Array, ...],
                  m: Array | None) -> tuple[tuple[Array, Array], tuple[Array, None]]:
    """One reverse step: the cotangents of the previous (H, C), and d(X·Wᵀ + b) of the step.

    Returns:
      ``((dH_prev, dC_prev), (d(X·Wᵀ + b), None))``, zero on padding steps.
    """
    f, g, hact = cfg.activations[d]
    dh, dc = carry
    gy_t, ai, ao, af, ac, c, cp_t = xs
    gh = Time.zero(gy_t, m) + dh
    i, di_ = act_d(f, ai, cfg.clip)
    o, do_ = act_d(f, ao, cfg.clip)
    cc, dcc_ = act_d(g, ac, cfg.clip)
    hc, dhc_ = act_d(hact, c, None)
    dao = gh * hc * do_
    dcell = dc + gh * o * dhc_
    if pr.peep is not None:
        dcell = dcell + dao * pr.peep[d][1]
    di = dcell * cc
    if cfg.input_forget:
        fg = 1 - i
        di = di - dcell * cp_t
        daf = jnp.zeros_like(dao)
    else:
        fg, df_ = act_d(f, af, cfg.clip)
        daf = dcell * cp_t * df_
    dai = di * di_
    dcp = dcell * fg
    if pr.peep is not None:
        pi, _, pf = pr.peep[d]
        dcp = dcp + dai * pi + daf * pf
    dg = jnp.concatenate([dai, dao, daf, dcell * i * dcc_], axis=-1)
    return (Time.select(dg @ pr.r[d], gh, m), Time.select(dcp, dc, m)), (Time.zero(dg, m), None)


def weight_grads(cfg: RNNConfig, pr: Prepared, d: int, emit: tuple[Array, None], xs: tuple[Array, ...],
                 hp: Array) -> dict[str, Array]:
    """Direction d's gradients of R, b and (with peepholes) P (W's is shared: scan.py)."""
    del cfg
    dgx = emit[0]
    hidden, h2 = pr.hidden, 2 * pr.hidden
    sb = sum_ln(dgx)
    out = {"r": wgrad(dgx, hp), "b": jnp.concatenate([sb, sb])}
    if pr.peep is not None:
        cs, cp = xs[5], xs[6]
        dai, dao, daf = dgx[..., :hidden], dgx[..., hidden:h2], dgx[..., h2 : 3 * hidden]
        out["p"] = jnp.concatenate([sum_ln(dai * cp), sum_ln(dao * cs), sum_ln(daf * cp)])
    return out
