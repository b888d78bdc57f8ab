"""The JAX primitives: three per cell (forward, tangent, backward), shape rules, lowerings.

For cell in {gru, lstm}:

* ``jaxgru_<cell>``: the forward. Operands (see reference.py), static ``cfg``, ``ensemble``
  and ``residuals``; outputs ``(y, y_h[, y_c])`` and, if ``residuals``, ``res``.
* ``jaxgru_<cell>_jvp``: the tangent map, linear in its tangent operands given the primals
  and the forward's ``y``/``res``. Operands: primals, y, res, tangents of the float primals.
* ``jaxgru_<cell>_vjp``: the backward, registered as the transpose of the tangent map.
  Operands: primals, y, res, cotangents of the outputs; outputs: cotangents of the float
  primals.

``ensemble > 0`` means every operand and output has a leading axis of that size (independent
members, e.g. vmapped weights). Lowerings: the ``lax.scan`` reference (``xla``) everywhere;
the forward also has a host-callback lowering into WGSL kernels (``wgsl``, webgpu/callback.py).
"""

from __future__ import annotations

from functools import partial

import jax

from jaxgru._src import reference, shapes
from jaxgru._src.compat import Primitive, mlir, xla
from jaxgru._src.options import RNNConfig

CELLS = ("gru", "lstm")


def _make(name: str) -> Primitive:
    p = Primitive(name)
    p.multiple_results = True
    p.def_impl(partial(xla.apply_primitive, p))
    return p


forward_p = {c: _make(f"jaxgru_{c}") for c in CELLS}
tangent_p = {c: _make(f"jaxgru_{c}_jvp") for c in CELLS}
backward_p = {c: _make(f"jaxgru_{c}_vjp") for c in CELLS}

def n_operands(cell: str) -> int:
    return len(shapes.OPERAND_NAMES[cell])


# --------------------------------------------------------------------------------------
# the ensemble axis: one member at a time through the reference
# --------------------------------------------------------------------------------------
def _over_ensemble(fn, ensemble: int):
    return jax.vmap(fn) if ensemble else fn


def reference_forward(cfg: RNNConfig, ensemble: int, residuals: bool):
    return _over_ensemble(lambda *ops: reference.forward(cfg, *ops, residuals=residuals), ensemble)


def reference_tangent(cfg: RNNConfig, ensemble: int):
    n = n_operands(cfg.cell)

    def fn(*args):
        return reference.tangent(cfg, args[:n], args[n], args[n + 1], args[n + 2 :])

    return _over_ensemble(fn, ensemble)


def reference_backward(cfg: RNNConfig, ensemble: int):
    n = n_operands(cfg.cell)

    def fn(*args):
        return reference.backward(cfg, args[:n], args[n], args[n + 1], args[n + 2 :])

    return _over_ensemble(fn, ensemble)


# --------------------------------------------------------------------------------------
# shape rules (outputs built from input avals with .update: keeps shard_map's vma type)
# --------------------------------------------------------------------------------------
def _fname(cfg):
    return f"jaxgru.{cfg.cell}"


# Axis of N (the batch) in x / y / a state / residuals, for layout 0 and 1.
_N_AXIS = {"x": (1, 0), "y": (2, 0), "state": (1, 0), "res": (2, 2)}


def _out(x, cfg, ensemble, kind, shape, dtype):
    """An output aval from x's: same mesh (shard_map vma, explicit sharding) with x's batch
    sharding moved onto the output's batch axis; every other axis unsharded."""
    off = 1 if ensemble else 0
    spec = tuple(x.sharding.spec) + (None,) * (len(x.shape) - len(x.sharding.spec))
    x_n = _N_AXIS["x"][cfg.layout] + off
    if any(s is not None for i, s in enumerate(spec) if i not in (x_n, 0 if ensemble else -1)):
        raise ValueError(
            f"{_fname(cfg)}: x may be sharded along its batch axis only; got sharding {x.sharding.spec}."
        )
    out = [None] * len(shape)
    out[_N_AXIS[kind][cfg.layout] + off] = spec[x_n]
    if ensemble:
        out[0] = spec[0]
    sharding = x.sharding.update(spec=jax.sharding.PartitionSpec(*out))
    return x.update(shape=shape, dtype=dtype, weak_type=False, sharding=sharding)


