"""Autodiff and batching rules of the primitives.

* jvp of the forward: run the forward once with residuals, then the tangent primitive.
* transpose of the tangent primitive: the backward primitive. So ``grad`` holds exactly one
  forward and one backward primitive, and no loop.
* jvp of the tangent/backward primitives and of a forward that returns residuals (only met
  in higher-order derivatives): ``jax.jvp`` of their ``lax.scan`` references.
* vmap: a vmapped axis of data operands (x, states, lengths, Y, residuals) is folded into
  the batch axis N, so one primitive call serves the whole vmap. A vmapped weight (an
  ensemble) moves to a leading ensemble axis; the backward always uses the ensemble axis
  because its weight gradients must stay per member.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp

from jaxgru._src.compat import ad, batching, match_varying
from jaxgru._src.options import RNNConfig
from jaxgru._src.primitives import (
    CELLS,
    backward_p,
    forward_p,
    n_operands,
    reference_backward,
    reference_forward,
    reference_tangent,
    tangent_p,
)


def _instantiate(t, like):
    if type(t) is ad.Zero:
        return jnp.zeros(like.shape, like.dtype) if like is not None else ad.instantiate_zeros(t)
    return t


# --------------------------------------------------------------------------------------
# jvp
# --------------------------------------------------------------------------------------
def _forward_jvp(primals, tangents, *, cfg: RNNConfig, ensemble: int, residuals: bool):
    cell = cfg.cell
    floats = primals[:-1]
    if residuals:  # higher order only: differentiate the reference
        return _jvp_via(reference_forward(cfg, ensemble, True), forward_p[cell],
                        primals, tangents, dict(cfg=cfg, ensemble=ensemble, residuals=True))
    outs = forward_p[cell].bind(*primals, cfg=cfg, ensemble=ensemble, residuals=True)
    y, res = outs[0], outs[-1]
    tans = [_instantiate(t, p) for t, p in zip(tangents[:-1], floats)]
    args = match_varying(*primals, y, res, *tans)
    t_outs = tangent_p[cell].bind(*args, cfg=cfg, ensemble=ensemble)
    return outs[:-1], t_outs


def _jvp_via(ref_fn, prim, primals, tangents, params):
    """jvp rule through ``jax.jvp`` of the reference, for every float operand."""
    outs = prim.bind(*primals, **params)
    is_float = [jnp.issubdtype(p.dtype, jnp.floating) for p in primals]
    fl = [p for p, f in zip(primals, is_float) if f]
    tans = [_instantiate(t, p) for t, p, f in zip(tangents, primals, is_float) if f]

    def f(*floats):
        it = iter(floats)
        return ref_fn(*[next(it) if flt else p for p, flt in zip(primals, is_float)])

    _, t_outs = jax.jvp(f, tuple(fl), tuple(tans))
    return outs, list(t_outs)


def _tangent_jvp(primals, tangents, *, cfg: RNNConfig, ensemble: int):
    return _jvp_via(reference_tangent(cfg, ensemble), tangent_p[cfg.cell], primals, tangents,
                    dict(cfg=cfg, ensemble=ensemble))


def _backward_jvp(primals, tangents, *, cfg: RNNConfig, ensemble: int):
    return _jvp_via(reference_backward(cfg, ensemble), backward_p[cfg.cell], primals, tangents,
                    dict(cfg=cfg, ensemble=ensemble))


# --------------------------------------------------------------------------------------
# transpose: tangent map -> backward
# --------------------------------------------------------------------------------------
def _tangent_transpose(cts, *args, cfg: RNNConfig, ensemble: int):
    cell = cfg.cell
    n = n_operands(cell)
    primals, y, res, tans = args[:n], args[n], args[n + 1], args[n + 2 :]
    for a in (*primals, y, res):
        if ad.is_undefined_primal(a):
            raise NotImplementedError("jaxgru: the tangent map is linear in its tangents only.")
    if all(type(c) is ad.Zero for c in cts):
        return [None] * len(args)
    cts = [ad.instantiate_zeros(c) for c in cts]
    grads = backward_p[cell].bind(*match_varying(*primals, y, res, *cts), cfg=cfg, ensemble=ensemble)
    out = [None] * (n + 2)
    out += [g if ad.is_undefined_primal(t) else None for g, t in zip(grads, tans)]
    return out


# --------------------------------------------------------------------------------------
# batching
# --------------------------------------------------------------------------------------
# Axis of N (the batch) per operand kind, for layout 0 / 1; None: no batch axis (weights).
_N_AXIS = {
    "x": (1, 0), "state": (1, 0), "lens": (0, 0), "y": (2, 0), "res": (2, 2), "param": (None, None),
}


def _kinds(cell):
    fwd = ("x", "param", "param", "param", "state", "lens") if cell == "gru" else (
        "x", "param", "param", "param", "param", "state", "state", "lens")
    outs = ("y", "state") if cell == "gru" else ("y", "state", "state")
    return fwd, outs


def _signature(prim_kind, cell, residuals=False):
    fwd, outs = _kinds(cell)
    if prim_kind == "forward":
        return fwd, outs + (("res",) if residuals else ())
    if prim_kind == "tangent":
        return (*fwd, "y", "res", *fwd[:-1]), outs
    return (*fwd, "y", "res", *outs), fwd[:-1]


def _batch_rule(prim, prim_kind, axis_data, args, dims, **params):
    if all(d is None for d in dims):  # e.g. jacfwd's primal part
        outs = prim.bind(*args, **params)
        return outs, [None] * len(outs)
    cfg, e = params["cfg"], params["ensemble"]
    size = axis_data.size
    kinds_in, kinds_out = _signature(prim_kind, cfg.cell, params.get("residuals", False))
    ensemble = prim_kind == "backward" or any(
        d is not None and k == "param" for d, k in zip(dims, kinds_in)
    )
    if ensemble:
        new = []
        for a, d in zip(args, dims):
            a = jnp.broadcast_to(a, (size, *a.shape)) if d is None else jnp.moveaxis(a, d, 0)
            new.append(a.reshape((size * e, *a.shape[2:])) if e else a)
        outs = prim.bind(*new, **{**params, "ensemble": size * e if e else size})
        if e:
            outs = [o.reshape((size, e, *o.shape[1:])) for o in outs]
        return outs, [0] * len(outs)
    off = 1 if e else 0
    lay = cfg.layout
    new = []
    for a, d, k in zip(args, dims, kinds_in):
        ax = _N_AXIS[k][lay]
        if ax is None:
            new.append(a)
            continue
        ax += off
        if d is None:
            a = jnp.broadcast_to(jnp.expand_dims(a, ax), (*a.shape[:ax], size, *a.shape[ax:]))
        else:
            a = jnp.moveaxis(a, d, ax)
        new.append(a.reshape((*a.shape[:ax], size * a.shape[ax + 1], *a.shape[ax + 2 :])))
    outs = prim.bind(*new, **params)
    res, out_dims = [], []
    for o, k in zip(outs, kinds_out):
        ax = _N_AXIS[k][lay] + off
        res.append(o.reshape((*o.shape[:ax], size, o.shape[ax] // size, *o.shape[ax + 1 :])))
        out_dims.append(ax)
    return res, out_dims


# --------------------------------------------------------------------------------------
# registration
# --------------------------------------------------------------------------------------
for _c in CELLS:
    ad.primitive_jvps[forward_p[_c]] = _forward_jvp
    ad.primitive_jvps[tangent_p[_c]] = _tangent_jvp
    ad.primitive_jvps[backward_p[_c]] = _backward_jvp
    ad.primitive_transposes[tangent_p[_c]] = _tangent_transpose
    batching.fancy_primitive_batchers[forward_p[_c]] = partial(_batch_rule, forward_p[_c], "forward")
    batching.fancy_primitive_batchers[tangent_p[_c]] = partial(_batch_rule, tangent_p[_c], "tangent")
    batching.fancy_primitive_batchers[backward_p[_c]] = partial(_batch_rule, backward_p[_c], "backward")
