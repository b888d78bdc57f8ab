"""Keras 3 ``GRU`` / ``LSTM`` / ``Bidirectional`` layers -> jaxgru parameters.

Keras 3's formulas (``kernel`` is ``(input, gates*units)``, applied as ``x @ kernel``):

    GRU (gates z, r, h)   z = ra(x Kz + bz + h Rz + rbz)     r = ra(x Kr + br + h Rr + rbr)
        reset_after=True:  hh = a(x Kh + bh + r ⊙ (h Rh + rbh))   bias (2, 3u): row 0 input, row 1 recurrent
        reset_after=False: hh = a(x Kh + bh + (r ⊙ h) Rh)         bias (3u,): input side only
        h' = z ⊙ h + (1 − z) ⊙ hh
    LSTM (gates i, f, c, o)  i, f, o = ra(x K* + h R* + b*)   c' = f ⊙ c + i ⊙ a(x Kc + h Rc + bc)
        h' = o ⊙ a(c')

So GRU = ONNX GRU with ``linear_before_reset = reset_after`` and the same gate order
(transposed kernels); LSTM = ONNX LSTM with rows i, f, c, o -> i, o, f, c and all biases on
the input side. ``ra`` is ``recurrent_activation`` (ONNX f), ``a`` is ``activation`` (ONNX g,
and h for the LSTM).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from jaxgru._src.params import GRUParams, LSTMParams
from jaxgru.interop import _common as C
from jaxgru.interop import _layout
from jaxgru.interop._common import Act

if TYPE_CHECKING:  # pragma: no cover
    import keras

# Keras 3 activation name -> the ONNX activation that computes exactly the same function
# (checked numerically against keras.activations in tests/test_interop_keras.py).
KERAS_ACTIVATIONS: dict[str, Act] = {
    "tanh": Act("Tanh"),
    "sigmoid": Act("Sigmoid"),
    "relu": Act("Relu"),
    "linear": Act("Affine", 1.0, 0.0),
    "softplus": Act("Softplus"),
    "softsign": Act("Softsign"),
    "elu": Act("Elu", 1.0),
    "hard_sigmoid": Act("HardSigmoid", 1.0 / 6.0, 0.5),  # Keras 3: relu6(x + 3) / 6
    "leaky_relu": Act("LeakyRelu", 0.2),  # Keras 3 default negative_slope
}
MERGE_MODES = ("concat", "sum", "mul", "ave", None)


def _activation(fname: str, what: str, fn: Any) -> Act:
    import keras

    for name, act in KERAS_ACTIVATIONS.items():
        if keras.activations.get(name) is fn:
            return act
    label = getattr(fn, "__name__", repr(fn))
    raise NotImplementedError(
        f"{fname}: {what}={label!r} has no exact ONNX equivalent; supported Keras activations: "
        f"{', '.join(KERAS_ACTIVATIONS)}."
    )


def _numpy(v: Any) -> np.ndarray:
    import keras

    return np.asarray(keras.ops.convert_to_numpy(v))


def _one_layer(fname: str, layer: Any, where: str
               ) -> tuple[str, np.ndarray, np.ndarray, np.ndarray | None, bool, tuple[Act, ...]]:
    """(cell, w [G*H, I], r [G*H, H], b [2*G*H] | None, lbr, acts) of one Keras GRU/LSTM."""
    import keras

    if isinstance(layer, keras.layers.GRU):
        cell = "gru"
    elif isinstance(layer, keras.layers.LSTM):
        cell = "lstm"
    else:
        raise TypeError(f"{fname}: {where} must be a keras.layers.GRU, LSTM or Bidirectional; got "
                        f"{type(layer).__name__}.")
    if not layer.built:
        raise ValueError(f"{fname}: {where} ({layer.name}) is not built, so it has no weights yet; "
                         "call it on an input (or layer.build(input_shape)) first.")
    kc = layer.cell
    src = _layout.KERAS_GRU if cell == "gru" else _layout.KERAS_LSTM
    w = _layout.to_onnx(_layout.kernel_to_rows(_numpy(kc.kernel)), src)
    r = _layout.to_onnx(_layout.kernel_to_rows(_numpy(kc.recurrent_kernel)), src)
    lbr = bool(getattr(kc, "reset_after", False))
    b = None
    if kc.use_bias:
        bias = _numpy(kc.bias)
        if cell == "gru" and lbr:  # (2, 3u): input biases, recurrent biases
            wb, rb = bias[0], bias[1]
        else:  # (G*u,): input side only
            wb, rb = bias, None
        wb = _layout.to_onnx(wb, src)
        rb = None if rb is None else _layout.to_onnx(rb, src)
        b = _layout.onnx_bias(wb, rb, like=wb)
    f = _activation(fname, f"{where}.recurrent_activation", kc.recurrent_activation)
    g = _activation(fname, f"{where}.activation", kc.activation)
    acts = (f, g) if cell == "gru" else (f, g, g)
    return cell, w, r, b, lbr, acts


def from_keras(layer: keras.layers.Layer) -> tuple[list[GRUParams] | list[LSTMParams], dict[str, Any]]:
    """Convert a built Keras 3 ``GRU``, ``LSTM`` or ``Bidirectional`` layer to jaxgru.

    Keras inputs are batch-major, so the options hold ``layout=1``: run
    ``jaxgru.gru(layers[0], x, **options)`` (or ``gru_stack``) on the same ``x [N, L, I]``.
    ``y`` then has shape ``[N, L, D, H]``; how Keras's outputs relate to it:

    - plain layer, ``return_sequences=True``: ``keras_out == y[:, :, 0]``; otherwise
      ``keras_out == y_h[:, 0]`` (the state after the last step).
    - ``go_backwards=True`` (``direction="reverse"``): Keras returns the sequence in processing
      order, while ONNX/jaxgru's reverse ``y`` is aligned with the input positions, so
      ``keras_out == jnp.flip(y[:, :, 0], axis=1)``; the final state is ``y_h[:, 0]`` in both.
    - ``Bidirectional`` (``direction="bidirectional"``; Keras flips the backward sequence back
      into input order): ``merge_mode="concat"``: ``y.reshape(N, L, 2 * H)``; ``"sum"``:
      ``y.sum(2)``; ``"ave"``: ``y.mean(2)``; ``"mul"``: ``y.prod(2)``; ``None``:
      ``[y[:, :, 0], y[:, :, 1]]``. Without ``return_sequences`` the same merge applies to
      ``y_h[:, 0]`` and ``y_h[:, 1]``.

    Initial states in Keras's ``initial_state`` list map to ``initial_h``/``initial_c`` of shape
    ``[N, D, H]`` (forward direction first). Dropout and masking are not converted (inference,
    full-length sequences; use ``sequence_lens`` for right-padded batches).

    Args:
      layer: a built ``keras.layers.GRU``, ``keras.layers.LSTM`` or a
        ``keras.layers.Bidirectional`` wrapping one of them.

    Returns:
      ``(layers, options)``: a one-element list of ``GRUParams``/``LSTMParams`` (weights as jax
      arrays in the variables' dtype, ``b=None`` for ``use_bias=False``) and the options
      (``layout=1``, ``direction``, ``linear_before_reset`` for GRU, activations when not the
      defaults).

    Raises:
      TypeError: an unsupported layer type.
      ValueError: an unbuilt layer, an unknown ``merge_mode``, or a ``Bidirectional`` whose two
        layers differ in kind, size or options.
      NotImplementedError: an activation without an exact ONNX equivalent, or a
        ``Bidirectional`` whose forward layer has ``go_backwards=True``.

    Example:
      >>> import os; os.environ.setdefault("KERAS_BACKEND", "jax")  # doctest: +SKIP
      >>> import keras, numpy as np, jaxgru
      >>> from jaxgru.interop import from_keras
      >>> layer = keras.layers.GRU(5, return_sequences=True)
      >>> x = np.ones((2, 7, 3), np.float32)
      >>> out = layer(x)
      >>> layers, options = from_keras(layer)
      >>> y, y_h = jaxgru.gru(layers[0], x, **options)
      >>> bool(np.allclose(out, y[:, :, 0], atol=1e-5))
      True
    """
    import keras

    fname = "jaxgru.interop.from_keras"
    if isinstance(layer, keras.layers.Bidirectional):
        if layer.merge_mode not in MERGE_MODES:
            raise ValueError(f"{fname}: layer.merge_mode must be one of {MERGE_MODES}; got "
                             f"{layer.merge_mode!r}.")
        fw, bw = layer.forward_layer, layer.backward_layer
        if fw.go_backwards or not bw.go_backwards:
            raise NotImplementedError(
                f"{fname}: Bidirectional with forward_layer.go_backwards={fw.go_backwards} and "
                f"backward_layer.go_backwards={bw.go_backwards}; expected False and True (ONNX "
                "puts the forward direction first)."
            )
        parts = [_one_layer(fname, fw, "layer.forward_layer"),
                 _one_layer(fname, bw, "layer.backward_layer")]
        direction = "bidirectional"
        for what, idx in (("kind", 0), ("reset_after", 4), ("activations", 5)):
            if parts[0][idx] != parts[1][idx]:
                raise ValueError(f"{fname}: the forward and backward layers must agree on {what}; "
                                 f"got {parts[0][idx]!r} and {parts[1][idx]!r}.")
        if parts[0][1].shape != parts[1][1].shape or parts[0][2].shape != parts[1][2].shape:
            raise ValueError(f"{fname}: the forward and backward layers must have the same sizes; "
                             f"got kernels {parts[0][1].shape} and {parts[1][1].shape}.")
    else:
        parts = [_one_layer(fname, layer, "layer")]
        direction = "reverse" if layer.go_backwards else "forward"
    cell, _, _, _, lbr, acts = parts[0]
    w = np.stack([p[1] for p in parts])
    r = np.stack([p[2] for p in parts])
    bs = [p[3] for p in parts]
    if all(b is None for b in bs):
        b = None
    else:  # one side without bias: zeros
        b = np.stack([np.zeros(2 * w.shape[1], w.dtype) if x is None else x for x in bs])
    arrays = (C.as_jax(w), C.as_jax(r), C.as_jax(b))
    layers: list[GRUParams] | list[LSTMParams] = [GRUParams(*arrays)] if cell == "gru" else [LSTMParams(*arrays)]
    options: dict[str, Any] = {"direction": direction, "layout": 1}
    if cell == "gru":
        options["linear_before_reset"] = lbr
    options.update(C.activation_options(cell, acts, direction))
    return layers, options
