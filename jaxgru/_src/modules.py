"""What the optional Flax and Equinox modules share (framework-free): one :class:`ModuleSpec`
holds a module's sizes and options (validated once, at construction), initialises its weights,
checks its inputs and runs the stack; and reading a converter's output back into a module.

A module's options are the stack options of its cell (``options.OPTIONS``) with ``direction``
replaced by ``bidirectional``, plus the module-level options of ``MODULE_OPTIONS`` (the stack
functions' own keywords, such as ``dropout``, which are not layer options); both frameworks
read them from the spec.
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxgru._src import api
from jaxgru._src import dropout as _dropout
from jaxgru._src.cells import spec as cell_spec
from jaxgru._src.options import OPTIONS_BY_NAME, check_names, make_config, option_names
from jaxgru._src.params import PARAMS_TYPE, GRUParams, LSTMParams, init_gru, init_lstm
from jaxgru._src.shapes import check_size

Params = GRUParams | LSTMParams
_INIT: dict[str, Callable[..., Any]] = {"gru": init_gru, "lstm": init_lstm}
_STACK: dict[str, Callable[..., Any]] = {"gru": api.gru_stack, "lstm": api.lstm_stack}


# The module-level options: keywords of every module constructor that are not layer options
# (not in options.OPTIONS) but keywords of the stack functions, with their defaults.
MODULE_OPTIONS: dict[str, Any] = {"dropout": 0.0}
# A cell's own sizes beyond input/hidden/num_layers/bidirectional, with their defaults: constructor
# arguments of its modules (weight shapes, as init_lstm's), neither layer nor stack options.
CELL_SIZES: dict[str, dict[str, Any]] = {"gru": {}, "lstm": {"proj_size": 0}}


def module_options(cell: str) -> tuple[str, ...]:
    """The layer options a module of ``cell`` takes as keywords (``direction`` is ``bidirectional``)."""
    return tuple(n for n in option_names(cell) if n != "direction")


def check_flag(fname: str, name: str, value: Any) -> bool:
    """A mode flag of a module (Flax ``deterministic``, Equinox ``inference``) as a bool.

    Raises:
      TypeError: not a bool (a traced bool included: the mode must be known when tracing).
    """
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise TypeError(f"{fname}: {name} must be a bool, known when tracing; got {value!r}.")


def static_tuple(v: Any) -> Any:
    """Lists as tuples: module options must be hashable (they are static under jit)."""
    if v is None or isinstance(v, (str, numbers.Real)):
        return v
    return tuple(v)


@dataclasses.dataclass(frozen=True)
class ModuleSpec:
    """A GRU/LSTM module's construction: sizes and options, static and hashable.

    Attributes:
      cell: "gru" or "lstm".
      name: the module's public name, for messages (``jaxgru.flax.GRU``).
      input_size, hidden_size, num_layers: sizes.
      bidirectional: whether each layer runs both directions.
      options: the other layer options (``module_options(cell)``) as (name, value) pairs.
      dropout: the rate of dropout between layers (``MODULE_OPTIONS``), applied only when a
        call gives a key (``run``).
      proj_size: LSTM only (``CELL_SIZES``): P > 0 projects each layer's hidden state to P
        features (PyTorch's ``proj_size``, ``LSTMParams.proj``); 0 for none.
    """

    cell: str
    name: str
    input_size: int
    hidden_size: int
    num_layers: int
    bidirectional: bool
    options: tuple[tuple[str, Any], ...]
    dropout: float = 0.0
    proj_size: int = 0

    @classmethod
    def make(cls, cell: str, name: str, input_size: Any, hidden_size: Any, num_layers: Any,
             bidirectional: Any, options: dict[str, Any]) -> ModuleSpec:
        """Validate a module's constructor arguments (every option now, not at the first call).

        ``options`` holds the layer options (``module_options(cell)``), the module-level ones
        (``MODULE_OPTIONS``) and the cell's own sizes (``CELL_SIZES``).
        """
        options = dict(options)
        dropout = _dropout.check_rate(name, options.pop("dropout", MODULE_OPTIONS["dropout"]))
        proj_size = options.pop("proj_size", 0) if "proj_size" in CELL_SIZES[cell] else 0
        if isinstance(proj_size, bool) or not isinstance(proj_size, numbers.Integral) or proj_size < 0:
            raise ValueError(f"{name}: proj_size must be a non-negative int (0: no projection); got {proj_size!r}.")
        check_names(name, options, module_options(cell))
        spec = cls(cell, name, check_size(name, "input_size", input_size), check_size(name, "hidden_size", hidden_size),
                   check_size(name, "num_layers", num_layers), bool(bidirectional),
                   tuple((k, static_tuple(options.get(k))) for k in module_options(cell) if k in options),
                   dropout, int(proj_size))
        make_config(cell, name, **spec.stack_options())
        return spec

    @property
    def num_directions(self) -> int:
        return 2 if self.bidirectional else 1

    def attribute(self, name: str) -> Any:
        """A size or a module option by name (an option's table default when not given).

        Raises:
          AttributeError: ``name`` is neither.
        """
        if name in _SIZES or name in MODULE_OPTIONS or name in CELL_SIZES[self.cell]:
            return getattr(self, name)
        if name not in module_options(self.cell):
            raise AttributeError(f"{self.name} has no attribute {name!r}")
        return dict(self.options).get(name, OPTIONS_BY_NAME[name].default)

    def stack_options(self) -> dict[str, Any]:
        """The keyword options of ``gru_stack`` / ``lstm_stack`` this module calls with."""
        return {"direction": "bidirectional" if self.bidirectional else "forward", **dict(self.options)}

    def init_layers(self, keys: Sequence[jax.Array], dtype: Any) -> list[Params]:
        """Weights initialised like PyTorch, one key per layer."""
        d = self.num_directions
        sizes = {"proj_size": self.proj_size} if self.proj_size else {}  # a layer reads d·P features then
        width = self.proj_size or self.hidden_size
        return [_INIT[self.cell](k, self.input_size if i == 0 else d * width, self.hidden_size,
                                 bidirectional=self.bidirectional, dtype=dtype, **sizes)
                for i, k in enumerate(keys)]

    def run(self, layers: Sequence[Params], x: Any, states: dict[str, Any], sequence_lens: Any,
            key: Any = None) -> tuple[Any, ...]:
        """The stack call, after checking x's features against the module's ``input_size``.

        ``key``: the dropout key (None: no dropout); each framework decides when to pass one.
        """
        shape = np.shape(x)  # a static shape, also under tracing exporters that wrap jnp
        if len(shape) == 3 and shape[-1] != self.input_size:
            raise ValueError(
                f"{self.name}: x has {shape[-1]} features on its last axis, but the module's "
                f"input_size is {self.input_size} (x of shape {tuple(shape)})."
            )
        return _STACK[self.cell](list(layers), x, **states, sequence_lens=sequence_lens, dropout=self.dropout,
                                 key=key, **self.stack_options())


_SIZES = ("input_size", "hidden_size", "num_layers", "bidirectional")


def spec_attribute(module: Any, name: str) -> Any:
    """A module's ``__getattr__``: its sizes and options, read from ``module.spec``."""
    if name.startswith("_") or name == "spec":  # not set (yet): the normal lookup's error
        return object.__getattribute__(module, name)
    return object.__getattribute__(module, "spec").attribute(name)


def lstm_states(fname: str, initial_state: Any) -> dict[str, Any]:
    """An LSTM module's ``initial_state`` (a pair ``(h_0, c_0)`` or None) as stack keywords."""
    if initial_state is None:
        initial_state = (None, None)
    if not isinstance(initial_state, (tuple, list)) or len(initial_state) != 2:
        raise TypeError(f"{fname}: initial_state must be a pair (h_0, c_0) or None; "
                        f"got {type(initial_state).__name__}.")
    return {"initial_h": initial_state[0], "initial_c": initial_state[1]}


def states_for(spec: ModuleSpec, initial_state: Any) -> dict[str, Any]:
    """A module's ``initial_state`` (GRU: h_0; LSTM: a pair) as the stack's state keywords."""
    if cell_spec(spec.cell).num_states == 1:
        return {"initial_h": initial_state}
    return lstm_states(spec.name, initial_state)


def converted_sizes(layers: Sequence[Params]) -> tuple[int, int, dict[str, int]]:
    """``(input_size, hidden_size, cell sizes)`` a module needs to hold ``layers`` (converted
    weights): the cell sizes are ``{"proj_size": P}`` for projected LSTM layers, else empty."""
    first = layers[0]
    proj = getattr(first, "proj", None)
    if proj is None:
        return int(jnp.shape(first.w)[-1]), int(jnp.shape(first.r)[-1]), {}
    return int(jnp.shape(first.w)[-1]), int(jnp.shape(proj)[-1]), {"proj_size": int(jnp.shape(proj)[1])}


def check_converted(fname: str, cell: str, layers: Sequence, options: dict) -> tuple[int, dict]:
    """Validate a converter's ``(layers, options)`` for a module.

    Returns:
      The number of directions the weights hold, and the options left for the module's
      constructor (``direction`` / ``bidirectional`` consumed).

    Raises:
      TypeError, ValueError: layers of the wrong kind, mixed directions, or a direction the
        modules cannot express (reverse-only) or that disagrees with the weights.
    """
    kind = PARAMS_TYPE[cell]
    if isinstance(layers, kind) or not isinstance(layers, Sequence) or not layers or not all(
            isinstance(p, kind) for p in layers):
        raise TypeError(f"{fname}: layers must be a non-empty list of jaxgru.{kind.__name__}; "
                        f"got {type(layers).__name__}.")
    options = dict(options)
    shapes = [tuple(jnp.shape(p.w)) for p in layers]
    d = shapes[0][0]
    if d not in (1, 2) or any(s[0] != d for s in shapes):
        raise ValueError(f"{fname}: every layer's w must hold the same 1 or 2 directions on axis 0; "
                         f"got w shapes {shapes}.")
    # a converter's `direction` stands for `bidirectional`; both must agree with the weights
    direction = options.pop("direction", "bidirectional" if d == 2 else "forward")
    if direction not in ("forward", "bidirectional"):
        raise ValueError(f"{fname}: direction must be 'forward' or 'bidirectional'; got {direction!r} "
                         "(run a reverse-only stack with jaxgru.gru_stack / lstm_stack).")
    bidirectional = options.pop("bidirectional", direction == "bidirectional")
    if (direction == "bidirectional") != (d == 2) or bool(bidirectional) != (d == 2):
        raise ValueError(f"{fname}: direction={direction!r}, bidirectional={bidirectional!r} disagree with "
                         f"weights holding {d} direction(s) (w shapes {shapes}).")
    return d, options
