"""Equinox conventions: jaxgru.interop.from_equinox against Equinox's own cells (scanned over a
sequence), and the Equinox modules on one example ``x [L, I]`` and under ``jax.vmap``."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from backend_cases import BACKENDS

import jaxgru
import jaxgru.equinox
from jaxgru.interop import from_equinox

L, N, I, H = 5, 3, 3, 4
TOL = {"atol": 2e-6, "rtol": 2e-6}
CELL = {"gru": eqx.nn.GRUCell, "lstm": eqx.nn.LSTMCell}


def _random_cell(kind, use_bias, seed=0):
    """An Equinox cell whose every parameter (bias_n too) is drawn, not left at its init."""
    cell = CELL[kind](I, H, use_bias=use_bias, key=jax.random.key(seed))
    rng = np.random.default_rng(seed)
    return jax.tree.map(lambda a: jnp.asarray(rng.uniform(-0.8, 0.8, a.shape).astype(np.float32)), cell)


def _scan(cell, x, state):
    """The oracle: Equinox's cell over one sequence x [L, I], as its docstring's lax.scan, per example."""
    def step(carry, x_t):
        carry = cell(x_t, carry)
        return carry, carry[0] if isinstance(carry, tuple) else carry
    return jax.lax.scan(step, state, x)


def _inputs(seed=1):
    rng = np.random.default_rng(seed)
    return (jnp.asarray(rng.standard_normal((N, L, I)).astype(np.float32)),
            jnp.asarray(rng.standard_normal((N, H)).astype(np.float32)),
            jnp.asarray(rng.standard_normal((N, H)).astype(np.float32)))


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("use_bias", [True, False])
@pytest.mark.parametrize("kind", ["gru", "lstm"])
def test_from_equinox_against_the_cell(kind, use_bias, backend):
    cell = _random_cell(kind, use_bias)
    layers, options = from_equinox(cell)
    assert options == ({"linear_before_reset": True} if kind == "gru" else {})
    assert (layers[0].b is None) == (not use_bias)
    xs, h0, c0 = _inputs()
    if kind == "gru":
        last, out = jax.vmap(lambda x, h: _scan(cell, x, h))(xs, h0)  # [N, H], [N, L, H]
        y, y_h = jaxgru.gru(layers[0], xs, initial_h=h0[:, None], layout=1, backend=backend, **options)
        got, want = (y[:, :, 0], y_h[:, 0]), (out, last)
        step = jaxgru.gru_cell(layers[0], xs[:, 0], h0, backend=backend, **options)
        want_step = jax.vmap(cell)(xs[:, 0], h0)
    else:
        (h_last, c_last), out = jax.vmap(lambda x, h, c: _scan(cell, x, (h, c)))(xs, h0, c0)
        y, y_h, y_c = jaxgru.lstm(layers[0], xs, initial_h=h0[:, None], initial_c=c0[:, None], layout=1,
                                  backend=backend, **options)
        got, want = (y[:, :, 0], y_h[:, 0], y_c[:, 0]), (out, h_last, c_last)
        step = jaxgru.lstm_cell(layers[0], xs[:, 0], h0, c0, backend=backend, **options)
        want_step = jax.vmap(lambda x, h, c: cell(x, (h, c)))(xs[:, 0], h0, c0)
    for a, b in zip([*got, *jax.tree.leaves(step)], [*want, *jax.tree.leaves(want_step)], strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), **TOL)


def test_from_equinox_keeps_the_dtype_and_refuses_other_objects():
    cell = eqx.nn.GRUCell(I, H, dtype=jnp.bfloat16, key=jax.random.key(0))
    layers, _ = from_equinox(cell)
    assert layers[0].w.dtype == jnp.bfloat16 and layers[0].b.shape == (1, 6 * H)
    np.testing.assert_array_equal(np.asarray(layers[0].b[0, 3 * H: 5 * H], np.float32), 0)  # Rb: z, r zero
    np.testing.assert_array_equal(np.asarray(layers[0].b[0, 5 * H:]), np.asarray(cell.bias_n))  # Rb_h = bias_n
    with pytest.raises(TypeError, match=r"cell must be an equinox.nn.GRUCell or equinox.nn.LSTMCell; got Linear."):
        from_equinox(eqx.nn.Linear(3, 4, key=jax.random.key(0)))
    with pytest.raises(TypeError, match=r"got GRU\.$"):
        from_equinox(jaxgru.equinox.GRU(I, H, key=jax.random.key(0)))


def test_converted_cell_runs_in_the_module():
    cell = _random_cell("lstm", True, seed=3)
    layers, options = from_equinox(cell)
    model = jaxgru.equinox.LSTM.from_params(layers, **options)
    xs, h0, c0 = _inputs(2)
    (h_last, c_last), out = _scan(cell, xs[0], (h0[0], c0[0]))
    y, (h_n, c_n) = model(xs[0], initial_state=(h0[:1], c0[:1]))  # one example: no batch axis
    for a, b in zip((y[:, 0], h_n[0], c_n[0]), (out, h_last, c_last), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), **TOL)


# --------------------------------------------------------------------------------------
# the modules on one example, and jax.vmap over examples
# --------------------------------------------------------------------------------------
def _model(kind, **kw):
    cls = jaxgru.equinox.GRU if kind == "gru" else jaxgru.equinox.LSTM
    return cls(I, H, num_layers=2, backend="xla", key=jax.random.key(0), **kw)


def _batched_state(kind, layout, d, seed=4):
    rng = np.random.default_rng(seed)
    shape = (2 * d, N, H) if layout == 0 else (N, 2 * d, H)
    h = jnp.asarray(rng.standard_normal(shape).astype(np.float32))
    if kind == "gru":
        return h
    return h, jnp.asarray(rng.standard_normal(shape).astype(np.float32))


@pytest.mark.parametrize(("kind", "layout", "bidirectional"), [("gru", 0, True), ("lstm", 1, False)])
def test_one_example_is_a_batch_of_one(kind, layout, bidirectional):
    model = _model(kind, layout=layout, bidirectional=bidirectional)
    d = 2 if bidirectional else 1
    xs, _, _ = _inputs(5)  # [N, L, I]
    x_batch = jnp.swapaxes(xs, 0, 1) if layout == 0 else xs
    state = _batched_state(kind, layout, d)
    lens = jnp.array([5, 3, 0])
    y_b, s_b = model(x_batch, state, lens)
    take = (lambda a, i: a[:, i]) if layout == 0 else (lambda a, i: a[i])  # states: [2D, N, H] / [N, 2D, H]
    take_y = (lambda a, i: a[:, :, i]) if layout == 0 else (lambda a, i: a[i])  # y: [L, D, N, H] / [N, L, D, H]
    for i in range(N):
        state_i = jax.tree.map(lambda a, i=i: take(a, i), state)
        y_i, s_i = model(xs[i], state_i, lens[i])
        assert y_i.shape == (L, d, H)
        # a batch of one, not bitwise a batch of N (XLA's matmuls tile by batch size)
        np.testing.assert_allclose(np.asarray(y_i), np.asarray(take_y(y_b, i)), rtol=1e-6, atol=1e-6)
        for a, b in zip(jax.tree.leaves(s_i), jax.tree.leaves(s_b), strict=True):
            assert a.shape == (2 * d, H)
            np.testing.assert_allclose(np.asarray(a), np.asarray(take(b, i)), rtol=1e-6, atol=1e-6)
    # vmap over the examples: the batched call's results, with one primitive call per layer
    vmapped = jax.vmap(model, in_axes=(0, 1 if layout == 0 else 0, 0))
    y_v, s_v = vmapped(xs, state, lens)
    np.testing.assert_allclose(np.asarray(y_v), np.asarray(jnp.moveaxis(y_b, 2, 0) if layout == 0 else y_b),
                               rtol=1e-6, atol=1e-6)
    for a, b in zip(jax.tree.leaves(s_v), jax.tree.leaves(s_b), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(jnp.moveaxis(b, 1, 0) if layout == 0 else b),
                                   rtol=1e-6, atol=1e-6)


def _primitives(jaxpr) -> list[str]:
    """Every equation's primitive name, sub-jaxprs (pjit, custom_jvp, ...) included."""
    names = []
    for eqn in jaxpr.eqns:
        names.append(eqn.primitive.name)
        for v in eqn.params.values():
            for sub in v if isinstance(v, (tuple, list)) else (v,):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    names += _primitives(inner)
    return names


