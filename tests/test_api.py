"""Public API: initialisers, pytrees, dtypes, cells, stacks and the documented decisions."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from oracles import ort_run, random_case

import jaxgru


# --------------------------------------------------------------------------------------
# initialisers and pytrees
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize(("init", "gates"), [(jaxgru.init_gru, 3), (jaxgru.init_lstm, 4)])
@pytest.mark.parametrize("bidirectional", [False, True])
def test_init_shapes_and_pytorch_distribution(init, gates, bidirectional):
    hidden, isize = 64, 48
    params = init(jax.random.key(0), isize, hidden, bidirectional=bidirectional)
    d = 2 if bidirectional else 1
    chex.assert_shape(params.w, (d, gates * hidden, isize))
    chex.assert_shape(params.r, (d, gates * hidden, hidden))
    chex.assert_shape(params.b, (d, 2 * gates * hidden))
    bound = 1 / np.sqrt(hidden)
    for a in (params.w, params.r, params.b):
        a = np.asarray(a)
        assert a.dtype == np.float32
        assert np.abs(a).max() <= bound
        # U(-k, k): mean 0, variance k^2 / 3 (loose statistical bounds, n >= 6000)
        assert abs(a.mean()) < 0.05 * bound
        assert abs(a.var() / (bound**2 / 3) - 1) < 0.1
    if gates == 4:
        assert params.p is None


def test_init_is_seeded_and_dtype():
    a = jaxgru.init_gru(jax.random.key(3), 4, 5, dtype=jnp.bfloat16)
    b = jaxgru.init_gru(jax.random.key(3), 4, 5, dtype=jnp.bfloat16)
    chex.assert_trees_all_equal(a, b)
    assert a.w.dtype == jnp.bfloat16


def test_params_are_pytrees_with_optional_leaves():
    p = jaxgru.GRUParams(jnp.ones((1, 6, 3)), jnp.ones((1, 6, 2)))
    assert len(jax.tree.leaves(p)) == 2  # absent b is no leaf
    q = jax.tree.map(lambda a: a * 2, jaxgru.LSTMParams(*jaxgru.init_lstm(jax.random.key(0), 3, 2)))
    assert isinstance(q, jaxgru.LSTMParams) and q.p is None
    out = jax.jit(lambda p: p.w.sum())(p)
    assert float(out) == 18.0


# --------------------------------------------------------------------------------------
# dtypes
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [jnp.float16, jnp.bfloat16])
@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_half_precision_computes_in_float32(cell, dtype):
    rng = np.random.default_rng(11)
    case = random_case(rng, cell, h0=True, lens=[5, 3, 1], peep=cell == "lstm")
    # Round the inputs to the half dtype, then the float32 oracle sees the same values.
    rounded = {k: (None if v is None else np.asarray(jnp.asarray(v, dtype).astype(jnp.float32)))
               for k, v in vars(case).items() if isinstance(v, np.ndarray) and v.dtype == np.float32}
    for k, v in rounded.items():
        setattr(case, k, v)
    ref = ort_run(case)
    half = {k: jnp.asarray(v, dtype) for k, v in rounded.items()}
    for k, v in half.items():
        setattr(case, k, v)
    outs = case.run()
    for got, want in zip(outs, ref):
        assert got.dtype == dtype
        # the only error is the final rounding to the half dtype
        eps = float(jnp.finfo(dtype).eps)
        np.testing.assert_allclose(np.asarray(got.astype(jnp.float32)), want, rtol=eps, atol=eps)


def test_mixed_dtypes_promote_and_return_x_dtype():
    rng = np.random.default_rng(2)
    case = random_case(rng, "gru")
    x16 = jnp.asarray(case.x, jnp.float16)
    y, h = jaxgru.gru(case.params, x16)
    assert y.dtype == h.dtype == jnp.float16
    case.x = np.asarray(x16.astype(jnp.float32))
    ref = ort_run(case)
    np.testing.assert_allclose(np.asarray(y, np.float32), ref[0], atol=2e-3, rtol=2e-3)


def test_float64(jax_x64):
    from onnx.backend.test.case.node.gru import GRUHelper
    from onnx.backend.test.case.node.lstm import LSTMHelper

    rng = np.random.default_rng(5)
    case = random_case(rng, "gru", dtype=np.float64, H=7, h0=True)
    y, h = jaxgru.gru(case.params, case.x, initial_h=case.h0)
    assert y.dtype == h.dtype == jnp.float64
    ref_y, ref_h = GRUHelper(X=case.x, W=case.w, R=case.r, B=case.b, initial_h=case.h0).step()
    np.testing.assert_allclose(np.asarray(y)[:, 0], ref_y[:, 0], rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(np.asarray(h), ref_h, rtol=1e-12, atol=1e-13)
    case = random_case(rng, "lstm", dtype=np.float64, H=5, peep=True)
    y, h, c = jaxgru.lstm(case.params, case.x)
    ref_y, ref_h, ref_c = LSTMHelper(X=case.x, W=case.w, R=case.r, B=case.b, P=case.p).step()[:3]
    assert y.dtype == c.dtype == jnp.float64
    np.testing.assert_allclose(np.asarray(y)[:, 0], ref_y[:, 0], rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(np.asarray(c), ref_c, rtol=1e-12, atol=1e-13)


# --------------------------------------------------------------------------------------
# documented decisions
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_length_zero_keeps_the_initial_state(direction):
    """Unlike onnxruntime (zeros), Y_h/Y_c of an empty sequence is the initial state."""
    rng = np.random.default_rng(0)
    case = random_case(rng, "lstm", direction=direction, h0=True, c0=True, lens=[0, 5, 0])
    y, h, c = case.run()
    np.testing.assert_array_equal(np.asarray(h)[:, [0, 2]], case.h0[:, [0, 2]])
    np.testing.assert_array_equal(np.asarray(c)[:, [0, 2]], case.c0[:, [0, 2]])
    np.testing.assert_array_equal(np.asarray(y)[:, :, [0, 2]], 0)


def test_absent_bias_and_state_are_zeros():
    rng = np.random.default_rng(1)
    case = random_case(rng, "gru", bias=False)
    y0, h0 = case.run()
    d = case.w.shape[0]
    y1, h1 = jaxgru.gru(jaxgru.GRUParams(case.w, case.r, np.zeros((d, 36), np.float32)), case.x,
                        initial_h=np.zeros((1, 3, 6), np.float32))
    chex.assert_trees_all_equal((y0, h0), (y1, h1))


# --------------------------------------------------------------------------------------
# cells and stacks against onnxruntime
# --------------------------------------------------------------------------------------
def test_gru_cell_is_one_onnx_step():
    rng = np.random.default_rng(4)
    case = random_case(rng, "gru", L=1, h0=True, linear_before_reset=1, clip=0.9)
    h = jaxgru.gru_cell(case.params, case.x[0], case.h0[0], linear_before_reset=True, clip=0.9)
    np.testing.assert_allclose(np.asarray(h), ort_run(case)[1][0], rtol=1e-5, atol=1e-6)


def test_lstm_cell_is_one_onnx_step():
    rng = np.random.default_rng(5)
    case = random_case(rng, "lstm", L=1, h0=True, c0=True, peep=True,
                       activations=["HardSigmoid", "Softsign", "Tanh"])
    h, c = jaxgru.lstm_cell(case.params, case.x[0], case.h0[0], case.c0[0],
                            activations=["HardSigmoid", "Softsign", "Tanh"])
    ref = ort_run(case)
    np.testing.assert_allclose(np.asarray(h), ref[1][0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(c), ref[2][0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("cell", ["gru", "lstm"])
@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
@pytest.mark.parametrize("layout", [0, 1])
def test_stack_equals_chained_onnx_nodes(cell, direction, layout):
    rng = np.random.default_rng(9)
    d = 2 if direction == "bidirectional" else 1
    n_layers, hidden, lens = 3, 5, [5, 3, 0]
    cases, x = [], None
    h0 = rng.standard_normal((n_layers * d, 3, hidden)).astype(np.float32)
    c0 = rng.standard_normal((n_layers * d, 3, hidden)).astype(np.float32)
    for k in range(n_layers):
        case = random_case(rng, cell, I=4 if k == 0 else d * hidden, H=hidden, direction=direction,
                           lens=lens)
        if x is not None:
            case.x = x
        case.h0 = h0[k * d : (k + 1) * d]
        case.c0 = c0[k * d : (k + 1) * d] if cell == "lstm" else None
        ref = ort_run(case)
        cases.append((case, ref))
        x = np.transpose(ref[0], (0, 2, 1, 3)).reshape(5, 3, d * hidden)  # [L, N, D*H]
    layers = [c.params for c, _ in cases]
    x0 = cases[0][0].x
    st = (lambda s: s) if layout == 0 else (lambda s: np.swapaxes(s, 0, 1))
    kw = dict(direction=direction, layout=layout, sequence_lens=np.array(lens), initial_h=st(h0))
    if cell == "gru":
        y, h_n = jaxgru.gru_stack(layers, x0 if layout == 0 else np.swapaxes(x0, 0, 1), **kw)
        states = [h_n]
    else:
        y, h_n, c_n = jaxgru.lstm_stack(layers, x0 if layout == 0 else np.swapaxes(x0, 0, 1),
                                        initial_c=st(c0), **kw)
        states = [h_n, c_n]
    y = np.asarray(y) if layout == 0 else np.transpose(np.asarray(y), (1, 2, 0, 3))
    np.testing.assert_allclose(y, cases[-1][1][0], rtol=1e-4, atol=1e-5)
    for i, s in enumerate(states):
        s = np.asarray(st(s))
        for k, (_, ref) in enumerate(cases):
            want = ref[1 + i].copy()
            want[:, 2] = (h0 if i == 0 else c0)[k * d : (k + 1) * d, 2]  # length 0 keeps the state
            np.testing.assert_allclose(s[k * d : (k + 1) * d], want, rtol=1e-4, atol=1e-5)
