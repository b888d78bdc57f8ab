"""W3C WebNN ``gru`` / ``lstm`` operands -> jaxgru parameters.

Our reading of the WebNN specification (``MLGraphBuilder.gru``/``gruCell``, ``lstm``/
``lstmCell`` and their emulation notes):

- GRU: ``weight [D, 3H, I]``, ``recurrentWeight [D, 3H, H]``, ``bias``/``recurrentBias
  [D, 3H]``, gates in ``layout`` order (``"zrn"``, the default, or ``"rzn"``). Update and reset
  gates add both biases; the new gate is ``tanh(bias_n + x Wnᵀ + r ⊙ (recurrentBias_n + h Rnᵀ))``
  with ``resetAfter=true`` (the default: ONNX ``linear_before_reset=1``) and
  ``tanh(bias_n + recurrentBias_n + x Wnᵀ + (r ⊙ h) Rnᵀ)`` with ``resetAfter=false`` (ONNX
  ``linear_before_reset=0``); ``h' = z ⊙ h + (1 − z) ⊙ n``. So ``bias`` is ONNX ``Wb`` and
  ``recurrentBias`` is ONNX ``Rb`` exactly.
- LSTM: gates in ``layout`` order (``"iofg"``, the default and ONNX's order, or ``"ifgo"``);
  ``peepholeWeight [D, 3H]`` packed i, o, f like ONNX ``P``. The input and forget gates'
  peepholes multiply the previous cell state, as in ONNX, but WebNN's output-gate peephole also
  multiplies the *previous* cell state C_{t-1}, where ONNX uses the new one, C_t. A nonzero
  output-gate peephole therefore has no ONNX equivalent.
- Directions ``"forward"``, ``"backward"``, ``"both"`` = ONNX ``forward``, ``reverse``,
  ``bidirectional``; the returned sequence is ``[steps, D, N, H]`` with the backward direction
  in input order, i.e. ONNX ``Y`` (layout 0). WebNN returns ``[Y_h, (Y_c,) Y]``.
- Activations: ``"relu"``, ``"sigmoid"``, ``"tanh"``; GRU takes 2 (gates, new gate), LSTM 3
  (gates, cell gate, cell-state filter), like ONNX per direction.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from jaxgru._src.params import GRUParams, LSTMParams
from jaxgru.interop import _common as C
from jaxgru.interop import _layout

WEBNN_DIRECTIONS = {"forward": "forward", "backward": "reverse", "both": "bidirectional"}
WEBNN_ACTIVATIONS = {"relu": C.RELU, "sigmoid": C.SIGMOID, "tanh": C.TANH}


def _common(fname: str, cell: str, weight: Any, recurrent_weight: Any, bias: Any | None,
            recurrent_bias: Any | None, layout: str, layouts: Sequence[str], direction: str,
            activations: Sequence[str] | None
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, int, int, dict[str, Any]]:
    C.check_choice(fname, "layout", layout, layouts)
    C.check_choice(fname, "direction", direction, tuple(WEBNN_DIRECTIONS))
    onnx_direction = WEBNN_DIRECTIONS[direction]
    d = C.num_directions(onnx_direction)
    g = len(layout)
    w = C.to_numpy(fname, "weight", weight)
    r = C.to_numpy(fname, "recurrent_weight", recurrent_weight)
    C.check_rank(fname, "recurrent_weight", r, 3, f"(num_directions, {g}*hidden, hidden)")
    hidden = r.shape[-1]
    C.check_rank(fname, "weight", w, 3, f"(num_directions, {g}*hidden, input_size)")
    C.check_shape(fname, "weight", w, (d, g * hidden, w.shape[-1]),
                  f"(num_directions, {g}*hidden, input_size)")
    C.check_shape(fname, "recurrent_weight", r, (d, g * hidden, hidden),
                  f"(num_directions, {g}*hidden, hidden)")
    biases = []
    for name, v in (("bias", bias), ("recurrent_bias", recurrent_bias)):
        if v is not None:
            v = C.to_numpy(fname, name, v)
            C.check_shape(fname, name, v, (d, g * hidden), f"(num_directions, {g}*hidden)")
        biases.append(v)
    C.same_dtype(fname, {"weight": w, "recurrent_weight": r, "bias": biases[0],
                         "recurrent_bias": biases[1]})
    w = _layout.to_onnx(w, layout, axis=1)
    r = _layout.to_onnx(r, layout, axis=1)
    if biases[0] is None and biases[1] is None:
        b = None
    else:
        wb, rb = (None if v is None else _layout.to_onnx(v, layout, axis=1) for v in biases)
        b = _layout.onnx_bias(wb, rb, like=np.zeros((d, g * hidden), w.dtype))
    if activations is None:
        acts = C.DEFAULT_ACTIVATIONS[cell]
        opts = {}
    else:
        n = len(C.DEFAULT_ACTIVATIONS[cell])
        if isinstance(activations, str) or len(activations) != n:
            raise ValueError(f"{fname}: activations must list {n} WebNN activations; got "
                             f"{activations!r}.")
        for a in activations:
            C.check_choice(fname, "activations[...]", a, tuple(WEBNN_ACTIVATIONS))
        acts = [WEBNN_ACTIVATIONS[a] for a in activations]
        opts = C.activation_options(cell, acts, onnx_direction)
    return w, r, b, hidden, d, {"direction": onnx_direction, "layout": 0, **opts}


def from_webnn_gru(
    weight: Any,
    recurrent_weight: Any,
    bias: Any | None = None,
    recurrent_bias: Any | None = None,
    *,
    layout: str = "zrn",
    reset_after: bool = True,
    direction: str = "forward",
    activations: Sequence[str] | None = None,
) -> tuple[list[GRUParams], dict[str, Any]]:
    """Convert the operands of a WebNN ``gru`` (or ``gruCell``) to jaxgru.

    Args:
      weight: ``[D, 3H, I]`` input weights in ``layout`` gate order (a ``gruCell``'s
        ``[3H, I]`` with a leading axis of 1 added).
      recurrent_weight: ``[D, 3H, H]``.
      bias: ``[D, 3H]`` input bias, or None (zeros).
      recurrent_bias: ``[D, 3H]`` recurrent bias, or None (zeros).
      layout: WebNN ``MLGruWeightLayout``: ``"zrn"`` (default) or ``"rzn"``.
      reset_after: WebNN ``resetAfter`` (default True): ONNX ``linear_before_reset``.
      direction: ``"forward"``, ``"backward"`` or ``"both"``.
      activations: WebNN ``activations`` (two of ``"relu"``, ``"sigmoid"``, ``"tanh"``), or
        None for the defaults (sigmoid, tanh).

    Returns:
      ``(layers, options)``: ``[GRUParams]`` in the weights' dtype and options for
      ``jaxgru.gru`` (``layout=0``: WebNN's input is ``[steps, N, I]``). jaxgru's ``y`` is
      WebNN's second output (the sequence), ``y_h`` its first.

    Raises:
      ValueError: a bad layout, direction, activation or shape (named in the message).
      TypeError: non-array or non-floating weights, or weights of different dtypes.
    """
    fname = "jaxgru.interop.from_webnn_gru"
    reset_after = C.check_bool(fname, "reset_after", reset_after)
    w, r, b, _, _, options = _common(fname, "gru", weight, recurrent_weight, bias, recurrent_bias,
                                     layout, _layout.WEBNN_GRU_LAYOUTS, direction, activations)
    options["linear_before_reset"] = reset_after
    return [GRUParams(C.as_jax(w), C.as_jax(r), C.as_jax(b))], options


def from_webnn_lstm(
    weight: Any,
    recurrent_weight: Any,
    bias: Any | None = None,
    recurrent_bias: Any | None = None,
    peephole_weight: Any | None = None,
    *,
    layout: str = "iofg",
    direction: str = "forward",
    activations: Sequence[str] | None = None,
) -> tuple[list[LSTMParams], dict[str, Any]]:
    """Convert the operands of a WebNN ``lstm`` (or ``lstmCell``) to jaxgru.

    Args:
      weight: ``[D, 4H, I]`` input weights in ``layout`` gate order.
      recurrent_weight: ``[D, 4H, H]``.
      bias: ``[D, 4H]`` input bias, or None (zeros).
      recurrent_bias: ``[D, 4H]`` recurrent bias, or None (zeros).
      peephole_weight: ``[D, 3H]`` peepholes packed i, o, f, or None. The output-gate part
        (``[:, H:2H]``) must be zero: WebNN applies it to C_{t-1}, ONNX to C_t.
      layout: WebNN ``MLLstmWeightLayout``: ``"iofg"`` (default) or ``"ifgo"``.
      direction: ``"forward"``, ``"backward"`` or ``"both"``.
      activations: WebNN ``activations`` (three of ``"relu"``, ``"sigmoid"``, ``"tanh"``), or
        None for the defaults (sigmoid, tanh, tanh).

    Returns:
      ``(layers, options)``: ``[LSTMParams]`` and options for ``jaxgru.lstm`` (``layout=0``).
      jaxgru's ``(y, y_h, y_c)`` are WebNN's outputs ``[2]``, ``[0]``, ``[1]``.

    Raises:
      NotImplementedError: a nonzero output-gate peephole (WebNN uses C_{t-1}, ONNX C_t).
      ValueError: a bad layout, direction, activation or shape (named in the message).
      TypeError: non-array or non-floating weights, or weights of different dtypes.
    """
    fname = "jaxgru.interop.from_webnn_lstm"
    w, r, b, hidden, d, options = _common(fname, "lstm", weight, recurrent_weight, bias,
                                          recurrent_bias, layout, _layout.WEBNN_LSTM_LAYOUTS,
                                          direction, activations)
    p = None
    if peephole_weight is not None:
        p = C.to_numpy(fname, "peephole_weight", peephole_weight)
        C.check_shape(fname, "peephole_weight", p, (d, 3 * hidden), "(num_directions, 3*hidden)")
        C.same_dtype(fname, {"weight": w, "peephole_weight": p})
        o = _layout.split_gates(p, _layout.PEEPHOLES, axis=1)["o"]
        if not C.is_zero(o):
            raise NotImplementedError(
                f"{fname}: peephole_weight has a nonzero output-gate part (peephole_weight[:, "
                f"{hidden}:{2 * hidden}]); WebNN applies it to the previous cell state C_(t-1) "
                "while ONNX/jaxgru apply it to the new cell state C_t, so the result would differ. "
                "Expected zeros there (the input and forget peepholes convert exactly)."
            )
    options["input_forget"] = False
    return [LSTMParams(C.as_jax(w), C.as_jax(r), C.as_jax(b), C.as_jax(p))], options
