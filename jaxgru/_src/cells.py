"""The cells' tables: gates, operands, outputs and residuals of GRU and LSTM, declared once.

Every site that needs one of these facts reads it from here: the shape rules (shapes.py), the
primitives' sharding and batching rules (primitives.py, rules.py), the reference (reference/),
the WGSL host side (webgpu/, which passes ``G`` and ``K`` to the kernels as override
constants), the initialisers, the stacks and the converters.

Operands of a layer call, in primitive order (absent ones are materialised as zeros by the
API)::

    GRU:  x, w, r, b, h0, lens          LSTM: x, w, r, b, p, h0, c0, lens

A projected LSTM (``cfg.proj``, PyTorch's ``proj_size``) has one more operand, ``proj``, just
before ``lens`` (``CellSpec.operands_for``): x, w, r, b, p, h0, c0, proj, lens. Without a
projection the operands, and everything built on them, are exactly the table's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

if TYPE_CHECKING:  # pragma: no cover
    from jaxgru._src.options import RNNConfig

Cell = Literal["gru", "lstm"]
# Kinds of arrays a primitive takes or returns.
Kind = Literal["x", "param", "state", "lens", "y", "res"]

# Axis of the batch N in each kind of array, for layout 0 and layout 1 (None: no batch axis).
BATCH_AXIS: dict[str, tuple[int | None, int | None]] = {
    "x": (1, 0), "y": (2, 0), "state": (1, 0), "lens": (0, 0), "res": (2, 2), "param": (None, None),
}
# Axis of the directions D in Y and in a state, for layout 0 and layout 1.
DIRECTION_AXIS: dict[str, tuple[int, int]] = {"y": (1, 2), "state": (0, 1)}


def batch_axis(kind: str, layout: int) -> int | None:
    """The batch axis of an array of ``kind`` in ``layout`` (None for weights)."""
    return BATCH_AXIS[kind][layout]


def direction_axis(kind: str, layout: int) -> int:
    """The directions axis of Y (``kind="y"``) or of a state (``kind="state"``) in ``layout``."""
    return DIRECTION_AXIS[kind][layout]


class Operand(NamedTuple):
    """One operand of a layer call.

    Attributes:
      name: as the user knows it, for messages ("x", "params.w", "initial_h", ...).
      kind: what sort of array it is (see ``BATCH_AXIS``).
      field: its name in :class:`Operands` (and, for weights, in GRUParams / LSTMParams).
    """

    name: str
    kind: Kind
    field: str


class Operands(NamedTuple):
    """One call's operands by role; the fields a cell does not have are None."""

    x: Any
    w: Any
    r: Any
    b: Any
    p: Any = None
    h0: Any = None
    c0: Any = None
    lens: Any = None
    proj: Any = None  # last: positional Operands(...) of the table's operands stay valid


_X = Operand("x", "x", "x")
_W = Operand("params.w", "param", "w")
_R = Operand("params.r", "param", "r")
_B = Operand("params.b", "param", "b")
_P = Operand("params.p", "param", "p")
_PROJ = Operand("params.proj", "param", "proj")
_H0 = Operand("initial_h", "state", "h0")
_C0 = Operand("initial_c", "state", "c0")
_LENS = Operand("sequence_lens", "lens", "lens")


