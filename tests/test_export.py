"""jax.export on the xla backend: serialise, deserialise and call, parameter pytrees included."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import pytest

import jaxgru


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_export_round_trip_with_param_pytrees(cell):
    init = jaxgru.init_gru if cell == "gru" else jaxgru.init_lstm
    fn = jaxgru.gru if cell == "gru" else jaxgru.lstm
    params = init(jax.random.key(0), 3, 4, bidirectional=True)
    x = jax.random.normal(jax.random.key(1), (5, 2, 3))
    lens = jnp.array([5, 2])

    def train_step(p, x, lens):
        def loss(p):
            y = fn(p, x, direction="bidirectional", sequence_lens=lens, backend="xla")[0]
            return jnp.mean(y**2)
        value, grads = jax.value_and_grad(loss)(p)
        return value, jax.tree.map(lambda a, g: a - 0.1 * g, p, grads)

    exported = jax.export.export(jax.jit(train_step))(params, x, lens)
    text = exported.mlir_module()
    assert "callback" not in text  # pure XLA: no host callback in the serialised module
    blob = exported.serialize()
    restored = jax.export.deserialize(blob)
    got = restored.call(params, x, lens)
    want = train_step(params, x, lens)
    chex.assert_trees_all_close(got, want, rtol=1e-6, atol=1e-6)
    assert isinstance(got[1], type(params))  # the pytree type survives serialisation


def test_export_with_symbolic_batch():
    params = jaxgru.init_lstm(jax.random.key(0), 3, 4)
    (b,) = jax.export.symbolic_shape("b")
    f = jax.jit(lambda p, x: jaxgru.lstm(p, x, layout=1, backend="xla"))
    exported = jax.export.export(f)(params, jax.ShapeDtypeStruct((b, 6, 3), jnp.float32))
    restored = jax.export.deserialize(exported.serialize())
    for n in (1, 5):
        x = jax.random.normal(jax.random.key(n), (n, 6, 3))
        chex.assert_trees_all_close(restored.call(params, x), f(params, x), rtol=1e-6, atol=1e-6)
