"""The projected LSTM (``LSTMParams.proj``, PyTorch's ``nn.LSTM(proj_size=P)``).

Oracles: PyTorch's own ``nn.LSTM(proj_size=P)`` (outputs, and the gradients of a loss with
respect to the input and every weight, by torch.autograd), numerical gradients
(``jax.test_util.check_grads`` on the xla reference, float64), a hand-written numpy LSTM step for
what PyTorch lacks (peepholes, input_forget, clip), and per-sequence PyTorch runs for ragged
lengths.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from backend_cases import BACKENDS
from jax.test_util import check_grads

import jaxgru
from jaxgru.interop import from_torch, to_onnx, to_torch

torch = pytest.importorskip("torch")

L, N, IN, H, P = 4, 2, 3, 5, 2
TOL = {"atol": 2e-5, "rtol": 2e-5}


def _torch_y(y, layout):
    """jaxgru's Y ([L, D, N, P] or [N, L, D, P]) as PyTorch's output ([L|N, N|L, D*P])."""
    y = np.asarray(y)
    if layout == 0:
        length, d, batch, p = y.shape
        return np.transpose(y, (0, 2, 1, 3)).reshape(length, batch, d * p)
    batch, length, d, p = y.shape
    return y.reshape(batch, length, d * p)


def _states(s, layout):
    """Between PyTorch's states [layers*D, N, ·] and jaxgru's (layout 1: [N, layers*D, ·])."""
    return np.asarray(s) if layout == 0 else np.swapaxes(np.asarray(s), 0, 1)


def _torch_module(num_layers, bidirectional, batch_first, *, dropout=0.0, seed=0):
    torch.manual_seed(seed)
    return torch.nn.LSTM(IN, H, num_layers=num_layers, proj_size=P, bidirectional=bidirectional,
                         batch_first=batch_first, dropout=dropout).eval()


# --------------------------------------------------------------------------------------
# PyTorch parity: outputs and every gradient, 1-3 layers, every backend
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize(("num_layers", "bidirectional", "batch_first"),
                         [(1, False, False), (2, True, True), (3, False, False)])
def test_matches_torch_outputs_and_gradients(backend, num_layers, bidirectional, batch_first):
    module = _torch_module(num_layers, bidirectional, batch_first, seed=num_layers)
    d = 2 if bidirectional else 1
    rng = np.random.default_rng(num_layers)
    x = rng.standard_normal((N, L, IN) if batch_first else (L, N, IN)).astype(np.float32)
    h0 = rng.standard_normal((num_layers * d, N, P)).astype(np.float32)
    c0 = rng.standard_normal((num_layers * d, N, H)).astype(np.float32)
    x_t = torch.from_numpy(x).requires_grad_()
    out, (h_n, c_n) = module(x_t, (torch.from_numpy(h0), torch.from_numpy(c0)))
    # cotangents: a random linear functional of every output
    cy, ch, cc = (rng.standard_normal(tuple(t.shape)).astype(np.float32) for t in (out, h_n, c_n))
    loss = (out * torch.from_numpy(cy)).sum() + (h_n * torch.from_numpy(ch)).sum() + (c_n * torch.from_numpy(cc)).sum()
    loss.backward()

    layers, options = from_torch(module)
    layout = options["layout"]
    assert all(p.proj is not None and p.proj.shape == (d, P, H) for p in layers)

    def run(layers, x):
        return jaxgru.lstm_stack(layers, x, initial_h=_states(h0, layout), initial_c=_states(c0, layout),
                                 backend=backend, **options)

    y, y_h, y_c = run(layers, x)
    chex.assert_trees_all_close((_torch_y(y, layout), _states(y_h, layout), _states(y_c, layout)),
                                (out.detach().numpy(), h_n.detach().numpy(), c_n.detach().numpy()), **TOL)

    def jloss(layers, x):
        y, y_h, y_c = run(layers, x)
        return (jnp.sum(_torch_y_j(y, layout) * cy) + jnp.sum(_states_j(y_h, layout) * ch)
                + jnp.sum(_states_j(y_c, layout) * cc))

    g_layers, g_x = jax.grad(jloss, argnums=(0, 1))(layers, x)
    np.testing.assert_allclose(g_x, x_t.grad.numpy(), **TOL)
    # the weights' gradients in PyTorch's layout: to_torch reorders them like the weights
    grads = to_torch(g_layers, options).state_dict()
    for name, param in module.named_parameters():
        np.testing.assert_allclose(grads[name].numpy(), param.grad.numpy(), err_msg=name, **TOL)


def _torch_y_j(y, layout):
    if layout == 0:
        length, d, batch, p = y.shape
        return jnp.transpose(y, (0, 2, 1, 3)).reshape(length, batch, d * p)
    batch, length, d, p = y.shape
    return y.reshape(batch, length, d * p)


def _states_j(s, layout):
    return s if layout == 0 else jnp.swapaxes(s, 0, 1)


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_ragged_lengths_match_torch_per_sequence(backend):
    """Past its length a sequence's h (P) and c (H) stay frozen and Y is zero, both directions;
    the oracle runs PyTorch on each sequence's valid prefix alone."""
    module = _torch_module(1, True, False, seed=7)
    rng = np.random.default_rng(7)
    lens = np.array([4, 1, 0, 3], np.int32)
    x = rng.standard_normal((L, len(lens), IN)).astype(np.float32)
    layers, options = from_torch(module)
    y, y_h, y_c = jaxgru.lstm(layers[0], x, sequence_lens=lens, backend=backend, **options)
    for n, k in enumerate(lens):
        if k == 0:  # nothing runs: zero Y, the (zero) initial states
            np.testing.assert_array_equal(y[:, :, n], 0)
            np.testing.assert_array_equal(y_h[:, n], 0)
            np.testing.assert_array_equal(y_c[:, n], 0)
            continue
        with torch.no_grad():
            out, (h_n, c_n) = module(torch.from_numpy(x[:k, n : n + 1]))
        np.testing.assert_allclose(_torch_y(y[:k, :, n : n + 1], 0), out.numpy(), **TOL)
        np.testing.assert_array_equal(y[k:, :, n], 0)
        np.testing.assert_allclose(y_h[:, n], h_n.numpy()[:, 0], **TOL)
        np.testing.assert_allclose(y_c[:, n], c_n.numpy()[:, 0], **TOL)


