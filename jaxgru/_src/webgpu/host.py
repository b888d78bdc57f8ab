"""Host-side data: operands converted for upload, device weight layouts, outputs reassembled.

Pure numpy; nothing here touches the device.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from jaxgru._src import shapes
from jaxgru._src.cells import batch_axis, spec
from jaxgru._src.options import RNNConfig
from jaxgru._src.webgpu.caches import digest
from jaxgru._src.webgpu.plan import Geometry

STORAGE_DTYPES = {"f32": np.dtype(np.float32), "f16": np.dtype(np.float16)}


@dataclasses.dataclass(frozen=True)
class Weight:
    """A device copy of a weight: its cache key and how to build it on a miss."""

    name: str
    key: tuple
    build: Callable[[], np.ndarray]


@dataclasses.dataclass
class Member:
    """One ensemble member's operands, ready to upload.

    Attributes:
      x: the input in the storage dtype and the user layout, C-contiguous.
      lens: int32 [N], clamped to [0, L] (all L when the call is not ragged).
      h0, c0: float32 [D, N, HP] direction-major, units padded with zeros (c0 None for GRU).
      weights: the four device weights wt, rt, xb, pr.
    """

    x: np.ndarray
    lens: np.ndarray
    h0: np.ndarray
    c0: np.ndarray | None
    weights: tuple[Weight, ...]


def _pad_units(a: np.ndarray, hp: int) -> np.ndarray:
    """Zero-pad the last axis (hidden units) to ``hp``."""
    out = np.zeros((*a.shape[:-1], hp), a.dtype)
    out[..., : a.shape[-1]] = a
    return out


def _states(cfg: RNNConfig, s: np.ndarray, hp: int) -> np.ndarray:
    """A state in the user layout -> float32 [D, N, HP]."""
    s = np.asarray(s, np.float32)
    return _pad_units(s if cfg.layout == 0 else np.swapaxes(s, 0, 1), hp)


def _wt(w: np.ndarray, geo: Geometry, st: np.dtype) -> np.ndarray:
    """W [D, G·H, I] -> Wᵀ [D, I, G, HP] (zero padded): columns of the projection GEMM."""
    d, _, i = w.shape
    wt = w.astype(np.float32).reshape(d, geo.G, geo.H, i).transpose(0, 3, 1, 2)
    return _pad_units(wt, geo.HP).astype(st)


def _rt(r: np.ndarray, geo: Geometry, st: np.dtype) -> np.ndarray:
    """R [D, G·H, H] -> rt [D, HP, G, HP], rt[d, k, g, j] = R[d, g·H + j, k] (zero padded)."""
    d, h = r.shape[0], geo.H
    rt = np.zeros((d, geo.HP, geo.G, geo.HP), np.float32)
    rt[:, :h, :, :h] = r.astype(np.float32).reshape(d, geo.G, h, h).transpose(0, 3, 1, 2)
    return rt.astype(st)


def _xb(cfg: RNNConfig, b: np.ndarray, geo: Geometry) -> np.ndarray:
    """The biases folded into the projection, [D, G, HP] float32 (Wb + Rb; Wb alone for GRU lbr=1)."""
    b = b.astype(np.float32)
    gh = geo.G * geo.H
    xb = b[:, :gh] if cfg.cell == "gru" and cfg.linear_before_reset else b[:, :gh] + b[:, gh:]
    return _pad_units(xb.reshape(-1, geo.G, geo.H), geo.HP)


def _pr(cfg: RNNConfig, b: np.ndarray, p: np.ndarray | None, geo: Geometry) -> np.ndarray:
    """The `pr` binding, [D, 3, HP] float32: Rb for GRU lbr=1, P for LSTM with peepholes, else 0."""
    if cfg.cell == "gru" and cfg.linear_before_reset:
        src = b[:, 3 * geo.H :]
    elif cfg.cell == "lstm" and cfg.peepholes:
        assert p is not None  # peepholes means P was given
        src = p
    else:
        src = np.zeros((geo.D, 3 * geo.H), np.float32)
    return _pad_units(src.astype(np.float32).reshape(-1, 3, geo.H), geo.HP)


def weights(cfg: RNNConfig, w, r, b, p, geo: Geometry, storage: str) -> tuple[Weight, ...]:
    """The device weights of one member, keyed by the digest of the operand they come from."""
    st = STORAGE_DTYPES[storage]
    kind = (cfg.cell, cfg.linear_before_reset, cfg.peepholes, geo.HP)
    db = digest(b)
    pr_src = digest(p) if cfg.cell == "lstm" and cfg.peepholes else db
    return (
        Weight("wt", ("wt", storage, geo.HP, *digest(w)), lambda: _wt(w, geo, st)),
        Weight("rt", ("rt", storage, geo.HP, *digest(r)), lambda: _rt(r, geo, st)),
        Weight("xb", ("xb", *kind, *db), lambda: _xb(cfg, b, geo)),
        Weight("pr", ("pr", *kind, *pr_src), lambda: _pr(cfg, b, p, geo)),
    )


def member(cfg: RNNConfig, operands, geo: Geometry, storage: str) -> Member:
    """Convert one member's operands for upload (digests of the weights included).

    Args:
      cfg: the call's options.
      operands: one member's operands (GRU or LSTM order, see reference.py), numpy arrays.
      geo: the call's geometry.
      storage: "f32" or "f16", the device element type of x, weights and outputs.

    Returns:
      The :class:`Member`; weight conversions are deferred to a cache miss.
    """
    x, w, r, b, p, h0, c0, lens = spec(cfg.cell).unpack(operands)
    if cfg.ragged:
        lens = np.clip(np.asarray(lens, np.int64), 0, geo.L).astype(np.int32)
    else:
        lens = np.full((geo.N,), geo.L, np.int32)
    return Member(
        x=np.ascontiguousarray(x, dtype=STORAGE_DTYPES[storage]),
        lens=lens,
        h0=_states(cfg, h0, geo.HP),
        c0=None if c0 is None else _states(cfg, c0, geo.HP),
        weights=weights(cfg, w, r, b, p, geo, storage),
    )


# --------------------------------------------------------------------------------------
# outputs
# --------------------------------------------------------------------------------------
def y_shape(geo: Geometry, n: int) -> tuple[int, ...]:
    """Y's shape for ``n`` batch rows in the user layout."""
    return shapes.y_shape(geo.layout, geo.L, geo.D, n, geo.H)


