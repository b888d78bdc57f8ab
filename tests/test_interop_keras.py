"""jaxgru.interop.from_keras against Keras 3's own GRU / LSTM / Bidirectional (JAX backend)."""

from __future__ import annotations

import os

os.environ.setdefault("KERAS_BACKEND", "jax")  # before keras is imported

import contextlib

import chex
import jax
import numpy as np
import pytest

keras = pytest.importorskip("keras")

import jaxgru  # noqa: E402
from jaxgru.interop import from_keras  # noqa: E402
from jaxgru.interop._keras import KERAS_ACTIVATIONS  # noqa: E402

L, N, IN, H = 4, 2, 3, 5
TOL = {"atol": 1e-5, "rtol": 1e-5}
# Cheap initializers (the default orthogonal one compiles a QR); _build randomizes every weight.
ZEROS = {"kernel_initializer": "zeros", "recurrent_initializer": "zeros"}


@contextlib.contextmanager
def _keras_numerics():
    """Keras itself relies on rank and dtype promotion, which tests/conftest.py makes strict."""
    with jax.numpy_rank_promotion("allow"), jax.numpy_dtype_promotion("standard"):
        yield


def _build(layer, rng):
    """Build the layer on a random input and give every weight (biases too) random values."""
    x = rng.standard_normal((N, L, IN)).astype(np.float32)
    with _keras_numerics():
        layer(x)
    for v in layer.weights:
        v.assign(rng.uniform(-0.5, 0.5, tuple(v.shape)).astype(np.float32))
    return x


def _run(layer, x, **kw):
    with _keras_numerics():
        out = layer(x, **kw)
    return [np.asarray(o) for o in out] if isinstance(out, (list, tuple)) else np.asarray(out)


@pytest.mark.parametrize("reset_after", [True, False])
def test_gru(reset_after):
    rng = np.random.default_rng(0)
    layer = keras.layers.GRU(H, **ZEROS, reset_after=reset_after, return_sequences=True, return_state=True)
    x = _build(layer, rng)
    h0 = rng.standard_normal((N, H)).astype(np.float32)
    out, h_last = _run(layer, x, initial_state=[h0])
    layers, options = from_keras(layer)
    assert options == {"direction": "forward", "layout": 1, "linear_before_reset": reset_after}
    y, y_h = jaxgru.gru(layers[0], x, initial_h=h0[:, None], **options)
    chex.assert_trees_all_close((y[:, :, 0], y_h[:, 0]), (out, h_last), **TOL)


def test_lstm_with_states_and_no_bias():
    rng = np.random.default_rng(1)
    layer = keras.layers.LSTM(H, **ZEROS, use_bias=False, return_sequences=True, return_state=True)
    x = _build(layer, rng)
    h0, c0 = (rng.standard_normal((N, H)).astype(np.float32) for _ in range(2))
    out, h_last, c_last = _run(layer, x, initial_state=[h0, c0])
    layers, options = from_keras(layer)
    assert layers[0].b is None
    y, y_h, y_c = jaxgru.lstm(layers[0], x, initial_h=h0[:, None], initial_c=c0[:, None], **options)
    chex.assert_trees_all_close((y[:, :, 0], y_h[:, 0], y_c[:, 0]), (out, h_last, c_last), **TOL)


def test_lstm_with_bias():
    rng = np.random.default_rng(2)
    layer = keras.layers.LSTM(H, **ZEROS, return_sequences=True)
    x = _build(layer, rng)
    out = _run(layer, x)
    layers, options = from_keras(layer)
    y, _, _ = jaxgru.lstm(layers[0], x, **options)
    chex.assert_trees_all_close(y[:, :, 0], out, **TOL)


