"""Frozen, hashable options: what a call asks for, passed as one static parameter to ``bind``."""

from __future__ import annotations

import dataclasses
from typing import Literal

from jaxgru._src.activations import Activation

Cell = Literal["gru", "lstm"]
DIRECTIONS = ("forward", "reverse", "bidirectional")
BACKENDS = ("auto", "xla", "wgsl")
# Activations per direction: GRU (f, g), LSTM (f, g, h).
N_ACTIVATIONS = {"gru": 2, "lstm": 3}
DEFAULT_ACTIVATIONS = {"gru": ("Sigmoid", "Tanh"), "lstm": ("Sigmoid", "Tanh", "Tanh")}
N_GATES = {"gru": 3, "lstm": 4}


@dataclasses.dataclass(frozen=True, repr=False)
class RNNConfig:
    """Everything static about one GRU/LSTM layer call.

    Attributes:
      cell: "gru" or "lstm".
      direction: "forward", "reverse" or "bidirectional".
      layout: 0 (time-major) or 1 (batch-major), as the ONNX attribute.
      linear_before_reset: GRU only.
      input_forget: LSTM only (f = 1 - i).
      activations: per direction, the resolved activations (f, g) or (f, g, h).
      clip: clamp of every activation input, or None.
      ragged: whether per-sequence lengths are applied.
      peepholes: LSTM only, whether P is used.
      backend: the resolved backend, "xla" or "wgsl".
    """

    cell: Cell
    direction: str = "forward"
    layout: int = 0
    linear_before_reset: bool = False
    input_forget: bool = False
    activations: tuple[tuple[Activation, ...], ...] = ()
    clip: float | None = None
    ragged: bool = False
    peepholes: bool = False
    backend: str = "xla"

    @property
    def num_directions(self) -> int:
        return 2 if self.direction == "bidirectional" else 1

    @property
    def num_gates(self) -> int:
        return N_GATES[self.cell]

    @property
    def reversed_dirs(self) -> tuple[bool, ...]:
        """For each direction slot, whether it runs backwards in time."""
        return {"forward": (False,), "reverse": (True,), "bidirectional": (False, True)}[self.direction]

    def __repr__(self) -> str:  # short: it is printed in every jaxpr
        acts = "|".join(",".join(map(repr, a)) for a in self.activations)
        parts = [self.cell, self.direction, f"layout={self.layout}"]
        if self.cell == "gru":
            parts.append(f"lbr={int(self.linear_before_reset)}")
        else:
            parts += [f"input_forget={int(self.input_forget)}", f"peepholes={int(self.peepholes)}"]
        parts += [f"acts={acts}", f"clip={self.clip}", f"ragged={int(self.ragged)}", self.backend]
        return f"RNNConfig({', '.join(parts)})"

    def replace(self, **changes) -> RNNConfig:
        return dataclasses.replace(self, **changes)