def test_lstm_cell_is_one_torch_step():
    module = _torch_module(1, False, False, seed=3)
    rng = np.random.default_rng(3)
    x, h, c = (rng.standard_normal(s).astype(np.float32) for s in ((N, IN), (N, P), (N, H)))
    with torch.no_grad():
        _, (h_n, c_n) = module(torch.from_numpy(x[None]), (torch.from_numpy(h[None]), torch.from_numpy(c[None])))
    layers, _ = from_torch(module)
    got_h, got_c = jaxgru.lstm_cell(layers[0], x, h, c)
    assert got_h.shape == (N, P) and got_c.shape == (N, H)
    chex.assert_trees_all_close((got_h, got_c), (h_n.numpy()[0], c_n.numpy()[0]), **TOL)


# --------------------------------------------------------------------------------------
# what PyTorch has not: peepholes, input_forget, clip (a hand-written numpy oracle)
# --------------------------------------------------------------------------------------
def _sigmoid(a):
    return 1 / (1 + np.exp(-a))


def _numpy_lstm(params, x, *, input_forget=False, clip=None):
    """One forward direction, zero initial states, gates i, o, f, c (ONNX), float64."""
    w, r, b, p, proj = (None if a is None else np.asarray(a, np.float64)[0] for a in params)
    cl = (lambda a: a) if clip is None else (lambda a: np.clip(a, -clip, clip))
    h, c = np.zeros((x.shape[1], proj.shape[0])), np.zeros((x.shape[1], proj.shape[1]))
    ys = []
    for x_t in np.asarray(x, np.float64):
        a = x_t @ w.T + h @ r.T + b[: 4 * H] + b[4 * H :]
        ai, ao, af, ac = np.split(a, 4, axis=-1)
        ai, af = ai + p[:H] * c, af + p[2 * H :] * c
        i = _sigmoid(cl(ai))
        f = 1 - i if input_forget else _sigmoid(cl(af))
        c = f * c + i * np.tanh(cl(ac))
        o = _sigmoid(cl(ao + p[H : 2 * H] * c))
        h = (o * np.tanh(c)) @ proj.T
        ys.append(h)
    return np.stack(ys)[:, None], h[None], c[None]


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize(("input_forget", "clip"), [(False, None), (True, 0.4)])
def test_peepholes_input_forget_clip(backend, input_forget, clip):
    rng = np.random.default_rng(5)
    f = lambda *s: rng.uniform(-0.8, 0.8, s).astype(np.float32)
    params = jaxgru.LSTMParams(f(1, 4 * H, IN), f(1, 4 * H, P), f(1, 8 * H), f(1, 3 * H), f(1, P, H))
    x = f(L, N, IN) * 3
    got = jaxgru.lstm(params, x, input_forget=input_forget, clip=clip, backend=backend)
    chex.assert_trees_all_close(got, _numpy_lstm(params, x, input_forget=input_forget, clip=clip), atol=1e-5)


