"""The ONNX LSTM cell (gates i, o, f, c; peepholes i, o, f): forward, tangent and backward
steps, weight gradients.

    a = X·Wᵀ + H·Rᵀ + Wb + Rb  (blocks a_i, a_o, a_f, a_c);  peepholes: a_i += Pi ⊙ C, a_f += Pf ⊙ C
    i = f(a_i),  f_t = f(a_f)  (input_forget: f_t = 1 − i),  C' = f_t ⊙ C + i ⊙ g(a_c)
    a_o += Po ⊙ C' (the output gate's peephole sees the new cell state),  H' = f(a_o) ⊙ h(C')
    projection (``cfg.proj``, PyTorch's proj_size): M = f(a_o) ⊙ h(C'), H' = M·projᵀ (P features)

Residuals per step (``cells.LSTM.residuals``): a_i, a_o, a_f, a_c and C' (M is recomputed from
a_o and C'). The scan drivers are in scan.py; the WGSL twin is wgsl/lstm.wgsl.
"""

from __future__ import annotations

import jax.numpy as jnp

from jaxgru._src.cells import LSTM, Operands
from jaxgru._src.options import RNNConfig
from jaxgru._src.reference.layout import Array, Orient, Prepared, Time, act, act_d, before, split, sum_ln, wgrad

SPEC = LSTM
Peepholes = list[Array] | None  # (i, o, f), each broadcastable to [N, H]
# The tangents of the peepholes and of the projection ([P, H]) of one direction, or None.
Aux = tuple[Peepholes, Array | None]


# --------------------------------------------------------------------------------------
# forward
# --------------------------------------------------------------------------------------
def loop_weights(cfg: RNNConfig, o: Orient, pr: Prepared, d: int) -> tuple[Array, Peepholes, Array | None]:
    """R in the layout the loop consumes, the peepholes (or None) and the projection (or None)."""
    del cfg
    peep = None if pr.peep is None else [o.vec(v[0]) for v in pr.peep[d]]
    return o.weight(pr.r[d]), peep, None if pr.proj is None else o.weight(pr.proj[d])


def step(cfg: RNNConfig, d: int, o: Orient, ax: list[Array], weights: tuple[Array, Peepholes, Array | None],
         state: tuple[Array, ...]) -> tuple[tuple[Array, Array], tuple[Array, ...]]:
    """One step on per-gate arrays: ``ax`` is X·Wᵀ + b per gate (i, o, f, c).

    Returns:
      ``((H', C'), residuals)``.
    """
    f, g, hact = cfg.activations[d]
    w_r, peep, w_p = weights
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
    if w_p is not None:
        h_new = o.mm(h_new, w_p)  # the projection: H' = M·projᵀ
    return (h_new, c_new), (ai, ao, af, ac, c_new)


# --------------------------------------------------------------------------------------
# tangent (linear in the tangents)
# --------------------------------------------------------------------------------------
def tangent_inputs(cfg: RNNConfig, pr: Prepared, d: int, res_d: Array, hp: Array, txp: Array, t: Operands,
                   tbias: list[tuple[Array, Array | None]]) -> tuple[tuple[Array, ...], Aux]:
    """Direction d's per-step scan inputs (everything but the carried dH, dC, hoisted) and the
    tangents of the peepholes and the projection. ``txp`` = d(X·Wᵀ + b) and ``hp`` the previous H."""
    del tbias  # LSTM folds every bias into txp
    ai, ao, af, ac, cs = split(res_d, 5)
    cp = before(pr.states[1][d], cs)
    tpeep = split(t.p[d][None], 3) if pr.peep is not None else None
    tproj = t.proj[d] if pr.proj is not None else None
    return (txp + hp @ t.r[d].T, ai, ao, af, ac, cs, cp), (tpeep, tproj)


