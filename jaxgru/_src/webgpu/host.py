"""Host-side data: operands converted for upload, the bias layouts of the prep kernels, outputs.

Pure numpy; nothing here touches the device.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from jaxgru._src import shapes
from jaxgru._src.cells import spec
from jaxgru._src.options import RNNConfig
from jaxgru._src.webgpu.plan import Geometry

STORAGE_DTYPES = {"f32": np.dtype(np.float32), "f16": np.dtype(np.float16)}


@dataclasses.dataclass
class Member:
    """One ensemble member's operands, ready to upload.

    The weights go up as the user gave them (ONNX layout, no copy when already in the storage
    dtype and contiguous); their device layouts (transposed, padded to vec4) are built by the
    prep kernels (wgsl/prep*.wgsl) in the call's own command buffer, so nothing is hashed or
    transposed on the host.

    Attributes:
      x: the input in the storage dtype and the user layout, C-contiguous.
      lens: int32 [N], clamped to [0, L] (all L when the call is not ragged).
      h0, c0: float32 [D, N, 4·S4] direction-major, units padded with zeros (c0 None for GRU).
      w, r: W [D, G·H, I] and R [D, G·H, H] (``[D, G·H, P]`` with a projection) in the storage dtype.
      b: float32 [D, 2·G·H]; p: float32 [D, 3·H] (LSTM with peepholes) or None.
      proj: an LSTM's projection [D, P, H] in the storage dtype, or None.
    """

    x: np.ndarray
    lens: np.ndarray
    h0: np.ndarray
    c0: np.ndarray | None
    w: np.ndarray
    r: np.ndarray
    b: np.ndarray
    p: np.ndarray | None
    proj: np.ndarray | None = None


def _pad_units(a: np.ndarray, hp: int) -> np.ndarray:
    """Zero-pad the last axis (hidden units) to ``hp``."""
    out = np.zeros((*a.shape[:-1], hp), a.dtype)
    out[..., : a.shape[-1]] = a
    return out


def _states(cfg: RNNConfig, s: np.ndarray, hp: int) -> np.ndarray:
    """A state in the user layout -> float32 [D, N, HP]."""
    s = np.asarray(s, np.float32)
    return _pad_units(s if cfg.layout == 0 else np.swapaxes(s, 0, 1), hp)


@dataclasses.dataclass(frozen=True)
class BiasLayout:
    """How prep_bias builds one f32 device array [D, NQ, HP] from ``b`` or ``p`` (prep.wgsl)."""

    src: str  # "b" or "p"
    constants: dict[str, float]


def bias_layouts(cfg: RNNConfig, geo: Geometry) -> dict[str, BiasLayout]:
    """The two bias-like bindings of the kernels: ``xb`` (folded into the projection) and ``pr``.

    ``xb`` = Wb + Rb per gate, or Wb alone for GRU with linear_before_reset (whose Rb stays with
    H·Rᵀ and goes to ``pr``); ``pr`` = LSTM peepholes P, GRU lbr=1's Rb, or zeros.
    """
    gh = geo.G * geo.H
    lbr = cfg.cell == "gru" and cfg.linear_before_reset
    b = {"STRIDE": 2 * gh, "HAS_SRC": 1}
    xb = BiasLayout("b", {**b, "NQ": geo.G, "OFF0": 0, "OFF1": gh, "FOLD": int(not lbr)})
    if lbr:
        pr = BiasLayout("b", {**b, "NQ": 3, "OFF0": gh, "OFF1": 0, "FOLD": 0})
    elif cfg.cell == "lstm" and cfg.peepholes:
        pr = BiasLayout("p", {"STRIDE": 3 * geo.H, "HAS_SRC": 1, "NQ": 3, "OFF0": 0, "OFF1": 0, "FOLD": 0})
    else:
        pr = BiasLayout("b", {**b, "NQ": 3, "OFF0": 0, "OFF1": 0, "FOLD": 0, "HAS_SRC": 0})
    return {"xb": xb, "pr": pr}


def member(cfg: RNNConfig, operands, geo: Geometry, storage: str) -> Member:
    """Convert one member's operands for upload.

    Args:
      cfg: the call's options.
      operands: one member's operands (in ``cells.CellSpec.operands`` order), numpy arrays.
      geo: the call's geometry.
      storage: "f32" or "f16", the device element type of x, weights and outputs.

    Returns:
      The :class:`Member`.
    """
    x, w, r, b, p, h0, c0, lens, proj = spec(cfg.cell).unpack(operands)
    if cfg.ragged:
        lens = np.clip(np.asarray(lens, np.int64), 0, geo.L).astype(np.int32)
    else:
        lens = np.full((geo.N,), geo.L, np.int32)
    st = STORAGE_DTYPES[storage]
    return Member(
        x=np.ascontiguousarray(x, dtype=st),
        lens=lens,
        h0=_states(cfg, h0, 4 * geo.S4),
        c0=None if c0 is None else _states(cfg, c0, 4 * geo.S4),
        w=np.ascontiguousarray(w, dtype=st),
        r=np.ascontiguousarray(r, dtype=st),
        b=np.ascontiguousarray(b, dtype=np.float32),
        p=np.ascontiguousarray(p, dtype=np.float32) if cfg.cell == "lstm" and cfg.peepholes else None,
        proj=None if proj is None else np.ascontiguousarray(proj, dtype=st),
    )


# --------------------------------------------------------------------------------------
# outputs
# --------------------------------------------------------------------------------------
def y_shape(geo: Geometry, n: int) -> tuple[int, ...]:
    """Y's shape for ``n`` batch rows in the user layout."""
    return shapes.y_shape(geo.layout, geo.L, geo.D, n, geo.out)


def state_shapes(geo: Geometry, n: int) -> list[tuple[int, ...]]:
    """Y_h's (and Y_c's) shapes for ``n`` batch rows in the user layout."""
    return [shapes.state_shape_of(geo.layout, geo.D, n, w) for w in geo.final_widths]


def trivial(cfg: RNNConfig, operands, geo: Geometry, residuals: bool) -> tuple[np.ndarray, ...]:
    """Outputs of a call with no work (L, N or H is 0): Y zero, final states = initial states."""
    ops = spec(cfg.cell).unpack(operands)
    dt = np.dtype(ops.x.dtype)
    outs = [np.zeros(y_shape(geo, geo.N), dt)]
    outs += [np.array(getattr(ops, o.field), dt) for o in spec(cfg.cell).state_operands]
    if residuals:
        outs.append(np.zeros((geo.D, geo.L, geo.N, geo.K * geo.H), np.float32))
    return tuple(outs)
