"""Data parallelism: run a jaxgru layer with its batch split over a mesh axis (``shard_map``)."""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

from jaxgru._src import api, shapes

_OPS = {api.gru: 1, api.lstm: 2, api.gru_stack: 1, api.lstm_stack: 2}  # op -> number of states
_ARRAY_OPTIONS = ("initial_h", "initial_c", "sequence_lens")


def sharded(op: Callable, mesh: Mesh, axis: str = "batch") -> Callable:
    """Data-parallel version of ``gru``, ``lstm``, ``gru_stack`` or ``lstm_stack``.

    The returned function has the signature of ``op``. Inside it, ``jax.shard_map`` splits
    ``x``, ``initial_h``, ``initial_c`` and ``sequence_lens`` along their batch axis over the
    mesh axis ``axis`` and replicates the weights; each device runs the layer on its shard,
    and the outputs come back sharded along their batch axis. Gradients of the replicated
    weights are summed over devices (the transpose of the replication), so ``jax.grad`` of a
    loss of the outputs equals the single-device gradient.

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
    n_states = _OPS[op]

    @functools.wraps(op)
    def wrapped(params, x, **options):
        layout = options.get("layout", 0)
        batch_x = 1 if layout == 0 else 0
        x = api._array("jaxgru.sharded", "x", x)  # array-likes become arrays, as in the layers
        shapes.check_rank("jaxgru.sharded", "x", x, 3, "(seq_length, batch, input_size)" if layout == 0
                          else "(batch, seq_length, input_size)")
        size = mesh.shape[axis]
        if x.shape[batch_x] % size:
            raise ValueError(
                f"jaxgru.sharded: the batch ({x.shape[batch_x]}, axis {batch_x} of x) must be divisible "
                f"by the size of mesh axis {axis!r} ({size})."
            )
        arrays = {k: options.pop(k) for k in _ARRAY_OPTIONS if options.get(k) is not None}

        def spec(ndim, batch_axis):
            return PartitionSpec(*[axis if i == batch_axis else None for i in range(ndim)])

        state_spec = spec(3, 1 if layout == 0 else 0)
        in_specs = (
            PartitionSpec(),  # weights: replicated (a prefix for the whole pytree)
            spec(3, batch_x),
            {k: PartitionSpec(axis) if k == "sequence_lens" else state_spec for k in arrays},
        )
        out_specs = (spec(4, 2 if layout == 0 else 0),) + (state_spec,) * n_states

        def local(p, xl, arrs):
            return op(p, xl, **arrs, **options)

        args = (params, x, arrays)
        if mesh.axis_types[mesh.axis_names.index(axis)] == AxisType.Explicit:
            # explicit-sharding meshes want the inputs already laid out as in_specs says
            args = jax.tree.map(lambda spec, a: jax.reshard(a, NamedSharding(mesh, spec)), in_specs, args,
                                is_leaf=lambda v: isinstance(v, PartitionSpec))
        return jax.shard_map(local, mesh=mesh, in_specs=in_specs, out_specs=out_specs)(*args)

    return wrapped