def state_shape(geo: Geometry, n: int) -> tuple[int, ...]:
    """Y_h's (and Y_c's) shape for ``n`` batch rows in the user layout."""
    return shapes.state_shape_of(geo.layout, geo.D, n, geo.H)


def assemble(cfg: RNNConfig, geo: Geometry, chunks: list[tuple[np.ndarray, ...]], out_dtype: np.dtype,
             residuals: bool) -> tuple[np.ndarray, ...]:
    """Join a member's chunk outputs along the batch and cast to the caller's dtypes.

    Args:
      chunks: per batch chunk, (y, finals [F, *state], res or None) as read back.
      out_dtype: the operands' dtype (y, y_h, y_c); res stays float32.
    """
    y_ax, s_ax = batch_axis("y", cfg.layout), batch_axis("state", cfg.layout)
    join = lambda parts, ax: parts[0] if len(parts) == 1 else np.concatenate(parts, axis=ax)
    # float32 -> float16 beyond 65504 is ±inf, as XLA's cast gives it: expected, not a warning
    with np.errstate(over="ignore"):
        y = join([c[0] for c in chunks], y_ax).astype(out_dtype, copy=False)
        outs = [y] + [
            join([c[1][f] for c in chunks], s_ax).astype(out_dtype, copy=False) for f in range(geo.finals)
        ]
    if residuals:
        outs.append(join([c[2] for c in chunks], 2))
    return tuple(outs)


def trivial(cfg: RNNConfig, operands, geo: Geometry, residuals: bool) -> tuple[np.ndarray, ...]:
    """Outputs of a call with no work (L, N or H is 0): Y zero, final states = initial states."""
    ops = spec(cfg.cell).unpack(operands)
    dt = np.dtype(ops.x.dtype)
    outs = [np.zeros(y_shape(geo, geo.N), dt)]
    outs += [np.array(getattr(ops, o.field), dt) for o in spec(cfg.cell).state_operands]
    if residuals:
        outs.append(np.zeros((geo.D, geo.L, geo.N, geo.K * geo.H), np.float32))
    return tuple(outs)