@dataclasses.dataclass(frozen=True)
class CellSpec:
    """What defines a cell kind, apart from its math (which is in reference/<cell>.py and wgsl/).

    Attributes:
      name: "gru" or "lstm".
      gates: the ONNX gate order, one letter per gate (rows of W and R in blocks of H).
      operands: the primitive's operands, in order.
      outputs: the kinds of the forward's outputs: Y, then the final states.
      activations: the default activations of one direction (ONNX's f, g[, h]).
      peepholes: peephole vectors per direction in P (``P [D, peepholes*H]``), 0 if none.
      residuals: blocks of H per step in the forward's residuals, given the call's options.
      projection: whether the cell may take an output projection ``proj [D, P, H]``
        (PyTorch's ``nn.LSTM(proj_size=P)``, an optional operand: see ``operands_for``): then
        the hidden state and Y have P features, R is ``[D, G·H, P]`` and the cell state keeps H.
    """

    name: Cell
    gates: str
    operands: tuple[Operand, ...]
    outputs: tuple[Kind, ...]
    activations: tuple[str, ...]
    peepholes: int
    residuals: Callable[[RNNConfig], int]
    projection: bool = False

    @property
    def num_gates(self) -> int:
        return len(self.gates)

    @property
    def num_activations(self) -> int:
        """Activations per direction."""
        return len(self.activations)

    @property
    def num_operands(self) -> int:
        """Operands of a call without a projection (see :meth:`operands_for`)."""
        return len(self.operands)

    def operands_for(self, cfg: RNNConfig) -> tuple[Operand, ...]:
        """The operands of a call with ``cfg``: the table's, with ``proj`` before ``lens`` when
        ``cfg.proj`` (a projected LSTM)."""
        return self._with_proj() if self.projection and cfg.proj else self.operands

    def _with_proj(self) -> tuple[Operand, ...]:
        return (*self.operands[:-1], _PROJ, self.operands[-1])  # proj just before lens

    @property
    def operand_names(self) -> tuple[str, ...]:
        return tuple(o.name for o in self.operands)

    @property
    def operand_kinds(self) -> tuple[Kind, ...]:
        return tuple(o.kind for o in self.operands)

    @property
    def param_fields(self) -> tuple[str, ...]:
        """The weights' fields (w, r, b[, p, proj]), as in GRUParams / LSTMParams."""
        return tuple(o.field for o in self.operands if o.kind == "param") + (("proj",) if self.projection else ())

    @property
    def state_operands(self) -> tuple[Operand, ...]:
        """The initial states (initial_h[, initial_c]), in operand and output order."""
        return tuple(o for o in self.operands if o.kind == "state")

    @property
    def num_states(self) -> int:
        return len(self.state_operands)

    def unpack(self, operands: Sequence[Any]) -> Operands:
        """The operands in primitive order (with or without ``proj``) -> :class:`Operands` by role."""
        table = self.operands
        if self.projection and len(operands) == len(table) + 1:
            table = self._with_proj()
        if len(operands) != len(table):
            raise TypeError(
                f"jaxgru.{self.name}: expected {self.num_operands} operands {self.operand_names}; "
                f"got {len(operands)}."
            )
        return Operands(**{o.field: a for o, a in zip(table, operands)})

    def pack(self, ops: Operands) -> tuple[Any, ...]:
        """:class:`Operands` -> the operands in primitive order (``proj`` only when set)."""
        table = self._with_proj() if self.projection and ops.proj is not None else self.operands
        return tuple(getattr(ops, o.field) for o in table)

    def param_shapes(self, d: int, hidden: int, input_size: int, proj_size: int = 0
                     ) -> dict[str, tuple[tuple[int, ...], str]]:
        """The shape of each weight and its meaning (for messages), by field.

        ``proj_size`` P > 0: a projected cell (R reads the P features of h, and ``proj``
        has a shape); 0: none.
        """
        g = f"{self.num_gates}*hidden"
        gh = self.num_gates * hidden
        shapes = {
            "w": ((d, gh, input_size), f"(num_directions, {g}, input_size)"),
            "r": ((d, gh, proj_size or hidden), f"(num_directions, {g}, {'proj_size' if proj_size else 'hidden'})"),
            "b": ((d, 2 * gh), f"(num_directions, 2*{g})"),
        }
        if self.peepholes:
            shapes["p"] = ((d, self.peepholes * hidden), f"(num_directions, {self.peepholes}*hidden)")
        if self.projection and proj_size:
            shapes["proj"] = ((d, proj_size, hidden), "(num_directions, proj_size, hidden)")
        return shapes

    def state_size(self, field: str, hidden: int, out: int) -> int:
        """Features of a state (``h0``: the output size ``out``, P when projected; ``c0``: H)."""
        return out if field == "h0" else hidden


def _gru_residuals(cfg: RNNConfig) -> int:
    # a_z, a_r, a_h, and with linear_before_reset the linear term H·Rhᵀ + Rbh
    return 4 if cfg.linear_before_reset else 3


def _lstm_residuals(cfg: RNNConfig) -> int:
    del cfg  # a_i, a_o, a_f, a_c and the new cell state C
    return 5


GRU = CellSpec(
    name="gru", gates="zrh", operands=(_X, _W, _R, _B, _H0, _LENS), outputs=("y", "state"),
    activations=("Sigmoid", "Tanh"), peepholes=0, residuals=_gru_residuals,
)
LSTM = CellSpec(
    name="lstm", gates="iofc", operands=(_X, _W, _R, _B, _P, _H0, _C0, _LENS),
    outputs=("y", "state", "state"), activations=("Sigmoid", "Tanh", "Tanh"), peepholes=3,
    residuals=_lstm_residuals, projection=True,
)
SPECS: dict[str, CellSpec] = {"gru": GRU, "lstm": LSTM}
CELLS: tuple[Cell, ...] = ("gru", "lstm")


def spec(cell: str) -> CellSpec:
    """The table of a cell kind."""
    return SPECS[cell]
