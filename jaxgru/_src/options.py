"""The layer options, declared once, and the frozen config a call binds.

``OPTIONS`` is the one table of the keyword options of ``jaxgru.gru`` / ``jaxgru.lstm``: name,
default, validator, the cells it applies to, its ONNX attribute and, for a boolean cell flag,
its WGSL override constant. Everything else is derived from it: which options the layers, the
one-step cells and the stacks accept, the :class:`RNNConfig` of a call, the options the Flax /
Equinox modules hold and pass on, the converters' mappings (PyTorch, ONNX) and the WGSL
specialisation constants. The public signatures stay explicit (users read them);
tests/test_options.py asserts that each matches this table.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import numpy as np

from jaxgru._src import activations as _acts
from jaxgru._src.activations import Activation
from jaxgru._src.cells import CELLS, Cell, spec

DIRECTIONS = ("forward", "reverse", "bidirectional")
BACKENDS = ("auto", "xla", "wgsl", "cpu")
# Default activations of one direction: GRU (f, g), LSTM (f, g, h); see cells.py.
DEFAULT_ACTIVATIONS = {c: spec(c).activations for c in CELLS}
# How an option's value is written as an ONNX attribute (and read back from one).
OnnxType = Literal["string", "int", "float", "strings", "floats"]


# --------------------------------------------------------------------------------------
# validators: (function name, option name, value) -> normalised value, or a clear error
# --------------------------------------------------------------------------------------
def _choice(choices: tuple[str, ...]) -> Callable[[str, str, Any], str]:
    def check(fname: str, name: str, v: Any) -> str:
        if not isinstance(v, str) or v not in choices:
            raise ValueError(f"{fname}: {name} must be one of {choices}; got {v!r}.")
        return v

    return check


def _flag(fname: str, name: str, v: Any) -> bool:
    if isinstance(v, (bool, np.bool_)) or (isinstance(v, numbers.Integral) and v in (0, 1)):
        return bool(v)
    raise ValueError(f"{fname}: {name} must be a bool (or 0/1); got {v!r}.")


def _layout(fname: str, name: str, v: Any) -> int:
    if isinstance(v, numbers.Integral) and not isinstance(v, bool) and v in (0, 1):
        return int(v)
    raise ValueError(f"{fname}: {name} must be 0 (time-major) or 1 (batch-major); got {v!r}.")


def _clip(fname: str, name: str, v: Any) -> float | None:
    if v is None:
        return None
    if not isinstance(v, numbers.Real) or isinstance(v, bool):
        raise TypeError(f"{fname}: {name} must be a positive number or None; got {v!r}.")
    v = float(v)
    if math.isnan(v) or v <= 0:
        raise ValueError(f"{fname}: {name} must be a positive number or None; got {v!r}.")
    return None if math.isinf(v) else v


RECURRENT_DTYPES = ("float16",)


def _recurrent_dtype(fname: str, name: str, v: Any) -> str | None:
    if v is None:
        return None
    if isinstance(v, str) and v in RECURRENT_DTYPES:
        return v
    if not isinstance(v, str):
        with contextlib.suppress(TypeError):  # a dtype object (jnp.float16, np.dtype(...)) by name
            v = np.dtype(v).name
        if v in RECURRENT_DTYPES:
            return v
    raise ValueError(f"{fname}: {name} must be None or one of {RECURRENT_DTYPES}; got {v!r}.")


def rounds_recurrent(fname: str, recurrent_dtype: str | None, dtype: Any) -> bool:
    """Whether a call's recurrent weights are rounded (``recurrent_dtype="float16"`` and float32
    weights; float16 ones are float16 already).

    Raises:
      ValueError: recurrent_dtype with bfloat16 or float64 weights.
    """
    if recurrent_dtype is None or np.dtype(dtype) == np.float16:
        return False
    if np.dtype(dtype) != np.float32:
        raise ValueError(f"{fname}: recurrent_dtype={recurrent_dtype!r} applies to float32 calls (float16 "
                         f"calls keep R in float16 already); got {np.dtype(dtype).name} operands.")
    return True


def _names(fname: str, name: str, v: Any) -> tuple[str, ...] | None:
    if v is None:
        return None
    if isinstance(v, str) or not isinstance(v, (Sequence, np.ndarray)):
        raise TypeError(f"{fname}: {name} must be a list of names; got {v!r}.")
    return tuple(v)


def _floats(fname: str, name: str, v: Any) -> tuple[float, ...]:
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


# --------------------------------------------------------------------------------------
# the table
# --------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Option:
    """One keyword option of the layer functions.

    Attributes:
      name: the keyword.
      default: its default in every public signature.
      check: ``(fname, name, value) -> normalised value``; raises naming the option.
      doc: one line for docstrings and messages.
      cells: the cells that take it.
      flag: a boolean of the cell's math: held in ``RNNConfig.flags``, read as ``cfg.<name>``.
      abbrev: its name in ``RNNConfig``'s repr (printed in every jaxpr), if not ``name``.
      wgsl: for a flag, the WGSL override constant that specialises the kernels on it.
      onnx: the ONNX attribute it is, with ``onnx_type`` its attribute type.
      per_step: accepted by the one-step ``gru_cell`` / ``lstm_cell`` (not direction/layout).
    """

    name: str
    default: Any
    check: Callable[[str, str, Any], Any]
    doc: str
    cells: tuple[Cell, ...] = CELLS
    flag: bool = False
    abbrev: str = ""
    wgsl: str | None = None
    onnx: str | None = None
    onnx_type: OnnxType | None = None
    per_step: bool = True


OPTIONS: tuple[Option, ...] = (
    Option("direction", "forward", _choice(DIRECTIONS), '"forward", "reverse" or "bidirectional" (D = 2)',
           onnx="direction", onnx_type="string", per_step=False),
    Option("layout", 0, _layout, "0 (time-major) or 1 (batch-major), as the ONNX attribute",
           onnx="layout", onnx_type="int", per_step=False),
    Option("linear_before_reset", False, _flag,
           "apply the reset gate after the recurrent matmul", cells=("gru",), flag=True,
           abbrev="lbr", wgsl="LBR", onnx="linear_before_reset", onnx_type="int"),
    Option("input_forget", False, _flag, "couple the forget gate to the input gate (f = 1 - i)",
           cells=("lstm",), flag=True, wgsl="INPUT_FORGET", onnx="input_forget",
           onnx_type="int"),
    Option("activations", None, _names, "activation names, per direction (default: the cell's)",
           onnx="activations", onnx_type="strings"),
    Option("activation_alpha", None, _floats, "alpha values, consumed in order by the activations that take one",
           onnx="activation_alpha", onnx_type="floats"),
    Option("activation_beta", None, _floats, "beta values, likewise", onnx="activation_beta",
           onnx_type="floats"),
    Option("clip", None, _clip, "clamp every activation input into [-clip, clip]", onnx="clip",
           onnx_type="float"),
    Option("recurrent_dtype", None, _recurrent_dtype,
           'None, or "float16": R (and an LSTM\'s proj) rounded to float16, float32 accumulation'),
    Option("backend", "auto", _choice(BACKENDS), '"auto", "xla", "wgsl" or "cpu"'),
)
OPTIONS_BY_NAME = {o.name: o for o in OPTIONS}
_BY_NAME = OPTIONS_BY_NAME
FLAG_NAMES = tuple(o.name for o in OPTIONS if o.flag)


def options_for(cell: str, *, per_step: bool = False) -> tuple[Option, ...]:
    """The options a cell kind takes (with ``per_step``: those of the one-step cells)."""
    return tuple(o for o in OPTIONS if cell in o.cells and (o.per_step or not per_step))


def option_names(cell: str, *, per_step: bool = False) -> tuple[str, ...]:
    return tuple(o.name for o in options_for(cell, per_step=per_step))


def pick(names: Sequence[str], scope: Mapping[str, Any]) -> dict[str, Any]:
    """The options ``names`` out of a public function's ``locals()``: its explicit keywords.

    The public signatures spell every option out for readers; this passes them on without
    listing them a second time.
    """
    return {name: scope[name] for name in names}


def flags_for(cell: str) -> tuple[Option, ...]:
    """The boolean flags of a cell's math (e.g. GRU's linear_before_reset)."""
    return tuple(o for o in options_for(cell) if o.flag)


def check_names(fname: str, given: Mapping[str, Any], allowed: Sequence[str]) -> None:
    """TypeError for a keyword not in ``allowed``."""
    for k in given:
        if k not in allowed:
            raise TypeError(f"{fname}: unexpected option {k!r}; allowed: {', '.join(allowed)}.")


def normalise(cell: str, fname: str, given: Mapping[str, Any]) -> dict[str, Any]:
    """Every option of ``cell``: the given ones validated, the others at their defaults.

    Raises:
      TypeError: an option ``cell`` does not take.
      TypeError, ValueError: a bad value, named in the message.
    """
    check_names(fname, given, option_names(cell))
    return {o.name: o.check(fname, o.name, given.get(o.name, o.default)) for o in options_for(cell)}


def num_directions(direction: str) -> int:
    return 2 if direction == "bidirectional" else 1


# --------------------------------------------------------------------------------------
# the config
# --------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, repr=False)
class RNNConfig:
    """Everything static about one GRU/LSTM layer call, passed as one parameter to ``bind``.

    Attributes:
      cell: "gru" or "lstm".
      direction: "forward", "reverse" or "bidirectional".
      layout: 0 (time-major) or 1 (batch-major), as the ONNX attribute.
      activations: per direction, the resolved activations (f, g) or (f, g, h).
      clip: clamp of every activation input, or None.
      backend: the resolved backend, "xla", "wgsl" or "cpu".
      auto: whether ``backend`` was chosen by ``backend="auto"`` (then ``jax.export`` lowers the
        call as ``xla``, whatever this machine chose; see ``backends.lowered``). Not in the repr.
      ragged: whether per-sequence lengths are applied.
      peepholes: LSTM only, whether P is used.
      proj: LSTM only, whether the output projection ``proj`` is applied (h = proj·(o ⊙ h(C))).
      flags: the cell's boolean options (``OPTIONS`` entries with ``flag``), as (name, value);
        each reads as an attribute: ``cfg.linear_before_reset``, ``cfg.input_forget``.
      recurrent_dtype: None, or "float16": the recurrent weights were rounded to float16 before
        the primitive (``api._round_recurrent``); the wgsl backend then keeps R's device copy
        in f16 (exact: the values are f16 already) and reads half the bytes per step.
    """

    cell: Cell
    direction: str = "forward"
    layout: int = 0
    activations: tuple[tuple[Activation, ...], ...] = ()
    clip: float | None = None
    backend: str = "xla"
    ragged: bool = False
    peepholes: bool = False
    flags: tuple[tuple[str, bool], ...] = ()
    proj: bool = False
    recurrent_dtype: str | None = None
    auto: bool = False

    def __getattr__(self, name: str) -> bool:
        # only reached for names that are not fields: the flags; another cell's flag is False
        if name in FLAG_NAMES:
            return bool(dict(self.flags).get(name, OPTIONS_BY_NAME[name].default))
        raise AttributeError(f"RNNConfig has no attribute {name!r}")

    @property
    def num_directions(self) -> int:
        return num_directions(self.direction)

    @property
    def num_gates(self) -> int:
        return spec(self.cell).num_gates

    @property
    def reversed_dirs(self) -> tuple[bool, ...]:
        """For each direction slot, whether it runs backwards in time."""
        return {"forward": (False,), "reverse": (True,), "bidirectional": (False, True)}[self.direction]

    def __repr__(self) -> str:  # short: it is printed in every jaxpr
        acts = "|".join(",".join(map(repr, a)) for a in self.activations)
        parts = [self.cell, self.direction, f"layout={self.layout}"]
        parts += [f"{o.abbrev or o.name}={int(getattr(self, o.name))}" for o in flags_for(self.cell)]
        if spec(self.cell).peepholes:
            parts.append(f"peepholes={int(self.peepholes)}")
        if self.proj:  # only when set: the repr of an unprojected call is unchanged
            parts.append("proj=1")
        if self.recurrent_dtype:  # likewise
            parts.append(f"recurrent_dtype={self.recurrent_dtype}")
        parts += [f"acts={acts}", f"clip={self.clip}", f"ragged={int(self.ragged)}", self.backend]
        return f"RNNConfig({', '.join(parts)})"

    def replace(self, **changes: Any) -> RNNConfig:
        """A copy with fields and flags (by option name) changed."""
        flags = {k: bool(changes.pop(k)) for k in list(changes) if k in FLAG_NAMES}
        if flags:
            changes["flags"] = tuple({**dict(self.flags), **flags}.items())
        return dataclasses.replace(self, **changes)


def resolve_activations(fname: str, cell: str, d: int, names: tuple[str, ...] | None,
                        alpha: tuple[float, ...], beta: tuple[float, ...]) -> tuple[tuple[Activation, ...], ...]:
    """Per direction, the activations with their alpha/beta (ONNX's consumption order)."""
    per_dir = spec(cell).num_activations
    names = DEFAULT_ACTIVATIONS[cell] * d if names is None else names
    if len(names) != per_dir * d:
        raise ValueError(
            f"{fname}: activations must list {per_dir} activations per direction "
            f"({per_dir * d} for {d} direction(s)); got {len(names)}: {list(names)}."
        )
    resolved = _acts.resolve(list(names), alpha, beta, argname="activations", fname=fname)
    return tuple(resolved[i * per_dir : (i + 1) * per_dir] for i in range(d))


def make_config(cell: str, fname: str, *, ragged: bool = False, peepholes: bool = False,
                proj: bool = False, **options: Any) -> RNNConfig:
    """Validate the options of one call and build its static config (backend not yet resolved).

    Args:
      cell: "gru" or "lstm".
      fname: the public function name, for messages.
      ragged: whether per-sequence lengths are given.
      peepholes: whether P is given (LSTM).
      proj: whether a projection is given (LSTM).
      **options: keyword options of the cell (see ``OPTIONS``); absent ones take their default.
    """
    v = normalise(cell, fname, options)
    d = num_directions(v["direction"])
    return RNNConfig(
        cell=spec(cell).name,
        direction=v["direction"],
        layout=v["layout"],
        activations=resolve_activations(fname, cell, d, v["activations"], v["activation_alpha"],
                                        v["activation_beta"]),
        clip=v["clip"],
        backend=v["backend"],
        ragged=ragged,
        peepholes=peepholes,
        flags=tuple((o.name, v[o.name]) for o in flags_for(cell)),
        proj=proj,
        recurrent_dtype=v["recurrent_dtype"],
    )
