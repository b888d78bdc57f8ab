"""Public entry points: normalise options, validate, materialise absent operands, dispatch."""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxgru._src import activations as _acts
from jaxgru._src import backends, shapes
from jaxgru._src.core import run_layer
from jaxgru._src.options import BACKENDS, DEFAULT_ACTIVATIONS, DIRECTIONS, N_ACTIVATIONS, RNNConfig
from jaxgru._src.params import GRUParams, LSTMParams

_PARAMS_TYPE = {"gru": GRUParams, "lstm": LSTMParams}


# --------------------------------------------------------------------------------------
# option normalisation
# --------------------------------------------------------------------------------------
def _flag(fname, name, v) -> bool:
    if isinstance(v, (bool, np.bool_)) or (isinstance(v, numbers.Integral) and v in (0, 1)):
        return bool(v)
    raise ValueError(f"{fname}: {name} must be a bool (or 0/1); got {v!r}.")


def _layout(fname, v) -> int:
    if isinstance(v, numbers.Integral) and not isinstance(v, bool) and v in (0, 1):
        return int(v)
    raise ValueError(f"{fname}: layout must be 0 (time-major) or 1 (batch-major); got {v!r}.")


def _clip(fname, v) -> float | None:
    if v is None:
        return None
    if not isinstance(v, numbers.Real) or isinstance(v, bool):
        raise TypeError(f"{fname}: clip must be a positive number or None; got {v!r}.")
    v = float(v)
    if math.isnan(v) or v <= 0:
        raise ValueError(f"{fname}: clip must be a positive number or None; got {v!r}.")
    return None if math.isinf(v) else v


def _floats(fname, name, v) -> tuple[float, ...]:
    if v is None:
        return ()
    if isinstance(v, numbers.Real) and not isinstance(v, bool):
        v = (v,)
    if not isinstance(v, (Sequence, np.ndarray)) or isinstance(v, str):
        raise TypeError(f"{fname}: {name} must be a list of numbers or None; got {v!r}.")
    out = []
    for e in v:
        if not isinstance(e, numbers.Real) or isinstance(e, bool) or math.isnan(float(e)):
            raise TypeError(f"{fname}: {name} must be a list of numbers; got element {e!r}.")
        out.append(float(e))
    return tuple(out)


def _activations(fname, cell, d, names, alpha, beta):
    per_dir = N_ACTIVATIONS[cell]
    if names is None:
        names = DEFAULT_ACTIVATIONS[cell] * d
    elif isinstance(names, str) or not isinstance(names, Sequence):
        raise TypeError(f"{fname}: activations must be a list of names; got {names!r}.")
    names = list(names)
    if len(names) != per_dir * d:
        raise ValueError(
            f"{fname}: activations must list {per_dir} activations per direction "
            f"({per_dir * d} for {d} direction(s)); got {len(names)}: {names}."
        )
    resolved = _acts.resolve(
        names, _floats(fname, "activation_alpha", alpha), _floats(fname, "activation_beta", beta),
        argname="activations", fname=fname,
    )
    return tuple(resolved[i * per_dir : (i + 1) * per_dir] for i in range(d))


def make_config(
    cell, fname, *, direction, layout, linear_before_reset=False, input_forget=False,
    activations=None, activation_alpha=None, activation_beta=None, clip=None, backend="auto",
    ragged=False, peepholes=False,
) -> RNNConfig:
    """Validate the options of one call and build its static config."""
    if direction not in DIRECTIONS:
        raise ValueError(f"{fname}: direction must be one of {DIRECTIONS}; got {direction!r}.")
    if backend not in BACKENDS:
        raise ValueError(f"{fname}: backend must be one of {BACKENDS}; got {backend!r}.")
    d = 2 if direction == "bidirectional" else 1
    cfg = RNNConfig(
        cell=cell,
        direction=direction,
        layout=_layout(fname, layout),
        linear_before_reset=_flag(fname, "linear_before_reset", linear_before_reset),
        input_forget=_flag(fname, "input_forget", input_forget),
        activations=_activations(fname, cell, d, activations, activation_alpha, activation_beta),
        clip=_clip(fname, clip),
        ragged=ragged,
        peepholes=peepholes,
        backend=backend,
    )
    return cfg


# --------------------------------------------------------------------------------------
# operands
# --------------------------------------------------------------------------------------
def _array(fname, name, v):
    if isinstance(v, (jax.Array, np.ndarray)) or hasattr(v, "__jax_array__"):
        return v
    try:
        return jnp.asarray(v)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{fname}: {name} must be an array; got {type(v).__name__}.") from e


