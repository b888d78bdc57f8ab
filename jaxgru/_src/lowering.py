"""Lowerings of the primitives: the ``lax.scan`` reference (``xla``) for every primitive, and the
host callback into the WGSL kernels (``wgsl``) for the forward.

The ensemble axis (``ensemble > 0``: every operand and output has a leading axis of that size)
runs the reference one member at a time under ``jax.vmap``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax

from jaxgru._src import reference
from jaxgru._src.cells import spec
from jaxgru._src.compat import mlir
from jaxgru._src.options import RNNConfig

Fn = Callable[..., Any]


def _over_ensemble(fn: Fn, ensemble: int) -> Fn:
    return jax.vmap(fn) if ensemble else fn


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


def forward_lowering(ctx: Any, *ops: Any, cfg: RNNConfig, ensemble: int, residuals: bool) -> Any:
    if cfg.backend == "xla":
        fn = reference_forward(cfg, ensemble, residuals)
    elif cfg.backend == "wgsl":
        from jaxgru._src.webgpu import callback  # imports wgpu: only when used

        fn = callback.make_forward(ctx, cfg, ensemble, residuals)
    else:
        raise NotImplementedError(f"jaxgru: no lowering for backend {cfg.backend!r}.")
    return mlir.lower_fun(fn, multiple_results=True)(ctx, *ops)


def tangent_lowering(ctx: Any, *ops: Any, cfg: RNNConfig, ensemble: int) -> Any:
    # The tangent and backward maps run on XLA for every backend (WGSL backward: later).
    return mlir.lower_fun(reference_tangent(cfg, ensemble), multiple_results=True)(ctx, *ops)


def backward_lowering(ctx: Any, *ops: Any, cfg: RNNConfig, ensemble: int) -> Any:
    return mlir.lower_fun(reference_backward(cfg, ensemble), multiple_results=True)(ctx, *ops)
