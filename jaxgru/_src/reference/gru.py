"""The ONNX GRU cell (gates z, r, h): forward, tangent and backward steps, weight gradients.

    z = f(a_z),  r = f(a_r),  a_z = X·Wzᵀ + H·Rzᵀ + Wbz + Rbz,  a_r likewise
    linear_before_reset=0:  a_h = X·Whᵀ + (r ⊙ H)·Rhᵀ + Rbh + Wbh
    linear_before_reset=1:  a_h = X·Whᵀ + r ⊙ lin + Wbh,  lin = H·Rhᵀ + Rbh
    H' = (1 − z) ⊙ g(a_h) + z ⊙ H

Residuals per step (``cells.GRU.residuals``): a_z, a_r, a_h, and ``lin`` with
linear_before_reset. The scan drivers are in scan.py; the WGSL twin is wgsl/gru.wgsl.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from jaxgru._src.cells import GRU, Operands
from jaxgru._src.options import RNNConfig
from jaxgru._src.reference.layout import Array, Orient, Prepared, Time, act, act_d, sum_ln, wgrad

SPEC = GRU


def _residuals(cfg: RNNConfig, res_d: Array, hidden: int) -> tuple[Array, Array, Array]:
    """(a_zr, a_h, lin) as [L, N, ...]; lin is zeros for lbr=0 (unused there)."""
    azr, ah = res_d[..., : 2 * hidden], res_d[..., 2 * hidden : 3 * hidden]
    lin = res_d[..., 3 * hidden :] if cfg.linear_before_reset else jnp.zeros_like(ah)
    return azr, ah, lin


# --------------------------------------------------------------------------------------
# forward
# --------------------------------------------------------------------------------------
def loop_weights(cfg: RNNConfig, o: Orient, pr: Prepared, d: int) -> tuple[Any, Array | None]:
    """What the step reads of R and its bias: R whole and Rb (lbr=1), or R's (z r, h) row blocks."""
    if cfg.linear_before_reset:
        rb = pr.bias[d][1]
        assert rb is not None  # biases() keeps Rb apart for lbr=1
        return o.weight(pr.r[d]), o.vec(rb[0])
    h2 = 2 * pr.hidden
    return (o.weight(pr.r[d][:h2]), o.weight(pr.r[d][h2:])), None


def step(cfg: RNNConfig, d: int, o: Orient, ax: list[Array], weights: tuple[Any, Array | None],
         state: tuple[Array, ...]) -> tuple[tuple[Array], tuple[Array, ...]]:
    """One step on per-gate arrays: ``ax`` is X·Wᵀ + b per gate (z, r, h).

    Returns:
      ``((H',), residuals)``.
    """
    f, g = cfg.activations[d][0], cfg.activations[d][1]
    w_r, rb = weights
    (h,) = state
    if cfg.linear_before_reset:
        assert rb is not None  # loop_weights keeps Rb apart for lbr=1
        gz, gr, lin = o.gates(o.mm(h, w_r) + rb, 3)  # H·Rᵀ + Rb, all gates
        az, ar = ax[0] + gz, ax[1] + gr
        r = act(f, ar, cfg.clip)
        ah = ax[2] + r * lin  # h~ = g(X·Whᵀ + r ⊙ (H·Rhᵀ + Rbh) + Wbh)
        res: tuple[Array, ...] = (az, ar, ah, lin)
    else:
        w_zr, w_h = w_r
        gz, gr = o.gates(o.mm(h, w_zr), 2)
        az, ar = ax[0] + gz, ax[1] + gr
        r = act(f, ar, cfg.clip)
        ah = ax[2] + o.mm(r * h, w_h)  # h~ = g(X·Whᵀ + (r ⊙ H)·Rhᵀ + b)
        res = (az, ar, ah)
    z = act(f, az, cfg.clip)
    hh = act(g, ah, cfg.clip)
    return (hh + z * (h - hh),), res  # H' = (1 − z) ⊙ h~ + z ⊙ H


# --------------------------------------------------------------------------------------
# tangent (linear in the tangents)
# --------------------------------------------------------------------------------------
def tangent_inputs(cfg: RNNConfig, pr: Prepared, d: int, res_d: Array, hp: Array, txp: Array, t: Operands,
                   tbias: list[tuple[Array, Array | None]]) -> tuple[tuple[Array, ...], None]:
    """Direction d's per-step scan inputs: everything of the tangent that does not depend on
    the carried dH, hoisted out of the loop. ``txp`` = d(X·Wᵀ + Wb) and ``hp`` the previous H."""
    hidden, h2 = pr.hidden, 2 * pr.hidden
    azr, ah, lin = _residuals(cfg, res_d, hidden)
    if cfg.linear_before_reset:
        trb = tbias[d][1]
        assert trb is not None
        ext = hp @ t.r[d].T + trb[None]  # d(H·Rᵀ + Rb) without dH
    else:
        r_ = act(cfg.activations[d][0], azr, cfg.clip)[..., hidden:]
        ext = jnp.concatenate([hp @ t.r[d][:h2].T, (r_ * hp) @ t.r[d][h2:].T], axis=-1)
    return (txp, ext, azr, ah, lin, hp), None