# --------------------------------------------------------------------------------------
# numerical gradients, vmap / ensembles, jit
# --------------------------------------------------------------------------------------
def _random_params(rng, d=1, dtype=np.float64, peepholes=True):
    f = lambda *s: rng.uniform(-0.6, 0.6, s).astype(dtype)
    return jaxgru.LSTMParams(f(d, 4 * H, IN), f(d, 4 * H, P), f(d, 8 * H), f(d, 3 * H) if peepholes else None,
                             f(d, P, H))


def test_check_grads_numerically():
    """Forward and reverse mode (incl. d proj) against finite differences, float64, ragged,
    bidirectional, peepholes and clip: the reference's tangent and backward with a projection."""
    with jax.enable_x64(True):
        rng = np.random.default_rng(11)
        params = _random_params(rng, d=2)
        x = rng.standard_normal((L, 3, IN))
        h0, c0 = rng.standard_normal((2, 3, P)), rng.standard_normal((2, 3, H))
        lens = jnp.array([4, 2, 0], jnp.int32)

        def f(params, x, h0, c0):
            y, y_h, y_c = jaxgru.lstm(params, x, initial_h=h0, initial_c=c0, sequence_lens=lens,
                                      direction="bidirectional", clip=2.0, backend="xla")
            return jnp.sum(jnp.sin(y)) + jnp.sum(y_h * 1.5) + jnp.sum(jnp.cos(y_c))

        check_grads(f, (params, x, h0, c0), order=1, modes=("fwd", "rev"), eps=1e-6, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_vmap_over_params_is_an_ensemble(backend):
    """vmap over the weights (proj batched like r: an ensemble axis, one WGSL call for all
    members) equals a loop over the members on xla, gradients too."""
    rng = np.random.default_rng(12)
    members = [_random_params(rng, dtype=np.float32) for _ in range(3)]
    stacked = jax.tree.map(lambda *a: jnp.stack(a), *members)
    x = rng.standard_normal((L, N, IN)).astype(np.float32)
    loss = lambda p, be: sum(jnp.sum(o ** 2) for o in jaxgru.lstm(p, x, backend=be))
    got = jax.vmap(lambda p: jaxgru.lstm(p, x, backend=backend))(stacked)
    want = [jaxgru.lstm(p, x, backend="xla") for p in members]
    chex.assert_trees_all_close(got, jax.tree.map(lambda *a: jnp.stack(a), *want), atol=1e-6)
    g = jax.vmap(jax.grad(lambda p: loss(p, backend)))(stacked)
    g_want = jax.tree.map(lambda *a: jnp.stack(a), *[jax.grad(lambda p: loss(p, "xla"))(p) for p in members])
    chex.assert_trees_all_close(g, g_want, atol=1e-5)
    assert g.proj.shape == (3, 1, P, H)


def test_jit_traces_once():
    traces = []

    @jax.jit
    def f(params, x):
        traces.append(None)
        return jaxgru.lstm(params, x, backend="xla")[0]

    rng = np.random.default_rng(13)
    for _ in range(3):
        f(_random_params(rng, dtype=np.float32), rng.standard_normal((L, N, IN)).astype(np.float32))
    assert len(traces) == 1


def test_unprojected_call_is_unchanged():
    """Without proj the primitive has the table's operands (no placeholder) and the config's repr
    is the one it always had."""
    params = jaxgru.init_lstm(jax.random.key(0), IN, H)
    assert params.proj is None
    eqn = jax.make_jaxpr(lambda x: jaxgru.lstm(params, x))(jnp.ones((L, N, IN))).eqns[-1]
    assert len(eqn.invars) == 8 and "proj" not in repr(eqn.params["cfg"])
    projected = jaxgru.init_lstm(jax.random.key(0), IN, H, proj_size=P)
    eqn = jax.make_jaxpr(lambda x: jaxgru.lstm(projected, x))(jnp.ones((L, N, IN))).eqns[-1]
    assert len(eqn.invars) == 9 and "proj=1" in repr(eqn.params["cfg"])


# --------------------------------------------------------------------------------------
# init, converters, modules
# --------------------------------------------------------------------------------------
def test_init_lstm_proj_size_draws_like_torch():
    params = jaxgru.init_lstm(jax.random.key(1), IN, 16, bidirectional=True, proj_size=4)
    assert (params.w.shape, params.r.shape, params.b.shape, params.p, params.proj.shape) == (
        (2, 64, IN), (2, 64, 4), (2, 128), None, (2, 4, 16))
    bound = 1 / np.sqrt(16)  # PyTorch: U(-1/sqrt(H), 1/sqrt(H)) for weight_hr too
    assert np.all(np.abs(params.proj) <= bound) and np.std(np.asarray(params.proj)) > bound / 3
    # proj_size=0 draws exactly what it drew before (same keys, no proj)
    chex.assert_trees_all_equal(jaxgru.init_lstm(jax.random.key(1), IN, 16, proj_size=0),
                                jaxgru.init_lstm(jax.random.key(1), IN, 16))


@pytest.mark.parametrize("num_layers", [1, 3])
def test_torch_round_trip_is_exact(num_layers):
    module = _torch_module(num_layers, True, True, dropout=0.25 if num_layers > 1 else 0.0, seed=4)
    layers, options = from_torch(module)
    assert options == {"direction": "bidirectional", "layout": 1, **({"dropout": 0.25} if num_layers > 1 else {})}
    back = to_torch(layers, options)
    assert back.proj_size == P and back.dropout == module.dropout
    want, got = module.state_dict(), back.state_dict()
    assert want.keys() == got.keys()
    for k in want:
        assert torch.equal(want[k], got[k]), k
    chex.assert_trees_all_equal(from_torch(back)[0], layers)
    # into a given module of the same configuration
    target = torch.nn.LSTM(IN, H, num_layers=num_layers, proj_size=P, bidirectional=True, batch_first=True)
    assert to_torch(layers, options, module=target) is target


def test_torch_and_onnx_errors():
    layers, options = from_torch(_torch_module(2, False, False))
    with pytest.raises(ValueError, match=r"module\.proj_size must be 2 to hold these weights; got 0"):
        to_torch(layers, options, module=torch.nn.LSTM(IN, H, num_layers=2))
    with pytest.raises(ValueError, match=r"module\.proj_size must be 0 to hold these weights; got 2"):
        to_torch([p._replace(proj=None, r=jnp.zeros((1, 4 * H, H))) for p in layers][:1], {},
                 module=torch.nn.LSTM(IN, H, proj_size=2))
    with pytest.raises(ValueError, match="proj_size is one for every layer"):
        to_torch([layers[0], layers[1]._replace(proj=None)], options)
    with pytest.raises(ValueError, match="has no projection"):
        to_torch(layers[:1], {}, module=torch.nn.LSTMCell(IN, H))
    with pytest.raises(NotImplementedError, match=r"layers\[0\]\.proj is set"):
        to_onnx(layers, options)


def test_shape_errors_name_the_argument():
    params = jaxgru.init_lstm(jax.random.key(0), IN, H, proj_size=P)
    x = jnp.ones((L, N, IN))
    with pytest.raises(ValueError, match=r"params\.proj must have shape \(num_directions, proj_size, hidden\)"
                                         r"=\(1, 2, 5\); got \(1, 3, 5\)"):
        jaxgru.lstm(params._replace(proj=jnp.ones((1, 3, H))), x)
    with pytest.raises(ValueError, match=r"params\.proj must have rank 3"):
        jaxgru.lstm(params._replace(proj=jnp.ones((P, H))), x)
    with pytest.raises(ValueError, match=r"params\.r must have shape \(num_directions, 4\*hidden, proj_size\) "
                                         r"with a projection; got \(1, 19, 2\)"):
        jaxgru.lstm(params._replace(r=jnp.ones((1, 19, P))), x)
    with pytest.raises(ValueError, match=r"initial_h must have shape \(num_directions, batch, proj_size\)="
                                         r"\(1, 2, 2\); got \(1, 2, 5\)"):
        jaxgru.lstm(params, x, initial_h=jnp.zeros((1, N, H)))
    with pytest.raises(ValueError, match=r"initial_c must have shape \(num_directions, batch, hidden\)="
                                         r"\(1, 2, 5\); got \(1, 2, 2\)"):
        jaxgru.lstm(params, x, initial_c=jnp.zeros((1, N, P)))
    with pytest.raises(ValueError, match=r"lstm_cell: c must have shape \(batch, hidden\)=\(2, 5\)"):
        jaxgru.lstm_cell(params, x[0], jnp.zeros((N, P)), jnp.zeros((N, P)))
    with pytest.raises(ValueError, match="proj_size must be a non-negative int"):
        jaxgru.init_lstm(jax.random.key(0), IN, H, proj_size=-1)
    # a stack's next layer reads D*P features
    with pytest.raises(ValueError, match=r"layers\[1\] must read the previous layer's outputs, "
                                         r"num_directions\*hidden=2 features"):
        jaxgru.lstm_stack([params, jaxgru.init_lstm(jax.random.key(1), H, H, proj_size=P)], x)


def test_flax_and_equinox_modules_take_proj_size():
    flax_nnx = pytest.importorskip("flax.nnx")
    eqx = pytest.importorskip("equinox")
    del eqx
    import jaxgru.equinox
    import jaxgru.flax

    module = _torch_module(2, True, False, seed=9)
    layers, options = from_torch(module)
    x = np.random.default_rng(9).standard_normal((L, N, IN)).astype(np.float32)
    with torch.no_grad():
        out, (h_n, c_n) = module(torch.from_numpy(x))
    want = (out.numpy(), h_n.numpy(), c_n.numpy())
    for model in (jaxgru.flax.LSTM.from_params(layers, **options),
                  jaxgru.equinox.LSTM.from_params(layers, **options)):
        assert model.proj_size == P
        y, (y_h, y_c) = model(x)
        chex.assert_trees_all_close((_torch_y(y, 0), y_h, y_c), want, **TOL)
    # constructed with proj_size: the weights' shapes, and a second layer reading D*P features
    nnx_model = jaxgru.flax.LSTM(IN, H, num_layers=2, bidirectional=True, proj_size=P, rngs=flax_nnx.Rngs(0))
    eqx_model = jaxgru.equinox.LSTM(IN, H, num_layers=2, bidirectional=True, proj_size=P, key=jax.random.key(0))
    for ps in (nnx_model.layer_params(), eqx_model.layers):
        assert [(p.w.shape, p.r.shape, p.proj.shape) for p in ps] == [
            ((2, 4 * H, IN), (2, 4 * H, P), (2, P, H)), ((2, 4 * H, 2 * P), (2, 4 * H, P), (2, P, H))]
    y, (y_h, y_c) = eqx_model(x)
    assert (y.shape, y_h.shape, y_c.shape) == ((L, 2, N, P), (4, N, P), (4, N, H))
    with pytest.raises(ValueError, match="proj_size must be a non-negative int"):
        jaxgru.equinox.LSTM(IN, H, proj_size=-2, key=jax.random.key(0))