@pytest.mark.parametrize("kind", ["gru", "lstm"])
def test_vmap_is_one_primitive_call_per_layer(kind):
    model = _model(kind, dropout=0.3)
    xs, _, _ = _inputs(6)
    keys = jax.random.split(jax.random.key(0), N)
    for fn, args in ((jax.vmap(lambda x: model(x, inference=True)), (xs,)),  # no dropout
                     (jax.vmap(lambda x, k: model(x, key=k)), (xs, keys))):  # a mask per example
        names = _primitives(jax.make_jaxpr(fn)(*args).jaxpr)
        assert names.count(f"jaxgru_{kind}") == 2, names  # num_layers
        assert not {"while", "scan"} & set(names), names
    y_v = jax.vmap(lambda x: model(x, inference=True))(xs)[0]
    y_b = model(jnp.swapaxes(xs, 0, 1), inference=True)[0]  # layout 0: [L, N, I]
    np.testing.assert_allclose(np.asarray(y_v), np.asarray(jnp.moveaxis(y_b, 2, 0)), rtol=1e-6, atol=1e-6)


def test_one_example_refuses_batched_states_and_lengths():
    model = _model("gru")
    xs, _, _ = _inputs(7)
    with pytest.raises(ValueError, match=r"jaxgru.equinox.GRU: initial_state must have rank 2 \(num_layers\*"):
        model(xs[0], jnp.zeros((2, 1, H)))
    with pytest.raises(ValueError, match=r"sequence_lens must have rank 0 \(a scalar\)"):
        model(xs[0], sequence_lens=jnp.array([5]))
    with pytest.raises(ValueError, match=r"initial_state\[1\] must have rank 2"):
        _model("lstm")(xs[0], (jnp.zeros((2, H)), jnp.zeros((2, 1, H))))
    with pytest.raises(ValueError, match="x must have rank 3"):
        model(xs[0, 0])  # rank 1: neither a batch nor one example
