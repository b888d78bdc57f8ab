"""The ``lax.scan`` drivers: forward, tangent (jvp) and backward (vjp) of any cell.

These are the ``xla`` lowerings of the primitives, written for one ensemble member with every
operand present (absent ones are zeros, see api.py), in the order of ``cells.CellSpec.operands``.
``x``, the states and the outputs are in the user's layout (ONNX ``layout`` 0 or 1). The math of
each cell is in its own module (gru.py, lstm.py), with the same functions: ``loop_weights`` /
``step`` (forward), ``tangent_inputs`` / ``tangent_step``, ``backward_inputs`` / ``backward_step``
and ``weight_grads``.

Residuals for autodiff are the activation inputs before clipping (and what else the cell lists),
per direction and step in processing order: ``res [D, L, N, K·H]`` with ``K =
cells.CellSpec.residuals(cfg)``. Hidden states before each step are recovered from Y, so
nothing else is stored.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import ModuleType

import jax.numpy as jnp
from jax import lax

from jaxgru._src.cells import spec
from jaxgru._src.options import RNNConfig
from jaxgru._src.reference import gru, lstm
from jaxgru._src.reference.layout import (
    Array,
    Orient,
    Prepared,
    assemble_y,
    biases,
    plan_for,
    states,
    time_major,
    wgrad,
    y_dir,
)

_CELLS: dict[str, ModuleType] = {"gru": gru, "lstm": lstm}
# (prepared operands, per direction the backward's scan inputs, per direction the carry of the
# last step) -> (per direction the carry before the first step, per direction the emissions, per
# direction the emissions' sums over steps and batch (the bias gradients' terms) or None, per
# direction R's gradient or None)
Recurrence = Callable[[Prepared, list, tuple], tuple[tuple, tuple, tuple | None, tuple | None]]
# (prepared operands, per direction the tangent's scan inputs, per direction its aux, per
# direction the carry before the first step) -> (per direction the carry after the last step,
# per direction dY [L, N, H] in processing order)
TangentRecurrence = Callable[[Prepared, list, list, tuple], tuple[tuple, tuple]]


def _finals(cfg: RNNConfig, last: Sequence[tuple[Array, ...]], k: int, orient: Orient | None = None) -> Array:
    """State k (0: h, 1: c) of every direction's carry, in the user layout."""
    per_dir = [s[k] if orient is None else orient.state(s[k]) for s in last]
    return states(cfg, jnp.stack(per_dir))


def forward(cfg: RNNConfig, *operands: Array, residuals: bool = False, plan: tuple[bool, bool] | None = None
            ) -> tuple[Array, ...]:
    """ONNX GRU/LSTM forward. Returns (y, y_h[, y_c]) and, if ``residuals``, res last.

    ``plan`` = (feature_major, hoist) overrides ``layout.plan_for`` (tests run every variant).
    """
    cell = _CELLS[cfg.cell]
    pr = Prepared(cfg, operands)
    tm, n_gates = pr.tm, cfg.num_gates
    feature_major, hoist = plan or plan_for(cfg.cell, pr.batch, pr.hidden, residuals)
    o = Orient(feature_major)
    keep = (lambda res: jnp.concatenate(res, axis=-1)) if residuals else (lambda res: None)
    # per direction: the input terms (hoisted per gate, or x for the loop), weights in the
    # layout the loop consumes, biases
    xs, xbias, wx, loop_w = [], [], [], []
    for d in pr.dirs:
        wx.append(o.weight(pr.w[d]))
        loop_w.append(cell.loop_weights(cfg, o, pr, d))
        xbias.append(o.gates(o.vec(pr.bias[d][0][0]), n_gates))
        if hoist:  # one GEMM per gate over all steps
            blocks = jnp.split(pr.w[d], n_gates)
            xs.append(tuple(o.seq(pr.x[d] @ wg.T) + bg[None] for wg, bg in zip(blocks, xbias[d])))
        else:
            xs.append(o.seq(pr.x[d]))
    mask = None if tm.mask is None else (jnp.swapaxes(tm.mask, 1, 2) if o.fm else tm.mask)

    def step(carry, inp):
        x_t, m = inp
        new, ys, rs = [], [], []
        for d in pr.dirs:
            ax = x_t[d] if hoist else [a + b for a, b in zip(o.gates(o.mm(x_t[d], wx[d]), n_gates), xbias[d])]
            state, res = cell.step(cfg, d, o, ax, loop_w[d], carry[d])
            new.append(tuple(tm.select(s, old, m) for s, old in zip(state, carry[d])))
            ys.append(tm.zero(state[0], m))
            rs.append(keep(res))
        return tuple(new), (tuple(ys), tuple(rs))

    carry0 = tuple(tuple(o.state(s[d]) for s in pr.states) for d in pr.dirs)
    last, (ys, rs) = lax.scan(step, carry0, (tuple(xs), mask), unroll=pr.unroll)
    y = assemble_y(cfg, [tm.proc(o.seq(y), d) for d, y in enumerate(ys)])
    outs = [y] + [_finals(cfg, last, k, o) for k in range(len(pr.states))]
    outs = [a.astype(operands[0].dtype) for a in outs]
    if residuals:
        outs.append(jnp.stack(rs))  # [D, L, N, K·H]
    return tuple(outs)


