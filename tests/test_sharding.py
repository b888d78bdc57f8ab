"""Data parallelism on 4 CPU devices: shard_map (jaxgru.sharded) and batch-sharded jit."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import jaxgru

COLLECTIVES = ("all-gather", "all-reduce", "all-to-all", "collective-permute", "reduce-scatter")
TOL = dict(rtol=2e-5, atol=2e-6)


def _mesh(kind=AxisType.Explicit):
    assert jax.device_count() >= 4, "conftest asks for 4 CPU devices"
    return jax.make_mesh((4,), ("batch",), axis_types=(kind,))


def _setup(cell, layout, n=8, seed=0):
    init = jaxgru.init_gru if cell == "gru" else jaxgru.init_lstm
    params = init(jax.random.key(seed), 3, 5, bidirectional=True)
    if cell == "lstm":
        params = params._replace(p=jax.random.normal(jax.random.key(7), (2, 15)) * 0.3)
    x = jax.random.normal(jax.random.key(seed + 1), (6, n, 3) if layout == 0 else (n, 6, 3))
    st = (2, n, 5) if layout == 0 else (n, 2, 5)
    states = {"initial_h": jax.random.normal(jax.random.key(2), st)}
    if cell == "lstm":
        states["initial_c"] = jax.random.normal(jax.random.key(3), st)
    lens = jnp.arange(n) % 7
    fn = jaxgru.gru if cell == "gru" else jaxgru.lstm
    return fn, params, x, states, lens


def _loss(outs):
    return sum(jnp.sum(jnp.cos(o) * (k + 1)) for k, o in enumerate(outs))


def _collectives(compiled_text):
    return sorted({c for c in COLLECTIVES if c in compiled_text})


@pytest.mark.parametrize("cell", ["gru", "lstm"])
@pytest.mark.parametrize("layout", [0, 1])
def test_shard_map_matches_single_device(cell, layout):
    fn, params, x, states, lens = _setup(cell, layout)
    opts = dict(direction="bidirectional", layout=layout, sequence_lens=lens, **states)
    par = jaxgru.sharded(fn, _mesh())
    chex.assert_trees_all_close(jax.jit(lambda p, x: par(p, x, **opts))(params, x), fn(params, x, **opts), **TOL)

    def grads(f):
        return jax.jit(jax.grad(lambda p, x, s: _loss(f(p, x, direction="bidirectional", layout=layout,
                                                        sequence_lens=lens, **s)), argnums=(0, 1, 2)))
    # gradients of the replicated weights are summed over devices by the transpose of pcast
    chex.assert_trees_all_close(grads(par)(params, x, states), grads(fn)(params, x, states), **TOL)


def test_shard_map_of_a_stack():
    layers = [jaxgru.init_lstm(jax.random.key(k), 3 if k == 0 else 10, 5, bidirectional=True) for k in range(2)]
    x = jax.random.normal(jax.random.key(9), (4, 8, 3))
    par = jaxgru.sharded(jaxgru.lstm_stack, _mesh())
    f = lambda ls: _loss(par(ls, x, direction="bidirectional"))
    g = lambda ls: _loss(jaxgru.lstm_stack(ls, x, direction="bidirectional"))
    chex.assert_trees_all_close(jax.jit(jax.grad(f))(layers), jax.grad(g)(layers), **TOL)


@pytest.mark.parametrize("kind", [AxisType.Explicit, AxisType.Auto], ids=["explicit", "auto"])
@pytest.mark.parametrize("cell", ["gru", "lstm"])
@pytest.mark.parametrize("layout", [0, 1])
def test_batch_sharded_jit_stays_sharded(kind, cell, layout):
    mesh = _mesh(kind)
    fn, params, x, states, lens = _setup(cell, layout)
    batch = P(None, "batch") if layout == 0 else P("batch")
    xs = jax.device_put(x, NamedSharding(mesh, batch))
    f = jax.jit(lambda p, x: fn(p, x, direction="bidirectional", layout=layout, sequence_lens=lens, **states))
    out = f(params, xs)
    chex.assert_trees_all_close(out, fn(params, x, direction="bidirectional", layout=layout,
                                        sequence_lens=lens, **states), **TOL)
    y_batch_axis = 2 if layout == 0 else 0
    assert out[0].sharding.spec[y_batch_axis] == "batch", out[0].sharding
    assert out[1].sharding.spec[1 if layout == 0 else 0] == "batch", out[1].sharding
    assert _collectives(f.lower(params, xs).compile().as_text()) == []
    # training: the only collective is the all-reduce of the weight gradients
    g = jax.jit(jax.grad(lambda p, x: _loss(fn(p, x, direction="bidirectional", layout=layout, **states)),
                         argnums=(0, 1)))
    _gp, gx = g(params, xs)
    assert gx.sharding.spec[1 if layout == 0 else 0] == "batch"
    assert _collectives(g.lower(params, xs).compile().as_text()) == ["all-reduce"]


def test_sharded_errors():
    mesh = _mesh()
    with pytest.raises(TypeError, match=r"op must be jaxgru\.gru"):
        jaxgru.sharded(jnp.sum, mesh)
    with pytest.raises(ValueError, match="axis must be one of the mesh axes"):
        jaxgru.sharded(jaxgru.gru, mesh, axis="data")
    _fn, params, x, _states, _ = _setup("gru", 0, n=6)
    with pytest.raises(ValueError, match=r"batch \(6, axis 1 of x\) must be divisible .* \(4\)"):
        jaxgru.sharded(jaxgru.gru, mesh)(params, x, direction="bidirectional")


def test_x_sharded_along_time_is_refused():
    mesh = _mesh()
    fn, params, _x, _, _ = _setup("gru", 0)
    xs = jax.device_put(jnp.zeros((8, 8, 3)), NamedSharding(mesh, P("batch")))
    with pytest.raises(ValueError, match="x may be sharded along its batch axis only"):
        jax.jit(lambda p, x: fn(p, x, direction="bidirectional"))(params, xs)
