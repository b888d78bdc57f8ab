"""Data parallelism: run a jaxgru layer with its batch split over a mesh axis (``shard_map``)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec
from jax.typing import ArrayLike

from jaxgru._src import api, shapes
from jaxgru._src.cells import batch_axis, spec
from jaxgru._src.options import OPTIONS_BY_NAME

_OPS = {api.gru: "gru", api.lstm: "lstm", api.gru_stack: "gru", api.lstm_stack: "lstm"}  # op -> its cell


def sharded(op: Callable, mesh: Mesh, axis: str = "batch") -> Callable:
    """Data-parallel version of ``gru``, ``lstm``, ``gru_stack`` or ``lstm_stack``.

    The returned function has the signature of ``op``. Inside it, ``jax.shard_map`` splits
    ``x``, ``initial_h``, ``initial_c`` and ``sequence_lens`` along their batch axis over the
    mesh axis ``axis`` and replicates the weights; each device runs the layer on its shard,
    and the outputs come back sharded along their batch axis. Gradients of the replicated
    weights are summed over devices (the transpose of the replication), so ``jax.grad`` of a
    loss of the outputs equals the single-device gradient. A stack's dropout ``key`` is folded
    with the shard's index, so every shard draws its own masks (they differ from the masks of
    the unsharded call with the same key).

    Args:
      op: ``jaxgru.gru``, ``jaxgru.lstm``, ``jaxgru.gru_stack`` or ``jaxgru.lstm_stack``.
      mesh: the device mesh.
      axis: the mesh axis that splits the batch; the batch size must be divisible by its size.

    Returns:
      A function with ``op``'s signature.

    Raises:
      TypeError: ``op`` is not one of the four layer functions.
      ValueError: ``axis`` is not a mesh axis, or the batch does not divide evenly.

    Example:
      >>> import jax, jaxgru
      >>> mesh = jax.make_mesh((1,), ("batch",))
      >>> params = jaxgru.init_gru(jax.random.key(0), 3, 4)
      >>> y, h = jaxgru.sharded(jaxgru.gru, mesh)(params, jax.numpy.ones((5, 2, 3)))
      >>> y.shape
      (5, 1, 2, 4)
    """
    if op not in _OPS:
        raise TypeError(
            "jaxgru.sharded: op must be jaxgru.gru, lstm, gru_stack or lstm_stack; "
            f"got {getattr(op, '__name__', op)!r}."
        )
    if not isinstance(mesh, Mesh):
        raise TypeError(f"jaxgru.sharded: mesh must be a jax.sharding.Mesh; got {type(mesh).__name__}.")
    if axis not in mesh.axis_names:
        raise ValueError(f"jaxgru.sharded: axis must be one of the mesh axes {mesh.axis_names}; got {axis!r}.")
    cell = spec(_OPS[op])

    @functools.wraps(op)
    def wrapped(params: Any, x: ArrayLike, **options: Any) -> Any:
        layout = OPTIONS_BY_NAME["layout"].check("jaxgru.sharded", "layout", options.get("layout", 0))
        xa = api._array("jaxgru.sharded", "x", x)  # array-likes become arrays, as in the layers
        shapes.check_rank("jaxgru.sharded", "x", xa, 3, shapes.x_meaning(layout))
        batch_x = batch_axis("x", layout)
        assert batch_x is not None
        size = mesh.shape[axis]
        if xa.shape[batch_x] % size:
            raise ValueError(
                f"jaxgru.sharded: the batch ({xa.shape[batch_x]}, axis {batch_x} of x) must be divisible "
                f"by the size of mesh axis {axis!r} ({size})."
            )

        def partition(kind: str, ndim: int) -> PartitionSpec:
            """Split an array of ``kind`` along its batch axis over the mesh axis."""
            batch = batch_axis(kind, layout)
            return PartitionSpec(*[axis if i == batch else None for i in range(ndim)])

        # the per-example operands given as keywords (states, lengths) split like x
        given = [o for o in cell.operands if o.kind in ("state", "lens") and options.get(o.name) is not None]
        arrays = {o.name: options.pop(o.name) for o in given}
        in_specs = (
            PartitionSpec(),  # weights: replicated (a prefix for the whole pytree)
            partition("x", 3),
            {o.name: partition(o.kind, 1 if o.kind == "lens" else 3) for o in given},
        )
        out_specs = tuple(partition(k, 4 if k == "y" else 3) for k in cell.outputs)

        def local(p: Any, xl: Any, arrs: Any) -> Any:
            local_options = dict(options)
            if local_options.get("key") is not None:  # a stack's dropout key: one stream per shard
                local_options["key"] = jax.random.fold_in(local_options["key"], jax.lax.axis_index(axis))
            return op(p, xl, **arrs, **local_options)

        args = (params, xa, arrays)
        if mesh.axis_types[mesh.axis_names.index(axis)] == AxisType.Explicit:
            # explicit-sharding meshes want the inputs already laid out as in_specs says
            args = jax.tree.map(lambda ps, a: jax.reshard(a, NamedSharding(mesh, ps)), in_specs, args,
                                is_leaf=lambda v: isinstance(v, PartitionSpec))
        return jax.shard_map(local, mesh=mesh, in_specs=in_specs, out_specs=out_specs)(*args)

    return wrapped
