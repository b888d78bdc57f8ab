"""Parameter pytrees in the canonical ONNX layout, and PyTorch-style initialisers.

Canonical layout (D = number of directions, H = hidden size, I = input size):

=========  ==========================  ============================================
 tensor     GRU                         LSTM
=========  ==========================  ============================================
 ``w``      ``[D, 3H, I]`` rows z,r,h   ``[D, 4H, I]`` rows i,o,f,c
 ``r``      ``[D, 3H, H]`` rows z,r,h   ``[D, 4H, H]`` rows i,o,f,c
 ``b``      ``[D, 6H]`` = Wb_zrh,Rb_zrh ``[D, 8H]`` = Wb_iofc, Rb_iofc
 ``p``      --                          ``[D, 3H]`` peepholes i,o,f
 ``proj``   --                          ``[D, P, H]`` output projection (optional)
=========  ==========================  ============================================

Absent ``b`` and ``p`` (``None``) mean zeros; an absent ``proj`` means no projection. With
``proj`` (PyTorch's ``nn.LSTM(proj_size=P)``, ``weight_hr``) the hidden state has P features:
``r`` is ``[D, 4H, P]``, ``h = proj · (o ⊙ h(C))``.
"""

from __future__ import annotations

import math
import numbers
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import DTypeLike