def test_go_backwards_output_is_in_processing_order():
    rng = np.random.default_rng(3)
    layer = keras.layers.GRU(H, **ZEROS, go_backwards=True, return_sequences=True, return_state=True)
    x = _build(layer, rng)
    out, h_last = _run(layer, x)
    layers, options = from_keras(layer)
    assert options["direction"] == "reverse"
    y, y_h = jaxgru.gru(layers[0], x, **options)
    # Keras lists the reverse direction's outputs in processing order; ONNX in input order.
    chex.assert_trees_all_close((np.flip(np.asarray(y[:, :, 0]), axis=1), y_h[:, 0]), (out, h_last),
                                **TOL)


def test_bidirectional_gru_concat():
    rng = np.random.default_rng(4)
    layer = keras.layers.Bidirectional(keras.layers.GRU(H, **ZEROS, return_sequences=True))
    x = _build(layer, rng)
    h0 = rng.standard_normal((N, 2, H)).astype(np.float32)
    out = _run(layer, x, initial_state=[h0[:, 0], h0[:, 1]])
    layers, options = from_keras(layer)
    assert options["direction"] == "bidirectional"
    y, _ = jaxgru.gru(layers[0], x, initial_h=h0, **options)
    chex.assert_trees_all_close(np.asarray(y).reshape(N, L, 2 * H), out, **TOL)


def test_bidirectional_lstm_ave_last_step():
    rng = np.random.default_rng(5)
    layer = keras.layers.Bidirectional(keras.layers.LSTM(H, **ZEROS), merge_mode="ave")
    x = _build(layer, rng)
    out = _run(layer, x)
    layers, options = from_keras(layer)
    _, y_h, _ = jaxgru.lstm(layers[0], x, **options)
    chex.assert_trees_all_close(np.asarray(y_h).mean(axis=1), out, **TOL)


def test_non_default_activations():
    rng = np.random.default_rng(6)
    layer = keras.layers.GRU(H, **ZEROS, activation="softsign", recurrent_activation="hard_sigmoid",
                             return_sequences=True)
    x = _build(layer, rng)
    out = _run(layer, x)
    layers, options = from_keras(layer)
    assert options["activations"] == ["HardSigmoid", "Softsign"]
    assert options["activation_alpha"] == pytest.approx([1 / 6])
    assert options["activation_beta"] == pytest.approx([0.5])
    y, _ = jaxgru.gru(layers[0], x, **options)
    chex.assert_trees_all_close(y[:, :, 0], out, **TOL)


# The ONNX activations, written from the operator specification (independent of jaxgru).
_ONNX = {
    "Tanh": lambda x, a, b: np.tanh(x),
    "Sigmoid": lambda x, a, b: 1 / (1 + np.exp(-x)),
    "Relu": lambda x, a, b: np.maximum(x, 0),
    "Affine": lambda x, a, b: a * x + b,
    "Softplus": lambda x, a, b: np.log1p(np.exp(x)),
    "Softsign": lambda x, a, b: x / (1 + np.abs(x)),
    "Elu": lambda x, a, b: np.where(x >= 0, x, a * (np.exp(x) - 1)),
    "HardSigmoid": lambda x, a, b: np.clip(a * x + b, 0, 1),
    "LeakyRelu": lambda x, a, b: np.where(x >= 0, x, a * x),
}


@pytest.mark.parametrize("name", sorted(KERAS_ACTIVATIONS))
def test_activation_table_matches_keras(name):
    act = KERAS_ACTIVATIONS[name]
    x = np.linspace(-6, 6, 241).astype(np.float32)
    with _keras_numerics():
        want = np.asarray(keras.activations.get(name)(x))
    got = _ONNX[act.name](x.astype(np.float64), act.alpha, act.beta)
    np.testing.assert_allclose(got, want, atol=2e-6, rtol=1e-6)


def test_errors():
    layer = keras.layers.GRU(H, **ZEROS, activation="silu")
    _build(layer, np.random.default_rng(7))
    with pytest.raises(NotImplementedError, match="activation='silu'"):
        from_keras(layer)
    with pytest.raises(ValueError, match="not built"):
        from_keras(keras.layers.LSTM(H, **ZEROS))
    with pytest.raises(TypeError, match="GRU, LSTM or Bidirectional"):
        from_keras(keras.layers.Dense(H))
