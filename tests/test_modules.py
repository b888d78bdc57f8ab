"""jaxgru.flax and jaxgru.equinox modules against jaxgru.gru_stack / lstm_stack with the same
weights (and PyTorch through from_params), training with optax, each framework's transforms,
and the wgsl backend."""

from __future__ import annotations

import math
import subprocess
import sys

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import wgsl_support
from flax import nnx

import jaxgru
import jaxgru.equinox
import jaxgru.flax

I, H, N, L = 3, 4, 3, 5  # one set of sizes: compiled programs are shared between tests
FRAMEWORKS = ["flax", "equinox"]
CELLS = ["gru", "lstm"]
FLAG = {"gru": "linear_before_reset", "lstm": "input_forget"}
ACTIVATIONS = {"gru": ["Sigmoid", "LeakyRelu", "Sigmoid", "Tanh"],
               "lstm": ["Sigmoid", "Tanh", "LeakyRelu", "Sigmoid", "Softsign", "Tanh"]}
CASES = {
    "1layer": dict(num_layers=1, bidirectional=False, layout=0, lens=None, state=False, options={}),
    "2layers-bidir-ragged-state": dict(num_layers=2, bidirectional=True, layout=0, lens=[5, 0, 3], state=True,
                                       options={}),
    "2layers-layout1-ragged-state-flag": dict(num_layers=2, bidirectional=False, layout=1, lens=[2, 5, 1],
                                              state=True, options={"flag": True}),
    "bidir-layout1-activations-clip": dict(num_layers=1, bidirectional=True, layout=1, lens=None, state=True,
                                           options={"activations": True, "clip": 0.9}),
}


def _options(cell, case) -> dict:
    """The module / stack keyword options of a case (except the direction)."""
    out = {"layout": case["layout"]}
    extra = case["options"]
    if extra.get("flag"):
        out[FLAG[cell]] = True
    if extra.get("activations"):
        out.update(activations=ACTIVATIONS[cell], activation_alpha=[0.2])
    if "clip" in extra:
        out["clip"] = extra["clip"]
    return out


def _make(framework, cell, *, seed=0, **kw):
    module = jaxgru.flax if framework == "flax" else jaxgru.equinox
    cls = module.GRU if cell == "gru" else module.LSTM
    if framework == "flax":
        return cls(I, H, rngs=nnx.Rngs(seed), **kw)
    return cls(I, H, key=jax.random.key(seed), **kw)


def _weights(framework, cell, model):
    """The module's weights read off its attributes, as the stack functions take them."""
    if framework == "equinox":
        return list(model.layers)
    cls = jaxgru.GRUParams if cell == "gru" else jaxgru.LSTMParams
    return [cls(*(None if getattr(layer, f) is None else getattr(layer, f)[...] for f in cls._fields))
            for layer in model.layers]


def _reference(cell, layers, x, state, lens, **options):
    """What the module must return, straight from jaxgru's stack functions."""
    if cell == "gru":
        return jaxgru.gru_stack(layers, x, initial_h=state, sequence_lens=lens, **options)
    h0, c0 = state if state is not None else (None, None)
    y, h_n, c_n = jaxgru.lstm_stack(layers, x, initial_h=h0, initial_c=c0, sequence_lens=lens, **options)
    return y, (h_n, c_n)


def _inputs(cell, case, key=0):
    rng = np.random.default_rng(key)
    d = 2 if case["bidirectional"] else 1
    x = rng.standard_normal((L, N, I) if case["layout"] == 0 else (N, L, I)).astype(np.float32)
    st = (case["num_layers"] * d, N, H) if case["layout"] == 0 else (N, case["num_layers"] * d, H)
    state = None
    if case["state"]:
        state = rng.standard_normal(st).astype(np.float32)
        if cell == "lstm":
            state = (state, rng.standard_normal(st).astype(np.float32))
    lens = None if case["lens"] is None else np.array(case["lens"], np.int32)
    return jnp.asarray(x), state, lens


def _assert_equal(a, b):
    for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(np.asarray(u), np.asarray(v))


