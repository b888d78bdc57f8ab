"""Shape and dtype rules: validation of every operand and the shapes of every output.

Works on anything with ``.shape`` and ``.dtype`` (arrays, tracers, avals), so the same checks
run in the public API and in the primitives' abstract evaluation, at trace time. No backend
imports here.
"""

from __future__ import annotations

import numbers

import numpy as np

from jaxgru._src.options import RNNConfig

# Names of the operands as the user knows them, in primitive operand order.
OPERAND_NAMES = {
    "gru": ("x", "params.w", "params.r", "params.b", "initial_h", "sequence_lens"),
    "lstm": (
        "x", "params.w", "params.r", "params.b", "params.p", "initial_h", "initial_c",
        "sequence_lens",
    ),
}
FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")


def _fmt(shape) -> str:
    return str(tuple(int(s) for s in shape))


def check_rank(fname: str, name: str, a, rank: int, meaning: str) -> None:
    if len(a.shape) != rank:
        raise ValueError(
            f"{fname}: {name} must have rank {rank} {meaning}; got shape {_fmt(a.shape)} "
            f"(rank {len(a.shape)})."
        )


def check_shape(fname: str, name: str, a, expected: tuple[int, ...], meaning: str) -> None:
    if tuple(a.shape) != tuple(expected):
        raise ValueError(
            f"{fname}: {name} must have shape {meaning}={_fmt(expected)}; got {_fmt(a.shape)}."
        )


def check_size(fname: str, name: str, value) -> int:
    """A positive int (any integral type but bool), or ValueError naming the argument."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{fname}: {name} must be a positive int; got {value!r}.")
    return int(value)


def check_float(fname: str, name: str, a) -> None:
    if np.dtype(a.dtype).name not in FLOAT_DTYPES:
        raise TypeError(
            f"{fname}: {name} must have a floating dtype (one of {', '.join(FLOAT_DTYPES)}); "
            f"got {np.dtype(a.dtype).name}."
        )


def sizes(cfg: RNNConfig, x, r) -> tuple[int, int, int, int, int]:
    """(L, N, I, H, D) from x and r."""
    length, batch = (x.shape[0], x.shape[1]) if cfg.layout == 0 else (x.shape[1], x.shape[0])
    return length, batch, x.shape[2], r.shape[-1], cfg.num_directions


def state_shape(cfg: RNNConfig, batch: int, hidden: int, d: int | None = None) -> tuple[int, ...]:
    d = cfg.num_directions if d is None else d
    return (d, batch, hidden) if cfg.layout == 0 else (batch, d, hidden)


def state_meaning(cfg: RNNConfig) -> str:
    return "(num_directions, batch, hidden)" if cfg.layout == 0 else "(batch, num_directions, hidden)"


def check_operands(cfg: RNNConfig, fname: str, operands, *, ensemble: int = 0) -> tuple:
    """Validate the operands of one layer call and return the output shapes.

    Args:
      cfg: the call's options.
      fname: the public function name, for messages.
      operands: in primitive order (see ``OPERAND_NAMES``); all present.
      ensemble: if > 0, every operand has a leading ensemble axis of that size.

    Returns:
      Shapes of (y, y_h) or (y, y_h, y_c), including the ensemble axis.
    """
    names = OPERAND_NAMES[cfg.cell]
    if len(operands) != len(names):
        raise TypeError(f"{fname}: expected {len(names)} operands {names}; got {len(operands)}.")
    lead = ()
    if ensemble:
        lead = (ensemble,)
        for name, a in zip(names, operands):
            if len(a.shape) < 1 or a.shape[0] != ensemble:
                raise ValueError(
                    f"{fname}: {name} must have a leading ensemble axis of size {ensemble}; "
                    f"got shape {_fmt(a.shape)}."
                )
        operands = [_Drop(a) for a in operands]
    x, w, r = operands[0], operands[1], operands[2]
    check_float(fname, "x", x)
    check_rank(fname, "x", x, 3, "(seq_length, batch, input_size)" if cfg.layout == 0 else
               "(batch, seq_length, input_size)")
    check_rank(fname, "params.r", r, 3, "(num_directions, gates*hidden, hidden)")
    length, batch, isize, hidden, d = sizes(cfg, x, r)
    g = cfg.num_gates
    gname = "3*hidden" if cfg.cell == "gru" else "4*hidden"
    check_shape(fname, "params.r", r, (d, g * hidden, hidden), f"(num_directions, {gname}, hidden)")
    check_shape(fname, "params.w", w, (d, g * hidden, isize), f"(num_directions, {gname}, input_size)")
    check_shape(fname, "params.b", operands[3], (d, 2 * g * hidden), f"(num_directions, 2*{gname})")
    st = state_shape(cfg, batch, hidden)
    check_shape(fname, "initial_h", operands[-3 if cfg.cell == "lstm" else -2], st, state_meaning(cfg))
    if cfg.cell == "lstm":
        check_shape(fname, "params.p", operands[4], (d, 3 * hidden), "(num_directions, 3*hidden)")
        check_shape(fname, "initial_c", operands[6], st, state_meaning(cfg))
    lens = operands[-1]
    check_shape(fname, "sequence_lens", lens, (batch,), "(batch,)")
    if not np.issubdtype(np.dtype(lens.dtype), np.integer):
        raise TypeError(f"{fname}: sequence_lens must have an integer dtype; got {np.dtype(lens.dtype).name}.")
    dtype = np.dtype(x.dtype)
    for name, a in zip(names[1:-1], operands[1:-1]):
        if np.dtype(a.dtype) != dtype:
            raise TypeError(
                f"{fname}: {name} must have the dtype of x ({dtype.name}); got {np.dtype(a.dtype).name}."
            )
    if len(cfg.activations) != d:
        raise ValueError(f"{fname}: expected activations for {d} direction(s); got {len(cfg.activations)}.")
    y = (length, d, batch, hidden) if cfg.layout == 0 else (batch, length, d, hidden)
    outs = (y, st) if cfg.cell == "gru" else (y, st, st)
    return tuple(lead + s for s in outs)


def residual_shape(cfg: RNNConfig, length: int, batch: int, hidden: int) -> tuple[int, ...]:
    """Shape of the forward's residuals ``[D, L, N, K]`` (see reference.py)."""
    k = {"gru": 4 if cfg.linear_before_reset else 3, "lstm": 5}[cfg.cell]
    return (cfg.num_directions, length, batch, k * hidden)


class _Drop:
    """A view of an operand without its leading (ensemble) axis, for checks."""

    def __init__(self, a):
        self.shape, self.dtype = tuple(a.shape[1:]), a.dtype
