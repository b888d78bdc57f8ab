"""Lowerings of the primitives: the ``lax.scan`` reference (``xla``) for every primitive, and the
host callbacks into the WGSL kernels (``wgsl``) for the forward and the backward.

The ensemble axis (``ensemble > 0``: every operand and output has a leading axis of that size)
runs the reference one member at a time under ``jax.vmap``.

Which backend the forward emits is ``backends.lowered(cfg, for_export)``: the lowering is the
one place that knows whether it is for ``jax.export`` (``ctx.module_context.lowering_parameters
.for_export``), where a ``backend="auto"`` call lowers as ``xla`` and an explicit ``wgsl`` is
refused with a message (JAX's own would be "serialization of host_callbacks is not yet
implemented").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax

from jaxgru._src import backends, reference
from jaxgru._src.cells import Kind, batch_axis, spec
from jaxgru._src.compat import mlir
from jaxgru._src.options import RNNConfig

Fn = Callable[..., Any]


def _over_ensemble(fn: Fn, ensemble: int) -> Fn:
    return jax.vmap(fn) if ensemble else fn


def _follow_x(cfg: RNNConfig, ensemble: int, kinds: Sequence[Kind | None], fn: Fn) -> Fn:
    """``fn`` with its batch-carrying operands laid out along the batch like ``x`` (the first).

    The shape rules give every output ``x``'s batch sharding (shapes._out), and ``lax.scan``
    needs its carry to keep one type. Under explicit sharding an initial state that is not
    sharded like ``x`` (the zeros ``api._layer`` makes for an absent ``initial_h``, a replicated
    ``initial_h``, the zero tangent of either) would break both: it is resharded here, on the
    batch axis only. Elsewhere (no mesh, auto axes, inside ``shard_map``) avals carry no batch
    sharding and nothing changes. ``kinds[i]`` is operand i's kind, None for "leave alone".
    """
    off = 1 if ensemble else 0

    def entry(a: Any, axis: int) -> Any:
        spec_ = tuple(getattr(getattr(a, "sharding", None), "spec", None) or ())
        return spec_[axis] if axis < len(spec_) else None

    def wrapped(*ops: Any) -> Any:
        x_axis = batch_axis("x", cfg.layout)
        assert x_axis is not None
        x_sharding = getattr(jax.typeof(ops[0]), "sharding", None)
        want = entry(jax.typeof(ops[0]), x_axis + off)
        if want is None or x_sharding is None:
            return fn(*ops)
        fixed = list(ops)
        for i, (a, kind) in enumerate(zip(ops, kinds)):
            axis = None if kind is None or kind == "x" else batch_axis(kind, cfg.layout)
            aval = jax.typeof(a)
            if axis is None or entry(aval, axis + off) == want:
                continue
            target = [None] * aval.ndim
            target[axis + off] = want
            if ensemble:
                target[0] = entry(aval, 0)
            # x's mesh: an operand made without one (zeros) has an empty mesh
            fixed[i] = jax.sharding.reshard(a, x_sharding.update(spec=jax.sharding.PartitionSpec(*target)))
        return fn(*fixed)

    return wrapped


def _operand_kinds(cfg: RNNConfig, tail: str) -> list[Kind | None]:
    """Kinds of a primitive's operands: the cell's, then the tail's (``tangent``: y, res and the
    float operands' tangents; ``backward``: y, res and cotangents sharded like the outputs)."""
    kinds: list[Kind | None] = list(spec(cfg.cell).operand_kinds)
    if tail == "tangent":
        kinds += [None, None, *kinds[:-1]]
    return kinds


def reference_forward(cfg: RNNConfig, ensemble: int, residuals: bool) -> Fn:
    """The forward reference as a function of the operands."""
    return _over_ensemble(lambda *ops: reference.forward(cfg, *ops, residuals=residuals), ensemble)


def _split_tail(cfg: RNNConfig, derivative: Fn) -> Fn:
    """``derivative(cfg, primals, y, res, tail)`` as a function of the flat operands."""
    n = spec(cfg.cell).num_operands

    def fn(*args: Any) -> Any:
        return derivative(cfg, args[:n], args[n], args[n + 1], args[n + 2 :])

    return fn


def reference_tangent(cfg: RNNConfig, ensemble: int) -> Fn:
    """The tangent map's reference: (primals, y, res, tangents) -> output tangents."""
    return _over_ensemble(_split_tail(cfg, reference.tangent), ensemble)


def reference_backward(cfg: RNNConfig, ensemble: int) -> Fn:
    """The backward's reference: (primals, y, res, cotangents) -> operand cotangents."""
    return _over_ensemble(_split_tail(cfg, reference.backward), ensemble)


def for_export(ctx: Any) -> bool:
    """Whether ``ctx`` lowers a module for ``jax.export`` (False where JAX does not say)."""
    params = getattr(ctx.module_context, "lowering_parameters", None)
    return bool(getattr(params, "for_export", False))


def forward_lowering(ctx: Any, *ops: Any, cfg: RNNConfig, ensemble: int, residuals: bool) -> Any:
    backend = backends.lowered(cfg, for_export(ctx))
    if backend == "xla":
        fn = reference_forward(cfg, ensemble, residuals)
    elif backend == "wgsl":
        from jaxgru._src.webgpu import callback  # imports wgpu: only when used

        fn = callback.make_forward(ctx, cfg, ensemble, residuals)
    else:
        raise NotImplementedError(f"jaxgru: no lowering for backend {backend!r}.")
    fn = _follow_x(cfg, ensemble, _operand_kinds(cfg, "forward"), fn)
    return mlir.lower_fun(fn, multiple_results=True)(ctx, *ops)


def tangent_lowering(ctx: Any, *ops: Any, cfg: RNNConfig, ensemble: int) -> Any:
    # The tangent and backward maps run on XLA for every backend (WGSL backward: later).
    fn = _follow_x(cfg, ensemble, _operand_kinds(cfg, "tangent"), reference_tangent(cfg, ensemble))
    return mlir.lower_fun(fn, multiple_results=True)(ctx, *ops)


def backward_lowering(ctx: Any, *ops: Any, cfg: RNNConfig, ensemble: int) -> Any:
    # the forward's backend: a wgsl forward (whose residuals are on the host already) gets the
    # wgsl backward; its residuals are uploaded, not recomputed (docs/wgsl.md says why)
    backend = backends.lowered(cfg, for_export(ctx))
    if backend == "xla":
        fn = reference_backward(cfg, ensemble)
    elif backend == "wgsl":
        from jaxgru._src.webgpu import callback  # imports wgpu: only when used

        fn = callback.make_backward(ctx, cfg, ensemble)
    else:
        raise NotImplementedError(f"jaxgru: no lowering for backend {backend!r}.")
    fn = _follow_x(cfg, ensemble, _operand_kinds(cfg, "backward"), fn)
    return mlir.lower_fun(fn, multiple_results=True)(ctx, *ops)
