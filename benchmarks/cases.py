"""The benchmark cases: what is measured, in the full suite and in the quick mode."""

from __future__ import annotations

import dataclasses
import itertools


@dataclasses.dataclass(frozen=True)
class Case:
    """One measured configuration. ``mode`` is "forward" (inference) or "train" (forward,
    backward and the weight gradients of ``mean(y**2)``). A GRU applies the reset gate after
    the recurrent matmul (ONNX ``linear_before_reset=1``, PyTorch's and Flax's GRU) unless
    ``lbr0``: ONNX's default, before it, which only jaxgru and onnxruntime compute."""

    cell: str
    mode: str
    L: int
    N: int
    I: int
    H: int
    bidirectional: bool = False
    ragged: bool = False
    lbr0: bool = False

    @property
    def D(self) -> int:
        return 2 if self.bidirectional else 1

    @property
    def G(self) -> int:
        return 3 if self.cell == "gru" else 4

    @property
    def name(self) -> str:
        flags = ("bi" if self.bidirectional else "uni") + ("-ragged" if self.ragged else "")
        flags += "-lbr0" if self.lbr0 else ""
        return f"{self.cell}-{self.mode}-{flags} L={self.L} N={self.N} I={self.I} H={self.H}"

    def flops(self) -> float:
        """Matmul FLOPs: forward 2·L·N·D·G·H·(I+H); a training step adds twice that (dX/dH, dW)."""
        fwd = 2.0 * self.L * self.N * self.D * self.G * self.H * (self.I + self.H)
        return fwd if self.mode == "forward" else 3 * fwd

    def weight_bytes_per_step(self) -> float:
        """Bytes of the recurrent weights R read per time step (float32), all directions."""
        return 4.0 * self.D * self.G * self.H * self.H


def parse_shape(spec: str) -> tuple[str, int, int, int, int]:
    """A benchmark's ``--shape CELL,L,N,I,H`` as (cell, L, N, I, H)."""
    cell, *dims = spec.split(",")
    L, N, I, H = map(int, dims)
    return cell, L, N, I, H


def parse_case(spec: str) -> Case:
    """A benchmark's ``--case CELL,MODE,L,N,I,H`` as a Case."""
    cell, mode, *dims = spec.split(",")
    L, N, I, H = map(int, dims)
    return Case(cell, mode, L, N, I, H)


def _grid(cells, modes, shapes, **flags):
    return [Case(c, m, *s, **flags) for c, m, s in itertools.product(cells, modes, shapes)]


# (L, N, I, H): latency (N = 1) to throughput (N >= 64), H from 64 to 1024, long sequences
SHAPES = [
    (100, 1, 64, 64),
    (100, 1, 256, 256),
    (1000, 1, 64, 64),
    (100, 16, 128, 128),
    (50, 64, 256, 256),
    (100, 64, 128, 128),
    (20, 64, 512, 1024),
    (1000, 16, 64, 64),
]
FULL = (
    _grid(["gru", "lstm"], ["forward", "train"], SHAPES)
    + _grid(["gru", "lstm"], ["forward", "train"], [(100, 16, 128, 128), (50, 64, 256, 256)], bidirectional=True)
    + _grid(["gru", "lstm"], ["forward", "train"], [(100, 16, 128, 128)], ragged=True)
    + _grid(["gru"], ["forward"], [(100, 16, 128, 128)], bidirectional=True, ragged=True)
    # ONNX's default GRU (onnxruntime the one peer): batch 1, where two dependent products a step
    # (z and r, then r*H's) weigh most, and a batch
    + _grid(["gru"], ["forward"], [(100, 1, 64, 64), (1000, 1, 64, 64), (100, 16, 128, 128)], lbr0=True)
)
QUICK = (
    _grid(["gru", "lstm"], ["forward"], [(100, 1, 64, 64), (50, 64, 256, 256)])
    + _grid(["gru"], ["train"], [(100, 16, 128, 128)])
    + _grid(["lstm"], ["forward"], [(100, 16, 128, 128)], bidirectional=True, ragged=True)
)
