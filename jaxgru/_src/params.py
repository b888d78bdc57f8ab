"""Parameter pytrees in the canonical ONNX layout, and PyTorch-style initialisers.

Canonical layout (D = number of directions, H = hidden size, I = input size):

=========  ==========================  ============================================
 tensor     GRU                         LSTM
=========  ==========================  ============================================
 ``w``      ``[D, 3H, I]`` rows z,r,h   ``[D, 4H, I]`` rows i,o,f,c
 ``r``      ``[D, 3H, H]`` rows z,r,h   ``[D, 4H, H]`` rows i,o,f,c
 ``b``      ``[D, 6H]`` = Wb_zrh,Rb_zrh ``[D, 8H]`` = Wb_iofc, Rb_iofc
 ``p``      --                          ``[D, 3H]`` peepholes i,o,f
=========  ==========================  ============================================

Absent ``b`` and ``p`` (``None``) mean zeros.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxgru._src import compat, shapes


class GRUParams(NamedTuple):
    """Weights of a (possibly bidirectional) GRU layer, ONNX layout, gates z, r, h.

    Attributes:
      w: input weights ``[D, 3H, I]``.
      r: recurrent weights ``[D, 3H, H]``.
      b: biases ``[D, 6H]`` (input biases then recurrent biases), or ``None`` for zeros.
    """

    w: jax.Array
    r: jax.Array
    b: jax.Array | None = None


class LSTMParams(NamedTuple):
    """Weights of a (possibly bidirectional) LSTM layer, ONNX layout, gates i, o, f, c.

    Attributes:
      w: input weights ``[D, 4H, I]``.
      r: recurrent weights ``[D, 4H, H]``.
      b: biases ``[D, 8H]`` (input biases then recurrent biases), or ``None`` for zeros.
      p: peephole weights ``[D, 3H]`` in the order i, o, f, or ``None`` for no peepholes.
    """

    w: jax.Array
    r: jax.Array
    b: jax.Array | None = None
    p: jax.Array | None = None


compat.register_export_serialization(GRUParams, "jaxgru.GRUParams")
compat.register_export_serialization(LSTMParams, "jaxgru.LSTMParams")


def _uniform_init(fname, key, gates, input_size, hidden_size, bidirectional, dtype):
    input_size = shapes.check_size(fname, "input_size", input_size)
    hidden_size = shapes.check_size(fname, "hidden_size", hidden_size)
    if not isinstance(bidirectional, (bool, np.bool_)):
        raise TypeError(f"{fname}: bidirectional must be a bool; got {bidirectional!r}.")
    d = 2 if bidirectional else 1
    bound = 1.0 / math.sqrt(hidden_size)
    sizes = (
        (d, gates * hidden_size, input_size),
        (d, gates * hidden_size, hidden_size),
        (d, 2 * gates * hidden_size),
    )
    keys = jax.random.split(key, len(sizes))
    return [jax.random.uniform(k, s, dtype, -bound, bound) for k, s in zip(keys, sizes)]


def init_gru(
    key: jax.Array,
    input_size: int,
    hidden_size: int,
    *,
    bidirectional: bool = False,
    dtype: jnp.dtype = jnp.float32,
) -> GRUParams:
    """Initialise GRU weights like PyTorch: every entry from U(-1/sqrt(H), 1/sqrt(H)).

    Args:
      key: a JAX PRNG key.
      input_size: I, the number of input features.
      hidden_size: H, the number of hidden units.
      bidirectional: create weights for two directions (D = 2).
      dtype: floating dtype of the weights.

    Returns:
      GRUParams with ``w [D, 3H, I]``, ``r [D, 3H, H]``, ``b [D, 6H]``.
    """
    return GRUParams(*_uniform_init("jaxgru.init_gru", key, 3, input_size, hidden_size, bidirectional, dtype))


def init_lstm(
    key: jax.Array,
    input_size: int,
    hidden_size: int,
    *,
    bidirectional: bool = False,
    dtype: jnp.dtype = jnp.float32,
) -> LSTMParams:
    """Initialise LSTM weights like PyTorch: every entry from U(-1/sqrt(H), 1/sqrt(H)).

    Args:
      key: a JAX PRNG key.
      input_size: I, the number of input features.
      hidden_size: H, the number of hidden units.
      bidirectional: create weights for two directions (D = 2).
      dtype: floating dtype of the weights.

    Returns:
      LSTMParams with ``w [D, 4H, I]``, ``r [D, 4H, H]``, ``b [D, 8H]`` and no peepholes.
    """
    return LSTMParams(*_uniform_init("jaxgru.init_lstm", key, 4, input_size, hidden_size, bidirectional, dtype))