def tangent_step(cfg: RNNConfig, pr: Prepared, d: int, aux: Aux, carry: tuple[Array, ...],
                 xs: tuple[Array, ...]) -> tuple[Array, Array]:
    """(dH', dC') from (dH, dC) and one step's :func:`tangent_inputs`."""
    f, g, hact = cfg.activations[d]
    dh, dc = carry
    ext_t, ai, ao, af, ac, c, cp_t = xs
    tpeep, tproj = aux
    dai, dao, daf, dac = split(ext_t + dh @ pr.rt[d], 4)
    if pr.peep is not None:
        assert tpeep is not None
        (pi, _, pf), (tpi, _, tpf) = pr.peep[d], tpeep
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
        assert tpeep is not None
        dao = dao + tpeep[1] * c + pr.peep[d][1] * dc_new  # the output gate's peephole sees C'
    o, do_ = act_d(f, ao, cfg.clip)
    hc, dhc_ = act_d(hact, c, None)
    dm = do_ * dao * hc + o * dhc_ * dc_new
    if pr.proj is not None:  # H' = M·projᵀ: dH' = dM·projᵀ + M·dprojᵀ
        assert tproj is not None
        dm = dm @ pr.proj[d].T + (o * hc) @ tproj.T
    return dm, dc_new


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
                  m: Array | None) -> tuple[tuple[Array, Array], tuple[Array, Array | None]]:
    """One reverse step: the cotangents of the previous (H, C), d(X·Wᵀ + b) of the step and,
    with a projection, the cotangent of H' (for proj's gradient).

    Returns:
      ``((dH_prev, dC_prev), (d(X·Wᵀ + b), dH' or None))``, zero on padding steps.
    """
    f, g, hact = cfg.activations[d]
    dh, dc = carry
    gy_t, ai, ao, af, ac, c, cp_t = xs
    gh = Time.zero(gy_t, m) + dh
    i, di_ = act_d(f, ai, cfg.clip)
    o, do_ = act_d(f, ao, cfg.clip)
    cc, dcc_ = act_d(g, ac, cfg.clip)
    hc, dhc_ = act_d(hact, c, None)
    gm = gh if pr.proj is None else gh @ pr.proj[d]  # the cotangent of M = o ⊙ h(C')
    dao = gm * hc * do_
    dcell = dc + gm * o * dhc_
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
    g_out = None if pr.proj is None else Time.zero(gh, m)
    return (Time.select(dg @ pr.r[d], gh, m), Time.select(dcp, dc, m)), (Time.zero(dg, m), g_out)


def weight_grads(cfg: RNNConfig, pr: Prepared, d: int, emit: tuple[Array, Array | None], xs: tuple[Array, ...],
                 hp: Array, sums: tuple[Array, None] | None = None, dr: Array | None = None) -> dict[str, Array]:
    """Direction d's gradients of R, b and (with peepholes) P, (with a projection) proj
    (W's is shared: scan.py). ``sums``: dG's sum over steps and batch, ``dr``: R's gradient,
    where the recurrence computed them."""
    dgx = emit[0]
    hidden, h2 = pr.hidden, 2 * pr.hidden
    sb = sum_ln(dgx) if sums is None else sums[0]
    out = {"r": wgrad(dgx, hp) if dr is None else dr, "b": jnp.concatenate([sb, sb])}
    if pr.peep is not None:
        cs, cp = xs[5], xs[6]
        dai, dao, daf = dgx[..., :hidden], dgx[..., hidden:h2], dgx[..., h2 : 3 * hidden]
        out["p"] = jnp.concatenate([sum_ln(dai * cp), sum_ln(dao * cs), sum_ln(daf * cp)])
    if pr.proj is not None:  # dproj = Σ dH'ᵀ·M, M = f(a_o) ⊙ h(C') recomputed from the residuals
        f, _, hact = cfg.activations[d]
        assert emit[1] is not None
        out["proj"] = wgrad(emit[1], act(f, xs[2], cfg.clip) * hact(xs[5]))
    return out