def tangent_step(cfg: RNNConfig, pr: Prepared, d: int, aux: None, carry: tuple[Array, ...],
                 xs: tuple[Array, ...]) -> tuple[Array]:
    """dH' from dH and one step's :func:`tangent_inputs`."""
    del aux
    f, g = cfg.activations[d][0], cfg.activations[d][1]
    hidden, h2 = pr.hidden, 2 * pr.hidden
    (dh,) = carry
    txp_t, ext_t, azr, ah, lin, hp_t = xs
    rt = pr.rt[d]
    zr, dzr_ = act_d(f, azr, cfg.clip)
    z, r_ = zr[:, :hidden], zr[:, hidden:]
    hh, dhh_ = act_d(g, ah, cfg.clip)
    if cfg.linear_before_reset:
        dgh = dh @ rt + ext_t
        dzr = dzr_ * (txp_t[:, :h2] + dgh[:, :h2])
        dah = txp_t[:, h2:] + dzr[:, hidden:] * lin + r_ * dgh[:, h2:]
    else:
        dzr = dzr_ * (txp_t[:, :h2] + dh @ rt[:, :h2] + ext_t[:, :h2])
        dah = txp_t[:, h2:] + (dzr[:, hidden:] * hp_t + r_ * dh) @ rt[:, h2:] + ext_t[:, h2:]
    dhh = dhh_ * dah
    return (dhh + dzr[:, :hidden] * (hp_t - hh) + z * (dh - dhh),)


# --------------------------------------------------------------------------------------
# backward (the transpose of the tangent)
# --------------------------------------------------------------------------------------
def backward_inputs(cfg: RNNConfig, pr: Prepared, d: int, gy_d: Array, res_d: Array, hp: Array
                    ) -> tuple[Array, ...]:
    """Direction d's per-step scan inputs of the backward (processing order)."""
    return (gy_d, *_residuals(cfg, res_d, pr.hidden), hp)


def backward_step(cfg: RNNConfig, pr: Prepared, d: int, carry: tuple[Array, ...], xs: tuple[Array, ...],
                  m: Array | None) -> tuple[tuple[Array], tuple[Array, Array | None]]:
    """One reverse step: the cotangent of the previous H, and what the weight gradients need.

    Returns:
      ``((dH_prev,), (d(X·Wᵀ + b), the h gate's d(H·Rhᵀ + Rbh) (lbr=1) or None))``, zero on
      padding steps. (With lbr=1 the z and r gates' d(H·Rᵀ + Rb) are those of d(X·Wᵀ + b).)
    """
    f, g = cfg.activations[d][0], cfg.activations[d][1]
    hidden, h2 = pr.hidden, 2 * pr.hidden
    (dh,) = carry
    gy_t, azr, ah, lin, hp_t = xs
    r = pr.r[d]
    gh = Time.zero(gy_t, m) + dh
    zr, dzr_ = act_d(f, azr, cfg.clip)
    z, r_ = zr[:, :hidden], zr[:, hidden:]
    hh, dhh_ = act_d(g, ah, cfg.clip)
    dah = gh * (1 - z) * dhh_
    daz = gh * (hp_t - hh) * dzr_[:, :hidden]
    if cfg.linear_before_reset:
        dar = dah * lin * dzr_[:, hidden:]
        dgh = dah * r_  # the h gate's d(H·Rhᵀ + Rbh)
        dh_prev = gh * z + jnp.concatenate([daz, dar, dgh], axis=-1) @ r
    else:
        drh = dah @ r[h2:]  # d(r ⊙ H)
        dar = drh * hp_t * dzr_[:, hidden:]
        dgh = None
        dh_prev = gh * z + drh * r_ + jnp.concatenate([daz, dar], -1) @ r[:h2]
    dgx = jnp.concatenate([daz, dar, dah], axis=-1)  # d(X·Wᵀ + b)
    return (Time.select(dh_prev, gh, m),), (Time.zero(dgx, m), None if dgh is None else Time.zero(dgh, m))


def weight_grads(cfg: RNNConfig, pr: Prepared, d: int, emit: tuple[Array, Array | None], xs: tuple[Array, ...],
                 hp: Array, sums: tuple[Array, Array | None] | None = None, dr: Array | None = None
                 ) -> dict[str, Array]:
    """Direction d's gradients of R and b from the backward's emissions (W's is shared: scan.py).
    ``sums``: the emissions' sums over steps and batch, ``dr``: R's gradient (lbr=1), where the
    recurrence computed them."""
    dgx, dgh = emit
    hidden, h2 = pr.hidden, 2 * pr.hidden
    sb, sh = sums if sums is not None else (sum_ln(dgx), None if dgh is None else sum_ln(dgh))
    if cfg.linear_before_reset:
        assert dgh is not None and sh is not None
        if dr is None:
            dr = jnp.concatenate([wgrad(dgx[..., :h2], hp), wgrad(dgh, hp)])
        return {"r": dr, "b": jnp.concatenate([sb, sb[:h2], sh])}
    r_ = act(cfg.activations[d][0], xs[1], cfg.clip)[..., hidden:]
    return {"r": jnp.concatenate([wgrad(dgx[..., :h2], hp), wgrad(dgx[..., h2:], r_ * hp)]),
            "b": jnp.concatenate([sb, sb])}