from jaxgru._src import cells, compat, shapes


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
      proj: output projection ``[D, P, H]`` (PyTorch's ``weight_hr_l{k}``), or ``None`` for
        none; with it ``r`` is ``[D, 4H, P]`` and h, Y have P features (the cell state keeps H).
    """

    w: jax.Array
    r: jax.Array
    b: jax.Array | None = None
    p: jax.Array | None = None
    proj: jax.Array | None = None


compat.register_export_serialization(GRUParams, "jaxgru.GRUParams")
compat.register_export_serialization(LSTMParams, "jaxgru.LSTMParams")
# The parameter class of each cell kind (its fields are cells.CellSpec.param_fields).
PARAMS_TYPE: dict[str, type[GRUParams] | type[LSTMParams]] = {"gru": GRUParams, "lstm": LSTMParams}


def _check_key(fname: str, key: object) -> None:
    """TypeError unless ``key`` is one PRNG key: typed (``jax.random.key``) or legacy uint32.

    Only the dtype and the shape are read, so a traced key is checked too.
    """
    dtype, shape = getattr(key, "dtype", None), getattr(key, "shape", None)
    if dtype is None or not isinstance(shape, tuple):
        got = type(key).__name__
    else:
        if jnp.issubdtype(dtype, jax.dtypes.prng_key):
            if shape == ():
                return
        elif dtype == np.uint32 and shape == jax.eval_shape(jax.random.PRNGKey, 0).shape:
            return  # a legacy key of the default implementation (threefry: uint32[2])
        got = f"an array of dtype {dtype} and shape {shape}"
    raise TypeError(
        f"{fname}: key must be a JAX PRNG key (jax.random.key(seed) or jax.random.PRNGKey(seed)); got {got}."
    )


def _check_dtype(fname: str, dtype: DTypeLike | None) -> None:
    """TypeError unless ``dtype`` names a floating dtype (None: JAX's default float)."""
    if dtype is None:
        return
    try:
        got = jnp.dtype(dtype)
    except TypeError:  # not a dtype at all ("abc", an object)
        got = None
    if got is not None and jnp.issubdtype(got, jnp.floating):
        return
    raise TypeError(f"{fname}: dtype must be a floating dtype (float16, bfloat16, float32 or float64); "
                    f"got {repr(dtype) if got is None else got.name}.")


def _uniform_init(
    fname: str,
    cell: str,
    key: jax.Array,
    input_size: int,
    hidden_size: int,
    bidirectional: bool,
    dtype: DTypeLike | None,
    proj_size: int = 0,
) -> list[jax.Array | None]:
    """``w``, ``r``, ``b`` (and ``p = None``, ``proj``) of ``cell`` from U(-1/sqrt(H), 1/sqrt(H)),
    one split of ``key`` each (PyTorch draws ``weight_hr`` from the same distribution)."""
    _check_key(fname, key)
    input_size = shapes.check_size(fname, "input_size", input_size)
    hidden_size = shapes.check_size(fname, "hidden_size", hidden_size)
    if isinstance(proj_size, bool) or not isinstance(proj_size, numbers.Integral) or proj_size < 0:
        raise ValueError(f"{fname}: proj_size must be a non-negative int (0: no projection); got {proj_size!r}.")
    if not isinstance(bidirectional, (bool, np.bool_)):
        raise TypeError(f"{fname}: bidirectional must be a bool; got {bidirectional!r}.")
    _check_dtype(fname, dtype)
    d = 2 if bidirectional else 1
    bound = 1.0 / math.sqrt(hidden_size)
    param_shapes = cells.spec(cell).param_shapes(d, hidden_size, input_size, int(proj_size))
    fields = ("w", "r", "b", "proj") if proj_size else ("w", "r", "b")  # no peepholes: p stays None
    keys = jax.random.split(key, len(fields))
    drawn = {f: jax.random.uniform(k, param_shapes[f][0], dtype, -bound, bound) for k, f in zip(keys, fields)}
    out: list[jax.Array | None] = [drawn["w"], drawn["r"], drawn["b"]]
    return out + ([None, drawn["proj"]] if proj_size else [])


def init_gru(
    key: jax.Array,
    input_size: int,
    hidden_size: int,
    *,
    bidirectional: bool = False,
    dtype: DTypeLike = jnp.float32,
) -> GRUParams:
    """Initialise GRU weights like PyTorch: every entry from U(-1/sqrt(H), 1/sqrt(H)).

    Args:
      key: a JAX PRNG key: ``jax.random.key(seed)`` or ``jax.random.PRNGKey(seed)``.
      input_size: I, the number of input features.
      hidden_size: H, the number of hidden units.
      bidirectional: create weights for two directions (D = 2).
      dtype: floating dtype of the weights.

    Returns:
      GRUParams with ``w [D, 3H, I]``, ``r [D, 3H, H]``, ``b [D, 6H]``.

    Raises:
      TypeError: ``key`` is not one PRNG key (typed, or legacy ``uint32[2]``), ``dtype`` is not
        a floating dtype, or ``bidirectional`` is not a bool.
      ValueError: ``input_size`` or ``hidden_size`` is not a positive int.
    """
    w, r, b = _uniform_init("jaxgru.init_gru", "gru", key, input_size, hidden_size, bidirectional, dtype)
    assert w is not None and r is not None
    return GRUParams(w, r, b)


def init_lstm(
    key: jax.Array,
    input_size: int,
    hidden_size: int,
    *,
    bidirectional: bool = False,
    dtype: DTypeLike = jnp.float32,
    proj_size: int = 0,
) -> LSTMParams:
    """Initialise LSTM weights like PyTorch: every entry from U(-1/sqrt(H), 1/sqrt(H)).

    Args:
      key: a JAX PRNG key: ``jax.random.key(seed)`` or ``jax.random.PRNGKey(seed)``.
      input_size: I, the number of input features.
      hidden_size: H, the number of hidden units.
      bidirectional: create weights for two directions (D = 2).
      dtype: floating dtype of the weights.
      proj_size: P > 0 adds an output projection ``proj [D, P, H]`` (PyTorch's
        ``nn.LSTM(proj_size=P)``); 0 (the default) for none.

    Returns:
      LSTMParams with ``w [D, 4H, I]``, ``r [D, 4H, H]`` (``[D, 4H, P]`` with a projection),
      ``b [D, 8H]``, no peepholes, and ``proj [D, P, H]`` or None.

    Raises:
      TypeError: ``key`` is not one PRNG key (typed, or legacy ``uint32[2]``), ``dtype`` is not
        a floating dtype, or ``bidirectional`` is not a bool.
      ValueError: ``input_size`` or ``hidden_size`` is not a positive int, or ``proj_size`` is
        not a non-negative int.

    Example:
      >>> import jax, jaxgru
      >>> params = jaxgru.init_lstm(jax.random.key(0), input_size=3, hidden_size=8, proj_size=2)
      >>> params.r.shape, params.proj.shape
      ((1, 32, 2), (1, 2, 8))
    """
    w, r, b, *rest = _uniform_init("jaxgru.init_lstm", "lstm", key, input_size, hidden_size, bidirectional, dtype,
                                   proj_size)
    assert w is not None and r is not None
    return LSTMParams(w, r, b, *rest)
