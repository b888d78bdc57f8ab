"""Bad input: a clear ValueError/TypeError naming the argument, expected and received value,
raised at trace time (``jax.eval_shape`` reports it before anything compiles)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxgru

L, N, I, H = 5, 3, 4, 6
F32 = jnp.float32


def gru_params(d=1, h=H, i=I, b=True):
    return jaxgru.GRUParams(
        jnp.zeros((d, 3 * h, i)), jnp.zeros((d, 3 * h, h)), jnp.zeros((d, 6 * h)) if b else None
    )


def lstm_params(d=1, h=H, i=I, p=True):
    return jaxgru.LSTMParams(
        jnp.zeros((d, 4 * h, i)), jnp.zeros((d, 4 * h, h)), jnp.zeros((d, 8 * h)),
        jnp.zeros((d, 3 * h)) if p else None,
    )


X = jnp.zeros((L, N, I))

# (id, thunk, exception type, pieces the message must contain)
BAD = [
    ("x-rank", lambda: jaxgru.gru(gru_params(), jnp.zeros((L, I))), ValueError,
     ["x", "rank 3", "(5, 4)"]),
    ("x-int", lambda: jaxgru.gru(gru_params(), jnp.zeros((L, N, I), jnp.int32)), TypeError,
     ["x", "floating", "int32"]),
    ("x-input-size", lambda: jaxgru.gru(gru_params(), jnp.zeros((L, N, I + 1))), ValueError,
     ["x has 5 features", "input_size=4", "params.w", "(1, 18, 4)"]),
    ("w-rank", lambda: jaxgru.gru(jaxgru.GRUParams(jnp.zeros((18, I)), jnp.zeros((1, 18, H))), X),
     ValueError, ["params.w", "(1, 18, 4)", "(18, 4)"]),
    ("r-rank", lambda: jaxgru.gru(jaxgru.GRUParams(jnp.zeros((1, 18, I)), jnp.zeros((18, H))), X),
     ValueError, ["params.r", "rank 3", "(18, 6)"]),
    ("r-gates", lambda: jaxgru.gru(jaxgru.GRUParams(jnp.zeros((1, 18, I)), jnp.zeros((1, 24, H))), X),
     ValueError, ["params.r", "3*hidden", "(1, 18, 6)", "(1, 24, 6)"]),
    ("lstm-given-gru-shapes", lambda: jaxgru.lstm(jaxgru.LSTMParams(*gru_params()[:2]), X),
     ValueError, ["params.r", "4*hidden"]),
    ("b-shape", lambda: jaxgru.gru(jaxgru.GRUParams(*gru_params()[:2], jnp.zeros((1, 3 * H))), X),
     ValueError, ["params.b", "(1, 36)", "(1, 18)"]),
    ("p-shape", lambda: jaxgru.lstm(lstm_params()._replace(p=jnp.zeros((1, 4 * H))), X),
     ValueError, ["params.p", "(1, 18)", "(1, 24)"]),
    ("directions-vs-weights", lambda: jaxgru.gru(gru_params(d=1), X, direction="bidirectional"),
     ValueError, ["params hold 1 direction", "params.r", "(1, 18, 6)", "direction='bidirectional' runs 2"]),
    ("weights-vs-directions", lambda: jaxgru.gru(gru_params(d=2), X),
     ValueError, ["params hold 2 direction", "(2, 18, 6)", "direction='forward' runs 1",
                  "direction='bidirectional'"]),
    ("initial_h-shape", lambda: jaxgru.gru(gru_params(), X, initial_h=jnp.zeros((1, N, H + 1))),
     ValueError, ["initial_h", "(num_directions, batch, hidden)=(1, 3, 6)", "(1, 3, 7)"]),
    ("initial_h-layout1", lambda: jaxgru.gru(gru_params(), jnp.zeros((N, L, I)), layout=1,
                                             initial_h=jnp.zeros((1, N, H))),
     ValueError, ["initial_h", "(batch, num_directions, hidden)=(3, 1, 6)", "(1, 3, 6)"]),
    ("initial_c-shape", lambda: jaxgru.lstm(lstm_params(), X, initial_c=jnp.zeros((N, H))),
     ValueError, ["initial_c", "(1, 3, 6)", "(3, 6)"]),
    ("initial_c-on-gru", lambda: jaxgru.gru(gru_params(), X, initial_c=jnp.zeros((1, N, H))),
     TypeError, ["initial_c"]),
    ("initial_h-int", lambda: jaxgru.gru(gru_params(), X, initial_h=jnp.zeros((1, N, H), jnp.int32)),
     TypeError, ["initial_h", "floating"]),
    ("lens-shape", lambda: jaxgru.gru(gru_params(), X, sequence_lens=jnp.array([1, 2])),
     ValueError, ["sequence_lens", "(batch,)=(3,)", "(2,)"]),
    ("lens-float", lambda: jaxgru.gru(gru_params(), X, sequence_lens=jnp.array([1.0, 2.0, 3.0])),
     TypeError, ["sequence_lens", "integer", "float32"]),
    ("lens-negative", lambda: jaxgru.gru(gru_params(), X, sequence_lens=np.array([1, -1, 3])),
     ValueError, ["sequence_lens", "[0, seq_length=5]", "-1"]),
    ("lens-too-long", lambda: jaxgru.lstm(lstm_params(), X, sequence_lens=np.array([1, 6, 3])),
     ValueError, ["sequence_lens", "[0, seq_length=5]", "6"]),
    ("direction", lambda: jaxgru.gru(gru_params(), X, direction="backward"), ValueError,
     ["direction", "'backward'", "bidirectional"]),
    ("layout", lambda: jaxgru.gru(gru_params(), X, layout=2), ValueError, ["layout", "0", "1", "2"]),
    ("layout-str", lambda: jaxgru.gru(gru_params(), X, layout="NTC"), ValueError, ["layout", "'NTC'"]),
    ("activation-unknown", lambda: jaxgru.gru(gru_params(), X, activations=["Sigmoid", "Swish"]),
     ValueError, ["activations", "'Swish'", "HardSigmoid"]),
    ("activation-count", lambda: jaxgru.gru(gru_params(), X, activations=["Sigmoid", "Tanh", "Tanh"]),
     ValueError, ["activations", "2 activations per direction", "got 3"]),
    ("activation-count-bidir", lambda: jaxgru.lstm(lstm_params(d=2), X, direction="bidirectional",
                                                   activations=["Sigmoid", "Tanh", "Tanh"]),
     ValueError, ["activations", "6 for 2 direction(s)", "got 3"]),
    ("activation-str", lambda: jaxgru.gru(gru_params(), X, activations="Sigmoid"), TypeError,
     ["activations", "list"]),
    ("alpha-too-many", lambda: jaxgru.gru(gru_params(), X, activations=["LeakyRelu", "Tanh"],
                                          activation_alpha=[0.1, 0.2]),
     ValueError, ["activation_alpha", "2 values", "at most 1"]),
    ("beta-not-used", lambda: jaxgru.gru(gru_params(), X, activation_beta=[0.5]), ValueError,
     ["activation_beta", "at most 0"]),
    ("alpha-type", lambda: jaxgru.gru(gru_params(), X, activation_alpha=["a"]), TypeError,
     ["activation_alpha"]),
    ("clip-negative", lambda: jaxgru.gru(gru_params(), X, clip=-1.0), ValueError, ["clip", "positive", "-1.0"]),
    ("clip-zero", lambda: jaxgru.lstm(lstm_params(), X, clip=0), ValueError, ["clip", "positive"]),
    ("clip-nan", lambda: jaxgru.lstm(lstm_params(), X, clip=float("nan")), ValueError, ["clip"]),
    ("clip-type", lambda: jaxgru.lstm(lstm_params(), X, clip="1"), TypeError, ["clip"]),
    ("lbr-value", lambda: jaxgru.gru(gru_params(), X, linear_before_reset=2), ValueError,
     ["linear_before_reset", "2"]),
    ("input_forget-value", lambda: jaxgru.lstm(lstm_params(), X, input_forget="yes"), ValueError,
     ["input_forget"]),
    ("backend", lambda: jaxgru.gru(gru_params(), X, backend="cuda"), ValueError, ["backend", "'cuda'"]),
    ("params-type", lambda: jaxgru.gru({"w": 1}, X), TypeError, ["params", "GRUParams", "dict"]),
    ("params-wrong-cell", lambda: jaxgru.gru(lstm_params(), X), TypeError, ["params", "GRUParams", "LSTMParams"]),
    ("params-missing-w", lambda: jaxgru.gru(jaxgru.GRUParams(None, jnp.zeros((1, 18, H))), X),
     TypeError, ["params.w", "required"]),
    ("params-int-r", lambda: jaxgru.gru(jaxgru.GRUParams(jnp.zeros((1, 18, I)), jnp.zeros((1, 18, H), int)), X),
     TypeError, ["params.r", "floating"]),
    ("cell-bidirectional", lambda: jaxgru.gru_cell(gru_params(d=2), jnp.zeros((N, I)), jnp.zeros((N, H))),
     ValueError, ["one direction", "(2, 18, 4)"]),
    ("cell-x-rank", lambda: jaxgru.gru_cell(gru_params(), X, jnp.zeros((N, H))), ValueError,
     ["x_t", "rank 2"]),
    ("cell-h-rank", lambda: jaxgru.lstm_cell(lstm_params(), jnp.zeros((N, I)), jnp.zeros((N, H)),
                                             jnp.zeros((1, N, H))), ValueError, ["c", "rank 2"]),
    ("cell-option", lambda: jaxgru.gru_cell(gru_params(), jnp.zeros((N, I)), jnp.zeros((N, H)),
                                            direction="reverse"), TypeError, ["direction", "allowed"]),
    ("stack-empty", lambda: jaxgru.gru_stack([], X), TypeError, ["layers", "non-empty"]),
    ("stack-not-list", lambda: jaxgru.gru_stack(gru_params(), X), TypeError, ["layers"]),
    ("stack-layer-size", lambda: jaxgru.gru_stack([gru_params(), gru_params()], X), ValueError,
     ["layers[1]", "previous layer", "=6 features", "params.w", "(1, 18, 4)"]),
    ("stack-states", lambda: jaxgru.lstm_stack([lstm_params(), lstm_params(i=H)], X,
                                               initial_h=jnp.zeros((1, N, H))), ValueError,
     ["initial_h", "num_layers*num_directions=2"]),
    ("stack-option", lambda: jaxgru.lstm_stack([lstm_params()], X, linear_before_reset=True), TypeError,
     ["linear_before_reset", "allowed"]),
    ("init-hidden", lambda: jaxgru.init_gru(jax.random.key(0), 3, 0), ValueError, ["hidden_size", "0"]),
    ("init-input", lambda: jaxgru.init_lstm(jax.random.key(0), 2.5, 3), ValueError, ["input_size", "2.5"]),
]


@pytest.mark.parametrize(("bad_id", "thunk", "exc", "pieces"), BAD, ids=[b[0] for b in BAD])
def test_bad_input_raises_clear_error(bad_id, thunk, exc, pieces):
    with pytest.raises(exc) as info:
        thunk()
    message = str(info.value)
    assert message.startswith("jaxgru.") or bad_id.startswith("init"), message
    for piece in pieces:
        assert piece in message, f"{piece!r} not in {message!r}"


@pytest.mark.parametrize(("bad_id", "thunk", "exc", "pieces"),
                         [b for b in BAD if not b[0].startswith(("lens-negative", "lens-too", "init"))],
                         ids=[b[0] for b in BAD if not b[0].startswith(("lens-negative", "lens-too", "init"))])
def test_errors_are_raised_at_trace_time(bad_id, thunk, exc, pieces):
    """Under jax.eval_shape nothing is compiled or run: the error comes from tracing."""
    del bad_id, pieces
    with pytest.raises(exc):
        jax.eval_shape(thunk)


def test_traced_lengths_are_clamped_not_checked():
    """Out-of-range lengths cannot be checked under jit; they are clamped into [0, L]."""
    params = jaxgru.init_gru(jax.random.key(0), I, H)
    x = jax.random.normal(jax.random.key(1), (L, N, I))
    f = jax.jit(lambda lens: jaxgru.gru(params, x, sequence_lens=lens))
    y_bad, h_bad = f(jnp.array([-3, 9, 2]))
    y_ok, h_ok = f(jnp.array([0, 5, 2]))
    np.testing.assert_array_equal(np.asarray(y_bad), np.asarray(y_ok))
    np.testing.assert_array_equal(np.asarray(h_bad), np.asarray(h_ok))
