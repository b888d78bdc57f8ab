"""Equinox ``eqx.nn.GRUCell`` / ``eqx.nn.LSTMCell`` -> jaxgru parameters.

Equinox's formulas (``equinox/nn/_rnn.py``; weights ``(gates*H, in)``, applied as ``W @ x``):

    GRUCell (rows r, z, n)   r = σ(W_r x + b_r + R_r h)      z = σ(W_z x + b_z + R_z h)
        n = tanh(W_n x + b_n + r ⊙ (R_n h + bias_n))          h' = n + z ⊙ (h − n)
    LSTMCell (rows i, f, g, o)   i, f, o = σ(W_* x + R_* h + b_*)   g = tanh(W_g x + R_g h + b_g)
        c' = f ⊙ c + i ⊙ g                                    h' = o ⊙ tanh(c')

``h' = n + z ⊙ (h − n)`` is ``(1 − z) ⊙ n + z ⊙ h``, so the GRU is the ONNX GRU with
``linear_before_reset=1``, rows r, z, n -> z, r, h, ``Wb`` = the reordered ``bias`` and ``Rb``
zero but for its h block, ``bias_n``. The LSTM is the ONNX LSTM without peepholes, rows
i, f, g, o -> i, o, f, c, with ``bias`` on the input side (``Rb = 0``). ``use_bias=False``
gives ``b=None``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from jaxgru._src.params import GRUParams, LSTMParams
from jaxgru.interop import _common as C
from jaxgru.interop import _layout


def _kind(cell: Any) -> str | None:
    """"gru" / "lstm" for an Equinox cell, else None (equinox imported only for an Equinox object)."""
    if type(cell).__module__.split(".")[0] != "equinox":
        return None
    import equinox as eqx

    if isinstance(cell, eqx.nn.GRUCell):
        return "gru"
    if isinstance(cell, eqx.nn.LSTMCell):
        return "lstm"
    return None


def from_equinox(cell: Any) -> tuple[list[GRUParams] | list[LSTMParams], dict[str, Any]]:
    """Convert an Equinox ``eqx.nn.GRUCell`` or ``eqx.nn.LSTMCell`` to jaxgru parameters and options.

    Equinox's GRU is ONNX's with ``linear_before_reset=True`` (gate rows r, z, n; ``bias`` on
    the input side, ``bias_n`` inside ``r ⊙ (…)``); its LSTM is ONNX's without peepholes (rows
    i, f, g, o; ``bias`` on the input side). Equinox cells act on one example (``x [I]``,
    ``h [H]``): add the batch axis for jaxgru (``x[None]``), or run a whole sequence with
    ``jaxgru.gru`` / ``lstm`` instead of scanning the cell.

    Args:
      cell: an ``eqx.nn.GRUCell`` or ``eqx.nn.LSTMCell`` (with or without bias).

    Returns:
      ``(layers, options)``: one ``GRUParams`` / ``LSTMParams`` (D = 1, jax arrays in the
      cell's dtype; ``b=None`` when ``use_bias=False``) and the options for ``gru_cell`` /
      ``lstm_cell`` (GRU: ``linear_before_reset=True``; LSTM: none), which also run a whole
      sequence with ``jaxgru.gru`` / ``lstm``.

    Raises:
      TypeError: ``cell`` is not an ``eqx.nn.GRUCell`` or ``eqx.nn.LSTMCell``, or its weights
        are traced, not floating, or of different dtypes.

    Example:
      >>> import jax, jax.numpy as jnp, equinox as eqx, jaxgru
      >>> from jaxgru.interop import from_equinox
      >>> cell = eqx.nn.GRUCell(3, 5, key=jax.random.key(0))
      >>> layers, options = from_equinox(cell)
      >>> x, h = jnp.ones(3), jnp.zeros(5)
      >>> h1 = jaxgru.gru_cell(layers[0], x[None], h[None], **options)[0]
      >>> bool(jnp.allclose(h1, cell(x, h), atol=1e-6))
      True
    """
    fname = "jaxgru.interop.from_equinox"
    kind = _kind(cell)
    if kind is None:
        raise TypeError(f"{fname}: cell must be an equinox.nn.GRUCell or equinox.nn.LSTMCell; got "
                        f"{type(cell).__name__}.")
    order = _layout.EQUINOX_GRU if kind == "gru" else _layout.EQUINOX_LSTM
    fields = ("weight_ih", "weight_hh", "bias", "bias_n") if kind == "gru" else ("weight_ih", "weight_hh", "bias")
    given = {f: C.to_numpy(fname, f"cell.{f}", getattr(cell, f)) for f in fields if getattr(cell, f) is not None}
    C.same_dtype(fname, dict(given))
    w = _layout.to_onnx(given["weight_ih"], order)
    r = _layout.to_onnx(given["weight_hh"], order)
    b = None
    if "bias" in given:
        wb = _layout.to_onnx(given["bias"], order)
        rb = None  # the LSTM: no recurrent bias
        if "bias_n" in given:
            zeros = np.zeros_like(given["bias_n"])
            rb = _layout.stack_gates({"z": zeros, "r": zeros, "n": given["bias_n"]}, _layout.ONNX_GRU)
        b = _layout.onnx_bias(wb, rb, like=wb)
    arrays = (C.as_jax(w[None]), C.as_jax(r[None]), None if b is None else C.as_jax(b[None]))
    if kind == "gru":
        return [GRUParams(*arrays)], {"linear_before_reset": True}
    return [LSTMParams(*arrays)], {}