def _forward_abstract(*ops, cfg: RNNConfig, ensemble: int, residuals: bool):
    out_shapes = shapes.check_operands(cfg, _fname(cfg), ops, ensemble=ensemble)
    x = ops[0]
    kinds = ("y", "state", "state")
    outs = [_out(x, cfg, ensemble, k, s, x.dtype) for k, s in zip(kinds, out_shapes)]
    if residuals:
        y = out_shapes[0]
        lead = y[:1] if ensemble else ()
        y = y[1:] if ensemble else y
        length, batch = (y[0], y[2]) if cfg.layout == 0 else (y[1], y[0])
        res = shapes.residual_shape(cfg, length, batch, y[-1])
        outs.append(_out(x, cfg, ensemble, "res", lead + res, reference.compute_dtype(x.dtype)))
    return outs


def _check_tail(cfg, ops, ensemble, tail, what):
    """Validate y, res and the tangents/cotangents that follow the primals."""
    n = n_operands(cfg.cell)
    primals = ops[:n]
    out_shapes = shapes.check_operands(cfg, _fname(cfg), primals, ensemble=ensemble)
    fwd = _forward_abstract(*primals, cfg=cfg, ensemble=ensemble, residuals=True)
    y, res = ops[n], ops[n + 1]
    for name, got, want in (("y", y, fwd[0]), ("residuals", res, fwd[-1])):
        if tuple(got.shape) != tuple(want.shape):
            raise ValueError(f"{_fname(cfg)}: {what}: {name} must have shape {want.shape}; got {got.shape}.")
    rest = ops[n + 2 :]
    if len(rest) != len(tail):
        raise TypeError(f"{_fname(cfg)}: {what} expects {len(tail)} trailing operands; got {len(rest)}.")
    for a, t in zip(rest, tail):
        if tuple(a.shape) != tuple(t.shape):
            raise ValueError(f"{_fname(cfg)}: {what}: operand must have shape {t.shape}; got {a.shape}.")
    return primals, out_shapes


def _tangent_abstract(*ops, cfg: RNNConfig, ensemble: int):
    n = n_operands(cfg.cell)
    primals = ops[:n]
    _check_tail(cfg, ops, ensemble, primals[:-1], "tangent")
    return _forward_abstract(*primals, cfg=cfg, ensemble=ensemble, residuals=False)


def _backward_abstract(*ops, cfg: RNNConfig, ensemble: int):
    n = n_operands(cfg.cell)
    primals = ops[:n]
    outs = _forward_abstract(*primals, cfg=cfg, ensemble=ensemble, residuals=False)
    _check_tail(cfg, ops, ensemble, outs, "backward")
    return [a.update(weak_type=False) for a in primals[:-1]]


for _c in CELLS:
    forward_p[_c].def_abstract_eval(_forward_abstract)
    tangent_p[_c].def_abstract_eval(_tangent_abstract)
    backward_p[_c].def_abstract_eval(_backward_abstract)


# --------------------------------------------------------------------------------------
# lowerings
# --------------------------------------------------------------------------------------
def _forward_lowering(ctx, *ops, cfg: RNNConfig, ensemble: int, residuals: bool):
    if cfg.backend == "xla":
        fn = reference_forward(cfg, ensemble, residuals)
    elif cfg.backend == "wgsl":
        from jaxgru._src.webgpu import callback  # imports wgpu: only when used

        fn = callback.make_forward(ctx, cfg, ensemble, residuals)
    else:
        raise NotImplementedError(f"jaxgru: no lowering for backend {cfg.backend!r}.")
    return mlir.lower_fun(fn, multiple_results=True)(ctx, *ops)


def _tangent_lowering(ctx, *ops, cfg: RNNConfig, ensemble: int):
    # The tangent and backward maps run on XLA for every backend (WGSL backward: later).
    return mlir.lower_fun(reference_tangent(cfg, ensemble), multiple_results=True)(ctx, *ops)


def _backward_lowering(ctx, *ops, cfg: RNNConfig, ensemble: int):
    return mlir.lower_fun(reference_backward(cfg, ensemble), multiple_results=True)(ctx, *ops)


for _c in CELLS:
    mlir.register_lowering(forward_p[_c], _forward_lowering)
    mlir.register_lowering(tangent_p[_c], _tangent_lowering)
    mlir.register_lowering(backward_p[_c], _backward_lowering)
