"""Lowerings of the primitives: the ``lax.scan`` reference (``xla``) for every primitive, and the
host callbacks into the WGSL kernels (``wgsl``) for the forward, the tangent map and the backward,
and on the ``cpu`` platform the native FFI kernels (``cpu``, native.py) for the forward and the
recurrences of the tangent map and the backward.

The ensemble axis (``ensemble > 0``: every operand and output has a leading axis of that size)
runs the reference one member at a time under ``jax.vmap``.

Which backend the forward and the tangent emit is ``backends.lowered(cfg, for_export)``: the lowering is the
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
    kinds: list[Kind | None] = [o.kind for o in spec(cfg.cell).operands_for(cfg)]
    if tail == "tangent":
        kinds += [None, None, *kinds[:-1]]
    return kinds


def reference_forward(cfg: RNNConfig, ensemble: int, residuals: bool) -> Fn:
    """The forward reference as a function of the operands."""
    return _over_ensemble(lambda *ops: reference.forward(cfg, *ops, residuals=residuals), ensemble)


def _split_tail(cfg: RNNConfig, derivative: Fn) -> Fn:
    """``derivative(cfg, primals, y, res, tail)`` as a function of the flat operands."""
    n = len(spec(cfg.cell).operands_for(cfg))

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
    if backend in ("xla", "cpu"):  # cpu: here on another platform, or partitioned (see below)
        fn = reference_forward(cfg, ensemble, residuals)
    elif backend == "wgsl":
        from jaxgru._src.webgpu import callback  # imports wgpu: only when used

        fn = callback.make_forward(ctx, cfg, ensemble, residuals)
    else:
        raise NotImplementedError(f"jaxgru: no lowering for backend {backend!r}.")
    fn = _follow_x(cfg, ensemble, _operand_kinds(cfg, "forward"), fn)
    return mlir.lower_fun(fn, multiple_results=True)(ctx, *ops)


def _partitioned(ctx: Any) -> bool:
    """Whether the module is partitioned over several devices (jit with sharded operands, outside
    shard_map's manual axes). The native FFI call has no partitioning rule (XLA would gather its
    operands onto one device), so such calls keep the reference lowering; inside ``shard_map``
    (every mesh axis manual) each device runs the FFI call on its own shard."""
    axis_ctx = ctx.module_context.axis_context
    mesh, manual = getattr(axis_ctx, "mesh", None), getattr(axis_ctx, "manual_axes", None)
    if mesh is not None and manual is not None:  # shard_map / GSPMD with a mesh
        return mesh.size > 1 and set(manual) != set(mesh.axis_names)
    return int(getattr(axis_ctx, "num_devices", 1) or 1) > 1  # jit over several devices


def cpu_forward_lowering(ctx: Any, *ops: Any, cfg: RNNConfig, ensemble: int, residuals: bool) -> Any:
    """The forward on the ``cpu`` platform: the native FFI kernels for ``backend="cpu"``
    (native.py), otherwise the same as on every platform (:func:`forward_lowering`). A projected
    LSTM has no native kernel yet: it runs the reference."""
    if backends.lowered(cfg, for_export(ctx)) == "cpu" and not _partitioned(ctx) and not cfg.proj:
        from jaxgru._src import native

        return mlir.lower_fun(native.make_forward(cfg, ensemble, residuals), multiple_results=True)(ctx, *ops)
    return forward_lowering(ctx, *ops, cfg=cfg, ensemble=ensemble, residuals=residuals)


def cpu_backward_lowering(ctx: Any, *ops: Any, cfg: RNNConfig, ensemble: int) -> Any:
    """The backward on the ``cpu`` platform: its reverse recurrence through the native FFI kernel
    for ``backend="cpu"`` (native.make_backward), otherwise :func:`backward_lowering`."""
    if backends.lowered(cfg, for_export(ctx)) == "cpu" and not _partitioned(ctx) and not cfg.proj:
        from jaxgru._src import native

        return mlir.lower_fun(native.make_backward(cfg, ensemble), multiple_results=True)(ctx, *ops)
    return backward_lowering(ctx, *ops, cfg=cfg, ensemble=ensemble)


def cpu_tangent_lowering(ctx: Any, *ops: Any, cfg: RNNConfig, ensemble: int) -> Any:
    """The tangent map on the ``cpu`` platform: its recurrence through the native FFI kernel for
    ``backend="cpu"`` (native.make_tangent), otherwise :func:`tangent_lowering`."""
    if backends.lowered(cfg, for_export(ctx)) == "cpu" and not _partitioned(ctx) and not cfg.proj:
        from jaxgru._src import native

        return mlir.lower_fun(native.make_tangent(cfg, ensemble), multiple_results=True)(ctx, *ops)
    return tangent_lowering(ctx, *ops, cfg=cfg, ensemble=ensemble)


def tangent_lowering(ctx: Any, *ops: Any, cfg: RNNConfig, ensemble: int) -> Any:
    if backends.lowered(cfg, for_export(ctx)) == "wgsl":
        from jaxgru._src.webgpu import callback  # imports wgpu: only when used

        fn = callback.make_tangent(ctx, cfg, ensemble)
    else:
        fn = reference_tangent(cfg, ensemble)
    fn = _follow_x(cfg, ensemble, _operand_kinds(cfg, "tangent"), fn)
    return mlir.lower_fun(fn, multiple_results=True)(ctx, *ops)


def backward_lowering(ctx: Any, *ops: Any, cfg: RNNConfig, ensemble: int) -> Any:
    # the forward's backend: a wgsl forward (whose residuals are on the host already) gets the
    # wgsl backward; its residuals are uploaded, not recomputed (docs/wgsl.md says why)
    # (cpu here: a call the native lowering does not take, see cpu_backward_lowering)
    backend = backends.lowered(cfg, for_export(ctx))
    if backend in ("xla", "cpu"):
        fn = reference_backward(cfg, ensemble)
    elif backend == "wgsl":
        from jaxgru._src.webgpu import callback  # imports wgpu: only when used

        fn = callback.make_backward(ctx, cfg, ensemble)
    else:
        raise NotImplementedError(f"jaxgru: no lowering for backend {backend!r}.")
    fn = _follow_x(cfg, ensemble, _operand_kinds(cfg, "backward"), fn)
    return mlir.lower_fun(fn, multiple_results=True)(ctx, *ops)
