"""Helpers shared by the converters: argument checks, array conversion, activation options.

Gate orders and reorders live in ``_layout.py``; this module knows nothing about them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, overload

import jax
import jax.core
import jax.numpy as jnp
import numpy as np

from jaxgru._src.activations import lookup
from jaxgru._src.options import DEFAULT_ACTIVATIONS, DIRECTIONS  # noqa: F401  (re-exported)
from jaxgru._src.shapes import check_rank, check_shape  # noqa: F401  (re-exported)


class Act(NamedTuple):
    """One ONNX activation with explicit parameters (None where the kind takes none)."""

    name: str
    alpha: float | None = None
    beta: float | None = None


SIGMOID, TANH, RELU = Act("Sigmoid"), Act("Tanh"), Act("Relu")


def num_directions(direction: str) -> int:
    return 2 if direction == "bidirectional" else 1


def check_choice(fname: str, name: str, value: object, choices: Sequence) -> None:
    """Raise ValueError unless ``value`` is one of ``choices``."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(
            f"{fname}: {name} must be one of {', '.join(repr(c) for c in choices)}; got {value!r}."
        )


def check_bool(fname: str, name: str, value: object) -> bool:
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise TypeError(f"{fname}: {name} must be a bool; got {value!r}.")


def to_numpy(fname: str, name: str, value: object) -> np.ndarray:
    """A concrete numpy array of a floating dtype (jax/numpy arrays, lists, Flax variables)."""
    get_value = getattr(value, "get_value", None)
    if callable(get_value):  # a flax.nnx.Variable
        value = get_value()
    if isinstance(value, jax.core.Tracer):
        raise TypeError(
            f"{fname}: {name} must be a concrete array; got a traced value (call the converter "
            "outside jit/vmap/grad)."
        )
    try:
        a = np.asarray(value)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{fname}: {name} must be an array; got {type(value).__name__}.") from e
    if not jnp.issubdtype(a.dtype, jnp.floating):
        raise TypeError(f"{fname}: {name} must have a floating dtype; got {a.dtype}.")
    return a


def same_dtype(fname: str, arrays: dict[str, np.ndarray | None]) -> np.dtype:
    """The common dtype of the given (non-None) arrays; TypeError when they differ."""
    present = {k: v.dtype for k, v in arrays.items() if v is not None}
    dtypes = set(present.values())
    if len(dtypes) > 1:
        got = ", ".join(f"{k}: {v}" for k, v in present.items())
        raise TypeError(f"{fname}: all weights must share one dtype; got {got}.")
    return next(iter(dtypes))


def rounded_f16(a: np.ndarray) -> np.ndarray:
    """``a`` rounded to float16, in its own dtype: the recurrent weights an exporter writes for
    ``recurrent_dtype="float16"`` (what the layer computes with, ``api._round_recurrent``)."""
    return a.astype(np.float16).astype(a.dtype)


def is_zero(a: np.ndarray | None) -> bool:
    return a is None or not np.any(np.asarray(a))


@overload
def as_jax(a: np.ndarray) -> jax.Array: ...
@overload
def as_jax(a: None) -> None: ...
@overload
def as_jax(a: np.ndarray | None) -> jax.Array | None: ...
def as_jax(a: np.ndarray | None) -> jax.Array | None:
    """A jax array in the dtype of ``a`` (float64 follows JAX's x64 setting)."""
    return None if a is None else jnp.asarray(a)


def activation_options(cell: str, acts: Sequence[Act], direction: str) -> dict:
    """The ``activations`` / ``activation_alpha`` / ``activation_beta`` options for one direction's
    activations, repeated for every direction; ``{}`` when they are the defaults."""
    names = tuple(a.name for a in acts)
    if names == DEFAULT_ACTIVATIONS[cell]:
        return {}
    d = num_directions(direction)
    acts = list(acts) * d
    alphas: list[float] = []
    betas: list[float] = []
    for a in acts:
        kind = lookup(a.name)
        # Every Act comes from a converter's fixed table: a known ONNX name, with alpha/beta
        # given wherever its kind takes them.
        assert kind is not None, a
        if kind.takes_alpha:
            assert a.alpha is not None, a
            alphas.append(a.alpha)
        if kind.takes_beta:
            assert a.beta is not None, a
            betas.append(a.beta)
    out: dict = {"activations": [a.name for a in acts]}
    if alphas:
        out["activation_alpha"] = [float(v) for v in alphas]
    if betas:
        out["activation_beta"] = [float(v) for v in betas]
    return out


def has_default_activations(cell: str, options: dict) -> bool:
    """Whether ``options`` asks for the default activations only (no alpha/beta)."""
    names = options.get("activations")
    if options.get("activation_alpha") or options.get("activation_beta"):
        return False
    if names is None:
        return True
    default = [n.lower() for n in DEFAULT_ACTIVATIONS[cell]]
    per = len(default)
    names = [str(n).lower() for n in names]
    return len(names) % per == 0 and all(
        names[i : i + per] == default for i in range(0, len(names), per)
    )
