"""``recurrent_dtype="float16"``: R (and an LSTM's proj) rounded to float16, on every backend.

Oracles: the xla reference (itself checked against onnxruntime, PyTorch and numerical
gradients elsewhere) run on weights rounded by numpy, PyTorch modules and onnxruntime sessions
built from numpy-rounded weights. The wgsl backend is also checked to keep R's device copy in
f16 (its pipelines are built for the "f32+r16" module).
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import wgsl_support
from backend_cases import BACKENDS

import jaxgru
from jaxgru._src.webgpu import runtime

L, N, IN, H, P = 5, 3, 4, 6, 3
TOL = {"atol": 2e-6, "rtol": 2e-6}


def _f16(a):
    """numpy's float16 rounding of a float32 array, back in float32 (the oracle's weights)."""
    return jnp.asarray(np.asarray(a).astype(np.float16).astype(np.float32))


def _params(cell: str, *, bidirectional=False, proj_size=0, seed=0):
    key = jax.random.key(seed)
    if cell == "gru":
        return jaxgru.init_gru(key, IN, H, bidirectional=bidirectional)
    return jaxgru.init_lstm(key, IN, H, bidirectional=bidirectional, proj_size=proj_size)


def _rounded(params):
    """The oracle's weights: R (and proj) rounded by numpy."""
    fields = {"r": _f16(params.r)}
    if getattr(params, "proj", None) is not None:
        fields["proj"] = _f16(params.proj)
    return params._replace(**fields)


def _layer(cell: str):
    return jaxgru.gru if cell == "gru" else jaxgru.lstm


def _x(seed=1):
    return jax.random.normal(jax.random.key(seed), (L, N, IN))


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("cell,options,proj_size", [
    ("gru", {}, 0),
    ("gru", {"linear_before_reset": True, "direction": "bidirectional"}, 0),
    ("lstm", {}, 0),
    ("lstm", {"direction": "bidirectional"}, P),
])
def test_outputs_and_gradients_are_those_of_the_rounded_weights(backend, cell, options, proj_size):
    params = _params(cell, bidirectional=options.get("direction") == "bidirectional", proj_size=proj_size)
    x, lens = _x(), jnp.array([L, 2, 0], jnp.int32)
    layer = _layer(cell)

    def loss(p, x, be, rd):
        outs = layer(p, x, sequence_lens=lens, backend=be, recurrent_dtype=rd, **options)
        return sum(jnp.sum(jnp.sin(o)) for o in outs), outs

    grad = jax.jit(jax.value_and_grad(loss, argnums=(0, 1), has_aux=True), static_argnums=(2, 3))
    (_, got), grads = grad(params, x, backend, "float16")
    (_, want), want_grads = grad(_rounded(params), x, "xla", None)
    chex.assert_trees_all_close(got, want, **TOL)
    # straight through the rounding: d/dR is the gradient at the rounded R, given for R
    chex.assert_trees_all_close(grads, want_grads, atol=2e-5, rtol=2e-5)
    # and the rounding is real: the unrounded layer differs beyond the tolerance
    plain = layer(params, x, sequence_lens=lens, backend="xla", **options)
    assert max(float(jnp.max(jnp.abs(a - b))) for a, b in zip(plain, want)) > 1e-5


@pytest.mark.wgsl
def test_wgsl_keeps_r_in_float16_on_the_device():
    rt = wgsl_support.require_adapter() and runtime.runtime()
    if not rt.has_f16:
        pytest.skip("the adapter has no shader-f16")
    params, x = _params("gru"), _x()
    before = set(rt._pipelines)
    y, _ = jax.jit(lambda p, x: jaxgru.gru(p, x, recurrent_dtype="float16", backend="wgsl"))(params, x)
    new = set(rt._pipelines) - before
    # the recurrence's module reads R as f16 (the input projection reads W, in f32)
    assert {storage for kernel, _, storage, _ in new if kernel == "gru"} == {"f32+r16"}
    chex.assert_trees_all_close(y, jaxgru.gru(_rounded(params), x, backend="xla")[0], **TOL)


def test_float16_calls_are_unchanged_and_other_dtypes_refused():
    params, x = _params("gru"), _x()
    half = jax.tree.map(lambda a: a.astype(jnp.float16), params)
    chex.assert_trees_all_close(jaxgru.gru(half, x.astype(jnp.float16), recurrent_dtype="float16", backend="xla"),
                                jaxgru.gru(half, x.astype(jnp.float16), backend="xla"))
    bf16 = jax.tree.map(lambda a: a.astype(jnp.bfloat16), params)
    with pytest.raises(ValueError, match=r"recurrent_dtype='float16' applies to float32 calls.*got bfloat16"):
        jaxgru.gru(bf16, x.astype(jnp.bfloat16), recurrent_dtype="float16")
    with pytest.raises(ValueError, match=r"recurrent_dtype must be None or one of \('float16',\); got 'f16'"):
        jaxgru.gru(params, x, recurrent_dtype="f16")
    # a dtype object names the same choice
    chex.assert_trees_all_close(jaxgru.gru(params, x, recurrent_dtype=jnp.float16, backend="xla"),
                                jaxgru.gru(params, x, recurrent_dtype="float16", backend="xla"))


