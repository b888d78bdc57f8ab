"""Dropout between the layers of a stack, as PyTorch's ``nn.GRU(dropout=p)`` / ``nn.LSTM``.

A stack-level option (not a layer option: it is not in ``options.OPTIONS``, no primitive sees
it). Inverted dropout, as PyTorch, ``nnx.Dropout`` and ``eqx.nn.Dropout``: with
``keys = jax.random.split(key, num_layers)``, the output of layer ``k < num_layers - 1`` (the
next layer's input, directions side by side) becomes

    mask = jax.random.bernoulli(keys[k], 1 - rate, x.shape)
    x = jnp.where(mask, x * (1 / (1 - rate)), 0)

The last layer's output and key are left alone; without a key nothing is dropped (inference).
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxgru._src.params import _check_key


def check_rate(fname: str, value: Any) -> float:
    """``dropout`` as a float in [0, 1).

    Raises:
      TypeError: not a real number (a bool, a string, an array).
      ValueError: outside [0, 1) or NaN.
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{fname}: dropout must be a float in [0, 1); got {value!r}.")
    rate = float(value)
    if math.isnan(rate) or not 0.0 <= rate < 1.0:
        raise ValueError(f"{fname}: dropout must be a float in [0, 1); got {value!r}.")
    return rate


def check(fname: str, rate: Any, key: Any) -> tuple[float, Any]:
    """The validated ``(dropout, key)`` of a stack call (``key`` None or one PRNG key)."""
    rate = check_rate(fname, rate)
    if key is not None:
        _check_key(fname, key)
    return rate, key


def layer_keys(rate: float, key: Any, num_layers: int) -> list[Any] | None:
    """One key per layer (``jax.random.split(key, num_layers)``), or None when nothing is dropped."""
    if key is None or rate == 0.0 or num_layers < 2:
        return None
    return list(jax.random.split(key, num_layers))


def apply(x: jax.Array, rate: float, key: Any) -> jax.Array:
    """Zero each entry of ``x`` with probability ``rate``; scale the kept ones by ``1 / (1 - rate)``.

    A product with the scale (rounded once to ``x``'s dtype), as PyTorch's: exactly the same on
    every backend (XLA may turn a division by a constant into this product, or not).
    """
    mask = jax.random.bernoulli(key, 1.0 - rate, x.shape)
    return jnp.where(mask, x * (1.0 / (1.0 - rate)), jnp.zeros_like(x))
