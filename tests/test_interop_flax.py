"""jaxgru.interop.from_flax against Flax's own cells (linen under nn.RNN, nnx in a Python loop)."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

flax = pytest.importorskip("flax")

import flax.linen as nn  # noqa: E402
from flax import nnx  # noqa: E402

import jaxgru  # noqa: E402
from jaxgru.interop import from_flax  # noqa: E402
from jaxgru.interop._flax import _jax_activations  # noqa: E402

L, N, IN, H = 4, 2, 3, 5
TOL = {"atol": 1e-5, "rtol": 1e-5}


def _randomize(tree, seed):
    """Every leaf from a numpy RNG (biases too, which Flax initialises to zero).

    ``tree`` may hold ShapeDtypeStructs: the tests take shapes from ``jax.eval_shape`` /
    ``nnx.eval_shape`` so that no initializer program (orthogonal init: a QR) is compiled.
    """
    rng = np.random.default_rng(seed)
    return jax.tree_util.tree_map(
        lambda a: jnp.asarray(rng.uniform(-0.5, 0.5, a.shape).astype(np.float32)), tree
    )


def _inputs(seed):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((N, L, IN)).astype(np.float32),
            rng.standard_normal((N, H)).astype(np.float32),
            rng.standard_normal((N, H)).astype(np.float32))


def test_linen_gru_sequence_under_rnn():
    x, h0, _ = _inputs(0)
    cell = nn.GRUCell(features=H)
    rnn = nn.RNN(cell, return_carry=True)
    variables = _randomize(jax.eval_shape(rnn.init, jax.random.key(0), x), 1)
    h_last, out = rnn.apply(variables, x, initial_carry=jnp.asarray(h0))
    # The RNN wraps the cell's parameters under "cell".
    layers, options = from_flax(variables["params"]["cell"])
    assert options == {"linear_before_reset": True}
    y, y_h = jaxgru.gru(layers[0], x, initial_h=h0[:, None], layout=1, **options)
    chex.assert_trees_all_close((y[:, :, 0], y_h[:, 0]), (out, h_last), **TOL)


@pytest.mark.parametrize("cls", [nn.LSTMCell, nn.OptimizedLSTMCell])
def test_linen_lstm_sequence_under_rnn(cls):
    x, h0, c0 = _inputs(1)
    rnn = nn.RNN(cls(features=H), return_carry=True)
    variables = _randomize(jax.eval_shape(rnn.init, jax.random.key(0), x), 2)
    (c_last, h_last), out = rnn.apply(variables, x, initial_carry=(jnp.asarray(c0), jnp.asarray(h0)))
    layers, options = from_flax({"params": variables["params"]["cell"]})  # with a "params" key
    y, y_h, y_c = jaxgru.lstm(layers[0], x, initial_h=h0[:, None], initial_c=c0[:, None], layout=1,
                              **options)
    chex.assert_trees_all_close((y[:, :, 0], y_h[:, 0], y_c[:, 0]), (out, h_last, c_last), **TOL)


def _nnx_loop(module, carry, x):
    outs = []
    for t in range(x.shape[1]):
        carry, out = module(carry, jnp.asarray(x[:, t]))
        outs.append(out)
    return carry, jnp.stack(outs, axis=1)


def _nnx_cell(cls, seed, **kw):
    """An nnx cell built abstractly, then given random parameters."""
    module = nnx.eval_shape(lambda: cls(IN, H, rngs=nnx.Rngs(0), **kw))
    nnx.update(module, _randomize(nnx.state(module, nnx.Param), seed))
    return module


@pytest.mark.parametrize("as_state", [False, True])
def test_nnx_gru(as_state):
    x, h0, _ = _inputs(2)
    module = _nnx_cell(nnx.GRUCell, 3)
    h_last, out = _nnx_loop(module, jnp.asarray(h0), x)
    layers, options = from_flax(nnx.state(module, nnx.Param) if as_state else module)
    assert options == {"linear_before_reset": True}
    y, y_h = jaxgru.gru(layers[0], x, initial_h=h0[:, None], layout=1, **options)
    chex.assert_trees_all_close((y[:, :, 0], y_h[:, 0]), (out, h_last), **TOL)


@pytest.mark.parametrize("cls", [nnx.LSTMCell, nnx.OptimizedLSTMCell])
def test_nnx_lstm(cls):
    x, h0, c0 = _inputs(3)
    module = _nnx_cell(cls, 4)
    (c_last, h_last), out = _nnx_loop(module, (jnp.asarray(c0), jnp.asarray(h0)), x)
    layers, options = from_flax(module)
    y, y_h, y_c = jaxgru.lstm(layers[0], x, initial_h=h0[:, None], initial_c=c0[:, None], layout=1,
                              **options)
    chex.assert_trees_all_close((y[:, :, 0], y_h[:, 0], y_c[:, 0]), (out, h_last, c_last), **TOL)


def test_cells_one_step():
    x, h0, c0 = _inputs(4)
    gru = nn.GRUCell(features=H)
    gv = _randomize(jax.eval_shape(gru.init, jax.random.key(0), h0, x[:, 0]), 5)
    want_h, _ = gru.apply(gv, jnp.asarray(h0), jnp.asarray(x[:, 0]))
    layers, options = from_flax(gv)
    chex.assert_trees_all_close(jaxgru.gru_cell(layers[0], x[:, 0], h0, **options), want_h, **TOL)
    lstm = nn.LSTMCell(features=H)
    carry = (jnp.asarray(c0), jnp.asarray(h0))
    lv = _randomize(jax.eval_shape(lstm.init, jax.random.key(0), carry, x[:, 0]), 6)
    (want_c, want_h), _ = lstm.apply(lv, carry, jnp.asarray(x[:, 0]))
    layers, options = from_flax(lv["params"])  # without the "params" key
    got_h, got_c = jaxgru.lstm_cell(layers[0], x[:, 0], h0, c0, **options)  # jaxgru: (h, c)
    chex.assert_trees_all_close((got_h, got_c), (want_h, want_c), **TOL)


def test_non_default_activations():
    x, h0, _ = _inputs(5)
    cell = nn.GRUCell(features=H, gate_fn=jax.nn.hard_sigmoid, activation_fn=jax.nn.relu)
    variables = _randomize(jax.eval_shape(cell.init, jax.random.key(0), h0, x[:, 0]), 7)
    want, _ = cell.apply(variables, jnp.asarray(h0), jnp.asarray(x[:, 0]))
    layers, options = from_flax(variables, cell=cell)
    assert options["activations"] == ["HardSigmoid", "Relu"]
    chex.assert_trees_all_close(jaxgru.gru_cell(layers[0], x[:, 0], h0, **options), want, **TOL)


# The ONNX activations, written from the operator specification (independent of jaxgru).
_ONNX = {
    "Sigmoid": lambda x, a, b: 1 / (1 + np.exp(-x)),
    "Tanh": lambda x, a, b: np.tanh(x),
    "Relu": lambda x, a, b: np.maximum(x, 0),
    "Softplus": lambda x, a, b: np.log1p(np.exp(x)),
    "Softsign": lambda x, a, b: x / (1 + np.abs(x)),
    "Elu": lambda x, a, b: np.where(x >= 0, x, a * (np.exp(x) - 1)),
    "HardSigmoid": lambda x, a, b: np.clip(a * x + b, 0, 1),
}


def test_activation_table_matches_jax():
    x = np.linspace(-6, 6, 241).astype(np.float32)
    for fn, act in _jax_activations():
        want = np.asarray(fn(jnp.asarray(x)))
        got = _ONNX[act.name](x.astype(np.float64), act.alpha, act.beta)
        np.testing.assert_allclose(got, want, atol=2e-6, rtol=1e-6, err_msg=act.name)


def test_errors():
    with pytest.raises(ValueError, match="cannot tell the cell kind"):
        from_flax({"params": {"kernel": np.zeros((3, 5), np.float32)}})
    with pytest.raises(TypeError, match="cell_params must be"):
        from_flax([1, 2])
    module = _nnx_cell(nnx.GRUCell, 8, activation_fn=jax.nn.gelu)
    with pytest.raises(NotImplementedError, match="activation_fn='gelu'"):
        from_flax(module)
    variables = _randomize(jax.eval_shape(nn.GRUCell(features=H).init, jax.random.key(0),
                                          jnp.zeros((N, H)), jnp.zeros((N, IN))), 9)
    with pytest.raises(ValueError, match="cell is a LSTMCell"):
        from_flax(variables, cell=nn.LSTMCell(features=H))


# --------------------------------------------------------------------------------------
# nnx.RNN: unwrapped to its cell, its time_major / reverse as layout / direction
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize(("cls", "rnn_kw"), [
    (nnx.GRUCell, {}),
    (nnx.LSTMCell, {"time_major": True}),
    (nnx.OptimizedLSTMCell, {"reverse": True, "keep_order": True}),
    (nnx.GRUCell, {"reverse": True, "keep_order": True, "time_major": True}),
])
def test_nnx_rnn_against_running_it(cls, rnn_kw):
    x, h0, c0 = _inputs(10)  # x [N, L, I]
    time_major = rnn_kw.get("time_major", False)
    xs = jnp.asarray(np.swapaxes(x, 0, 1) if time_major else x)
    rnn = nnx.RNN(_nnx_cell(cls, 11), return_carry=True, **rnn_kw)
    lstm = cls is not nnx.GRUCell
    carry = (jnp.asarray(c0), jnp.asarray(h0)) if lstm else jnp.asarray(h0)
    last, out = rnn(xs, initial_carry=carry)
    layers, options = from_flax(rnn)
    assert options["layout"] == (0 if time_major else 1)
    assert options["direction"] == ("reverse" if rnn_kw.get("reverse") else "forward")
    # jaxgru's states: [D, N, H] (layout 0) / [N, D, H] (layout 1)
    state = (lambda s: jnp.asarray(s)[None]) if time_major else (lambda s: jnp.asarray(s)[:, None])
    if lstm:
        y, y_h, y_c = jaxgru.lstm(layers[0], xs, initial_h=state(h0), initial_c=state(c0), **options)
        got, want = (y, y_h, y_c), (out, last[1], last[0])  # flax's carry is (c, h)
    else:
        y, y_h = jaxgru.gru(layers[0], xs, initial_h=state(h0), **options)
        got, want = (y, y_h), (out, last)
    d_axis = 1 if time_major else 2  # y: [L, D, N, H] / [N, L, D, H]
    got = (got[0].squeeze(d_axis), *(s[0] if time_major else s[:, 0] for s in got[1:]))
    chex.assert_trees_all_close(got, want, **TOL)
    # the sequence options are those of the layer functions: the cells refuse them
    assert {k: v for k, v in options.items() if k not in ("direction", "layout")} == from_flax(rnn.cell)[1]


def test_nnx_rnn_reversed_outputs_are_refused():
    rnn = nnx.RNN(_nnx_cell(nnx.GRUCell, 12), reverse=True)
    with pytest.raises(NotImplementedError, match="reverse=True and keep_order=False"):
        from_flax(rnn)
    _, options = from_flax(rnn.cell)  # the weights alone convert
    assert options == {"linear_before_reset": True}