def test_cells_stacks_and_transforms():  # (a name with 'vmap.' in it confuses chex.assert_max_traces)
    params, x = _params("lstm"), _x()
    rounded = _rounded(params)
    h, c = jnp.zeros((N, H)), jnp.zeros((N, H))
    chex.assert_trees_all_close(jaxgru.lstm_cell(params, x[0], h, c, recurrent_dtype="float16", backend="xla"),
                                jaxgru.lstm_cell(rounded, x[0], h, c, backend="xla"), **TOL)
    layers = [params, _params("lstm", seed=3)._replace(w=jnp.ones((1, 4 * H, H)) * 0.1)]
    chex.assert_trees_all_close(
        jaxgru.lstm_stack(layers, x, recurrent_dtype="float16", backend="xla"),
        jaxgru.lstm_stack([_rounded(p) for p in layers], x, backend="xla"), **TOL)

    run = jax.jit(chex.assert_max_traces(lambda p, x: jaxgru.lstm(p, x, recurrent_dtype="float16", backend="xla")[0],
                                         n=1))

    for k in range(2):
        chex.assert_trees_all_close(run(params, x + k), jaxgru.lstm(rounded, x + k, backend="xla")[0], **TOL)
    batched = jax.vmap(lambda x: run(params, x))(jnp.stack([x, 2 * x]))
    chex.assert_trees_all_close(batched[1], jaxgru.lstm(rounded, 2 * x, backend="xla")[0], **TOL)


def test_modules_pass_it_on():
    import jaxgru.equinox
    import jaxgru.flax

    x = _x()
    gru, lstm = _params("gru"), _params("lstm")
    module = jaxgru.flax.GRU.from_params([gru], recurrent_dtype="float16", backend="xla")
    chex.assert_trees_all_close(module(x), jaxgru.gru_stack([_rounded(gru)], x, backend="xla"), **TOL)
    eqx_module = jaxgru.equinox.LSTM.from_params([lstm], recurrent_dtype="float16", backend="xla")
    y, (h, c) = eqx_module(x)
    want = jaxgru.lstm_stack([_rounded(lstm)], x, backend="xla")
    chex.assert_trees_all_close((y, h, c), want, **TOL)


def test_exported_onnx_and_torch_compute_the_rounded_layer():
    onnxruntime = pytest.importorskip("onnxruntime")
    torch = pytest.importorskip("torch")
    from jaxgru.interop import to_onnx, to_torch

    params = _params("gru")
    params = params._replace(r=params.r * 3)  # larger weights: the rounding shows
    x = np.asarray(_x())
    want = jaxgru.gru(_rounded(params), x, linear_before_reset=True, backend="xla")
    options = {"linear_before_reset": True, "recurrent_dtype": "float16"}
    model = to_onnx([params], options)
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    y, y_h = session.run(None, {"X": x})
    np.testing.assert_allclose(y, want[0], atol=2e-6, rtol=2e-6)
    np.testing.assert_allclose(y_h, want[1], atol=2e-6, rtol=2e-6)
    module = to_torch([params], options)
    with torch.no_grad():
        ty, th = module(torch.from_numpy(x.copy()))
    np.testing.assert_allclose(ty.numpy(), np.asarray(want[0])[:, 0], atol=2e-6, rtol=2e-6)
    np.testing.assert_allclose(th.numpy(), np.asarray(want[1]), atol=2e-6, rtol=2e-6)


def test_jax2onnx_export_carries_the_rounding():
    pytest.importorskip("jax2onnx")
    onnxruntime = pytest.importorskip("onnxruntime")
    import jax2onnx

    from jaxgru.interop import register_jax2onnx

    register_jax2onnx()
    params = _params("gru")
    params = params._replace(r=params.r * 3)
    x = np.asarray(_x())
    model = jax2onnx.to_onnx(lambda x: jaxgru.gru(params, x, recurrent_dtype="float16", backend="xla")[0],
                             [x.shape])
    assert {"Cast", "GRU"} <= {n.op_type for n in model.graph.node}
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (y,) = session.run(None, {session.get_inputs()[0].name: x})
    np.testing.assert_allclose(y, jaxgru.gru(_rounded(params), x, backend="xla")[0], atol=2e-6, rtol=2e-6)
