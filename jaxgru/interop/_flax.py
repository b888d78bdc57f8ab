"""Flax cells (``flax.linen`` parameter dicts, ``flax.nnx`` modules or states) -> jaxgru.

Flax 0.12's formulas (kernels are ``(in, out)``, applied as ``x @ kernel + bias``), read from
``flax/linen/recurrent.py`` and ``flax/nnx/nn/recurrent.py``:

- linen ``GRUCell``: Dense layers ``ir``, ``iz``, ``in`` (with bias), ``hr``, ``hz`` (no bias),
  ``hn`` (with bias); ``r = σ(ir(x) + hr(h))``, ``z = σ(iz(x) + hz(h))``,
  ``n = tanh(in(x) + r ⊙ hn(h))``, ``h' = (1 − z) ⊙ n + z ⊙ h``. That is ONNX GRU with
  ``linear_before_reset=1``, ``Wb = [b_iz, b_ir, b_in]``, ``Rb = [0, 0, b_hn]``.
- nnx ``GRUCell``: two fused Linear layers, ``dense_i`` (``(I, 3H)``, r, z, n, with bias) and
  ``dense_h`` (``(H, 3H)``, no bias): ``n = tanh(x_n + r ⊙ h_n)``, so ``Wb`` = the
  reordered bias and ``Rb = 0`` (no recurrent bias at all, unlike linen).
- linen ``LSTMCell`` / ``OptimizedLSTMCell`` (same parameters) and nnx ``LSTMCell`` (``if_``
  for ``if``): input Dense ``ii``, ``if``, ``ig``, ``io`` without bias, hidden Dense ``hi``,
  ``hf``, ``hg``, ``ho`` with bias; ``c' = f ⊙ c + i ⊙ g``, ``h' = o ⊙ tanh(c')``: ONNX LSTM
  with ``Wb = 0`` and ``Rb`` the hidden biases. Flax's carry is ``(c, h)``; jaxgru's
  ``lstm_cell`` takes and returns ``(h, c)``.
- nnx ``OptimizedLSTMCell``: ``dense_i`` (``(I, 4H)``, no bias) and ``dense_h`` (``(H, 4H)``,
  with bias), gates i, f, g, o.
- nnx ``RNN``: ``nnx.scan`` of its ``cell`` over the time axis (axis 1 unless ``time_major``),
  from the cell's ``initialize_carry`` (zeros by default); ``reverse=True`` flips the inputs
  (and, with ``keep_order=True``, the outputs back): ONNX ``direction="reverse"``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxgru._src.cells import spec
from jaxgru._src.params import GRUParams, LSTMParams
from jaxgru.interop import _common as C
from jaxgru.interop import _layout
from jaxgru.interop._common import Act

_LINEN_GRU = {"ir", "iz", "in", "hr", "hz", "hn"}
_LSTM = {"ii", "if", "ig", "io", "hi", "hf", "hg", "ho"}
_NNX_LSTM = {"ii", "if_", "ig", "io", "hi", "hf", "hg", "ho"}
_FUSED = {"dense_i", "dense_h"}


def _jax_activations() -> list[tuple[Any, Act]]:
    """Functions Flax cells commonly use, with their exact ONNX equivalents."""
    return [
        (jax.nn.sigmoid, C.SIGMOID), (jnp.tanh, C.TANH), (jax.nn.tanh, C.TANH),
        (jax.nn.relu, C.RELU), (jax.nn.softplus, Act("Softplus")),
        (jax.nn.soft_sign, Act("Softsign")), (jax.nn.elu, Act("Elu", 1.0)),
        (jax.nn.hard_sigmoid, Act("HardSigmoid", 1.0 / 6.0, 0.5)),
    ]


def _activation(fname: str, what: str, fn: Any) -> Act:
    for f, act in _jax_activations():
        if fn is f:
            return act
    label = getattr(fn, "__name__", repr(fn))
    raise NotImplementedError(
        f"{fname}: {what}={label!r} has no exact ONNX equivalent that jaxgru recognises; "
        "supported: jax.nn.sigmoid, tanh, relu, softplus, soft_sign, elu, hard_sigmoid."
    )


def _tree(fname: str, obj: Any) -> tuple[Mapping, Any]:
    """(parameter mapping, module or None) from whatever the user passed."""
    module = None
    if type(obj).__module__.split(".")[0] == "flax":  # an nnx module or state: flax is loaded
        from flax import nnx

        if isinstance(obj, nnx.Module):
            module = obj
            obj = nnx.state(obj, nnx.Param)
        if isinstance(obj, nnx.State):
            obj = nnx.to_pure_dict(obj)
    if not isinstance(obj, Mapping):
        raise TypeError(f"{fname}: cell_params must be a Flax parameter dict, an nnx.State or an "
                        f"nnx cell module; got {type(obj).__name__}.")
    if "params" in obj and isinstance(obj["params"], Mapping):
        obj = obj["params"]
    return obj, module


def _get(fname: str, tree: Mapping, path: tuple[str, ...]) -> np.ndarray:
    node: Any = tree
    for k in path:
        if not isinstance(node, Mapping) or k not in node:
            raise ValueError(f"{fname}: cell_params has no entry {'/'.join(path)}.")
        node = node[k]
    return C.to_numpy(fname, "cell_params[" + "][".join(repr(k) for k in path) + "]", node)


def _has(tree: Mapping, *path: str) -> bool:
    node: Any = tree
    for k in path:
        if not isinstance(node, Mapping) or k not in node:
            return False
        node = node[k]
    return True


def _kind(fname: str, tree: Mapping) -> str:
    keys = set(tree)
    if keys == _LINEN_GRU:
        return "linen_gru"
    if keys in (_LSTM, _NNX_LSTM):
        return "per_gate_lstm"
    if keys == _FUSED:
        if _has(tree, "dense_i", "bias") and not _has(tree, "dense_h", "bias"):
            return "nnx_gru"
        if _has(tree, "dense_h", "bias") and not _has(tree, "dense_i", "bias"):
            return "nnx_optimized_lstm"
    raise ValueError(
        f"{fname}: cannot tell the cell kind from the keys {sorted(keys)}; expected those of a "
        f"linen GRUCell {sorted(_LINEN_GRU)}, a linen LSTMCell/OptimizedLSTMCell {sorted(_LSTM)}, "
        f"an nnx LSTMCell {sorted(_NNX_LSTM)}, or an nnx GRUCell/OptimizedLSTMCell "
        "{'dense_i', 'dense_h'} (bias on dense_i for the GRU, on dense_h for the LSTM)."
    )


def _nnx_rnn(obj: Any) -> Any:
    """``obj`` if it is an ``nnx.RNN`` (flax imported only for a flax object), else None."""
    if type(obj).__module__.split(".")[0] != "flax":
        return None
    from flax import nnx

    return obj if isinstance(obj, nnx.RNN) else None


def _rnn_options(fname: str, rnn: Any) -> dict[str, Any]:
    """The sequence options (direction, layout) that reproduce an ``nnx.RNN`` around its cell."""
    if rnn.reverse and not rnn.keep_order:
        raise NotImplementedError(
            f"{fname}: an nnx.RNN with reverse=True and keep_order=False returns its outputs in reversed "
            "time order, which no ONNX direction does; build it with keep_order=True (ONNX's "
            "direction='reverse'), or convert rnn.cell and flip the outputs along time."
        )
    return {"direction": "reverse" if rnn.reverse else "forward", "layout": 0 if rnn.time_major else 1}


def from_flax(
    cell_params: Any, *, cell: Any = None
) -> tuple[list[GRUParams] | list[LSTMParams], dict[str, Any]]:
    """Convert the parameters of a Flax GRU/LSTM cell to jaxgru.

    The cell kind is detected from the parameter names (see the module docstring for each
    kind's formulas). A linen parameter dict does not record the cell's ``gate_fn`` /
    ``activation_fn``: the defaults (sigmoid, tanh) are assumed unless ``cell`` (the linen
    module instance) is passed. nnx modules carry theirs and are read directly. An ``nnx.RNN``
    is unwrapped to its cell, and its ``time_major`` / ``reverse`` become the options
    ``layout`` / ``direction`` of ``jaxgru.gru`` / ``lstm``, which then reproduce the RNN.

    Args:
      cell_params: the variables of a linen ``GRUCell``, ``LSTMCell`` or ``OptimizedLSTMCell``
        (with or without the top-level ``"params"`` key), an nnx ``GRUCell``, ``LSTMCell`` or
        ``OptimizedLSTMCell`` module, or its ``nnx.state(module, nnx.Param)``, or an
        ``nnx.RNN`` around one of these nnx cells.
      cell: optional linen cell instance whose ``gate_fn``/``activation_fn`` to read.

    Returns:
      ``(layers, options)``: one ``GRUParams``/``LSTMParams`` (D = 1, jax arrays in the
      parameters' dtype) and options for ``gru_cell``/``lstm_cell`` (GRU:
      ``linear_before_reset=True``; activations when not the defaults). The same options run a
      whole sequence with ``jaxgru.gru``/``lstm``; add ``layout=1`` for the batch-major inputs
      of ``flax.linen.RNN``. For an ``nnx.RNN``: options for ``jaxgru.gru`` / ``lstm`` (the
      cell's, plus ``direction`` and ``layout``) that reproduce the RNN over a sequence.

    Raises:
      TypeError: an unsupported object.
      ValueError: keys or shapes that match no Flax cell, or a ``cell`` of another kind.
      NotImplementedError: a ``gate_fn``/``activation_fn`` without an exact ONNX equivalent, or
        an ``nnx.RNN`` with ``reverse=True`` and ``keep_order=False``.

    Example:
      >>> import jax, jax.numpy as jnp, flax.linen as nn, jaxgru
      >>> from jaxgru.interop import from_flax
      >>> cell = nn.GRUCell(features=5)
      >>> x, h = jnp.ones((2, 3)), jnp.zeros((2, 5))
      >>> variables = cell.init(jax.random.key(0), h, x)
      >>> layers, options = from_flax(variables)
      >>> h1, _ = cell.apply(variables, h, x)
      >>> bool(jnp.allclose(jaxgru.gru_cell(layers[0], x, h, **options), h1, atol=1e-6))
      True
    """
    fname = "jaxgru.interop.from_flax"
    rnn = _nnx_rnn(cell_params)
    sequence = {} if rnn is None else _rnn_options(fname, rnn)
    tree, module = _tree(fname, cell_params if rnn is None else rnn.cell)
    kind = _kind(fname, tree)
    source = module if module is not None else cell
    if source is not None:
        name = type(source).__name__
        expected = {"linen_gru": ("GRUCell",), "nnx_gru": ("GRUCell",),
                    "per_gate_lstm": ("LSTMCell", "OptimizedLSTMCell"),
                    "nnx_optimized_lstm": ("OptimizedLSTMCell",)}[kind]
        if name not in expected:
            raise ValueError(f"{fname}: cell is a {name}, but the parameters are those of a "
                             f"{' or '.join(expected)}.")
    get = lambda *path: _get(fname, tree, path)
    if kind == "linen_gru":
        w = _layout.stack_gates({g: _layout.kernel_to_rows(get("i" + g, "kernel")) for g in "zrn"},
                                _layout.ONNX_GRU)
        r = _layout.stack_gates({g: _layout.kernel_to_rows(get("h" + g, "kernel")) for g in "zrn"},
                                _layout.ONNX_GRU)
        hn = get("hn", "bias")
        wb = _layout.stack_gates({g: get("i" + g, "bias") for g in "zrn"}, _layout.ONNX_GRU)
        rb = _layout.stack_gates({"z": np.zeros_like(hn), "r": np.zeros_like(hn), "n": hn},
                                 _layout.ONNX_GRU)
        cell_kind = "gru"
    elif kind == "nnx_gru":
        src = _layout.FLAX_NNX_GRU
        w = _layout.to_onnx(_layout.kernel_to_rows(get("dense_i", "kernel")), src)
        r = _layout.to_onnx(_layout.kernel_to_rows(get("dense_h", "kernel")), src)
        wb, rb = _layout.to_onnx(get("dense_i", "bias"), src), None
        cell_kind = "gru"
    elif kind == "per_gate_lstm":
        f_key = "if_" if "if_" in tree else "if"
        key = lambda side, g: f_key if (side, g) == ("i", "f") else side + g
        w = _layout.stack_gates({g: _layout.kernel_to_rows(get(key("i", g), "kernel"))
                                 for g in "iofg"}, _layout.ONNX_LSTM)
        r = _layout.stack_gates({g: _layout.kernel_to_rows(get(key("h", g), "kernel"))
                                 for g in "iofg"}, _layout.ONNX_LSTM)
        wb, rb = None, _layout.stack_gates({g: get("h" + g, "bias") for g in "iofg"},
                                           _layout.ONNX_LSTM)
        cell_kind = "lstm"
    else:  # nnx_optimized_lstm
        src = _layout.FLAX_NNX_OPTIMIZED_LSTM
        w = _layout.to_onnx(_layout.kernel_to_rows(get("dense_i", "kernel")), src)
        r = _layout.to_onnx(_layout.kernel_to_rows(get("dense_h", "kernel")), src)
        wb, rb = None, _layout.to_onnx(get("dense_h", "bias"), src)
        cell_kind = "lstm"
    g = spec(cell_kind).num_gates
    hidden = r.shape[-1]
    C.check_shape(fname, "the recurrent kernel (transposed)", r, (g * hidden, hidden),
                  f"({g}*hidden, hidden)")
    C.check_shape(fname, "the input kernel (transposed)", w, (g * hidden, w.shape[-1]),
                  f"({g}*hidden, input_size)")
    b = _layout.onnx_bias(wb, rb, like=np.zeros((g * hidden,), w.dtype))
    C.same_dtype(fname, {"input kernels": w, "recurrent kernels": r, "biases": b})
    options: dict[str, Any] = {"linear_before_reset": True} if cell_kind == "gru" else {}
    if source is not None:
        f = _activation(fname, "gate_fn", source.gate_fn)
        a = _activation(fname, "activation_fn", source.activation_fn)
        acts = (f, a) if cell_kind == "gru" else (f, a, a)
        options.update(C.activation_options(cell_kind, acts, "forward"))
    options = {**sequence, **options}
    arrays = (C.as_jax(w[None]), C.as_jax(r[None]), C.as_jax(b[None]))
    return ([GRUParams(*arrays)] if cell_kind == "gru" else [LSTMParams(*arrays)]), options