def tangent(cfg: RNNConfig, primals: Sequence[Array], y: Array, res: Array, tangents: Sequence[Array],
            recurrence: TangentRecurrence | None = None) -> tuple[Array, ...]:
    """Forward-mode derivative: tangents of (y, y_h[, y_c]) from tangents of the operands.

    ``recurrence`` replaces the ``lax.scan`` over the steps (the native CPU lowering's kernel);
    the terms hoisted out of the steps (``tangent_inputs``) are the same either way.

    Args:
      cfg: the layer's options.
      primals: the forward's operands.
      y: the forward's Y (user layout).
      res: the forward's residuals ``[D, L, N, K·H]``.
      tangents: tangents of the floating operands, in operand order (lens excluded).
      recurrence: see above (None: the ``lax.scan``).
    """
    cell = _CELLS[cfg.cell]
    pr = Prepared(cfg, primals)
    tm = pr.tm
    t = spec(cfg.cell).unpack([*(a.astype(pr.dtype) for a in tangents), None])
    txt = time_major(cfg, t.x)
    tbias = biases(cfg, t.b, pr.hidden)
    res = res.astype(pr.dtype)
    per_dir, aux = [], []
    for d in pr.dirs:
        hp = pr.h_prev(cfg, y, d)
        txp = tm.proc(txt, d) @ pr.wt[d] + pr.x[d] @ t.w[d].T + tbias[d][0][None]  # d(X·Wᵀ + Wb)
        xs_d, aux_d = cell.tangent_inputs(cfg, pr, d, res[d], hp, txp, t, tbias)
        per_dir.append(xs_d)
        aux.append(aux_d)

    def step(carry, inp):
        xs, m = inp
        new, dys = [], []
        for d in pr.dirs:
            state = cell.tangent_step(cfg, pr, d, aux[d], carry[d], xs[d])
            new.append(tuple(tm.select(s, old, m) for s, old in zip(state, carry[d])))
            dys.append(tm.zero(state[0], m))
        return tuple(new), tuple(dys)

    t_states = [states(cfg, s) for s in (t.h0, t.c0) if s is not None]
    carry0 = tuple(tuple(s[d] for s in t_states) for d in pr.dirs)
    if recurrence is None:
        last, dys = lax.scan(step, carry0, (tuple(per_dir), tm.mask), unroll=pr.unroll)
    else:
        last, dys = recurrence(pr, per_dir, aux, carry0)
    outs = [assemble_y(cfg, [tm.proc(dy, d) for d, dy in enumerate(dys)])]
    outs += [_finals(cfg, last, k) for k in range(len(t_states))]
    return tuple(o.astype(primals[0].dtype) for o in outs)


def backward(cfg: RNNConfig, primals: Sequence[Array], y: Array, res: Array, cotangents: Sequence[Array],
             recurrence: Recurrence | None = None) -> tuple[Array, ...]:
    """Reverse-mode derivative: cotangents of the floating operands from those of the outputs.

    ``recurrence`` replaces the reverse ``lax.scan`` (the native CPU lowering's kernel); the
    weight gradients after it are the same GEMMs over all steps either way.

    Returns:
      Cotangents of every operand but ``sequence_lens``, in operand order.
    """
    cell_spec = spec(cfg.cell)
    cell = _CELLS[cfg.cell]
    pr = Prepared(cfg, primals)
    tm = pr.tm
    gy = cotangents[0].astype(pr.dtype)
    g_states = [states(cfg, c.astype(pr.dtype)) for c in cotangents[1:]]
    res = res.astype(pr.dtype)
    hps = [pr.h_prev(cfg, y, d) for d in pr.dirs]
    per_dir = [cell.backward_inputs(cfg, pr, d, tm.proc(y_dir(cfg, gy, d), d), res[d], hps[d])
               for d in pr.dirs]

    def step(carry, inp):
        xs, m = inp
        new, emits = [], []
        for d in pr.dirs:
            state, emit = cell.backward_step(cfg, pr, d, carry[d], xs[d], m)
            new.append(state)
            emits.append(emit)
        return tuple(new), tuple(emits)

    carry0 = tuple(tuple(s[d] for s in g_states) for d in pr.dirs)
    if recurrence is None:
        first, emits = lax.scan(step, carry0, (tuple(per_dir), tm.mask), reverse=True, unroll=pr.unroll)
        sums = rgrads = None
    else:
        first, emits, sums, rgrads = recurrence(pr, per_dir, carry0)

    g_xs, grads = [], {"w": []}
    for d in pr.dirs:
        dgx = emits[d][0]  # d(X·Wᵀ + b): every cell's first emission
        grads["w"].append(wgrad(dgx, pr.x[d]))
        g_xs.append(tm.proc(dgx @ pr.w[d], d))
        for k, v in cell.weight_grads(cfg, pr, d, emits[d], per_dir[d], hps[d],
                                      None if sums is None else sums[d],
                                      None if rgrads is None else rgrads[d]).items():
            grads.setdefault(k, []).append(v)
    ops = cell_spec.unpack(primals)
    g_x = g_xs[0]
    for a in g_xs[1:]:
        g_x = g_x + a
    out = {"x": time_major(cfg, g_x)}
    operands = cell_spec.operands_for(cfg)
    for o in operands:  # a weight without gradient (P without peepholes) gets zeros
        if o.kind == "param":
            out[o.field] = jnp.stack(grads[o.field]) if o.field in grads else jnp.zeros_like(getattr(ops, o.field))
    for k, o in enumerate(cell_spec.state_operands):
        out[o.field] = _finals(cfg, first, k)
    return tuple(out[o.field].astype(getattr(ops, o.field).dtype) for o in operands if o.kind != "lens")
