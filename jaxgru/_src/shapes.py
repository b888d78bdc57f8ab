"""Shape and dtype rules: validation of every operand, the shapes of every output, and the
primitives' abstract evaluation.

Works on anything with ``.shape`` and ``.dtype`` (arrays, tracers, avals), so the same checks
run in the public API and in the primitives' abstract evaluation, at trace time. No backend
imports here. What each operand is (name, kind, batch axis) comes from cells.py.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from jaxgru._src.cells import batch_axis, spec
from jaxgru._src.options import RNNConfig
from jaxgru._src.reference.layout import compute_dtype

FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")
Shape = tuple[int, ...]


def _fmt(shape: Sequence[Any]) -> str:
    return str(tuple(int(s) for s in shape))


def check_rank(fname: str, name: str, a: Any, rank: int, meaning: str) -> None:
    if len(a.shape) != rank:
        raise ValueError(
            f"{fname}: {name} must have rank {rank} {meaning}; got shape {_fmt(a.shape)} "
            f"(rank {len(a.shape)})."
        )


def check_shape(fname: str, name: str, a: Any, expected: Sequence[int], meaning: str) -> None:
    if tuple(a.shape) != tuple(expected):
        raise ValueError(
            f"{fname}: {name} must have shape {meaning}={_fmt(expected)}; got {_fmt(a.shape)}."
        )


def check_size(fname: str, name: str, value: Any) -> int:
    """A positive int (any integral type but bool), or ValueError naming the argument."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{fname}: {name} must be a positive int; got {value!r}.")
    return int(value)


def check_float(fname: str, name: str, a: Any) -> None:
    if np.dtype(a.dtype).name not in FLOAT_DTYPES:
        raise TypeError(
            f"{fname}: {name} must have a floating dtype (one of {', '.join(FLOAT_DTYPES)}); "
            f"got {np.dtype(a.dtype).name}."
        )


def x_meaning(layout: int) -> str:
    return "(seq_length, batch, input_size)" if layout == 0 else "(batch, seq_length, input_size)"


def sizes(cfg: RNNConfig, x: Any, r: Any) -> tuple[int, int, int, int, int]:
    """(L, N, I, H, D) from x and r (H: the cell's hidden size, ``r [D, G·H, H or P]``)."""
    length, batch = (x.shape[0], x.shape[1]) if cfg.layout == 0 else (x.shape[1], x.shape[0])
    hidden = r.shape[1] // cfg.num_gates if cfg.proj else r.shape[-1]
    return length, batch, x.shape[2], hidden, cfg.num_directions


def out_size(cfg: RNNConfig, r: Any) -> int:
    """Features of h and Y: P for a projected LSTM (``r [D, G·H, P]``), else H."""
    del cfg  # r's last axis reads h in both cases
    return int(r.shape[-1])


def check_projected_r(fname: str, cfg: RNNConfig, r: Any) -> None:
    """With a projection, H is read from R's rows: they must be a multiple of the gates."""
    if cfg.proj and r.shape[1] % cfg.num_gates:
        raise ValueError(
            f"{fname}: params.r must have shape (num_directions, {cfg.num_gates}*hidden, proj_size) with a "
            f"projection; got {_fmt(r.shape)} ({int(r.shape[1])} rows, not a multiple of {cfg.num_gates})."
        )


def state_shape_of(layout: int, d: int, batch: int, hidden: int) -> Shape:
    """A state's shape: ``[D, N, H]`` (layout 0) or ``[N, D, H]`` (layout 1)."""
    return (d, batch, hidden) if layout == 0 else (batch, d, hidden)


def state_shape(cfg: RNNConfig, batch: int, hidden: int, d: int | None = None) -> Shape:
    return state_shape_of(cfg.layout, cfg.num_directions if d is None else d, batch, hidden)


def y_shape(layout: int, length: int, d: int, batch: int, hidden: int) -> Shape:
    """Y's shape: ``[L, D, N, H]`` (layout 0) or ``[N, L, D, H]`` (layout 1)."""
    return (length, d, batch, hidden) if layout == 0 else (batch, length, d, hidden)


def state_meaning(cfg: RNNConfig, field: str = "h0") -> str:
    size = "proj_size" if cfg.proj and field == "h0" else "hidden"
    return f"(num_directions, batch, {size})" if cfg.layout == 0 else f"(batch, num_directions, {size})"


