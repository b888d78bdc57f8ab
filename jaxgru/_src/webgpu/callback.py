"""The ``wgsl`` lowerings of the forward and backward primitives: host callbacks into
``kernels.forward`` and ``backward.backward``.

On the CPU platform the callback is ``jax.experimental.buffer_callback``: it sees XLA's own
buffers as numpy views (no copy in) and writes the results straight into XLA's output
buffers. Elsewhere (JAX on a GPU, or a jax without buffer_callback) it is
``jax.pure_callback``, which copies through the host. The primitive's batching rule folds vmap
into the batch, so the callback never sees a vmapped axis.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import numpy as np

from jaxgru._src import compat
from jaxgru._src.options import RNNConfig
from jaxgru._src.webgpu import backward, kernels

Host = Callable[..., tuple[np.ndarray, ...]]  # host(arrays, out=None) -> outputs


def make_forward(ctx: compat.mlir.LoweringRuleContext, cfg: RNNConfig, ensemble: int, residuals: bool
                 ) -> Callable[..., list]:
    """A jax-traceable function of the operands that runs the WGSL forward on the host.

    Args:
      ctx: the MLIR lowering context (its platform picks the callback kind; its output avals
        give the result shapes).
      cfg, ensemble, residuals: the primitive's static parameters.

    Returns:
      ``fn(*operands) -> list of outputs``, to be lowered with ``mlir.lower_fun``.
    """
    def run(arrays, out=None) -> tuple[np.ndarray, ...]:
        return kernels.forward(cfg, [np.asarray(a) for a in arrays], residuals=residuals, ensemble=ensemble,
                               out=out)

    return _host_callback(ctx, run)


def make_backward(ctx: compat.mlir.LoweringRuleContext, cfg: RNNConfig, ensemble: int) -> Callable[..., list]:
    """A jax-traceable function of the backward primitive's operands (primals, y, res, output
    cotangents) that runs the WGSL backward on the host; like :func:`make_forward`."""
    def run(arrays, out=None) -> tuple[np.ndarray, ...]:
        return backward.backward(cfg, [np.asarray(a) for a in arrays], ensemble=ensemble, out=out)

    return _host_callback(ctx, run)


def _host_callback(ctx: compat.mlir.LoweringRuleContext, run: Host) -> Callable[..., list]:
    """``run`` as a jax-traceable function: buffer_callback on CPU (results written straight
    into XLA's output buffers), pure_callback elsewhere."""
    results = tuple(jax.ShapeDtypeStruct(a.shape, a.dtype) for a in ctx.avals_out)
    platforms = set(ctx.module_context.platforms)
    if compat.buffer_callback is not None and platforms == {"cpu"}:

        def in_place(exec_ctx, outs, *args):
            del exec_ctx
            # the results land in XLA's output buffers straight from the mapped read-back
            run(args, out=[np.asarray(o) for o in outs])

        call = compat.buffer_callback(in_place, results)
        return lambda *ops: list(call(*ops))

    def copied(*args):
        return run(args)

    return lambda *ops: list(jax.pure_callback(copied, results, *ops, vmap_method="sequential"))
