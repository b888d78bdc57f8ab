"""Autodiff and batching rules of a cell's three primitives (registered in primitives.py).

* jvp of the forward: run the forward once with residuals, then the tangent primitive.
* transpose of the tangent primitive: the backward primitive. So ``grad`` holds exactly one
  forward and one backward primitive, and no loop.
* jvp of the tangent/backward primitives and of a forward that returns residuals (only met
  in higher-order derivatives): ``jax.jvp`` of their ``lax.scan`` references.
* vmap: a vmapped axis of data operands (x, states, lengths, Y, residuals) is folded into
  the batch axis N, so one primitive call serves the whole vmap. A vmapped weight (an
  ensemble) moves to a leading ensemble axis; the backward always uses the ensemble axis
  because its weight gradients must stay per member.

Every rule takes the cell's :class:`Primitives` first (bound with ``functools.partial``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, Literal

import jax
import jax.numpy as jnp

from jaxgru._src import lowering
from jaxgru._src.cells import Kind, batch_axis, spec
from jaxgru._src.compat import Primitive, ad, match_varying
from jaxgru._src.options import RNNConfig

Role = Literal["forward", "tangent", "backward"]


@dataclasses.dataclass(frozen=True)
class Primitives:
    """The three primitives of one cell kind."""

    cell: str
    forward: Primitive
    tangent: Primitive
    backward: Primitive


def _instantiate(t: Any, like: Any) -> Any:
    if type(t) is ad.Zero:
        return jnp.zeros(like.shape, like.dtype) if like is not None else ad.instantiate_zeros(t)
    return t


# --------------------------------------------------------------------------------------
# jvp
# --------------------------------------------------------------------------------------
def forward_jvp(p: Primitives, primals: Sequence[Any], tangents: Sequence[Any], *, cfg: RNNConfig,
                ensemble: int, residuals: bool) -> tuple[Any, Any]:
    floats = primals[:-1]
    if residuals:  # higher order only: differentiate the reference
        return _jvp_via(lowering.reference_forward(cfg, ensemble, True), p.forward, primals, tangents,
                        dict(cfg=cfg, ensemble=ensemble, residuals=True))
    outs = p.forward.bind(*primals, cfg=cfg, ensemble=ensemble, residuals=True)
    y, res = outs[0], outs[-1]
    tans = [_instantiate(t, a) for t, a in zip(tangents[:-1], floats)]
    t_outs = p.tangent.bind(*match_varying(*primals, y, res, *tans), cfg=cfg, ensemble=ensemble)
    return outs[:-1], t_outs


def _jvp_via(ref_fn: Callable[..., Any], prim: Primitive, primals: Sequence[Any], tangents: Sequence[Any],
             params: dict[str, Any]) -> tuple[Any, list[Any]]:
    """jvp rule through ``jax.jvp`` of the reference, for every float operand."""
    outs = prim.bind(*primals, **params)
    is_float = [jnp.issubdtype(a.dtype, jnp.floating) for a in primals]
    fl = [a for a, f in zip(primals, is_float) if f]
    tans = [_instantiate(t, a) for t, a, f in zip(tangents, primals, is_float) if f]

    def f(*floats: Any) -> Any:
        it = iter(floats)
        return ref_fn(*[next(it) if flt else a for a, flt in zip(primals, is_float)])

    _, t_outs = jax.jvp(f, tuple(fl), tuple(tans))
    return outs, list(t_outs)


def tangent_jvp(p: Primitives, primals: Sequence[Any], tangents: Sequence[Any], *, cfg: RNNConfig,
                ensemble: int) -> tuple[Any, list[Any]]:
    return _jvp_via(lowering.reference_tangent(cfg, ensemble), p.tangent, primals, tangents,
                    dict(cfg=cfg, ensemble=ensemble))


def backward_jvp(p: Primitives, primals: Sequence[Any], tangents: Sequence[Any], *, cfg: RNNConfig,
                 ensemble: int) -> tuple[Any, list[Any]]:
    return _jvp_via(lowering.reference_backward(cfg, ensemble), p.backward, primals, tangents,
                    dict(cfg=cfg, ensemble=ensemble))


# --------------------------------------------------------------------------------------
# transpose: tangent map -> backward
# --------------------------------------------------------------------------------------
def tangent_transpose(p: Primitives, cts: Sequence[Any], *args: Any, cfg: RNNConfig, ensemble: int) -> list[Any]:
    n = len(spec(cfg.cell).operands_for(cfg))
    primals, y, res, tans = args[:n], args[n], args[n + 1], args[n + 2 :]
    for a in (*primals, y, res):
        if ad.is_undefined_primal(a):
            raise NotImplementedError("jaxgru: the tangent map is linear in its tangents only.")
    if all(type(c) is ad.Zero for c in cts):
        return [None] * len(args)
    cts = [ad.instantiate_zeros(c) for c in cts]
    grads = p.backward.bind(*match_varying(*primals, y, res, *cts), cfg=cfg, ensemble=ensemble)
    out: list[Any] = [None] * (n + 2)
    out += [g if ad.is_undefined_primal(t) else None for g, t in zip(grads, tans)]
    return out


# --------------------------------------------------------------------------------------
# batching
# --------------------------------------------------------------------------------------
def _signature(role: Role, cfg: RNNConfig, residuals: bool = False) -> tuple[tuple[Kind, ...], tuple[Kind, ...]]:
    """Kinds of a primitive's operands and outputs (from the cell's table)."""
    s = spec(cfg.cell)
    fwd: tuple[Kind, ...] = tuple(o.kind for o in s.operands_for(cfg))
    outs = s.outputs
    floats: tuple[Kind, ...] = tuple(k for k in fwd if k != "lens")
    extra: tuple[Kind, ...] = ("y", "res")
    if role == "forward":
        return fwd, outs + (extra[1:] if residuals else ())
    if role == "tangent":
        return (*fwd, *extra, *floats), outs
    return (*fwd, *extra, *outs), floats


def batch_rule(prim: Primitive, role: Role, axis_data: Any, args: Sequence[Any], dims: Sequence[int | None],
               **params: Any) -> tuple[Any, list[int | None]]:
    """Fold a vmapped axis into the batch axis N, or into a leading ensemble axis for weights."""
    if all(d is None for d in dims):  # e.g. jacfwd's primal part
        outs = prim.bind(*args, **params)
        return outs, [None] * len(outs)
    cfg, e = params["cfg"], params["ensemble"]
    size = axis_data.size
    kinds_in, kinds_out = _signature(role, cfg, params.get("residuals", False))
    ensemble = role == "backward" or any(d is not None and k == "param" for d, k in zip(dims, kinds_in))
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
    new = []
    for a, d, k in zip(args, dims, kinds_in):
        ax = batch_axis(k, cfg.layout)
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
        ax = batch_axis(k, cfg.layout)
        assert ax is not None  # every output has a batch axis
        ax += off
        res.append(o.reshape((*o.shape[:ax], size, o.shape[ax] // size, *o.shape[ax + 1 :])))
        out_dims.append(ax)
    return res, out_dims