def _check_params(fname, cell, params):
    cls = _PARAMS_TYPE[cell]
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


def _concrete_lens(fname, lens, length):
    try:
        values = np.asarray(lens)
    except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError):
        return  # traced: clamped into [0, L] inside (documented)
    if values.size and (values.min() < 0 or values.max() > length):
        raise ValueError(
            f"{fname}: sequence_lens must lie in [0, seq_length={length}]; got values in "
            f"[{values.min()}, {values.max()}]."
        )


def _layer(cell, fname, params, x, *, initial_h=None, initial_c=None, sequence_lens=None,
           direction="forward", layout=0, linear_before_reset=False, input_forget=False,
           activations=None, activation_alpha=None, activation_beta=None, clip=None,
           backend="auto"):
    _check_params(fname, cell, params)
    x = _array(fname, "x", x)
    shapes.check_float(fname, "x", x)
    peep = cell == "lstm" and params.p is not None
    cfg = make_config(
        cell, fname, direction=direction, layout=layout, linear_before_reset=linear_before_reset,
        input_forget=input_forget, activations=activations, activation_alpha=activation_alpha,
        activation_beta=activation_beta, clip=clip, backend=backend,
        ragged=sequence_lens is not None, peepholes=peep,
    )
    w = _array(fname, "params.w", params.w)
    r = _array(fname, "params.r", params.r)
    shapes.check_rank(fname, "x", x, 3, "(seq_length, batch, input_size)" if cfg.layout == 0
                      else "(batch, seq_length, input_size)")
    shapes.check_rank(fname, "params.r", r, 3, "(num_directions, gates*hidden, hidden)")
    length, batch, _, hidden, d = shapes.sizes(cfg, x, r)
    g = cfg.num_gates
    # One storage dtype for the call: JAX's promotion of every floating input.
    given = [x, w, r] + [_array(fname, n, v) for n, v in (
        ("params.b", params.b), ("params.p", getattr(params, "p", None)),
        ("initial_h", initial_h), ("initial_c", initial_c)) if v is not None]
    for n, v in (("initial_h", initial_h), ("initial_c", initial_c)):
        if v is not None:
            shapes.check_float(fname, n, _array(fname, n, v))
    dtype = x.dtype
    with jax.numpy_dtype_promotion("standard"):  # documented rule, whatever the user's setting
        for a in given[1:]:
            dtype = jnp.promote_types(dtype, a.dtype)
    cast = lambda v: jnp.asarray(v).astype(dtype)
    zeros = lambda shape: jnp.zeros(shape, dtype)
    st = shapes.state_shape(cfg, batch, hidden)
    b = zeros((d, 2 * g * hidden)) if params.b is None else cast(params.b)
    h0 = zeros(st) if initial_h is None else cast(initial_h)
    if sequence_lens is None:
        lens = jnp.full((batch,), length, jnp.int32)
    else:
        lens = _array(fname, "sequence_lens", sequence_lens)
        if not np.issubdtype(np.dtype(lens.dtype), np.integer):
            raise TypeError(
                f"{fname}: sequence_lens must have an integer dtype; got {np.dtype(lens.dtype).name}."
            )
        shapes.check_shape(fname, "sequence_lens", lens, (batch,), "(batch,)")
        _concrete_lens(fname, lens, length)
        lens = jnp.asarray(lens).astype(jnp.int32)
    if cell == "gru":
        if initial_c is not None:
            raise TypeError(f"{fname}: initial_c is an LSTM argument.")
        operands = [cast(x), cast(w), cast(r), b, h0, lens]
    else:
        p = zeros((d, 3 * hidden)) if params.p is None else cast(params.p)
        c0 = zeros(st) if initial_c is None else cast(initial_c)
        operands = [cast(x), cast(w), cast(r), b, p, h0, c0, lens]
    shapes.check_operands(cfg, fname, operands)
    cfg = cfg.replace(backend=backends.resolve(cfg.backend, fname, dtype))
    outs = run_layer(cfg, operands)
    return tuple(o.astype(x.dtype) for o in outs)


