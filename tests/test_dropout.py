"""Dropout between the layers of gru_stack / lstm_stack and of the Flax / Equinox modules.

Oracles: layers whose output is their input (exactly: Affine activations, identity weights), so
the stack's mask and scale are read off its output; a hand-written per-layer loop of
``jaxgru.gru`` / ``lstm`` with ``jax.random.bernoulli`` and the documented keys (exact
equality, forward and gradient, on every backend); PyTorch's ``nn.GRU(dropout=p)`` in training
mode (its masks come from another RNG, so statistics only); ``nnx.Dropout``'s and
``eqx.nn.Dropout``'s conventions for the modules.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from backend_cases import BACKENDS
from flax import nnx

import jaxgru
import jaxgru.equinox
import jaxgru.flax
from jaxgru.interop import from_torch, to_torch

I, H, N, L = 3, 4, 3, 5  # small: compiled programs are shared between tests
P = 0.4
CELLS = ["gru", "lstm"]
STACK = {"gru": jaxgru.gru_stack, "lstm": jaxgru.lstm_stack}
LAYER = {"gru": jaxgru.gru, "lstm": jaxgru.lstm}
INIT = {"gru": jaxgru.init_gru, "lstm": jaxgru.init_lstm}
STATES = {"gru": ("initial_h",), "lstm": ("initial_h", "initial_c")}


def _layers(cell, num_layers, bidirectional=False, seed=0, input_size=I):
    d = 2 if bidirectional else 1
    keys = jax.random.split(jax.random.key(seed), num_layers)
    return [INIT[cell](k, input_size if i == 0 else d * H, H, bidirectional=bidirectional) for i, k in enumerate(keys)]


def _loop(cell, layers, x, *, rate, key, layout=0, direction="forward", sequence_lens=None, states=None,
          **options):
    """The documented semantics, written out: one layer call per layer, masks from the split keys."""
    d = 2 if direction == "bidirectional" else 1
    keys = jax.random.split(key, len(layers)) if key is not None else None
    axis = 0 if layout == 0 else 1  # the states' layer/direction axis
    finals = {name: [] for name in STATES[cell]}
    inp = x
    for k, params in enumerate(layers):
        given = {name: jax.lax.slice_in_dim(s, k * d, (k + 1) * d, axis=axis) for name, s in (states or {}).items()}
        y, *last = LAYER[cell](params, inp, sequence_lens=sequence_lens, direction=direction, layout=layout,
                               **given, **options)
        for name, s in zip(STATES[cell], last):
            finals[name].append(s)
        if layout == 0:
            inp = jnp.transpose(y, (0, 2, 1, 3)).reshape(y.shape[0], y.shape[2], -1)
        else:
            inp = y.reshape(y.shape[0], y.shape[1], -1)
        if keys is not None and k < len(layers) - 1:
            mask = jax.random.bernoulli(keys[k], 1 - rate, inp.shape)
            inp = jnp.where(mask, inp * (1 / (1 - rate)), 0.0)
    return (y, *(jnp.concatenate(v, axis=axis) for v in finals.values()))


def _inputs(cell, layout, d, num_layers, seed=1):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((L, N, I) if layout == 0 else (N, L, I)).astype(np.float32)
    shape = (num_layers * d, N, H) if layout == 0 else (N, num_layers * d, H)
    states = {name: rng.standard_normal(shape).astype(np.float32) for name in STATES[cell]}
    return jnp.asarray(x), states, jnp.array([5, 2, 0])


# --------------------------------------------------------------------------------------
# the stacks: the mask and its scale, read off identity layers
# --------------------------------------------------------------------------------------
def _identity_stack(cell, hidden, seed=0):
    """Layer 0 linear (y = W x, exactly), layer 1 the identity, layer 2 the identity: the stack's
    output is layer 0's output dropped twice, layer 1's is it dropped once (one exact read-out each).

    Affine activations make every gate exact: GRU z = 0 and candidate = W x; LSTM (with
    input_forget) i = o = 1, f = 0, c = W x, h = c. No recurrent weights, no biases.
    """
    g = 3 if cell == "gru" else 4
    rng = np.random.default_rng(seed)
    w0 = rng.standard_normal((1, g * hidden, I)).astype(np.float32)
    eye = np.zeros((1, g * hidden, hidden), np.float32)
    eye[0, (g - 1) * hidden:] = np.eye(hidden, dtype=np.float32)  # the candidate block (h / c), last in ONNX order
    cls = jaxgru.GRUParams if cell == "gru" else jaxgru.LSTMParams
    w0[0, : (g - 1) * hidden] = 0.0
    zeros = lambda w: np.zeros((1, g * hidden, hidden), np.float32)
    layers = [cls(jnp.asarray(w0), jnp.asarray(zeros(w0))), cls(jnp.asarray(eye), jnp.asarray(zeros(eye))),
              cls(jnp.asarray(eye), jnp.asarray(zeros(eye)))]
    if cell == "gru":
        options = dict(activations=["Affine", "Affine"], activation_alpha=[0.0, 1.0], activation_beta=[0.0, 0.0])
    else:
        options = dict(activations=["Affine"] * 3, activation_alpha=[0.0, 1.0, 1.0],
                       activation_beta=[1.0, 0.0, 0.0], input_forget=True)
    return layers, options


@pytest.mark.parametrize(("cell", "rate"), [("gru", 0.3), ("lstm", 0.7)])
def test_mask_statistics_and_exact_scale(cell, rate):
    length, batch, hidden = 40, 8, 20
    layers, options = _identity_stack(cell, hidden)
    x = jnp.asarray(np.random.default_rng(2).standard_normal((length, batch, I)).astype(np.float32))
    run = jax.jit(lambda ls, x, key: STACK[cell](ls, x, dropout=rate, key=key, backend="xla", **options)[0][:, 0])
    y0 = np.asarray(LAYER[cell](layers[0], x, backend="xla", **options)[0][:, 0])  # layer 0's output
    assert np.all(y0 != 0)
    # without a key the stack is the identity after layer 0
    np.testing.assert_array_equal(np.asarray(run(layers[:2], x, None)), y0)
    key = jax.random.key(3)
    y1 = np.asarray(run(layers[:2], x, key))
    n = y0.size
    bound = 5 * np.sqrt(n * rate * (1 - rate))  # binomial: 5 standard deviations
    dropped = y1 == 0
    assert abs(dropped.sum() - n * rate) < bound, (dropped.mean(), rate)
    # kept values: scaled by exactly 1 / (1 - rate) (rounded once to float32)
    scale = np.float32(1 / (1 - rate))
    np.testing.assert_array_equal(y1[~dropped], (y0 * scale)[~dropped])
    np.testing.assert_allclose(y1[~dropped] / y0[~dropped], 1 / (1 - rate), rtol=3e-7)
    # the documented keys: keys = jax.random.split(key, num_layers); keys[k] masks layer k's output
    mask = lambda k, num_layers: np.asarray(jax.random.bernoulli(jax.random.split(key, num_layers)[k], 1 - rate,
                                                                 y0.shape))
    np.testing.assert_array_equal(~dropped, mask(0, 2))
    # another key, another mask
    y_other = np.asarray(run(layers[:2], x, jax.random.key(4)))
    assert np.any((y_other == 0) != dropped)


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("cell", CELLS)
def test_stack_equals_hand_written_loop(cell, backend):
    # three bidirectional layers (two masks), time-major; two layers, batch-major
    case = dict(layout=0, direction="bidirectional", num_layers=3) if cell == "gru" else dict(
        layout=1, direction="forward", num_layers=2)
    d = 2 if case["direction"] == "bidirectional" else 1
    layers = _layers(cell, case["num_layers"], bidirectional=d == 2)
    x, states, lens = _inputs(cell, case["layout"], d, case["num_layers"])
    kw = dict(layout=case["layout"], direction=case["direction"], sequence_lens=lens, backend=backend)
    key = jax.random.key(7)
    got = STACK[cell](layers, x, **states, dropout=P, key=key, **kw)
    want = _loop(cell, layers, x, rate=P, key=key, states=states, **kw)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # and dropout changed something (the last layer's output depends on the dropped input)
    plain = _loop(cell, layers, x, rate=P, key=None, states=states, **kw)
    assert not np.array_equal(np.asarray(got[0]), np.asarray(plain[0]))


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("cell", CELLS)
def test_gradients_equal_hand_written_loop(cell, backend):
    d = 2 if (cell, backend) == ("gru", "xla") else 1  # one bidirectional case: the graphs are big
    layers = _layers(cell, 2, bidirectional=d == 2)
    x, states, lens = _inputs(cell, 0, d, 2)
    kw = dict(direction="bidirectional" if d == 2 else "forward", sequence_lens=lens, backend=backend)
    key = jax.random.key(11)
    rng = np.random.default_rng(5)
    target = jnp.asarray(rng.standard_normal((L, d, N, H)).astype(np.float32))

    def loss(fn):
        def f(layers, x):
            y, *finals = fn(layers, x)
            return jnp.sum(y * target) + sum(jnp.sum(jnp.sin(s)) for s in finals)
        return f

    stack = loss(lambda ls, x: STACK[cell](ls, x, **states, dropout=P, key=key, **kw))
    loop = loss(lambda ls, x: _loop(cell, ls, x, rate=P, key=key, states=states, **kw))
    got = jax.jit(jax.grad(stack, argnums=(0, 1)))(layers, x)
    want = jax.jit(jax.grad(loop, argnums=(0, 1)))(layers, x)
    err = max(float(np.max(np.abs(np.asarray(a) - np.asarray(b))))
              for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True))
    assert err <= 1e-6, err
    assert all(np.all(np.isfinite(np.asarray(a))) for a in jax.tree.leaves(got))


@pytest.mark.parametrize("cell", CELLS)
def test_no_dropout_with_rate_zero_or_without_key(cell):
    layers = _layers(cell, 3)
    x, states, lens = _inputs(cell, 0, 1, 3)
    plain = STACK[cell](layers, x, **states, sequence_lens=lens, backend="xla")  # eager, as the others
    for kw in (dict(dropout=0.0, key=jax.random.key(0)), dict(dropout=0.5), dict(dropout=0.5, key=None),
               dict(dropout=0, key=jax.random.PRNGKey(1))):
        got = STACK[cell](layers, x, **states, sequence_lens=lens, backend="xla", **kw)
        for a, b in zip(got, plain, strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # one layer: nothing between layers, nothing dropped
    one = STACK[cell](layers[:1], x, dropout=0.9, key=jax.random.key(0), backend="xla")
    np.testing.assert_array_equal(np.asarray(one[0]), np.asarray(LAYER[cell](layers[0], x, backend="xla")[0]))


def test_legacy_keys_and_jit():
    layers = _layers("gru", 2)
    x, _, _ = _inputs("gru", 0, 1, 2)
    key = jax.random.PRNGKey(3)  # a legacy uint32 key works like a typed one
    got = jax.jit(lambda ls, x, k: jaxgru.gru_stack(ls, x, dropout=P, key=k, backend="xla"))(layers, x, key)
    want = _loop("gru", layers, x, rate=P, key=key, backend="xla")
    np.testing.assert_array_equal(np.asarray(got[0]), np.asarray(want[0]))


@pytest.mark.parametrize(("kw", "exc", "message"), [
    (dict(dropout=1.0), ValueError, r"jaxgru.gru_stack: dropout must be a float in \[0, 1\); got 1.0."),
    (dict(dropout=-0.1), ValueError, r"dropout must be a float in \[0, 1\); got -0.1."),
    (dict(dropout=float("nan")), ValueError, r"dropout must be a float in \[0, 1\); got nan."),
    (dict(dropout="0.5"), TypeError, r"dropout must be a float in \[0, 1\); got '0.5'."),
    (dict(dropout=True), TypeError, r"dropout must be a float in \[0, 1\); got True."),
    (dict(dropout=jnp.float32(0.5)), TypeError, r"dropout must be a float in \[0, 1\)"),
    (dict(dropout=0.5, key=0), TypeError, r"jaxgru.gru_stack: key must be a JAX PRNG key .*; got int."),
    (dict(dropout=0.5, key=jnp.zeros(3, jnp.uint32)), TypeError, r"key must be a JAX PRNG key"),
])
def test_bad_dropout_and_key(kw, exc, message):
    layers = _layers("gru", 2)
    x, _, _ = _inputs("gru", 0, 1, 2)
    with pytest.raises(exc, match=message):
        jaxgru.gru_stack(layers, x, **kw)


def test_dropout_is_not_a_layer_option():
    layers = _layers("lstm", 1)
    x, _, _ = _inputs("lstm", 0, 1, 1)
    with pytest.raises(TypeError, match="dropout"):
        jaxgru.lstm(layers[0], x, dropout=0.5)  # a stack keyword only
    with pytest.raises(TypeError, match="unexpected option 'dropout'"):
        jaxgru.lstm_cell(layers[0], x[0], jnp.zeros((N, H)), jnp.zeros((N, H)), dropout=0.5)


# --------------------------------------------------------------------------------------
# PyTorch: nn.GRU(dropout=p) in training mode (statistics), and the converters
# --------------------------------------------------------------------------------------
def _torch_read_out_gru(rate, hidden):
    """A 2-layer nn.GRU whose second layer outputs tanh(its input): z = 0, candidate = tanh(x)."""
    torch.manual_seed(0)
    module = torch.nn.GRU(I, hidden, num_layers=2, dropout=rate)
    with torch.no_grad():
        w = torch.zeros(3 * hidden, hidden)
        w[2 * hidden:] = torch.eye(hidden)  # rows r, z, n: n reads x
        module.weight_ih_l1.copy_(w)
        module.weight_hh_l1.zero_()
        module.bias_hh_l1.zero_()
        b = torch.zeros(3 * hidden)
        b[hidden: 2 * hidden] = -1e4  # z = sigmoid(-1e4) = 0
        module.bias_ih_l1.copy_(b)
    return module


def test_statistics_match_pytorch_training_mode():
    rate, length, batch, hidden = 0.35, 40, 8, 20
    module = _torch_read_out_gru(rate, hidden)
    x = np.random.default_rng(4).standard_normal((length, batch, I)).astype(np.float32)
    layers, options = from_torch(module)
    assert options["dropout"] == rate
    y0 = np.asarray(jaxgru.gru(layers[0], x, backend="xla", linear_before_reset=True)[0][:, 0])  # layer 0
    expect_kept = np.tanh(y0 / (1 - rate))
    module.train()
    with torch.no_grad():
        out_t = np.concatenate([module(torch.from_numpy(x))[0].numpy() for _ in range(3)])
    out_j = np.concatenate([np.asarray(jaxgru.gru_stack(layers, x, key=jax.random.key(s), backend="xla",
                                                        **options)[0][:, 0]) for s in range(3)])
    n = out_t.size
    bound = 5 * np.sqrt(n * rate * (1 - rate))
    fractions = {}
    for name, out in (("torch", out_t), ("jaxgru", out_j)):
        dropped = np.abs(out) < 1e-30
        assert abs(dropped.sum() - n * rate) < bound, (name, dropped.mean())
        np.testing.assert_allclose(out[~dropped], np.tile(expect_kept, (3, 1, 1))[~dropped], atol=1e-5)
        fractions[name] = dropped.mean()
    assert abs(fractions["torch"] - fractions["jaxgru"]) < 2 * 5 * np.sqrt(rate * (1 - rate) / n)
    # eval mode: no dropout on either side
    module.eval()
    with torch.no_grad():
        want = module(torch.from_numpy(x))[0].numpy()
    got = np.asarray(jaxgru.gru_stack(layers, x, backend="xla", **options)[0][:, 0])
    np.testing.assert_allclose(got, want, atol=1e-5)


@pytest.mark.parametrize("cls", [torch.nn.GRU, torch.nn.LSTM])
def test_torch_round_trip_keeps_dropout(cls):
    module = cls(I, H, num_layers=2, dropout=0.25, bidirectional=True)
    layers, options = from_torch(module)
    assert options["dropout"] == 0.25
    back = to_torch(layers, options)
    assert isinstance(back, cls) and back.dropout == 0.25
    assert {k: torch.equal(v, back.state_dict()[k]) for k, v in module.state_dict().items()} == dict.fromkeys(
        module.state_dict(), True)
    target = cls(I, H, num_layers=2, bidirectional=True)  # dropout 0, given: gets the options' rate
    assert to_torch(layers, options, target).dropout == 0.25
    # no dropout: no option (the layer functions and cells take none)
    assert "dropout" not in from_torch(cls(I, H, num_layers=2))[1]
    assert "dropout" not in from_torch(torch.nn.GRUCell(I, H))[1]
    assert to_torch(layers, {k: v for k, v in options.items() if k != "dropout"}).dropout == 0.0
    # the modules take it from the converter's options
    for module_cls in (jaxgru.flax.GRU, jaxgru.equinox.GRU) if cls is torch.nn.GRU else (jaxgru.flax.LSTM,
                                                                                         jaxgru.equinox.LSTM):
        assert module_cls.from_params(layers, **options).dropout == 0.25


def test_to_torch_refuses_bad_dropout():
    layers, options = from_torch(torch.nn.GRU(I, H, num_layers=2))
    with pytest.raises(ValueError, match=r"jaxgru.interop.to_torch: dropout must be a float in \[0, 1\); got 1.5."):
        to_torch(layers, {**options, "dropout": 1.5})
    with pytest.raises(TypeError, match="dropout must be a float"):
        to_torch(layers, {**options, "dropout": "high"})
    one, opts = from_torch(torch.nn.GRUCell(I, H))
    with pytest.raises(ValueError, match="holds one forward layer without dropout; got 1 layer"):
        to_torch(one, {**opts, "dropout": 0.5}, torch.nn.GRUCell(I, H))


# --------------------------------------------------------------------------------------
# Flax NNX modules: nnx.Dropout's conventions
# --------------------------------------------------------------------------------------
def _flax(cell, **kw):
    cls = jaxgru.flax.GRU if cell == "gru" else jaxgru.flax.LSTM
    return cls(I, H, num_layers=2, backend="xla", rngs=nnx.Rngs(0), **kw)


def _flatten(out):
    return [np.asarray(a) for a in jax.tree.leaves(out)]


def _same(a, b):
    return all(np.array_equal(u, v) for u, v in zip(_flatten(a), _flatten(b), strict=True))


@pytest.mark.parametrize("cell", CELLS)
def test_flax_train_eval_and_deterministic(cell):
    model = _flax(cell, dropout=P)
    x, _, _ = _inputs(cell, 0, 1, 2)
    layers = model.layer_params()
    plain = STACK[cell](layers, x, backend="xla")
    # the weights are those of a module without dropout (the dropout stream is forked after them)
    assert _same(layers, _flax(cell).layer_params())
    assert model.deterministic is False and model.dropout == P
    first, second = model(x), model(x)
    assert not _same(first, second)  # the stream advances
    assert _same(_flax(cell, dropout=P)(x), first)  # the same seed, the same masks
    # a call's key / rngs: exactly the stack with that key
    key = jax.random.key(5)
    want = STACK[cell](layers, x, dropout=P, key=key, backend="xla")
    y = model(x, rngs=key)
    assert _same(y[0], want[0])
    assert _same(model(x, rngs=nnx.Rngs(dropout=5))[0],
                 STACK[cell](layers, x, dropout=P, key=nnx.Rngs(dropout=5).dropout(), backend="xla")[0])
    assert _same(model(x, rngs=nnx.Rngs(dropout=5).dropout)[0], model(x, rngs=nnx.Rngs(dropout=5))[0])
    # deterministic: the call's, eval() / train(), nnx.view
    assert _same(model(x, deterministic=True)[0], plain[0])
    model.eval()
    assert model.deterministic is True
    assert _same(model(x)[0], plain[0])
    assert not _same(model(x, deterministic=False)[0], plain[0])
    model.train()
    assert model.deterministic is False
    assert not _same(model(x)[0], plain[0])
    view = nnx.view(model, deterministic=True)
    assert view.deterministic is True and model.deterministic is False
    assert _same(view(x)[0], plain[0])
    built_eval = _flax(cell, dropout=P, deterministic=True)
    assert _same(built_eval(x)[0], plain[0])


def test_flax_under_nnx_jit_and_grad():
    model = _flax("gru", dropout=P)
    x, _, _ = _inputs("gru", 0, 1, 2)

    @nnx.jit
    def loss_and_grad(model, x):
        return nnx.value_and_grad(lambda m: jnp.sum(m(x)[0] ** 2))(model)

    (l1, g1), (l2, _) = loss_and_grad(model, x), loss_and_grad(model, x)
    assert float(l1) != float(l2)  # the stream's state is carried through nnx.jit
    model.eval()
    (l3, _), (l4, _) = loss_and_grad(model, x), loss_and_grad(model, x)
    assert float(l3) == float(l4)
    assert np.all(np.isfinite(np.asarray(g1["layers"][0]["w"][...])))


def test_flax_dropout_zero_keeps_no_stream_and_bad_arguments():
    model = _flax("gru")
    assert model.rngs is None and model.dropout == 0.0
    x, _, _ = _inputs("gru", 0, 1, 2)
    assert _same(model(x)[0], model(x)[0])
    with pytest.raises(TypeError, match=r"jaxgru.flax.GRU: deterministic must be a bool, known when tracing; got 1."):
        _flax("gru", deterministic=1)
    with pytest.raises(ValueError, match=r"jaxgru.flax.LSTM: dropout must be a float in \[0, 1\); got 1."):
        _flax("lstm", dropout=1)
    dropping = _flax("gru", dropout=P)
    with pytest.raises(TypeError, match=r"rngs must be an nnx\.Rngs, nnx\.RngStream or a JAX PRNG key; got int"):
        dropping(x, rngs=3)
    with pytest.raises(TypeError, match="deterministic must be a bool"):
        dropping(x, deterministic="no")


# --------------------------------------------------------------------------------------
# Equinox modules: eqx.nn.Dropout's conventions
# --------------------------------------------------------------------------------------
def _eqx(cell, backend="xla", **kw):
    cls = jaxgru.equinox.GRU if cell == "gru" else jaxgru.equinox.LSTM
    return cls(I, H, num_layers=2, backend=backend, key=jax.random.key(0), **kw)


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("cell", CELLS)
def test_equinox_key_and_inference(cell, backend):
    model = _eqx(cell, backend, dropout=P)
    x, _, _ = _inputs(cell, 0, 1, 2)
    plain = STACK[cell](model.layers, x, backend=backend)
    key = jax.random.key(9)
    want = STACK[cell](model.layers, x, dropout=P, key=key, backend=backend)
    assert _same(model(x, key=key)[0], want[0])
    assert _same(model(x, inference=True)[0], plain[0])
    assert _same(model(x, key=key, inference=True)[0], plain[0])
    with pytest.raises(RuntimeError, match=r"dropout=0.4 requires a key when not in inference mode"):
        model(x)
    inference = eqx.nn.inference_mode(model)
    assert inference.inference is True
    assert _same(inference(x)[0], plain[0])
    assert _same(inference(x, key=key, inference=False)[0], want[0])
    training = eqx.nn.inference_mode(inference, value=False)
    assert _same(training(x, key=key)[0], want[0])
    assert _same(_eqx(cell, backend, dropout=P, inference=True)(x)[0], plain[0])
    assert _same(_eqx(cell, backend)(x)[0], plain[0])  # no dropout: no key needed


def test_equinox_transforms():
    model = _eqx("gru", dropout=P)
    x, _, _ = _inputs("gru", 0, 1, 2)
    key = jax.random.key(2)
    assert len(jax.tree.leaves(model)) == 6  # the weights only: plain jax.jit / jax.grad work as before
    loss = lambda m, k: jnp.sum(m(x, key=k)[0] ** 2)
    (value, g) = jax.jit(jax.value_and_grad(loss))(model, key)
    np.testing.assert_allclose(float(value), float(jnp.sum(
        jaxgru.gru_stack(model.layers, x, dropout=P, key=key, backend="xla")[0] ** 2)), rtol=1e-6)
    assert all(np.all(np.isfinite(np.asarray(a))) for a in jax.tree.leaves(g))
    # after inference_mode the flag is a bool leaf, as eqx.nn.Dropout's: eqx.filter_jit treats it as static
    inference = eqx.nn.inference_mode(model)
    got = eqx.filter_jit(lambda m: m(x)[0])(inference)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(jaxgru.gru_stack(model.layers, x, backend="xla")[0]))
    with pytest.raises(TypeError, match="inference must be a bool, known when tracing"):
        jax.jit(lambda m: m(x)[0])(inference)


def test_equinox_vmap_over_examples_with_keys():
    model = _eqx("lstm", dropout=P)
    rng = np.random.default_rng(6)
    xs = jnp.asarray(rng.standard_normal((N, L, I)).astype(np.float32))  # N examples [L, I]
    keys = jax.random.split(jax.random.key(1), N)
    y, (_, c) = jax.vmap(lambda x, k: model(x, key=k))(xs, keys)
    for i in range(N):
        yi, (_, ci) = model(xs[i], key=keys[i])
        np.testing.assert_allclose(np.asarray(y[i]), np.asarray(yi), rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(np.asarray(c[i]), np.asarray(ci), rtol=1e-6, atol=1e-6)
    jaxpr = jax.make_jaxpr(jax.vmap(lambda x, k: model(x, key=k)))(xs, keys)
    assert str(jaxpr).count("jaxgru_lstm[") == 2  # one primitive call per layer, the vmap folded in


def test_equinox_bad_arguments():
    with pytest.raises(TypeError, match=r"jaxgru\.equinox\.GRU: inference must be a bool"):
        _eqx("gru", inference=None)
    with pytest.raises(TypeError, match=r"jaxgru.equinox.LSTM: dropout must be a float in \[0, 1\)"):
        _eqx("lstm", dropout="0.1")
    model = _eqx("gru", dropout=P)
    x, _, _ = _inputs("gru", 0, 1, 2)
    with pytest.raises(TypeError, match="inference must be a bool"):
        model(x, key=jax.random.key(0), inference="yes")
    with pytest.raises(TypeError, match="key must be a JAX PRNG key"):
        model(x, key=1)


def test_sharded_stack_draws_independent_masks_per_shard():
    """jaxgru.sharded folds the shard index into the dropout key: identical rows on two shards
    get different masks, and each shard equals the unsharded stack with its folded key."""
    mesh = jax.make_mesh((2,), ("batch",), axis_types=(jax.sharding.AxisType.Auto,), devices=jax.devices()[:2])
    layers = [jaxgru.init_gru(jax.random.key(k), 3 if k == 0 else 4, 4) for k in range(2)]
    x = jnp.broadcast_to(jax.random.normal(jax.random.key(9), (6, 1, 3)), (6, 2, 3))  # 2 equal rows
    key = jax.random.key(3)
    y, _ = jaxgru.sharded(jaxgru.gru_stack, mesh)(layers, x, dropout=0.5, key=key)
    assert not np.allclose(np.asarray(y[:, :, 0]), np.asarray(y[:, :, 1]))  # one row per shard
    for shard in range(2):
        want, _ = jaxgru.gru_stack(layers, x[:, shard : shard + 1], dropout=0.5,
                                   key=jax.random.fold_in(key, shard))
        np.testing.assert_array_equal(np.asarray(y[:, :, shard : shard + 1]), np.asarray(want))
