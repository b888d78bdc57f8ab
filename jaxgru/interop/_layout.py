"""Every gate order and every reorder helper of the converters, in one place.

A gate order is a string with one letter per gate block, in the order the blocks are stacked
along the gate axis (blocks are contiguous and of equal size H):

=================  ======  =======
 system             GRU     LSTM
=================  ======  =======
 ONNX / jaxgru      zrn     iofg
 PyTorch            rzn     ifgo
 Keras 3            zrn     ifgo
 WebNN              zrn or rzn (``layout``)   iofg or ifgo (``layout``)
 Apple BNNS Graph   rnz     ifog (weights)
 Flax linen         per-gate Dense layers (named ``ir``, ``iz``, ``in``, ...)
 Flax nnx           rzn     ifgo (``OptimizedLSTMCell``)
 Equinox            rzn     ifgo (``eqx.nn.GRUCell`` / ``LSTMCell``)
=================  ======  =======

Letters: ``z`` update, ``r`` reset, ``n`` new / candidate (ONNX calls it ``h``); ``i`` input,
``o`` output, ``f`` forget, ``g`` cell candidate (ONNX calls it ``c``).

Everything here works on numpy arrays; the converters turn the results into jax arrays.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

ONNX_GRU = "zrn"
ONNX_LSTM = "iofg"
TORCH_GRU = "rzn"
TORCH_LSTM = "ifgo"
KERAS_GRU = "zrn"
KERAS_LSTM = "ifgo"
WEBNN_GRU_LAYOUTS = ("zrn", "rzn")
WEBNN_LSTM_LAYOUTS = ("iofg", "ifgo")
BNNS_GRU = "rnz"
BNNS_LSTM = "ifog"
BNNS_LSTM_BIAS_ORDERS = ("ifog", "ifgo")
FLAX_NNX_GRU = "rzn"
FLAX_NNX_OPTIMIZED_LSTM = "ifgo"
EQUINOX_GRU = "rzn"
EQUINOX_LSTM = "ifgo"
# ONNX peephole order (WebNN uses the same): i, o, f.
PEEPHOLES = "iof"


def perm(src: str, dst: str) -> tuple[int, ...]:
    """Block indices into ``src`` that produce the order ``dst``.

    Example: ``perm("rzn", "zrn") == (1, 0, 2)``: ONNX rows = PyTorch rows ``[1, 0, 2]``.
    """
    if sorted(src) != sorted(dst) or len(set(src)) != len(src):
        raise AssertionError(f"gate orders {src!r} and {dst!r} do not hold the same gates")
    return tuple(src.index(g) for g in dst)


def reorder(a: np.ndarray, src: str, dst: str, axis: int = 0) -> np.ndarray:
    """Reorder the gate blocks of ``a`` along ``axis`` from order ``src`` to order ``dst``."""
    blocks = np.split(np.asarray(a), len(src), axis=axis)
    return np.concatenate([blocks[i] for i in perm(src, dst)], axis=axis)


def to_onnx(a: np.ndarray, src: str, axis: int = 0) -> np.ndarray:
    """Reorder gate blocks from ``src`` into the ONNX order of the same cell kind."""
    return reorder(a, src, ONNX_GRU if len(src) == 3 else ONNX_LSTM, axis)


def from_onnx(a: np.ndarray, dst: str, axis: int = 0) -> np.ndarray:
    """Reorder gate blocks from the ONNX order into ``dst``."""
    return reorder(a, ONNX_GRU if len(dst) == 3 else ONNX_LSTM, dst, axis)


def kernel_to_rows(kernel: np.ndarray) -> np.ndarray:
    """A ``(in, gates*H)`` kernel (Keras, Flax: ``y = x @ kernel``) as ``(gates*H, in)`` rows."""
    return np.swapaxes(np.asarray(kernel), -1, -2)


def stack_gates(blocks: Mapping[str, np.ndarray], order: str, axis: int = 0) -> np.ndarray:
    """Concatenate per-gate blocks (keyed by gate letter) in ``order``."""
    return np.concatenate([np.asarray(blocks[g]) for g in order], axis=axis)


def split_gates(a: np.ndarray, order: str, axis: int = 0) -> dict[str, np.ndarray]:
    """Split stacked gate blocks into a dict keyed by gate letter."""
    return dict(zip(order, np.split(np.asarray(a), len(order), axis=axis), strict=True))


def onnx_bias(wb: np.ndarray | None, rb: np.ndarray | None, like: np.ndarray) -> np.ndarray:
    """The ONNX bias ``[..., 2*G*H] = [Wb, Rb]`` from input/recurrent biases (None = zeros).

    ``like`` is an array of the shape and dtype a missing half takes.
    """
    wb = np.zeros_like(like) if wb is None else np.asarray(wb)
    rb = np.zeros_like(like) if rb is None else np.asarray(rb)
    return np.concatenate([wb, rb], axis=-1)


def split_onnx_bias(b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(Wb, Rb)`` from an ONNX bias ``[..., 2*G*H]``."""
    wb, rb = np.split(np.asarray(b), 2, axis=-1)
    return wb, rb
