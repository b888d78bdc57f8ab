"""jaxgru.interop.from_torch / to_torch against PyTorch's own nn.GRU / nn.LSTM / cells."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import jaxgru  # noqa: E402
from jaxgru.interop import _torch, from_torch, to_torch  # noqa: E402

L, N, IN, H = 4, 2, 3, 5  # one set of sizes: compiled programs are shared between tests
TOL = {"atol": 1e-5, "rtol": 1e-5}


def _random_layer(rng, cell, input_size, d=1):
    """Random ONNX-layout parameters (numpy RNG: no jax.random programs to compile)."""
    g = 3 if cell == "gru" else 4
    f = lambda *s: rng.uniform(-0.4, 0.4, s).astype(np.float32)
    cls = jaxgru.GRUParams if cell == "gru" else jaxgru.LSTMParams
    return cls(f(d, g * H, input_size), f(d, g * H, H), f(d, 2 * g * H))


def _torch_y(y, layout):
    """jaxgru's Y ([L, D, N, H] or [N, L, D, H]) in PyTorch's output shape ([L|N, N|L, D*H])."""
    y = np.asarray(y)
    if layout == 0:
        length, d, batch, hidden = y.shape
        return np.transpose(y, (0, 2, 1, 3)).reshape(length, batch, d * hidden)
    batch, length, d, hidden = y.shape
    return y.reshape(batch, length, d * hidden)


def _states(s, layout):
    """jaxgru's stacked states in PyTorch's [layers*D, N, H] (PyTorch never batch-firsts them)."""
    return np.asarray(s) if layout == 0 else np.swapaxes(np.asarray(s), 0, 1)


@pytest.mark.parametrize(
    ("kind", "num_layers", "bidirectional", "batch_first", "bias", "init_state"),
    [
        ("GRU", 1, False, False, True, True),
        ("GRU", 2, True, True, True, False),
        ("GRU", 3, False, False, False, True),
        ("LSTM", 1, False, False, True, True),
        ("LSTM", 2, True, True, True, True),
        ("LSTM", 3, False, False, False, False),
    ],
)
def test_module_parity(kind, num_layers, bidirectional, batch_first, bias, init_state):
    torch.manual_seed(num_layers + 10 * bidirectional)
    module = getattr(torch.nn, kind)(IN, H, num_layers=num_layers, bidirectional=bidirectional,
                                     batch_first=batch_first, bias=bias)
    d = 2 if bidirectional else 1
    x = torch.randn((N, L, IN) if batch_first else (L, N, IN))
    states = [torch.randn(num_layers * d, N, H) for _ in range(2 if kind == "LSTM" else 1)]
    with torch.no_grad():
        if kind == "GRU":
            out, h_n = module(x, states[0] if init_state else None)
            want = (out, h_n)
        else:
            out, (h_n, c_n) = module(x, tuple(states) if init_state else None)
            want = (out, h_n, c_n)

    layers, options = from_torch(module)
    assert len(layers) == num_layers
    assert options["layout"] == (1 if batch_first else 0)
    assert options["direction"] == ("bidirectional" if bidirectional else "forward")
    assert all((p.b is None) == (not bias) for p in layers)
    chex.assert_trees_all_equal_dtypes(layers[0].w, jax.numpy.zeros((), jax.numpy.float32))
    layout = options["layout"]
    kw = {}
    if init_state:
        kw["initial_h"] = _states(states[0].numpy(), layout)
        if kind == "LSTM":
            kw["initial_c"] = _states(states[1].numpy(), layout)
    stack = jaxgru.gru_stack if kind == "GRU" else jaxgru.lstm_stack
    got = stack(layers, x.numpy(), **kw, **options)
    got = (_torch_y(got[0], layout), *(_states(s, layout) for s in got[1:]))
    chex.assert_trees_all_close(got, tuple(t.numpy() for t in want), **TOL)


def test_gru_cell_parity():
    torch.manual_seed(1)
    cell = torch.nn.GRUCell(IN, H)
    x, h = torch.randn(N, IN), torch.randn(N, H)
    with torch.no_grad():
        want = cell(x, h).numpy()
    layers, options = from_torch(cell)
    assert options == {"linear_before_reset": True}
    chex.assert_trees_all_close(jaxgru.gru_cell(layers[0], x.numpy(), h.numpy(), **options), want, **TOL)


def test_lstm_cell_parity():
    torch.manual_seed(2)
    cell = torch.nn.LSTMCell(IN, H, bias=False)
    x, h, c = torch.randn(N, IN), torch.randn(N, H), torch.randn(N, H)
    with torch.no_grad():
        want = tuple(t.numpy() for t in cell(x, (h, c)))
    layers, options = from_torch(cell)
    assert options == {} and layers[0].b is None
    got = jaxgru.lstm_cell(layers[0], x.numpy(), h.numpy(), c.numpy(), **options)
    chex.assert_trees_all_close(got, want, **TOL)


@pytest.mark.parametrize("kind", ["GRU", "LSTM", "GRUCell", "LSTMCell"])
def test_round_trip_from_torch_is_exact(kind):
    torch.manual_seed(3)
    if kind.endswith("Cell"):
        module = getattr(torch.nn, kind)(IN, H)
        target = getattr(torch.nn, kind)(IN, H)
    else:
        module = getattr(torch.nn, kind)(IN, H, num_layers=2, bidirectional=True, batch_first=True)
        target = None
    back = to_torch(*from_torch(module), module=target)
    want, got = module.state_dict(), back.state_dict()
    assert want.keys() == got.keys()
    for k in want:
        assert torch.equal(want[k], got[k]), k


@pytest.mark.parametrize("bias", [True, False])
def test_round_trip_to_torch_is_exact_and_runs_like_jaxgru(bias):
    rng = np.random.default_rng(0)
    layers = [_random_layer(rng, "lstm", IN, 2), _random_layer(rng, "lstm", 2 * H, 2)]
    if not bias:
        layers = [p._replace(b=None) for p in layers]
    options = {"direction": "bidirectional", "layout": 1}
    module = to_torch(layers, options)
    assert isinstance(module, torch.nn.LSTM) and module.num_layers == 2 and module.bias == bias
    back, back_options = from_torch(module)
    chex.assert_trees_all_equal(back, layers)
    assert back_options == options
    x = rng.standard_normal((N, L, IN)).astype(np.float32)
    with torch.no_grad():
        out, (h_n, c_n) = module(torch.from_numpy(x))
    y, y_h, y_c = jaxgru.lstm_stack(layers, x, **options)
    chex.assert_trees_all_close((_torch_y(y, 1), _states(y_h, 1), _states(y_c, 1)),
                                (out.numpy(), h_n.numpy(), c_n.numpy()), **TOL)


def test_to_torch_writes_into_a_given_module():
    layers = [_random_layer(np.random.default_rng(1), "gru", IN)]
    module = torch.nn.GRU(IN, H, batch_first=True)
    assert to_torch(layers, {"linear_before_reset": True, "layout": 1}, module=module) is module
    chex.assert_trees_all_equal(from_torch(module)[0], layers)


def test_jax_arrays_go_to_torch_as_copies():
    """A JAX array's numpy view is read-only: the tensor made from it must not share its memory
    (torch.from_numpy would, writable, and warn that writing to it is undefined behaviour)."""
    a = jnp.arange(12.0).reshape(3, 4)
    view = np.asarray(a)
    assert not view.flags.writeable
    t = _torch._numpy_to_torch(view)
    assert t.data_ptr() != view.ctypes.data
    t.add_(1.0)
    chex.assert_trees_all_equal(np.asarray(a), np.arange(12.0, dtype=np.float32).reshape(3, 4))


def test_bfloat16_keeps_dtype():
    module = torch.nn.GRU(IN, H).to(torch.bfloat16)
    layers, _ = from_torch(module)
    assert layers[0].w.dtype == jax.numpy.bfloat16
    back = to_torch(*from_torch(module))
    assert back.weight_ih_l0.dtype == torch.bfloat16
    assert torch.equal(back.weight_hh_l0, module.weight_hh_l0)


def test_errors():
    # (nn.LSTM(proj_size=P) converts: tests/test_projection.py)
    with pytest.raises(TypeError, match=r"module must be a torch\.nn\.GRU"):
        from_torch(torch.nn.RNN(IN, H))
    rng = np.random.default_rng(2)
    gru, lstm = [_random_layer(rng, "gru", IN)], [_random_layer(rng, "lstm", IN)]
    bad = {
        "fixes linear_before_reset=True": (gru, {}),
        "default activations": (gru, {"linear_before_reset": True,
                                      "activations": ["HardSigmoid", "Tanh"]}),
        "no cell clip": (lstm, {"clip": 3.0}),
        r"fixes input_forget=False \(couple the forget gate": (lstm, {"input_forget": True}),
        r"direction'\] must be one of": (lstm, {"direction": "reverse"}),
        "has no PyTorch": (lstm, {"linear_before_reset": True}),
    }
    for message, (layers, options) in bad.items():
        with pytest.raises(ValueError, match=message):
            to_torch(layers, options)
    peep = [lstm[0]._replace(p=np.ones((1, 3 * H), np.float32))]
    with pytest.raises(ValueError, match="peephole"):
        to_torch(peep, {})
    with pytest.raises(ValueError, match=r"module\.hidden_size must be 5"):
        to_torch(lstm, {}, module=torch.nn.LSTM(IN, H + 1))
    with pytest.raises(ValueError, match=r"module\.batch_first must be True"):
        to_torch(lstm, {"layout": 1}, module=torch.nn.LSTM(IN, H))
    with pytest.raises(TypeError, match=r"torch\.nn\.GRU or GRUCell"):
        to_torch(gru, {"linear_before_reset": True}, module=torch.nn.LSTM(IN, H))
    with pytest.raises(ValueError, match="bias=False"):
        to_torch(lstm, {}, module=torch.nn.LSTM(IN, H, bias=False))
    with pytest.raises(TypeError, match="non-empty list"):
        to_torch(gru[0], {"linear_before_reset": True})
