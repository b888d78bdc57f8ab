"""Every version-sensitive JAX import in one place (written against jax 0.10.x)."""

from __future__ import annotations

import jax
from jax.extend.core import Primitive  # noqa: F401  (jax.core.Primitive is gone)
from jax.interpreters import ad, batching, mlir, xla  # noqa: F401

try:  # zero-copy host callbacks; experimental, so keep a fallback
    from jax.experimental.buffer_callback import buffer_callback
except ImportError:  # pragma: no cover - depends on the installed jax
    buffer_callback = None


def register_export_serialization(cls: type, name: str) -> None:
    """Let ``jax.export`` serialise a NamedTuple pytree (no-op where unsupported)."""
    register = getattr(jax.export, "register_namedtuple_serialization", None)
    if register is not None:
        register(cls, serialized_name=name)


def varying_axes(x: jax.Array) -> frozenset:
    """The shard_map manual axes over which ``x`` varies (empty outside shard_map)."""
    aval = jax.typeof(x)
    mat = getattr(aval, "manual_axis_type", None)
    return frozenset(getattr(mat, "varying", ()) or ())


def match_varying(*args: jax.Array) -> list[jax.Array]:
    """Make every operand vary over the same shard_map axes before a ``bind``.

    Outside shard_map this is the identity. Inside, ``pcast(..., to="varying")`` is what lax
    does for its own primitives; its transpose is a ``psum``, which is exactly the gradient
    reduction a replicated parameter needs. Without it, shape rules would mix varying and
    replicated types and gradients of replicated weights come out wrong.
    """
    vmas = [varying_axes(a) for a in args]
    union = frozenset().union(*vmas)
    if not union:
        return list(args)
    return [
        jax.lax.pcast(a, tuple(sorted(union - v)), to="varying") if union - v else a
        for a, v in zip(args, vmas)
    ]