def _check_directions(fname: str, cfg: RNNConfig, r: Any) -> None:
    """Blame ``direction`` when the weights hold the other number of directions."""
    d, held = cfg.num_directions, int(r.shape[0])
    if held == d or held not in (1, 2):
        return  # the right count, or no count at all: the shape check below says what it must be
    fix = ("pass direction='bidirectional'" if held == 2 else
           "use direction='forward' or 'reverse', or weights for 2 directions")
    raise ValueError(
        f"{fname}: the params hold {held} direction(s) (params.r of shape {_fmt(r.shape)}) but "
        f"direction={cfg.direction!r} runs {d}; {fix}."
    )


def _check_input_size(fname: str, x: Any, w: Any, expected: Shape) -> None:
    """Blame x when its feature axis, not the weights, is what disagrees."""
    if len(w.shape) == 3 and tuple(w.shape[:2]) == tuple(expected[:2]) and w.shape[2] != x.shape[2]:
        raise ValueError(
            f"{fname}: x has {int(x.shape[2])} features on its last axis, but the params expect "
            f"input_size={int(w.shape[2])} (params.w of shape {_fmt(w.shape)})."
        )


def check_operands(cfg: RNNConfig, fname: str, operands: Sequence[Any], *, ensemble: int = 0) -> tuple[Shape, ...]:
    """Validate the operands of one layer call and return the output shapes.

    Args:
      cfg: the call's options.
      fname: the public function name, for messages.
      operands: in primitive order (see ``cells.CellSpec.operands``); all present.
      ensemble: if > 0, every operand has a leading ensemble axis of that size.

    Returns:
      Shapes of (y, y_h) or (y, y_h, y_c), including the ensemble axis.
    """
    cell = spec(cfg.cell)
    names = tuple(o.name for o in cell.operands_for(cfg))
    if len(operands) != len(names):
        raise TypeError(f"{fname}: expected {len(names)} operands {names}; got {len(operands)}.")
    lead: Shape = ()
    if ensemble:
        lead = (ensemble,)
        for name, a in zip(names, operands):
            if len(a.shape) < 1 or a.shape[0] != ensemble:
                raise ValueError(
                    f"{fname}: {name} must have a leading ensemble axis of size {ensemble}; "
                    f"got shape {_fmt(a.shape)}."
                )
        operands = [_Drop(a) for a in operands]
    ops = cell.unpack(operands)
    x, r = ops.x, ops.r
    check_float(fname, "x", x)
    check_rank(fname, "x", x, 3, x_meaning(cfg.layout))
    check_rank(fname, "params.r", r, 3, "(num_directions, gates*hidden, hidden)")
    _check_directions(fname, cfg, r)
    check_projected_r(fname, cfg, r)
    length, batch, isize, hidden, d = sizes(cfg, x, r)
    out = out_size(cfg, r)
    expected = cell.param_shapes(d, hidden, isize, out if cfg.proj else 0)
    check_shape(fname, "params.r", r, *expected["r"])
    _check_input_size(fname, x, ops.w, expected["w"][0])
    for field in cell.param_fields:
        if field not in ("r", "proj"):
            check_shape(fname, f"params.{field}", getattr(ops, field), *expected[field])
    if cfg.proj:
        check_rank(fname, "params.proj", ops.proj, 3, expected["proj"][1])
        check_shape(fname, "params.proj", ops.proj, *expected["proj"])
    st = {o.field: state_shape(cfg, batch, cell.state_size(o.field, hidden, out)) for o in cell.state_operands}
    for o in cell.state_operands:
        check_shape(fname, o.name, getattr(ops, o.field), st[o.field], state_meaning(cfg, o.field))
    lens = ops.lens
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
    y = y_shape(cfg.layout, length, d, batch, out)
    return tuple(lead + s for s in (y, *(st[o.field] for o in cell.state_operands)))


def residual_shape(cfg: RNNConfig, length: int, batch: int, hidden: int) -> Shape:
    """Shape of the forward's residuals ``[D, L, N, K·H]`` (see reference/scan.py)."""
    return (cfg.num_directions, length, batch, spec(cfg.cell).residuals(cfg) * hidden)


class _Drop:
    """A view of an operand without its leading (ensemble) axis, for checks."""

    def __init__(self, a: Any) -> None:
        self.shape, self.dtype = tuple(a.shape[1:]), a.dtype


# --------------------------------------------------------------------------------------
# abstract evaluation (outputs built from input avals with .update: keeps shard_map's vma type)
# --------------------------------------------------------------------------------------
def fname_of(cfg: RNNConfig) -> str:
    return f"jaxgru.{cfg.cell}"


