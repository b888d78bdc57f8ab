"""The primitives themselves: shape rules (validation at trace time, shapes of every option
combination), the chosen lowering, and what a jaxpr shows."""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import pytest

import jaxgru
from jaxgru._src import api
from jaxgru._src.primitives import backward_p, forward_p, tangent_p

L, N, I, H = 5, 3, 4, 6


def _ops(cell, d=1, layout=0, dtype=jnp.float32, e=0):
    g = 3 if cell == "gru" else 4
    lead = (e,) if e else ()
    z = lambda *s, dt=dtype: jax.ShapeDtypeStruct(lead + s, dt)
    st = (d, N, H) if layout == 0 else (N, d, H)
    ops = [z(L, N, I) if layout == 0 else z(N, L, I), z(d, g * H, I), z(d, g * H, H), z(d, 2 * g * H)]
    if cell == "lstm":
        ops.append(z(d, 3 * H))
    ops += [z(*st)] * (1 if cell == "gru" else 2)
    ops.append(z(N, dt=jnp.int32))
    return ops


def _cfg(cell, **kw):
    kw.setdefault("backend", "xla")
    return api.make_config(cell, "t", direction=kw.pop("direction", "forward"), layout=kw.pop("layout", 0), **kw)


def _fwd(cfg, ops, e=0, residuals=False):
    return jax.eval_shape(lambda *o: forward_p[cfg.cell].bind(*o, cfg=cfg, ensemble=e, residuals=residuals), *ops)


@pytest.mark.parametrize(("cell", "direction", "layout", "e"), list(itertools.product(
    ["gru", "lstm"], ["forward", "bidirectional"], [0, 1], [0, 2])))
def test_shape_rule_matches_the_computation(cell, direction, layout, e):
    d = 2 if direction == "bidirectional" else 1
    cfg = _cfg(cell, direction=direction, layout=layout, ragged=True)
    ops = _ops(cell, d, layout, e=e)
    abstract = _fwd(cfg, ops, e, residuals=True)
    concrete = jax.jit(lambda *o: forward_p[cell].bind(*o, cfg=cfg, ensemble=e, residuals=True))(
        *[jnp.ones(o.shape, o.dtype) for o in ops])
    assert [a.shape for a in abstract] == [c.shape for c in concrete]
    assert [a.dtype for a in abstract] == [c.dtype for c in concrete]


@pytest.mark.parametrize(("change", "exc", "pieces"), [
    (lambda ops: ops.__setitem__(1, jax.ShapeDtypeStruct((1, 18, 4), jnp.float16)), TypeError,
     ["params.w", "dtype of x (float32)", "float16"]),
    (lambda ops: ops.__setitem__(-1, jax.ShapeDtypeStruct((N,), jnp.float32)), TypeError,
     ["sequence_lens", "integer"]),
    (lambda ops: ops.__setitem__(4, jax.ShapeDtypeStruct((1, N, H + 1), jnp.float32)), ValueError,
     ["initial_h", "(1, 3, 6)", "(1, 3, 7)"]),
    (lambda ops: ops.pop(), TypeError, ["expected 6 operands"]),
    (lambda ops: ops.__setitem__(0, jax.ShapeDtypeStruct((L, N, I), jnp.int32)), TypeError, ["x", "floating"]),
])
def test_forward_shape_rule_validates(change, exc, pieces):
    ops = _ops("gru")
    change(ops)
    with pytest.raises(exc) as info:
        _fwd(_cfg("gru"), ops)
    for p in pieces:
        assert p in str(info.value), str(info.value)


def test_ensemble_axis_is_checked():
    ops = _ops("lstm", e=3)
    ops[2] = jax.ShapeDtypeStruct((2, *ops[2].shape[1:]), jnp.float32)
    with pytest.raises(ValueError, match=r"params.r must have a leading ensemble axis of size 3"):
        _fwd(_cfg("lstm"), ops, e=3)


def test_tangent_and_backward_rules_validate():
    cfg = _cfg("gru", ragged=True)
    ops = _ops("gru")
    y, yh, res = _fwd(cfg, ops, residuals=True)
    tans = ops[:-1]
    ok = jax.eval_shape(lambda *a: tangent_p["gru"].bind(*a, cfg=cfg, ensemble=0), *ops, y, res, *tans)
    assert [o.shape for o in ok] == [y.shape, yh.shape]
    bad_res = jax.ShapeDtypeStruct((*res.shape[:-1], res.shape[-1] + 1), res.dtype)
    with pytest.raises(ValueError, match="residuals must have shape"):
        jax.eval_shape(lambda *a: tangent_p["gru"].bind(*a, cfg=cfg, ensemble=0), *ops, y, bad_res, *tans)
    with pytest.raises(ValueError, match="backward: operand must have shape"):
        jax.eval_shape(lambda *a: backward_p["gru"].bind(*a, cfg=cfg, ensemble=0), *ops, y, res, y, y)
    grads = jax.eval_shape(lambda *a: backward_p["gru"].bind(*a, cfg=cfg, ensemble=0), *ops, y, res, y, yh)
    assert [g.shape for g in grads] == [o.shape for o in ops[:-1]]


def test_eval_shape_of_the_public_api():
    params = jaxgru.init_lstm(jax.random.key(0), I, H, bidirectional=True)
    out = jax.eval_shape(lambda p, x: jaxgru.lstm(p, x, direction="bidirectional", layout=1), params,
                         jax.ShapeDtypeStruct((N, L, I), jnp.bfloat16))
    assert [(o.shape, o.dtype) for o in out] == [((N, L, 2, H), jnp.bfloat16)] + [((N, 2, H), jnp.bfloat16)] * 2


def test_xla_lowering_is_a_plain_xla_program():
    params = jaxgru.init_gru(jax.random.key(0), I, H)
    text = jax.jit(lambda p, x: jaxgru.gru(p, x, backend="xla")).lower(params, jnp.ones((20, N, I))).as_text()
    assert "stablehlo.while" in text and "dot_general" in text and "callback" not in text


def test_jaxpr_shows_the_primitive_and_its_options():
    params = jaxgru.init_gru(jax.random.key(0), I, H)
    text = str(jax.make_jaxpr(lambda p, x: jaxgru.gru(p, x, linear_before_reset=True, clip=2.0, backend="xla"))(
        params, jnp.ones((L, N, I))))
    assert "jaxgru_gru[" in text
    assert "RNNConfig(gru, forward, layout=0, lbr=1, acts=Sigmoid,Tanh, clip=2.0, ragged=0, xla)" in text