# --------------------------------------------------------------------------------------
# public functions
# --------------------------------------------------------------------------------------
def gru(
    params: GRUParams,
    x: jax.Array,
    *,
    initial_h: jax.Array | None = None,
    sequence_lens: jax.Array | None = None,
    direction: str = "forward",
    layout: int = 0,
    linear_before_reset: bool = False,
    activations: Sequence[str] | None = None,
    activation_alpha: Sequence[float] | None = None,
    activation_beta: Sequence[float] | None = None,
    clip: float | None = None,
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
      backend: "auto", "xla" or "wgsl".

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
    return _layer(
        "gru", "jaxgru.gru", params, x, initial_h=initial_h, sequence_lens=sequence_lens,
        direction=direction, layout=layout, linear_before_reset=linear_before_reset,
        activations=activations, activation_alpha=activation_alpha,
        activation_beta=activation_beta, clip=clip, backend=backend,
    )


def lstm(
    params: LSTMParams,
    x: jax.Array,
    *,
    initial_h: jax.Array | None = None,
    initial_c: jax.Array | None = None,
    sequence_lens: jax.Array | None = None,
    direction: str = "forward",
    layout: int = 0,
    input_forget: bool = False,
    activations: Sequence[str] | None = None,
    activation_alpha: Sequence[float] | None = None,
    activation_beta: Sequence[float] | None = None,
    clip: float | None = None,
    backend: str = "auto",
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The ONNX ``LSTM`` operator (opset 22): an LSTM layer over a whole sequence.

    Args:
      params: ``LSTMParams(w [D,4H,I], r [D,4H,H], b [D,8H] | None, p [D,3H] | None)``,
        gates i, o, f, c; peepholes i, o, f.
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
      backend: "auto", "xla" or "wgsl".

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
    return _layer(
        "lstm", "jaxgru.lstm", params, x, initial_h=initial_h, initial_c=initial_c,
        sequence_lens=sequence_lens, direction=direction, layout=layout,
        input_forget=input_forget, activations=activations, activation_alpha=activation_alpha,
        activation_beta=activation_beta, clip=clip, backend=backend,
    )


def _cell_inputs(fname, params, x_t, states):
    x_t = _array(fname, "x_t", x_t)
    shapes.check_rank(fname, "x_t", x_t, 2, "(batch, input_size)")
    states = [(name, _array(fname, name, s)) for name, s in states]
    for name, s in states:
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
    for name, s in states:
        shapes.check_float(fname, name, s)
        if len(r.shape) == 3:
            shapes.check_shape(fname, name, s, (x_t.shape[0], r.shape[-1]), "(batch, hidden)")
    return x_t[None]


def gru_cell(params: GRUParams, x_t: jax.Array, h: jax.Array, **options: Any) -> jax.Array:
    """One GRU time step (D = 1).

    Args:
      params: a one-direction ``GRUParams``.
      x_t: inputs ``[N, I]``.
      h: previous hidden state ``[N, H]``.
      **options: ``linear_before_reset``, ``activations``, ``activation_alpha``,
        ``activation_beta``, ``clip``, ``backend`` as in ``gru``.

    Returns:
      The new hidden state ``[N, H]``.
    """
    fname = "jaxgru.gru_cell"
    _check_params(fname, "gru", params)
    _only(fname, options, ("linear_before_reset", "activations", "activation_alpha",
                           "activation_beta", "clip", "backend"))
    xs = _cell_inputs(fname, params, x_t, (("h", h),))
    _, y_h = _layer("gru", fname, params, xs, initial_h=jnp.asarray(h)[None], **options)
    return y_h[0]


def lstm_cell(
    params: LSTMParams, x_t: jax.Array, h: jax.Array, c: jax.Array, **options: Any
) -> tuple[jax.Array, jax.Array]:
    """One LSTM time step (D = 1).

    Args:
      params: a one-direction ``LSTMParams``.
      x_t: inputs ``[N, I]``.
      h: previous hidden state ``[N, H]``.
      c: previous cell state ``[N, H]``.
      **options: ``input_forget``, ``activations``, ``activation_alpha``, ``activation_beta``,
        ``clip``, ``backend`` as in ``lstm``.

    Returns:
      ``(h, c)``, the new hidden and cell states ``[N, H]``.
    """
    fname = "jaxgru.lstm_cell"
    _check_params(fname, "lstm", params)
    _only(fname, options, ("input_forget", "activations", "activation_alpha",
                           "activation_beta", "clip", "backend"))
    xs = _cell_inputs(fname, params, x_t, (("h", h), ("c", c)))
    _, y_h, y_c = _layer("lstm", fname, params, xs, initial_h=jnp.asarray(h)[None],
                         initial_c=jnp.asarray(c)[None], **options)
    return y_h[0], y_c[0]


def _only(fname, options, allowed):
    for k in options:
        if k not in allowed:
            raise TypeError(f"{fname}: unexpected option {k!r}; allowed: {', '.join(allowed)}.")


def _stack(cell, fname, layers, x, states, options):
    cls = _PARAMS_TYPE[cell]
    if isinstance(layers, cls) or not isinstance(layers, Sequence) or not layers:
        raise TypeError(
            f"{fname}: layers must be a non-empty list of jaxgru.{cls.__name__}; got "
            f"{type(layers).__name__}."
        )
    allowed = ("sequence_lens", "direction", "layout", "activations", "activation_alpha",
               "activation_beta", "clip", "backend")
    _only(fname, options, allowed + (("linear_before_reset",) if cell == "gru" else ("input_forget",)))
    direction = options.get("direction", "forward")
    if direction not in DIRECTIONS:
        raise ValueError(f"{fname}: direction must be one of {DIRECTIONS}; got {direction!r}.")
    layout = _layout(fname, options.get("layout", 0))
    d = 2 if direction == "bidirectional" else 1
    n_layers = len(layers)
    x = _array(fname, "x", x)
    init = {}
    for name, s in states.items():
        if s is None:
            continue
        s = _array(fname, name, s)
        shapes.check_rank(fname, name, s, 3, "(num_layers*num_directions, batch, hidden)")
        axis = 0 if layout == 0 else 1
        if s.shape[axis] != n_layers * d:
            raise ValueError(
                f"{fname}: {name} must have num_layers*num_directions={n_layers * d} entries "
                f"on axis {axis}; got shape {tuple(s.shape)}."
            )
        init[name] = s
    outs_h, outs_c = [], []
    y = None
    for k, params in enumerate(layers):
        lname = f"{fname} (layers[{k}])"
        kw = {n: jax.lax.slice_in_dim(s, k * d, (k + 1) * d, axis=0 if layout == 0 else 1)
              for n, s in init.items()}
        res = _layer(cell, lname, params, x, **kw, **options)
        y = res[0]
        outs_h.append(res[1])
        if cell == "lstm":
            outs_c.append(res[2])
        # next layer's input: the directions' outputs side by side, [L, N, D*H] / [N, L, D*H]
        if layout == 0:
            length, _, batch, hidden = y.shape
            x = jnp.transpose(y, (0, 2, 1, 3)).reshape(length, batch, d * hidden)
        else:
            batch, length, _, hidden = y.shape
            x = y.reshape(batch, length, d * hidden)
    cat = lambda s: jnp.concatenate(s, axis=0 if layout == 0 else 1)
    return (y, cat(outs_h)) if cell == "gru" else (y, cat(outs_h), cat(outs_c))


def gru_stack(
    layers: Sequence[GRUParams], x: jax.Array, *, initial_h: jax.Array | None = None, **options: Any
) -> tuple[jax.Array, jax.Array]:
    """A multi-layer GRU: layer k+1 reads layer k's outputs, directions side by side.

    Args:
      layers: one ``GRUParams`` per layer; layer k > 0 has input size ``D * H``.
      x: inputs ``[L, N, I]`` (layout 0) or ``[N, L, I]`` (layout 1).
      initial_h: ``[num_layers*D, N, H]`` (layout 0) or ``[N, num_layers*D, H]`` (layout 1),
        layer-major then direction (PyTorch's order); zeros if None.
      **options: every keyword option of ``gru`` (applied to each layer).

    Returns:
      ``(y, h_n)``: the last layer's ``y`` (as ``gru`` returns it) and the final states of
      every layer, shaped like ``initial_h``.
    """
    return _stack("gru", "jaxgru.gru_stack", layers, x, {"initial_h": initial_h}, options)


def lstm_stack(
    layers: Sequence[LSTMParams],
    x: jax.Array,
    *,
    initial_h: jax.Array | None = None,
    initial_c: jax.Array | None = None,
    **options: Any,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """A multi-layer LSTM: layer k+1 reads layer k's outputs, directions side by side.

    Args:
      layers: one ``LSTMParams`` per layer; layer k > 0 has input size ``D * H``.
      x: inputs ``[L, N, I]`` (layout 0) or ``[N, L, I]`` (layout 1).
      initial_h: ``[num_layers*D, N, H]`` (layout 0) or ``[N, num_layers*D, H]`` (layout 1).
      initial_c: like ``initial_h``.
      **options: every keyword option of ``lstm`` (applied to each layer).

    Returns:
      ``(y, h_n, c_n)``: the last layer's ``y`` and the final states of every layer.
    """
    return _stack(
        "lstm", "jaxgru.lstm_stack", layers, x,
        {"initial_h": initial_h, "initial_c": initial_c}, options,
    )
