"""What the optional Flax and Equinox modules share (framework-free): option checks, the
options of the stack call, and reading a converter's output back into a module."""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp

from jaxgru._src.params import GRUParams, LSTMParams


def static_tuple(v: Sequence | float | None) -> tuple | float | str | None:
    """Lists as tuples: module options must be hashable (they are static under jit)."""
    if v is None or isinstance(v, (str, numbers.Real)):
        return v
    return tuple(v)


def stack_options(m: Any) -> dict:
    """The keyword options of ``gru_stack`` / ``lstm_stack`` held by a module ``m``."""
    return {"direction": "bidirectional" if m.bidirectional else "forward", "layout": m.layout,
            "activations": m.activations, "activation_alpha": m.activation_alpha,
            "activation_beta": m.activation_beta, "clip": m.clip, "backend": m.backend}


def lstm_states(fname: str, initial_state: Any) -> dict:
    """An LSTM module's ``initial_state`` (a pair ``(h_0, c_0)`` or None) as stack keywords."""
    if initial_state is None:
        initial_state = (None, None)
    if not isinstance(initial_state, (tuple, list)) or len(initial_state) != 2:
        raise TypeError(f"{fname}: initial_state must be a pair (h_0, c_0) or None; "
                        f"got {type(initial_state).__name__}.")
    return {"initial_h": initial_state[0], "initial_c": initial_state[1]}


def check_converted(fname: str, cell: str, layers: Sequence, options: dict) -> tuple[int, dict]:
    """Validate a converter's ``(layers, options)`` for a module.

    Returns:
      The number of directions the weights hold, and the options left for the module's
      constructor (``direction`` / ``bidirectional`` consumed).

    Raises:
      TypeError, ValueError: layers of the wrong kind, mixed directions, or a direction the
        modules cannot express (reverse-only) or that disagrees with the weights.
    """
    kind = GRUParams if cell == "gru" else LSTMParams
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
