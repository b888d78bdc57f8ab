"""Public entry points: normalise options, validate, materialise absent operands, dispatch.

The keyword options are declared once, in ``options.OPTIONS``; the signatures below spell them
out for readers and tests/test_options.py checks that they match the table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxgru._src import backends, shapes
from jaxgru._src import dropout as _dropout
from jaxgru._src.cells import direction_axis, spec
from jaxgru._src.options import (
    OPTIONS_BY_NAME,
    RNNConfig,
    check_names,
    make_config,
    num_directions,
    option_names,
    pick,
    rounds_recurrent,
)
from jaxgru._src.params import PARAMS_TYPE, GRUParams, LSTMParams
from jaxgru._src.primitives import run_layer

__all__ = ["gru", "gru_cell", "gru_stack", "lstm", "lstm_cell", "lstm_stack", "make_config"]

_OPTION = OPTIONS_BY_NAME


# --------------------------------------------------------------------------------------
# operands
# --------------------------------------------------------------------------------------
def _array(fname: str, name: str, v: Any) -> Any:
    if isinstance(v, (jax.Array, np.ndarray)) or hasattr(v, "__jax_array__"):
        return v
    if type(v).__name__ == "PackedSequence" and type(v).__module__.startswith("torch"):  # torch not imported
        raise TypeError(f"{fname}: {name} is a torch PackedSequence; convert it with "
                        "jaxgru.interop.from_packed_sequence(packed) -> (x, sequence_lens).")
    try:
        return jnp.asarray(v)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{fname}: {name} must be an array; got {type(v).__name__}.") from e


def _check_params(fname: str, cell: str, params: Any) -> None:
    cls = PARAMS_TYPE[cell]
    if not isinstance(params, cls):
        raise TypeError(
            f"{fname}: params must be jaxgru.{cls.__name__}; got {type(params).__name__}."
        )
    for field in params._fields:
        v = getattr(params, field)
        if v is None:
            if field in ("w", "r"):
                raise TypeError(f"{fname}: params.{field} is required; got None.")
            continue
        v = _array(fname, f"params.{field}", v)
        shapes.check_float(fname, f"params.{field}", v)


def _concrete_lens(fname: str, lens: Any, length: int) -> None:
    try:
        values = np.asarray(lens)
    except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError):
        return  # traced: clamped into [0, L] inside (documented)
    if values.size and (values.min() < 0 or values.max() > length):
        raise ValueError(
            f"{fname}: sequence_lens must lie in [0, seq_length={length}]; got values in "
            f"[{values.min()}, {values.max()}]."
        )


def _lens(fname: str, sequence_lens: Any, batch: int, length: int) -> Any:
    if sequence_lens is None:
        # lax.full, not jnp.full: jax2onnx's jnp.full takes no symbolic batch
        return jax.lax.full((batch,), length, jnp.int32)
    lens = _array(fname, "sequence_lens", sequence_lens)
    if not np.issubdtype(np.dtype(lens.dtype), np.integer):
        raise TypeError(
            f"{fname}: sequence_lens must have an integer dtype; got {np.dtype(lens.dtype).name}."
        )
    shapes.check_shape(fname, "sequence_lens", lens, (batch,), "(batch,)")
    _concrete_lens(fname, lens, length)
    return jnp.asarray(lens).astype(jnp.int32)


def _layer(cell: str, fname: str, params: Any, x: Any, states: Mapping[str, Any], sequence_lens: Any,
           options: Mapping[str, Any]) -> tuple[jax.Array, ...]:
    """One layer: validate, materialise absent operands as zeros, bind.

    Args:
      states: initial states by operand name (``initial_h``[, ``initial_c``]); None for zeros.
      options: keyword options of the cell (``options.OPTIONS``).
    """
    cs = spec(cell)
    _check_params(fname, cell, params)
    x = _array(fname, "x", x)
    shapes.check_float(fname, "x", x)
    state_ops = {o.name: o for o in cs.state_operands}
    for name in states:
        if name not in state_ops:
            raise TypeError(f"{fname}: {name} is not an argument of the {cell.upper()}.")
    peepholes = bool(cs.peepholes) and params.p is not None
    proj = cs.projection and params.proj is not None
    cfg = make_config(cell, fname, ragged=sequence_lens is not None, peepholes=peepholes, proj=proj, **options)
    r = _array(fname, "params.r", params.r)
    shapes.check_rank(fname, "x", x, 3, shapes.x_meaning(cfg.layout))
    shapes.check_rank(fname, "params.r", r, 3, "(num_directions, gates*hidden, hidden)")
    shapes.check_projected_r(fname, cfg, r)
    length, batch, isize, hidden, d = shapes.sizes(cfg, x, r)
    out = shapes.out_size(cfg, r)
    given = {f: _array(fname, f"params.{f}", getattr(params, f)) for f in cs.param_fields
             if getattr(params, f) is not None}
    for name, v in states.items():
        if v is not None:
            given[state_ops[name].field] = v = _array(fname, name, v)
            shapes.check_float(fname, name, v)
    # One storage dtype for the call: JAX's promotion of every floating input, canonical (a
    # numpy float64 input computes in float32 unless x64 is on, as jnp functions do, silently).
    dtype = x.dtype
    with jax.numpy_dtype_promotion("standard"):  # documented rule, whatever the user's setting
        for a in given.values():
            dtype = jnp.promote_types(dtype, a.dtype)
    dtype = jax.dtypes.canonicalize_dtype(dtype)
    # absent weights are zeros (an absent proj is no operand at all: cells.operands_for)
    zeros = {f: s for f, (s, _) in cs.param_shapes(d, hidden, isize).items()}
    zeros.update({o.field: shapes.state_shape(cfg, batch, cs.state_size(o.field, hidden, out))
                  for o in cs.state_operands})
    values = {"x": x, "lens": _lens(fname, sequence_lens, batch, length), **given}
    operands = []
    for o in cs.operands_for(cfg):
        v = values.get(o.field)
        if o.kind == "lens":
            operands.append(v)
        else:
            operands.append(jnp.zeros(zeros[o.field], dtype) if v is None else jnp.asarray(v).astype(dtype))
    shapes.check_operands(cfg, fname, operands)
    operands = _round_recurrent(cfg, fname, operands, dtype)
    cfg = backends.configure(cfg, fname, dtype)
    out_dtype = jax.dtypes.canonicalize_dtype(x.dtype)
    return tuple(o.astype(out_dtype) for o in run_layer(cfg, operands))


def _round_recurrent(cfg: RNNConfig, fname: str, operands: list[jax.Array], dtype: Any) -> list[jax.Array]:
    """``recurrent_dtype="float16"``: R (and an LSTM's proj) rounded to float16, on every backend.

    The rounding is done here, in the program, before the primitive, so every backend computes
    with the same values (the wgsl backend then stores them in f16 losslessly) and the
    derivatives need no rule of their own: the gradient passes straight through the rounding
    (``r + stop_gradient(round(r) - r)`` is ``round(r)``, exactly: the difference of a float32
    and its float16 rounding is a float32).
    """
    if not rounds_recurrent(fname, cfg.recurrent_dtype, dtype):
        return operands
    ops = spec(cfg.cell).operands_for(cfg)
    return [a + jax.lax.stop_gradient(a.astype(jnp.float16).astype(a.dtype) - a) if o.field in ("r", "proj") else a
            for o, a in zip(ops, operands, strict=True)]


# --------------------------------------------------------------------------------------
# public functions
# --------------------------------------------------------------------------------------
def gru(
    params: GRUParams,
    x: ArrayLike,
    *,
    initial_h: ArrayLike | None = None,
    sequence_lens: ArrayLike | None = None,
    direction: str = "forward",
    layout: int = 0,
    linear_before_reset: bool = False,
    activations: Sequence[str] | None = None,
    activation_alpha: Sequence[float] | None = None,
    activation_beta: Sequence[float] | None = None,
    clip: float | None = None,
    recurrent_dtype: str | None = None,
    backend: str = "auto",
) -> tuple[jax.Array, jax.Array]:
    """The ONNX ``GRU`` operator (opset 22): a GRU layer over a whole sequence.

    Args:
      params: ``GRUParams(w [D,3H,I], r [D,3H,H], b [D,6H] | None)``, gates z, r, h.
      x: inputs ``[L, N, I]`` (layout 0) or ``[N, L, I]`` (layout 1).
      initial_h: ``[D, N, H]`` (layout 0) or ``[N, D, H]`` (layout 1); zeros if None.
      sequence_lens: ``[N]`` integer lengths in ``[0, L]``; Y is zero past each length and
        Y_h holds the last valid state (the initial state for length 0).
      direction: "forward", "reverse" or "bidirectional" (D = 2).
      layout: 0 or 1, as the ONNX attribute.
      linear_before_reset: apply the reset gate after the recurrent matmul (PyTorch: True).
      activations: 2 names per direction (f, g); default ("Sigmoid", "Tanh") per direction.
      activation_alpha: alpha values, consumed in order by the activations that take one.
      activation_beta: beta values, likewise.
      clip: clamp every activation input into ``[-clip, clip]``.
      recurrent_dtype: None, or "float16": the recurrent weights ``r`` rounded to float16
        (accumulation stays float32; the gradient passes straight through the rounding). On
        the wgsl backend R's device copy is then f16 (half the bytes read per step); every
        backend computes with the same rounded values. For float32 calls.
      backend: "auto", "xla", "wgsl" or "cpu" (see docs/backends.md).

    Returns:
      ``(y, y_h)``: ``y [L, D, N, H]`` (layout 0) or ``[N, L, D, H]`` (layout 1), and
      ``y_h [D, N, H]`` or ``[N, D, H]``, in the dtype of ``x``.

    Raises:
      TypeError, ValueError: a bad argument, named in the message (at trace time).

    Example:
      >>> import jax, jaxgru
      >>> params = jaxgru.init_gru(jax.random.key(0), input_size=3, hidden_size=5)
      >>> y, y_h = jaxgru.gru(params, jax.numpy.ones((7, 2, 3)))
      >>> y.shape, y_h.shape
      ((7, 1, 2, 5), (1, 2, 5))
    """
    y, y_h = _layer("gru", "jaxgru.gru", params, x, {"initial_h": initial_h}, sequence_lens,
                    pick(option_names("gru"), locals()))
    return y, y_h


def lstm(
    params: LSTMParams,
    x: ArrayLike,
    *,
    initial_h: ArrayLike | None = None,
    initial_c: ArrayLike | None = None,
    sequence_lens: ArrayLike | None = None,
    direction: str = "forward",
    layout: int = 0,
    input_forget: bool = False,
    activations: Sequence[str] | None = None,
    activation_alpha: Sequence[float] | None = None,
    activation_beta: Sequence[float] | None = None,
    clip: float | None = None,
    recurrent_dtype: str | None = None,
    backend: str = "auto",
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The ONNX ``LSTM`` operator (opset 22): an LSTM layer over a whole sequence.

    Args:
      params: ``LSTMParams(w [D,4H,I], r [D,4H,H], b [D,8H] | None, p [D,3H] | None,
        proj [D,P,H] | None)``, gates i, o, f, c; peepholes i, o, f. With ``proj`` (PyTorch's
        ``proj_size``) ``r`` is ``[D,4H,P]`` and h = proj·(o ⊙ h(c)): ``y``, ``y_h`` and
        ``initial_h`` have P features, ``y_c`` and ``initial_c`` keep H.
      x: inputs ``[L, N, I]`` (layout 0) or ``[N, L, I]`` (layout 1).
      initial_h: ``[D, N, H]`` (layout 0) or ``[N, D, H]`` (layout 1); zeros if None.
      initial_c: like ``initial_h``, the initial cell state.
      sequence_lens: ``[N]`` integer lengths in ``[0, L]``.
      direction: "forward", "reverse" or "bidirectional" (D = 2).
      layout: 0 or 1, as the ONNX attribute.
      input_forget: couple the forget gate to the input gate (f = 1 - i).
      activations: 3 names per direction (f, g, h); default ("Sigmoid", "Tanh", "Tanh").
      activation_alpha: alpha values, consumed in order by the activations that take one.
      activation_beta: beta values, likewise.
      clip: clamp every gate's activation input into ``[-clip, clip]``.
      recurrent_dtype: None, or "float16": the recurrent weights ``r`` and ``proj`` rounded to float16
        (accumulation stays float32; the gradient passes straight through the rounding). On
        the wgsl backend R's device copy is then f16 (half the bytes read per step); every
        backend computes with the same rounded values. For float32 calls.
      backend: "auto", "xla", "wgsl" or "cpu" (see docs/backends.md).

    Returns:
      ``(y, y_h, y_c)`` with the shapes of ``gru``'s ``(y, y_h)`` and ``y_c`` like ``y_h``.

    Raises:
      TypeError, ValueError: a bad argument, named in the message (at trace time).

    Example:
      >>> import jax, jaxgru
      >>> params = jaxgru.init_lstm(jax.random.key(0), input_size=3, hidden_size=5)
      >>> y, y_h, y_c = jaxgru.lstm(params, jax.numpy.ones((2, 7, 3)), layout=1)
      >>> y.shape, y_c.shape
      ((2, 7, 1, 5), (2, 1, 5))
    """
    y, y_h, y_c = _layer("lstm", "jaxgru.lstm", params, x, {"initial_h": initial_h, "initial_c": initial_c},
                         sequence_lens, pick(option_names("lstm"), locals()))
    return y, y_h, y_c


def _cell(cell: str, fname: str, params: Any, x_t: Any, states: dict[str, Any], options: dict[str, Any]
          ) -> tuple[jax.Array, ...]:
    """One time step: a one-step layer (D = 1, layout 0) on ``x_t [N, I]`` and states ``[N, H]``.

    Args:
      states: the previous states by their argument name (``h``[, ``c``]), in the cell's order.
    """
    _check_params(fname, cell, params)
    check_names(fname, options, option_names(cell, per_step=True))
    x_t = _array(fname, "x_t", x_t)
    shapes.check_rank(fname, "x_t", x_t, 2, "(batch, input_size)")
    arrays = {name: _array(fname, name, s) for name, s in states.items()}
    for name, s in arrays.items():
        shapes.check_rank(fname, name, s, 2, "(batch, hidden)")
    w = _array(fname, "params.w", params.w)
    if len(w.shape) != 3 or w.shape[0] != 1:
        raise ValueError(
            f"{fname}: params must hold one direction, w of shape (1, gates*hidden, input_size); "
            f"got w of shape {tuple(w.shape)}."
        )
    # name the cell's own arguments (the layer below would report initial_h / initial_c / x)
    shapes.check_float(fname, "x_t", x_t)
    r = _array(fname, "params.r", params.r)
    projected = getattr(params, "proj", None) is not None  # h has R's P features, c keeps H
    for name, s in arrays.items():
        shapes.check_float(fname, name, s)
        if len(r.shape) == 3:
            width, meaning = r.shape[-1], "(batch, proj_size)" if projected else "(batch, hidden)"
            if projected and name == "c":
                width, meaning = r.shape[1] // spec(cell).num_gates, "(batch, hidden)"
            shapes.check_shape(fname, name, s, (x_t.shape[0], width), meaning)
    initial = {o.name: jnp.asarray(s)[None] for o, s in zip(spec(cell).state_operands, arrays.values())}
    return _layer(cell, fname, params, x_t[None], initial, None, options)[1:]


def gru_cell(params: GRUParams, x_t: ArrayLike, h: ArrayLike, **options: Any) -> jax.Array:
    """One GRU time step (D = 1).

    Args:
      params: a one-direction ``GRUParams``.
      x_t: inputs ``[N, I]``.
      h: previous hidden state ``[N, H]``.
      **options: ``linear_before_reset``, ``activations``, ``activation_alpha``,
        ``activation_beta``, ``clip``, ``recurrent_dtype``, ``backend`` as in ``gru``.

    Returns:
      The new hidden state ``[N, H]``.
    """
    (y_h,) = _cell("gru", "jaxgru.gru_cell", params, x_t, {"h": h}, options)
    return y_h[0]


def lstm_cell(
    params: LSTMParams, x_t: ArrayLike, h: ArrayLike, c: ArrayLike, **options: Any
) -> tuple[jax.Array, jax.Array]:
    """One LSTM time step (D = 1).

    Args:
      params: a one-direction ``LSTMParams``.
      x_t: inputs ``[N, I]``.
      h: previous hidden state ``[N, H]`` (``[N, P]`` with a projection ``params.proj``).
      c: previous cell state ``[N, H]``.
      **options: ``input_forget``, ``activations``, ``activation_alpha``, ``activation_beta``,
        ``clip``, ``recurrent_dtype``, ``backend`` as in ``lstm``.

    Returns:
      ``(h, c)``, the new hidden and cell states ``[N, H]`` (with ``params.proj``: h
      ``[N, P]``, c ``[N, H]``).
    """
    y_h, y_c = _cell("lstm", "jaxgru.lstm_cell", params, x_t, {"h": h, "c": c}, options)
    return y_h[0], y_c[0]


def _stack(cell: str, fname: str, layers: Any, x: Any, states: dict[str, Any], options: dict[str, Any],
           dropout: Any = 0.0, key: Any = None) -> tuple[jax.Array, ...]:
    """Layers in sequence; each layer's options are ``options`` (minus ``sequence_lens``).

    ``dropout`` / ``key``: dropout between layers (``dropout.py``); none without a key.
    """
    cls = PARAMS_TYPE[cell]
    if isinstance(layers, cls) or not isinstance(layers, Sequence) or not layers:
        raise TypeError(
            f"{fname}: layers must be a non-empty list of jaxgru.{cls.__name__}; got "
            f"{type(layers).__name__}."
        )
    check_names(fname, options, ("sequence_lens", *option_names(cell)))
    rate, key = _dropout.check(fname, dropout, key)
    options = dict(options)
    sequence_lens = options.pop("sequence_lens", None)
    direction = _OPTION["direction"].check(fname, "direction", options.get("direction", "forward"))
    layout = _OPTION["layout"].check(fname, "layout", options.get("layout", 0))
    d = num_directions(direction)
    axis = direction_axis("state", layout)
    n_layers = len(layers)
    x = _array(fname, "x", x)
    init = {}
    for name, s in states.items():
        if s is None:
            continue
        s = _array(fname, name, s)
        shapes.check_rank(fname, name, s, 3, "(num_layers*num_directions, batch, hidden)")
        if s.shape[axis] != n_layers * d:
            raise ValueError(
                f"{fname}: {name} must have num_layers*num_directions={n_layers * d} entries "
                f"on axis {axis}; got shape {tuple(s.shape)}."
            )
        init[name] = s
    finals: list[list[jax.Array]] = [[] for _ in states]
    keys = _dropout.layer_keys(rate, key, n_layers)
    y = x
    for k, params in enumerate(layers):
        # np.shape, not jnp.shape: jax2onnx patches jnp.shape to return a traced array
        w_shape = np.shape(params.w) if isinstance(params, cls) and params.w is not None else ()
        if k and len(w_shape) == 3 and w_shape[-1] != x.shape[-1]:
            raise ValueError(
                f"{fname}: layers[{k}] must read the previous layer's outputs, num_directions*hidden="
                f"{x.shape[-1]} features; got params.w of shape {tuple(w_shape)} (input_size {w_shape[-1]})."
            )
        kw = {n: jax.lax.slice_in_dim(s, k * d, (k + 1) * d, axis=axis) for n, s in init.items()}
        y, *last = _layer(cell, f"{fname} (layers[{k}])", params, x, kw, sequence_lens, options)
        for acc, s in zip(finals, last):
            acc.append(s)
        # next layer's input: the directions' outputs side by side, [L, N, D*H] / [N, L, D*H]
        if layout == 0:
            length, _, batch, hidden = y.shape
            x = jnp.transpose(y, (0, 2, 1, 3)).reshape(length, batch, d * hidden)
        else:
            batch, length, _, hidden = y.shape
            x = y.reshape(batch, length, d * hidden)
        if keys is not None and k < n_layers - 1:  # every layer's output but the last
            x = _dropout.apply(x, rate, keys[k])
    return (y, *(jnp.concatenate(s, axis=axis) for s in finals))


def gru_stack(
    layers: Sequence[GRUParams],
    x: ArrayLike,
    *,
    initial_h: ArrayLike | None = None,
    dropout: float = 0.0,
    key: jax.Array | None = None,
    **options: Any,
) -> tuple[jax.Array, jax.Array]:
    """A multi-layer GRU: layer k+1 reads layer k's outputs, directions side by side.

    Dropout between layers is PyTorch's ``nn.GRU(dropout=p)`` (inverted): with
    ``keys = jax.random.split(key, num_layers)``, the output of each layer ``k`` but the last
    (the next layer's input ``x_k``, ``[L, N, D*H]`` or ``[N, L, D*H]``) becomes
    ``jnp.where(jax.random.bernoulli(keys[k], 1 - dropout, x_k.shape), x_k * (1 / (1 - dropout)), 0)``.
    Without a key nothing is dropped (inference), whatever ``dropout`` is.

    Args:
      layers: one ``GRUParams`` per layer; layer k > 0 has input size ``D * H``.
      x: inputs ``[L, N, I]`` (layout 0) or ``[N, L, I]`` (layout 1).
      initial_h: ``[num_layers*D, N, H]`` (layout 0) or ``[N, num_layers*D, H]`` (layout 1),
        layer-major then direction (PyTorch's order); zeros if None.
      dropout: the rate in [0, 1) at which each layer's output but the last is zeroed (the kept
        values are scaled by ``1 / (1 - dropout)``); applied only with a ``key``.
      key: a JAX PRNG key for the dropout masks; None for no dropout (inference).
      **options: ``sequence_lens`` and every keyword option of ``gru`` (applied to each layer).

    Returns:
      ``(y, h_n)``: the last layer's ``y`` (as ``gru`` returns it) and the final states of
      every layer, shaped like ``initial_h``.

    Raises:
      TypeError, ValueError: a bad argument, named in the message (``dropout`` outside [0, 1),
        a ``key`` that is not a PRNG key, layers that do not chain, ...).

    Example:
      >>> import jax, jax.numpy as jnp, jaxgru
      >>> layers = [jaxgru.init_gru(jax.random.key(0), 3, 5), jaxgru.init_gru(jax.random.key(1), 5, 5)]
      >>> x = jnp.ones((7, 2, 3))
      >>> y, h_n = jaxgru.gru_stack(layers, x, dropout=0.5, key=jax.random.key(2))  # training
      >>> y_eval, _ = jaxgru.gru_stack(layers, x, dropout=0.5)  # no key: no dropout
      >>> y.shape, h_n.shape, bool(jnp.all(y_eval == jaxgru.gru_stack(layers, x)[0]))
      ((7, 1, 2, 5), (2, 2, 5), True)
    """
    y, h_n = _stack("gru", "jaxgru.gru_stack", layers, x, {"initial_h": initial_h}, options, dropout, key)
    return y, h_n


def lstm_stack(
    layers: Sequence[LSTMParams],
    x: ArrayLike,
    *,
    initial_h: ArrayLike | None = None,
    initial_c: ArrayLike | None = None,
    dropout: float = 0.0,
    key: jax.Array | None = None,
    **options: Any,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """A multi-layer LSTM: layer k+1 reads layer k's outputs, directions side by side.

    Dropout between layers is PyTorch's ``nn.LSTM(dropout=p)``, drawn as in ``gru_stack``
    (``keys = jax.random.split(key, num_layers)``, ``keys[k]`` masks layer k's output, the
    last layer's output is kept whole); without a key nothing is dropped (inference).

    Args:
      layers: one ``LSTMParams`` per layer; layer k > 0 has input size ``D * H``.
      x: inputs ``[L, N, I]`` (layout 0) or ``[N, L, I]`` (layout 1).
      initial_h: ``[num_layers*D, N, H]`` (layout 0) or ``[N, num_layers*D, H]`` (layout 1).
      initial_c: like ``initial_h``.
      dropout: the rate in [0, 1) at which each layer's output but the last is zeroed (the kept
        values are scaled by ``1 / (1 - dropout)``); applied only with a ``key``.
      key: a JAX PRNG key for the dropout masks; None for no dropout (inference).
      **options: ``sequence_lens`` and every keyword option of ``lstm`` (applied to each layer).

    Returns:
      ``(y, h_n, c_n)``: the last layer's ``y`` and the final states of every layer.

    Raises:
      TypeError, ValueError: a bad argument, named in the message.

    Example:
      >>> import jax, jax.numpy as jnp, jaxgru
      >>> layers = [jaxgru.init_lstm(jax.random.key(0), 3, 5), jaxgru.init_lstm(jax.random.key(1), 5, 5)]
      >>> y, h_n, c_n = jaxgru.lstm_stack(layers, jnp.ones((7, 2, 3)), dropout=0.2, key=jax.random.key(2))
      >>> y.shape, c_n.shape
      ((7, 1, 2, 5), (2, 2, 5))
    """
    y, h_n, c_n = _stack("lstm", "jaxgru.lstm_stack", layers, x,
                         {"initial_h": initial_h, "initial_c": initial_c}, options, dropout, key)
    return y, h_n, c_n
