"""Apple BNNS Graph (``BNNSGraph.Builder``) ``gru`` / ``lstm`` weights -> jaxgru parameters.

Our reading of Apple's published documentation of ``BNNSGraph.Builder.Tensor.gru(...)`` and
``.lstm(...)`` (Accelerate, iOS/macOS 26; "Discussion" sections), not checked against an
Apple device:

GRU. ``inputHiddenWeight (3H, I) = concat(W_ir, W_in, W_iz)``, ``hiddenHiddenWeight (3H, H) =
concat(W_hr, W_hn, W_hz)``: gate order **r, n, z** (ONNX rows = BNNS rows ``[2, 0, 1]``).
``bias = concat(b_hr, b_hn, b_hz)``, ``inputBias = concat(b_ir, b_in, b_iz)``; the parameter
list calls ``bias`` "the sum of input-hidden and hidden-hidden biases" and says ``inputBias``
is used only when ``applyResetGateAfterMatMul`` is true. The formulas::

    r = RA(W_ir x + b_ir + W_hr h + b_hr)        z = RA(W_iz x + b_iz + W_hz h + b_hz)
    flag false: n = A(W_in x + b_in + (W_hn h) ⊙ r + b_hn)      (b_hn outside the reset gate)
    flag true:  n = A(W_in x + b_in + (W_hn h + b_hn) ⊙ r)
    h' = (1 − z) ⊙ n + z ⊙ h

Both variants multiply the reset gate *after* the recurrent matmul, so both are ONNX
``linear_before_reset=1``; the flag only moves ``b_hn``:

- flag false: ``bias`` holds the summed biases, so ONNX ``Wb = bias`` (reordered) and
  ``Rb = 0`` (``b_hn`` must stay outside ``r``, and ONNX's ``Wbh`` is). A nonzero
  ``input_bias`` is refused: the documentation both ignores it and writes ``b_i*`` in the
  formula, so its meaning is ambiguous; fold it into ``bias``.
- flag true: ONNX ``Wb = inputBias``, ``Rb = bias`` (both reordered).

LSTM. ``inputHiddenWeight = concat(W_ii, W_if, W_io, W_ig)`` and likewise
``hiddenHiddenWeight``: gate order **i, f, o, g** (ONNX rows = BNNS rows ``[0, 2, 1, 3]``).
``bias (4H,)`` is the summed bias. The documentation is inconsistent about its order: the
formula line reads ``concat(b_ii + b_hi, b_if + b_hf, b_ig + b_hg, b_io + b_ho)`` (i, f, g,
o) while the weights are i, f, o, g. **Our choice: the bias follows the weights (i, f, o, g).**
Reason: BNNS Graph executes Core ML models, and Core ML's MIL ``lstm`` operator documents one
order, i, f, o, g, for weights *and* bias (its MIL ``gru`` likewise matches the GRU above: gate
order r, n, z and ``b_hn`` outside the reset gate). Pass ``bias_order="ifgo"`` to follow
Apple's bias line literally. No peepholes, no projection.

Activations: ``RA`` (``recurrentActivation``) is ONNX f, ``A`` (``activation``) is ONNX g
for the GRU and h for the LSTM, whose ``CA`` (``cellActivation``) is ONNX g. Names
``"sigmoid"``, ``"tanh"``, ``"relu"`` are accepted. ``direction="reverse"`` maps to ONNX
``reverse``; Apple does not say whether its reverse output sequence is in input or processing
order (jaxgru's is in input order).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from jaxgru._src.params import GRUParams, LSTMParams
from jaxgru.interop import _common as C
from jaxgru.interop import _layout

BNNS_ACTIVATIONS = {"sigmoid": C.SIGMOID, "tanh": C.TANH, "relu": C.RELU}
BNNS_DIRECTIONS = ("forward", "reverse")


def _act(fname: str, name: str, value: object) -> C.Act:
    C.check_choice(fname, name, value, tuple(BNNS_ACTIVATIONS))
    assert isinstance(value, str)  # check_choice raised otherwise
    return BNNS_ACTIVATIONS[value]


def _weights(fname: str, g: int, input_hidden_weight: Any, hidden_hidden_weight: Any
             ) -> tuple[np.ndarray, np.ndarray, int]:
    w = C.to_numpy(fname, "input_hidden_weight", input_hidden_weight)
    r = C.to_numpy(fname, "hidden_hidden_weight", hidden_hidden_weight)
    C.check_rank(fname, "hidden_hidden_weight", r, 2, f"({g}*hidden, hidden)")
    hidden = r.shape[-1]
    C.check_shape(fname, "hidden_hidden_weight", r, (g * hidden, hidden), f"({g}*hidden, hidden)")
    C.check_rank(fname, "input_hidden_weight", w, 2, f"({g}*hidden, input_size)")
    C.check_shape(fname, "input_hidden_weight", w, (g * hidden, w.shape[-1]),
                  f"({g}*hidden, input_size)")
    return w, r, hidden


def _bias(fname: str, name: str, value: Any, g: int, hidden: int) -> np.ndarray | None:
    if value is None:
        return None
    v = C.to_numpy(fname, name, value)
    C.check_shape(fname, name, v, (g * hidden,), f"({g}*hidden,)")
    return v


def from_bnns_gru(
    input_hidden_weight: Any,
    hidden_hidden_weight: Any,
    bias: Any,
    input_bias: Any | None = None,
    *,
    apply_reset_gate_after_matmul: bool = False,
    direction: str = "forward",
    activation: str = "tanh",
    recurrent_activation: str = "sigmoid",
) -> tuple[list[GRUParams], dict[str, Any]]:
    """Convert the weights of a BNNS Graph ``gru`` to jaxgru (see the module docstring).

    Args:
      input_hidden_weight: ``(3H, I)``, gate blocks r, n, z.
      hidden_hidden_weight: ``(3H, H)``, gate blocks r, n, z.
      bias: ``(3H,)`` (r, n, z): the summed biases when ``apply_reset_gate_after_matmul`` is
        False, the hidden-side biases when it is True. None means zeros.
      input_bias: ``(3H,)`` (r, n, z) input-side biases, used when
        ``apply_reset_gate_after_matmul`` is True; must be None or zero otherwise.
      apply_reset_gate_after_matmul: BNNS's ``applyResetGateAfterMatMul``.
      direction: ``"forward"`` or ``"reverse"``.
      activation: BNNS ``activation`` (A): ``"tanh"``, ``"sigmoid"`` or ``"relu"``.
      recurrent_activation: BNNS ``recurrentActivation`` (RA), likewise.

    Returns:
      ``(layers, options)``: ``[GRUParams]`` (D = 1) in the weights' dtype and options for
      ``jaxgru.gru`` (``linear_before_reset=True``, ``layout=0``: BNNS's ``x`` is
      ``(L, N, I)``).

    Raises:
      ValueError: bad shapes, names, or a nonzero ``input_bias`` with the flag False.
      TypeError: non-array or non-floating weights, or weights of different dtypes.
    """
    fname = "jaxgru.interop.from_bnns_gru"
    after = C.check_bool(fname, "apply_reset_gate_after_matmul", apply_reset_gate_after_matmul)
    C.check_choice(fname, "direction", direction, BNNS_DIRECTIONS)
    acts = (_act(fname, "recurrent_activation", recurrent_activation),
            _act(fname, "activation", activation))
    w, r, hidden = _weights(fname, 3, input_hidden_weight, hidden_hidden_weight)
    b_h = _bias(fname, "bias", bias, 3, hidden)
    b_i = _bias(fname, "input_bias", input_bias, 3, hidden)
    C.same_dtype(fname, {"input_hidden_weight": w, "hidden_hidden_weight": r, "bias": b_h,
                         "input_bias": b_i})
    if not after and not C.is_zero(b_i):
        raise ValueError(
            f"{fname}: input_bias is only used with apply_reset_gate_after_matmul=True (with "
            "False, BNNS's bias is the sum of the input and hidden biases); got a nonzero "
            "input_bias with apply_reset_gate_after_matmul=False. Add it into bias instead."
        )
    order = _layout.BNNS_GRU
    to = lambda a: None if a is None else _layout.to_onnx(a, order)
    if after:  # n = A(W_in x + b_in + r ⊙ (W_hn h + b_hn)): Wb = inputBias, Rb = bias
        wb, rb = to(b_i), to(b_h)
    else:  # n = A(W_in x + r ⊙ (W_hn h) + (b_in + b_hn)): every bias on the input side
        wb, rb = to(b_h), None
    b = None if wb is None and rb is None else _layout.onnx_bias(wb, rb, like=w[:, 0])
    params = GRUParams(C.as_jax(_layout.to_onnx(w, order)[None]), C.as_jax(_layout.to_onnx(r, order)[None]),
                       None if b is None else C.as_jax(b[None]))
    options = {"direction": direction, "layout": 0, "linear_before_reset": True,
               **C.activation_options("gru", acts, direction)}
    return [params], options


def from_bnns_lstm(
    input_hidden_weight: Any,
    hidden_hidden_weight: Any,
    bias: Any | None = None,
    *,
    bias_order: str = "ifog",
    direction: str = "forward",
    activation: str = "tanh",
    recurrent_activation: str = "sigmoid",
    cell_activation: str = "tanh",
) -> tuple[list[LSTMParams], dict[str, Any]]:
    """Convert the weights of a BNNS Graph ``lstm`` to jaxgru (see the module docstring).

    Args:
      input_hidden_weight: ``(4H, I)``, gate blocks i, f, o, g.
      hidden_hidden_weight: ``(4H, H)``, gate blocks i, f, o, g.
      bias: ``(4H,)`` summed biases, or None (zeros).
      bias_order: gate order of ``bias``: ``"ifog"`` (default, like the weights) or
        ``"ifgo"`` (as the documentation's bias line writes it).
      direction: ``"forward"`` or ``"reverse"``.
      activation: BNNS ``activation`` (A, applied to the new cell state): ``"tanh"``,
        ``"sigmoid"`` or ``"relu"``.
      recurrent_activation: BNNS ``recurrentActivation`` (RA, the i, f, o gates), likewise.
      cell_activation: BNNS ``cellActivation`` (CA, the cell gate g), likewise.

    Returns:
      ``(layers, options)``: ``[LSTMParams]`` (D = 1, no peepholes) and options for
      ``jaxgru.lstm`` (``layout=0``).

    Raises:
      ValueError: bad shapes or names (named in the message).
      TypeError: non-array or non-floating weights, or weights of different dtypes.
    """
    fname = "jaxgru.interop.from_bnns_lstm"
    C.check_choice(fname, "bias_order", bias_order, _layout.BNNS_LSTM_BIAS_ORDERS)
    C.check_choice(fname, "direction", direction, BNNS_DIRECTIONS)
    acts = (_act(fname, "recurrent_activation", recurrent_activation),
            _act(fname, "cell_activation", cell_activation),
            _act(fname, "activation", activation))
    w, r, hidden = _weights(fname, 4, input_hidden_weight, hidden_hidden_weight)
    b = _bias(fname, "bias", bias, 4, hidden)
    C.same_dtype(fname, {"input_hidden_weight": w, "hidden_hidden_weight": r, "bias": b})
    order = _layout.BNNS_LSTM
    if b is not None:
        b = _layout.onnx_bias(_layout.to_onnx(b, bias_order), None, like=b)[None]
    params = LSTMParams(C.as_jax(_layout.to_onnx(w, order)[None]),
                        C.as_jax(_layout.to_onnx(r, order)[None]), C.as_jax(b))
    options = {"direction": direction, "layout": 0, "input_forget": False,
               **C.activation_options("lstm", acts, direction)}
    return [params], options
