"""The ``wgsl`` lowerings of the forward, tangent and backward primitives: host callbacks into
``kernels.forward``, ``tangent.tangent`` and ``backward.backward``.

On the CPU platform the callback is ``jax.experimental.buffer_callback``: it sees XLA's own
buffers as numpy views (no copy in) and writes the results straight into XLA's output
buffers. Elsewhere (JAX on a GPU, or a jax without buffer_callback) it is
``jax.pure_callback``, which copies through the host. The primitives' batching rules fold vmap
into the batch, so the callback never sees a vmapped axis.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import numpy as np

from jaxgru._src import compat
from jaxgru._src.cells import spec
from jaxgru._src.options import RNNConfig
from jaxgru._src.webgpu import backward, kernels

# host(operands, out): runs a primitive on numpy operands; writes into ``out`` (XLA's output
# buffers) when given, else returns the outputs
Host = Callable[[list[np.ndarray], "list[np.ndarray] | None"], tuple[np.ndarray, ...]]


def _host_call(ctx: compat.mlir.LoweringRuleContext, host: Host) -> Callable[..., list]:
    """A jax-traceable function of the operands that runs ``host`` (the ctx's platform picks the
    callback kind; its output avals give the result shapes)."""
    results = tuple(jax.ShapeDtypeStruct(a.shape, a.dtype) for a in ctx.avals_out)
    platforms = set(ctx.module_context.platforms)
    if compat.buffer_callback is not None and platforms == {"cpu"}:

        def in_place(exec_ctx, outs, *args):
            del exec_ctx
            # the results land in XLA's output buffers straight from the mapped read-back
            host([np.asarray(a) for a in args], [np.asarray(o) for o in outs])

        call = compat.buffer_callback(in_place, results)
        return lambda *ops: list(call(*ops))

    def copied(*args):
        return host([np.asarray(a) for a in args], None)

    return lambda *ops: list(jax.pure_callback(copied, results, *ops, vmap_method="sequential"))


def make_forward(ctx: compat.mlir.LoweringRuleContext, cfg: RNNConfig, ensemble: int, residuals: bool
                 ) -> Callable[..., list]:
    """The WGSL forward as a function of the operands, to be lowered with ``mlir.lower_fun``.

    Args:
      ctx: the MLIR lowering context.
      cfg, ensemble, residuals: the primitive's static parameters.

    Returns:
      ``fn(*operands) -> list of outputs``.
    """
    return _host_call(ctx, lambda arrays, out: kernels.forward(cfg, arrays, residuals=residuals,
                                                               ensemble=ensemble, out=out))


def make_tangent(ctx: compat.mlir.LoweringRuleContext, cfg: RNNConfig, ensemble: int) -> Callable[..., list]:
    """The WGSL tangent map as a function of its operands (primals, y, res, tangents).

    Args:
      ctx: the MLIR lowering context.
      cfg, ensemble: the primitive's static parameters.

    Returns:
      ``fn(*operands) -> [dy, dy_h[, dy_c]]``.
    """
    from jaxgru._src.webgpu import tangent

    n = len(spec(cfg.cell).operands_for(cfg))
    return _host_call(ctx, lambda a, out: tangent.tangent(cfg, a[:n], a[n], a[n + 1], a[n + 2 :],
                                                          ensemble=ensemble, out=out))


def make_backward(ctx: compat.mlir.LoweringRuleContext, cfg: RNNConfig, ensemble: int) -> Callable[..., list]:
    """The WGSL backward as a function of its operands (primals, y, res, output cotangents).

    Args:
      ctx: the MLIR lowering context.
      cfg, ensemble: the primitive's static parameters.

    Returns:
      ``fn(*operands) -> the operands' cotangents``, as ``reference.backward``.
    """
    return _host_call(ctx, lambda arrays, out: backward.backward(cfg, arrays, ensemble=ensemble, out=out))