# --------------------------------------------------------------------------------------
# imports
# --------------------------------------------------------------------------------------
def test_core_imports_no_module_framework():
    code = ("import sys, jaxgru, jaxgru.interop; "
            "print([d for d in ('flax', 'equinox', 'optax', 'tqdm') if d in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


@pytest.mark.parametrize(("module", "other"), [("jaxgru.flax", "equinox"), ("jaxgru.equinox", "flax")])
def test_each_module_imports_only_its_framework(module, other):
    code = f"import sys, {module}; print({other!r} in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# --------------------------------------------------------------------------------------
# forward = the stack function with the same weights
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_module_matches_stack_function(framework, cell, case):
    c = CASES[case]
    options = _options(cell, c)
    model = _make(framework, cell, num_layers=c["num_layers"], bidirectional=c["bidirectional"],
                  backend="xla", **options)
    x, state, lens = _inputs(cell, c)
    got = model(x, state, lens)
    direction = "bidirectional" if c["bidirectional"] else "forward"
    want = _reference(cell, _weights(framework, cell, model), x, state, lens, direction=direction,
                      backend="xla", **options)
    _assert_equal(got, want)


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_initialisation_is_pytorch_like_per_layer(framework, cell):
    model = _make(framework, cell, num_layers=2, bidirectional=True)
    layers = _weights(framework, cell, model)
    g = 3 if cell == "gru" else 4
    assert [p.w.shape for p in layers] == [(2, g * H, I), (2, g * H, 2 * H)]
    assert [p.b.shape for p in layers] == [(2, 2 * g * H)] * 2
    bound = 1 / math.sqrt(H)
    for leaf in jax.tree.leaves(layers):
        assert leaf.dtype == jnp.float32 and float(jnp.max(jnp.abs(leaf))) <= bound
    assert not np.allclose(layers[0].r, layers[1].r)  # each layer has its own key
    other = _weights(framework, cell, _make(framework, cell, seed=1, num_layers=2, bidirectional=True))
    assert not np.allclose(layers[0].w, other[0].w)


def test_flax_parameters_are_nnx_params():
    model = jaxgru.flax.LSTM(I, H, num_layers=2, rngs=nnx.Rngs(0))
    params = nnx.state(model, nnx.Param)
    assert set(params["layers"][1]) == {"w", "r", "b"}
    assert sum(a.size for a in jax.tree.leaves(params)) == sum(
        a.size for a in jax.tree.leaves(_weights("flax", "lstm", model)))


def test_equinox_leaves_are_exactly_the_weights():
    model = jaxgru.equinox.GRU(I, H, num_layers=2, activations=["Sigmoid", "Tanh"], key=jax.random.key(0))
    assert len(jax.tree.leaves(model)) == 6
    assert all(isinstance(a, jax.Array) for a in jax.tree.leaves(model))


# --------------------------------------------------------------------------------------
# from_params: a converter's (layers, options), checked against PyTorch itself
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_from_params_reproduces_torch(framework, cell):
    torch = pytest.importorskip("torch")
    from jaxgru.interop import from_torch

    torch.manual_seed(0)
    source = (torch.nn.GRU if cell == "gru" else torch.nn.LSTM)(I, H, num_layers=2, bidirectional=True,
                                                                 batch_first=True)
    x = torch.randn(N, L, I)
    with torch.no_grad():
        out, state = source(x)
    module = jaxgru.flax if framework == "flax" else jaxgru.equinox
    cls = module.GRU if cell == "gru" else module.LSTM
    layers, options = from_torch(source)
    model = cls.from_params(layers, **options)
    y, got_state = model(jnp.asarray(x.numpy()))
    # jaxgru's [N, L, D, H] -> PyTorch's [N, L, D*H]; layout-1 states are [N, layers*D, H]
    np.testing.assert_allclose(np.asarray(y).reshape(N, L, 2 * H), out.numpy(), atol=1e-5, rtol=1e-5)
    h_n = got_state if cell == "gru" else got_state[0]
    want_h = state if cell == "gru" else state[0]
    np.testing.assert_allclose(np.swapaxes(np.asarray(h_n), 0, 1), want_h.numpy(), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_from_params_keeps_peepholes_and_missing_biases(framework):
    rng = np.random.default_rng(0)
    f = lambda *s: rng.uniform(-0.5, 0.5, s).astype(np.float32)
    layers = [jaxgru.LSTMParams(f(1, 4 * H, I), f(1, 4 * H, H), None, f(1, 3 * H))]
    module = jaxgru.flax if framework == "flax" else jaxgru.equinox
    model = module.LSTM.from_params(layers, direction="forward", clip=2.0)
    x = jnp.asarray(f(L, N, I))
    _assert_equal(model(x), _reference("lstm", layers, x, None, None, clip=2.0))


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_from_params_reads_the_directions_from_the_weights(framework):
    module = jaxgru.flax if framework == "flax" else jaxgru.equinox
    keys = jax.random.split(jax.random.key(0), 2)
    layers = [jaxgru.init_gru(keys[0], I, H, bidirectional=True),
              jaxgru.init_gru(keys[1], 2 * H, H, bidirectional=True)]
    model = module.GRU.from_params(layers, linear_before_reset=True)
    assert model.bidirectional and model.num_layers == 2
    x = jnp.asarray(np.random.default_rng(0).standard_normal((L, N, I)).astype(np.float32))
    _assert_equal(model(x), _reference("gru", layers, x, None, None, direction="bidirectional",
                                       linear_before_reset=True))


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_from_params_errors(framework):
    module = jaxgru.flax if framework == "flax" else jaxgru.equinox
    layers = [jaxgru.init_gru(jax.random.key(0), I, H, bidirectional=True)]
    with pytest.raises(TypeError, match=r"from_params: layers must be a non-empty list of jaxgru.GRUParams"):
        module.GRU.from_params(layers[0])
    with pytest.raises(ValueError, match=r"disagree with weights holding 2 direction"):
        module.GRU.from_params(layers, direction="forward")
    with pytest.raises(ValueError, match=r"disagree with weights holding 2 direction"):
        module.GRU.from_params(layers, bidirectional=False)
    second = jaxgru.init_gru(jax.random.key(1), 2 * H, H)
    with pytest.raises(ValueError, match=r"the same 1 or 2 directions"):
        module.GRU.from_params([layers[0], second])
    with pytest.raises(ValueError, match=r"direction must be 'forward' or 'bidirectional'"):
        module.GRU.from_params(layers, direction="reverse")


# --------------------------------------------------------------------------------------
# options and errors
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_bad_options_fail_at_construction_naming_the_module(framework):
    name = f"jaxgru.{framework}.GRU"
    with pytest.raises(ValueError, match=rf"{name}: activations must list 2 activations per direction"):
        _make(framework, "gru", activations=["Sigmoid"])
    with pytest.raises(ValueError, match=rf"{name}: layout must be 0"):
        _make(framework, "gru", layout=2)
    with pytest.raises(ValueError, match=rf"{name}: num_layers must be a positive int"):
        _make(framework, "gru", num_layers=0)
    with pytest.raises(ValueError, match=rf"{name}: backend must be one of"):
        _make(framework, "gru", backend="cuda")


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_lstm_initial_state_must_be_a_pair(framework):
    model = _make(framework, "lstm")
    with pytest.raises(TypeError, match=r"initial_state must be a pair \(h_0, c_0\)"):
        model(jnp.ones((L, N, I)), jnp.zeros((1, N, H)))
    h0 = jnp.full((1, N, H), 0.5)
    _assert_equal(model(jnp.ones((L, N, I)), (h0, None)),
                  _reference("lstm", _weights(framework, "lstm", model), jnp.ones((L, N, I)), (h0, None), None))


def test_flax_dtype_and_param_dtype():
    model = jaxgru.flax.GRU(I, H, dtype=jnp.bfloat16, param_dtype=jnp.bfloat16, rngs=nnx.Rngs(0))
    assert model.layers[0].w.dtype == jnp.bfloat16
    y, h_n = model(jnp.ones((L, N, I), jnp.float32))
    assert y.dtype == h_n.dtype == jnp.bfloat16
    default = jaxgru.flax.GRU(I, H, rngs=nnx.Rngs(0))
    assert default(jnp.ones((L, N, I), jnp.bfloat16))[0].dtype == jnp.bfloat16  # jaxgru: x's dtype


def test_equinox_dtype():
    model = jaxgru.equinox.LSTM(I, H, dtype=jnp.bfloat16, key=jax.random.key(0))
    assert {a.dtype for a in jax.tree.leaves(model)} == {jnp.dtype(jnp.bfloat16)}


# --------------------------------------------------------------------------------------
# training
# --------------------------------------------------------------------------------------
@pytest.fixture
def standard_promotion():
    """optax's Adam mixes int32 step counts with floats: JAX's default rules, as users run it."""
    with jax.numpy_dtype_promotion("standard"):
        yield


def _problem():
    """Batch-major inputs, ragged lengths and a target for a bidirectional y: a small regression."""
    rng = np.random.default_rng(1)
    x = jnp.asarray(rng.standard_normal((N, L, I)).astype(np.float32))
    target = jnp.asarray(rng.uniform(-0.5, 0.5, (N, L, 2, H)).astype(np.float32))
    return x, jnp.array([5, 3, 4], jnp.int32), target


def _mse(y, target, lens):
    valid = (jnp.arange(L)[None, :] < lens[:, None])[:, :, None, None]  # y is zero past each length
    return jnp.mean((y - target) ** 2, where=jnp.broadcast_to(valid, y.shape))


def _train(step, state, steps=25):
    losses = []
    for _ in range(steps):
        state, loss = step(state)
        losses.append(float(loss))
    return losses


def _assert_learns(losses):
    assert all(np.isfinite(losses))
    assert losses[-1] < 0.7 * losses[0], losses


@pytest.mark.parametrize("cell", CELLS)
def test_flax_trains_with_optax_under_jax_jit(cell, standard_promotion):
    cls = jaxgru.flax.GRU if cell == "gru" else jaxgru.flax.LSTM
    model = cls(I, H, num_layers=2, bidirectional=True, layout=1, backend="xla", rngs=nnx.Rngs(0))
    x, lens, target = _problem()
    graphdef, params = nnx.split(model, nnx.Param)
    opt = optax.adam(3e-2)

    @jax.jit
    def step(state):
        params, opt_state = state
        loss_fn = lambda p: _mse(nnx.merge(graphdef, p)(x, sequence_lens=lens)[0], target, lens)
        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = opt.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), loss

    _assert_learns(_train(step, (params, opt.init(params))))


@pytest.mark.parametrize("cell", CELLS)
def test_equinox_trains_with_optax_under_jax_jit(cell, standard_promotion):
    cls = jaxgru.equinox.GRU if cell == "gru" else jaxgru.equinox.LSTM
    model = cls(I, H, num_layers=2, bidirectional=True, layout=1, backend="xla", key=jax.random.key(0))
    x, lens, target = _problem()
    opt = optax.adam(3e-2)

    @jax.jit  # every field but the weights is static: the module passes through jax.jit as is
    def step(state):
        model, opt_state = state
        loss, grads = jax.value_and_grad(lambda m: _mse(m(x, sequence_lens=lens)[0], target, lens))(model)
        updates, opt_state = opt.update(grads, opt_state, model)
        return (optax.apply_updates(model, updates), opt_state), loss

    _assert_learns(_train(step, (model, opt.init(model))))


def _stack_loss(cell, layers, x, lens, target, **options):
    y = _reference(cell, layers, x, None, lens, direction="bidirectional", layout=1, backend="xla", **options)[0]
    return _mse(y, target, lens)


def test_flax_nnx_jit_grad_and_optimizer(standard_promotion):
    model = jaxgru.flax.GRU(I, H, num_layers=2, bidirectional=True, layout=1, linear_before_reset=True,
                            backend="xla", rngs=nnx.Rngs(0))
    x, lens, target = _problem()
    loss_fn = lambda m: _mse(m(x, sequence_lens=lens)[0], target, lens)
    grads = nnx.jit(nnx.grad(loss_fn))(model)
    # the same gradients as differentiating the stack function with the module's weights
    want = jax.grad(lambda ls: _stack_loss("gru", ls, x, lens, target, linear_before_reset=True))(
        _weights("flax", "gru", model))
    for k, layer in enumerate(want):
        for f in ("w", "r", "b"):
            np.testing.assert_allclose(grads["layers"][k][f][...], getattr(layer, f), rtol=1e-5, atol=1e-7)

    optimizer = nnx.Optimizer(model, optax.adam(3e-2), wrt=nnx.Param)

    @nnx.jit
    def step(model, optimizer):
        loss, grads = nnx.value_and_grad(loss_fn)(model)
        optimizer.update(model, grads)
        return loss

    _assert_learns([float(step(model, optimizer)) for _ in range(25)])


def test_equinox_filter_jit_and_filter_grad(standard_promotion):
    model = jaxgru.equinox.LSTM(I, H, num_layers=2, bidirectional=True, layout=1, backend="xla",
                                key=jax.random.key(0))
    x, lens, target = _problem()
    loss_fn = lambda m: _mse(m(x, sequence_lens=lens)[0], target, lens)
    grads = eqx.filter_jit(eqx.filter_grad(loss_fn))(model)
    want = jax.grad(lambda ls: _stack_loss("lstm", ls, x, lens, target))(list(model.layers))
    for got, ref in zip(jax.tree.leaves(grads), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-7)

    opt = optax.adam(3e-2)

    @eqx.filter_jit
    def step(state):
        model, opt_state = state
        loss, grads = eqx.filter_value_and_grad(loss_fn)(model)
        updates, opt_state = opt.update(grads, opt_state, eqx.filter(model, eqx.is_inexact_array))
        return (eqx.apply_updates(model, updates), opt_state), loss

    _assert_learns(_train(step, (model, opt.init(eqx.filter(model, eqx.is_inexact_array)))))


# --------------------------------------------------------------------------------------
# wgsl backend
# --------------------------------------------------------------------------------------
@pytest.mark.wgsl
@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_wgsl_forward_agrees_with_xla(framework, cell):
    wgsl_support.require_adapter()
    case = CASES["2layers-bidir-ragged-state"]
    x, state, lens = _inputs(cell, case)
    out = {}
    for backend in ("xla", "wgsl"):
        model = _make(framework, cell, num_layers=2, bidirectional=True, backend=backend)  # same seed: same weights
        out[backend] = model(x, state, lens)
    for a, b in zip(jax.tree.leaves(out["xla"]), jax.tree.leaves(out["wgsl"]), strict=True):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), atol=1e-5, rtol=1e-4)
