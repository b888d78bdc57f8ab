"""The JAX primitives, three per cell, and the one block that registers all their rules.

For cell in {gru, lstm}:

* ``jaxgru_<cell>``: the forward. Operands (cells.CellSpec.operands), static ``cfg``,
  ``ensemble`` and ``residuals``; outputs ``(y, y_h[, y_c])`` and, if ``residuals``, ``res``.
* ``jaxgru_<cell>_jvp``: the tangent map, linear in its tangent operands given the primals
  and the forward's ``y``/``res``. Operands: primals, y, res, tangents of the float primals.
* ``jaxgru_<cell>_vjp``: the backward, registered as the transpose of the tangent map.
  Operands: primals, y, res, cotangents of the outputs; outputs: cotangents of the float
  primals.

``ensemble > 0`` means every operand and output has a leading axis of that size (independent
members, e.g. vmapped weights). Shape rules: shapes.py; lowerings: lowering.py (``xla``: the
``lax.scan`` reference everywhere; ``wgsl``: host callbacks into the WGSL kernels for the
forward, the tangent and the backward; ``cpu``: XLA FFI calls into the native kernels for the
forward and the recurrences of the tangent and the backward, on the cpu platform); jvp,
transpose and batching: rules.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

from jaxgru._src import lowering, rules, shapes
from jaxgru._src.cells import CELLS
from jaxgru._src.compat import Primitive, ad, batching, match_varying, mlir, xla
from jaxgru._src.options import RNNConfig


def _make(name: str) -> Primitive:
    p = Primitive(name)
    p.multiple_results = True
    p.def_impl(partial(xla.apply_primitive, p))
    return p


def _register(cell: str) -> rules.Primitives:
    """Create one cell's primitives and register every rule of each, together."""
    p = rules.Primitives(cell, _make(f"jaxgru_{cell}"), _make(f"jaxgru_{cell}_jvp"), _make(f"jaxgru_{cell}_vjp"))

    p.forward.def_abstract_eval(shapes.forward_abstract)
    mlir.register_lowering(p.forward, lowering.forward_lowering)
    mlir.register_lowering(p.forward, lowering.cpu_forward_lowering, platform="cpu")  # backend="cpu"
    ad.primitive_jvps[p.forward] = partial(rules.forward_jvp, p)
    batching.fancy_primitive_batchers[p.forward] = partial(rules.batch_rule, p.forward, "forward")

    p.tangent.def_abstract_eval(shapes.tangent_abstract)
    mlir.register_lowering(p.tangent, lowering.tangent_lowering)
    mlir.register_lowering(p.tangent, lowering.cpu_tangent_lowering, platform="cpu")  # backend="cpu"
    ad.primitive_jvps[p.tangent] = partial(rules.tangent_jvp, p)
    ad.primitive_transposes[p.tangent] = partial(rules.tangent_transpose, p)
    batching.fancy_primitive_batchers[p.tangent] = partial(rules.batch_rule, p.tangent, "tangent")

    p.backward.def_abstract_eval(shapes.backward_abstract)
    mlir.register_lowering(p.backward, lowering.backward_lowering)
    mlir.register_lowering(p.backward, lowering.cpu_backward_lowering, platform="cpu")  # backend="cpu"
    ad.primitive_jvps[p.backward] = partial(rules.backward_jvp, p)
    batching.fancy_primitive_batchers[p.backward] = partial(rules.batch_rule, p.backward, "backward")
    return p


PRIMITIVES = {cell: _register(cell) for cell in CELLS}
forward_p = {c: p.forward for c, p in PRIMITIVES.items()}
tangent_p = {c: p.tangent for c, p in PRIMITIVES.items()}
backward_p = {c: p.backward for c, p in PRIMITIVES.items()}


def run_layer(cfg: RNNConfig, operands: Sequence[Any]) -> tuple[Any, ...]:
    """Run one GRU/LSTM layer on fully materialised operands (in cells.CellSpec.operands order)."""
    return tuple(forward_p[cfg.cell].bind(*match_varying(*operands), cfg=cfg, ensemble=0, residuals=False))