def _out(x: Any, cfg: RNNConfig, ensemble: int, kind: str, shape: Shape, dtype: Any) -> Any:
    """An output aval from x's: same mesh (shard_map vma, explicit sharding) with x's batch
    sharding moved onto the output's batch axis; every other axis unsharded."""
    off = 1 if ensemble else 0
    spec_ = tuple(x.sharding.spec) + (None,) * (len(x.shape) - len(x.sharding.spec))
    x_n = batch_axis("x", cfg.layout)
    assert x_n is not None
    x_n += off
    if any(s is not None for i, s in enumerate(spec_) if i not in (x_n, 0 if ensemble else -1)):
        raise ValueError(
            f"{fname_of(cfg)}: x may be sharded along its batch axis only; got sharding {x.sharding.spec}."
        )
    out: list[Any] = [None] * len(shape)
    axis = batch_axis(kind, cfg.layout)
    assert axis is not None
    out[axis + off] = spec_[x_n]
    if ensemble:
        out[0] = spec_[0]
    sharding = x.sharding.update(spec=jax.sharding.PartitionSpec(*out))
    return x.update(shape=shape, dtype=dtype, weak_type=False, sharding=sharding)


def forward_shapes(cfg: RNNConfig, fname: str, ops: Sequence[Any], *, ensemble: int, residuals: bool
                   ) -> tuple[Shape, ...]:
    """Validate a forward's operands; the shapes of (y, y_h[, y_c]) and, with ``residuals``, res."""
    out_shapes = check_operands(cfg, fname, ops, ensemble=ensemble)
    if not residuals:
        return out_shapes
    y = out_shapes[0]
    lead = y[:1] if ensemble else ()
    y = y[1:] if ensemble else y
    length, batch = (y[0], y[2]) if cfg.layout == 0 else (y[1], y[0])
    # the residuals hold blocks of the cell's H: the last state's features (GRU's h, LSTM's c)
    return (*out_shapes, lead + residual_shape(cfg, length, batch, out_shapes[-1][-1]))


def forward_abstract(*ops: Any, cfg: RNNConfig, ensemble: int, residuals: bool) -> list[Any]:
    """Avals of the forward's outputs: (y, y_h[, y_c]) and, with ``residuals``, res."""
    out_shapes = forward_shapes(cfg, fname_of(cfg), ops, ensemble=ensemble, residuals=residuals)
    x = ops[0]
    kinds = (*spec(cfg.cell).outputs, "res")  # res only with residuals (zip stops first)
    dtypes = [x.dtype] * len(spec(cfg.cell).outputs) + [compute_dtype(x.dtype)]
    return [_out(x, cfg, ensemble, k, s, dt) for k, s, dt in zip(kinds, out_shapes, dtypes)]


def _check_tail(cfg: RNNConfig, ops: Sequence[Any], ensemble: int, tail: Sequence[Any], what: str) -> None:
    """Validate y, res and the tangents/cotangents that follow the primals."""
    n = len(spec(cfg.cell).operands_for(cfg))
    primals = ops[:n]
    fwd = forward_abstract(*primals, cfg=cfg, ensemble=ensemble, residuals=True)
    y, res = ops[n], ops[n + 1]
    for name, got, want in (("y", y, fwd[0]), ("residuals", res, fwd[-1])):
        if tuple(got.shape) != tuple(want.shape):
            raise ValueError(f"{fname_of(cfg)}: {what}: {name} must have shape {want.shape}; got {got.shape}.")
    rest = ops[n + 2 :]
    if len(rest) != len(tail):
        raise TypeError(f"{fname_of(cfg)}: {what} expects {len(tail)} trailing operands; got {len(rest)}.")
    for a, t in zip(rest, tail):
        if tuple(a.shape) != tuple(t.shape):
            raise ValueError(f"{fname_of(cfg)}: {what}: operand must have shape {t.shape}; got {a.shape}.")


def tangent_abstract(*ops: Any, cfg: RNNConfig, ensemble: int) -> list[Any]:
    """Avals of the tangent map's outputs (those of the forward without residuals)."""
    primals = ops[: len(spec(cfg.cell).operands_for(cfg))]
    _check_tail(cfg, ops, ensemble, primals[:-1], "tangent")
    return forward_abstract(*primals, cfg=cfg, ensemble=ensemble, residuals=False)


def backward_abstract(*ops: Any, cfg: RNNConfig, ensemble: int) -> list[Any]:
    """Avals of the backward's outputs: one cotangent per floating operand."""
    primals = ops[: len(spec(cfg.cell).operands_for(cfg))]
    outs = forward_abstract(*primals, cfg=cfg, ensemble=ensemble, residuals=False)
    _check_tail(cfg, ops, ensemble, outs, "backward")
    return [a.update(weak_type=False) for a in primals[:-1]]
