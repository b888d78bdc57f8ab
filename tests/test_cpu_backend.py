"""The native CPU lowering (``backend="cpu"``, csrc/ through the XLA FFI): every ONNX feature
against onnxruntime and the xla reference, every instruction set's kernels, the thread counts,
autodiff, vmap, jit, concurrent calls, the backend choice and the fallbacks."""

from __future__ import annotations

import pathlib
import re
import threading

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from oracles import ort_run, random_case

import jaxgru
from jaxgru._src import activations, backends, native

pytestmark = pytest.mark.skipif(not native.available(), reason="the native CPU extension is not built")
ROOT = pathlib.Path(__file__).resolve().parents[1]


def _outs(case, layout=0, **kw):
    outs = case.run(layout, **kw)
    if layout == 1:
        outs = [np.transpose(outs[0], (1, 2, 0, 3))] + [np.swapaxes(o, 0, 1) for o in outs[1:]]
    return [np.asarray(o, np.float32) for o in outs]


def _check(case, layout=0, atol=2e-5, ort=True):
    got = _outs(case, layout, backend="cpu")
    want = _outs(case, layout, backend="xla")
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, atol=atol, rtol=1e-5)
    if ort:
        for g, w in zip(got, ort_run(case), strict=True):
            np.testing.assert_allclose(g, w, atol=atol, rtol=1e-5)
    return got


def test_activation_ids_match_the_python_table():
    """layer.h lists the activations in the order of activations.NAMES (Activation.kind_id)."""
    header = (ROOT / "csrc" / "layer.h").read_text()
    listed = re.search(r"// ACTIVATIONS: (.*)", header).group(1).split()
    assert tuple(listed) == activations.NAMES
    enum = re.search(r"enum Act : int32_t \{(.*?)\};", header, re.S).group(1)
    ids = [e.strip().split("=")[0].strip() for e in enum.split(",")]
    assert ids == ["k" + n for n in activations.NAMES] + ["kNumActs"]


FEATURES = [
    ("gru", {}),
    ("gru", {"linear_before_reset": 1}),
    ("gru", {"direction": "reverse", "h0": True}),
    ("gru", {"direction": "bidirectional", "linear_before_reset": 1, "lens": [5, 0, 3]}),
    ("gru", {"direction": "reverse", "lens": [2, 5, 1], "clip": 0.7}),
    ("gru", {"activations": ["HardSigmoid", "Elu"], "activation_alpha": [0.3, 0.8],
             "activation_beta": [0.4]}),
    ("lstm", {}),
    ("lstm", {"peep": True, "h0": True, "c0": True}),
    ("lstm", {"input_forget": 1, "peep": True, "lens": [3, 5, 0]}),
    ("lstm", {"direction": "bidirectional", "clip": 1.5, "c0": True, "lens": [1, 4, 5]}),
    ("lstm", {"direction": "reverse", "activations": ["Sigmoid", "Softsign", "ScaledTanh"],
              "activation_alpha": [1.2], "activation_beta": [0.7]}),
]


@pytest.mark.parametrize(("cell", "opts"), FEATURES, ids=[f"{c}-{i}" for i, (c, _) in enumerate(FEATURES)])
@pytest.mark.parametrize("layout", [0, 1])
def test_features_match_onnxruntime_and_xla(cell, opts, layout):
    opts = dict(opts)
    kw = {k: opts.pop(k) for k in ("h0", "c0", "peep", "lens", "direction") if k in opts}
    case = random_case(np.random.default_rng(0), cell, L=5, N=3, I=4, H=6, **kw, **opts)
    if case.lens is not None and (case.lens == 0).any():
        # onnxruntime gives zero final states for length 0; jaxgru keeps the initial state
        # (docs/semantics.md): compare those rows with xla only
        _check(case, layout, ort=False)
        keep = case.lens > 0
        got = _outs(case, 0, backend="cpu")
        want = ort_run(case)
        np.testing.assert_allclose(got[0], want[0], atol=2e-5)
        for g, w in zip(got[1:], want[1:]):
            np.testing.assert_allclose(g[:, keep], w[:, keep], atol=2e-5)
    else:
        _check(case, layout)


@pytest.mark.parametrize("name", activations.NAMES)
def test_every_activation(name):
    kind = activations.lookup(name)
    acts = [name, "Tanh"] if name != "Softplus" else ["Sigmoid", name]
    ab = {"activation_alpha": [0.6]} if kind.takes_alpha else {}
    if kind.takes_beta:
        ab["activation_beta"] = [0.3]
    case = random_case(np.random.default_rng(1), "gru", L=4, N=2, I=3, H=5, activations=acts, **ab)
    # onnxruntime's Softplus is log(1 + e^x) (fine at these values); the rest are exact forms
    _check(case)


@pytest.mark.parametrize("isa", ["avx512", "avx2", "generic"])
@pytest.mark.parametrize("cell", ["gru", "lstm"])
@pytest.mark.parametrize("lbr", [0, 1])
def test_every_isa_and_tile_tail(monkeypatch, isa, cell, lbr):
    """Each instruction set's kernels (capped by JAXGRU_CPU_ISA), with H not a multiple of the
    16-unit block, batch rows beyond one tile and ragged lengths: all agree with xla."""
    if cell == "lstm" and lbr:
        pytest.skip("no linear_before_reset for LSTM")
    monkeypatch.setenv(native.ISA_ENV, isa)
    opts = {"linear_before_reset": lbr} if cell == "gru" else {"peep": True}
    case = random_case(np.random.default_rng(2), cell, L=6, N=11, I=9, H=35, direction="bidirectional",
                       lens=[6, 1, 0, 3, 6, 2, 5, 6, 4, 6, 1], h0=True, **opts)
    want = _outs(case, backend="xla")
    jax.clear_caches()  # the ISA is read when a call is lowered
    got = _outs(case, backend="cpu")
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, atol=2e-5, rtol=1e-5)


BATCH1 = [("gru", {"linear_before_reset": 0}), ("gru", {"linear_before_reset": 1, "direction": "reverse"}),
          ("lstm", {"peep": True, "direction": "bidirectional"}), ("lstm", {"clip": 0.9, "c0": True})]


@pytest.mark.parametrize("isa", ["avx512", "avx2", "generic"])
@pytest.mark.parametrize(("cell", "opts"), BATCH1, ids=[f"{c}-{i}" for i, (c, _) in enumerate(BATCH1)])
def test_batch_one_reads_r_rows(monkeypatch, isa, cell, opts):
    """Batch 1 with H a multiple of 16 (H = 48, three blocks): the steps read R's rows, not its
    panels (GRU lbr=0 in both phases; the default activations and a clip): agrees with
    onnxruntime and xla on each instruction set."""
    monkeypatch.setenv(native.ISA_ENV, isa)
    opts = dict(opts)
    kw = {k: opts.pop(k) for k in ("c0", "peep", "direction") if k in opts}
    case = random_case(np.random.default_rng(7), cell, L=5, N=1, I=20, H=48, h0=True, **kw, **opts)
    jax.clear_caches()
    _check(case)


def test_isa_report_and_cap():
    mod, _ = native._module()
    best = mod.isa(0)
    assert best in ("avx512", "avx2", "generic")
    assert mod.isa(3) == "generic"
    assert native.status()["available"] and native.status()["isa"] == best


@pytest.mark.parametrize("threads", ["1", "2", "5"])
def test_thread_counts_agree(monkeypatch, threads):
    """Work split over 1, 2 and 5 threads (more than this machine's pool: the surplus steal)."""
    monkeypatch.setenv(native.THREADS_ENV, threads)
    case = random_case(np.random.default_rng(3), "lstm", L=7, N=16, I=8, H=64, direction="bidirectional",
                       peep=True)
    jax.clear_caches()
    _check(case, ort=False)


def test_bad_environment_values_are_named(monkeypatch):
    params = jaxgru.init_gru(jax.random.key(0), 3, 4)
    monkeypatch.setenv(native.ISA_ENV, "sse9")
    with pytest.raises(ValueError, match="JAXGRU_CPU_ISA"):
        jax.jit(lambda p, x: jaxgru.gru(p, x, backend="cpu"))(params, jnp.ones((2, 1, 3)))
    monkeypatch.setenv(native.ISA_ENV, "generic")
    monkeypatch.setenv(native.THREADS_ENV, "zero")
    with pytest.raises(ValueError, match="JAXGRU_CPU_THREADS"):
        jax.jit(lambda p, x: jaxgru.gru(p, x, backend="cpu"))(params, jnp.ones((2, 1, 3)))


@pytest.mark.parametrize("dtype", [jnp.float16, jnp.bfloat16])
def test_half_precision_storage_computes_in_float32(dtype):
    case = random_case(np.random.default_rng(4), "gru", L=5, N=2, I=3, H=7, linear_before_reset=1)
    for name in ("x", "w", "r", "b"):
        setattr(case, name, np.asarray(jnp.asarray(getattr(case, name), dtype)))
    got = case.run(0, backend="cpu")
    want = case.run(0, backend="xla")
    for g, w in zip(got, want):
        assert g.dtype == dtype
        np.testing.assert_allclose(np.float32(g), np.float32(w), atol=2e-2)


def test_float64_falls_back_to_xla(jax_x64):
    params = jaxgru.init_gru(jax.random.key(0), 3, 4, dtype=jnp.float64)
    x = jnp.ones((5, 2, 3), jnp.float64)
    jaxpr = jax.make_jaxpr(lambda p, x: jaxgru.gru(p, x, backend="cpu"))(params, x)
    assert next(e.params["cfg"].backend for e in jaxpr.eqns if e.primitive.name == "jaxgru_gru") == "xla"
    np.testing.assert_allclose(jaxgru.gru(params, x, backend="cpu")[0], jaxgru.gru(params, x, backend="xla")[0])


def _hlo(fn, *args):
    return jax.jit(fn).lower(*args).as_text()


def test_lowers_to_one_ffi_call_per_layer_and_exports_as_xla():
    params = jaxgru.init_lstm(jax.random.key(0), 3, 4, bidirectional=True)
    x = jnp.ones((5, 2, 3))
    f = lambda p, x: jaxgru.lstm(p, x, direction="bidirectional", backend="cpu")
    assert _hlo(f, params, x).count("jaxgru_lstm_forward") == 1
    exported = jax.export.export(jax.jit(f))(params, x)
    assert "jaxgru_lstm_forward" not in exported.mlir_module()
    np.testing.assert_allclose(exported.call(params, x)[0], f(params, x)[0], atol=1e-6)


GRAD_CASES = [
    ("gru", {"linear_before_reset": 0, "clip": 2.0}),
    ("gru", {"linear_before_reset": 1, "activations": ["HardSigmoid", "Softsign"] * 2,
             "activation_alpha": [0.3, 0.25], "activation_beta": [0.45, 0.5]}),
    ("lstm", {"peep": True, "clip": 2.0}),
    ("lstm", {"peep": True, "input_forget": 1, "activations": ["Sigmoid", "Elu", "Softplus"] * 2,
              "activation_alpha": [0.9, 1.1]}),
]


@pytest.mark.parametrize(("cell", "opts"), GRAD_CASES, ids=[f"{c}-{i}" for i, (c, _) in enumerate(GRAD_CASES)])
@pytest.mark.parametrize("isa", ["best", "generic"])
def test_gradients_match_xla(monkeypatch, cell, opts, isa):
    """grad through the native forward and the native backward recurrence equals grad on xla,
    for every float operand (bidirectional, ragged with a length 0, initial states)."""
    monkeypatch.setenv(native.ISA_ENV, isa)
    opts = dict(opts)
    case = random_case(np.random.default_rng(5), cell, L=5, N=4, I=4, H=18, direction="bidirectional",
                       h0=True, c0=cell == "lstm", lens=[5, 2, 0, 4], **opts)
    fn = jaxgru.gru if cell == "gru" else jaxgru.lstm
    kw = case.kwargs(0)
    states = {k: kw.pop(k) for k in ("initial_h", "initial_c") if k in kw}

    def loss(backend):
        def f(params, x, states):
            outs = fn(params, x, **kw, **states, backend=backend)
            return sum(jnp.sum(jnp.sin(o)) for o in outs)
        return jax.jit(jax.grad(f, argnums=(0, 1, 2)))

    jax.clear_caches()
    hlo = loss("cpu").lower(case.params, case.x, states).as_text()
    assert f"jaxgru_{cell}_forward" in hlo and f"jaxgru_{cell}_backward" in hlo
    got = loss("cpu")(case.params, case.x, states)
    want = loss("xla")(case.params, case.x, states)
    chex.assert_trees_all_close(got, want, atol=5e-5, rtol=1e-4)
    jvp = jax.jvp(lambda x: fn(case.params, x, **kw, **states, backend="cpu")[0], (case.x,), (case.x,))[1]
    jvp_x = jax.jvp(lambda x: fn(case.params, x, **kw, **states, backend="xla")[0], (case.x,), (case.x,))[1]
    np.testing.assert_allclose(jvp, jvp_x, atol=5e-5, rtol=1e-4)


def test_layout1_gradients_match_xla():
    case = random_case(np.random.default_rng(6), "gru", L=4, N=3, I=3, H=5, linear_before_reset=1, h0=True)
    x1 = np.swapaxes(case.x, 0, 1)
    kw = case.kwargs(1)

    def g(backend):
        return jax.grad(lambda p, x: jnp.sum(jnp.sin(jaxgru.gru(p, x, **kw, backend=backend)[0])), argnums=(0, 1))

    chex.assert_trees_all_close(g("cpu")(case.params, x1), g("xla")(case.params, x1), atol=5e-5, rtol=1e-4)


def test_vmap_over_inputs_and_over_weights():
    params = jaxgru.init_gru(jax.random.key(0), 3, 5)
    xs = jax.random.normal(jax.random.key(1), (4, 6, 2, 3))
    f = lambda backend: jax.jit(jax.vmap(lambda x: jaxgru.gru(params, x, backend=backend)))
    chex.assert_trees_all_close(f("cpu")(xs), f("xla")(xs), atol=2e-6)
    stacked = jax.tree.map(lambda *a: jnp.stack(a), params, jaxgru.init_gru(jax.random.key(2), 3, 5))
    g = lambda backend: jax.vmap(lambda p: jaxgru.gru(p, xs[0], backend=backend))
    chex.assert_trees_all_close(g("cpu")(stacked), g("xla")(stacked), atol=2e-6)


def test_concurrent_calls_from_eight_threads():
    """No state shared between calls: 8 Python threads running one jitted layer at once."""
    params = jaxgru.init_lstm(jax.random.key(0), 8, 32, bidirectional=True)
    f = jax.jit(lambda p, x: jaxgru.lstm(p, x, direction="bidirectional", backend="cpu"))
    xs = [jax.random.normal(jax.random.key(i), (9, 4, 8)) for i in range(8)]
    want = [jaxgru.lstm(params, x, direction="bidirectional", backend="xla") for x in xs]
    f(params, xs[0])  # compile once
    got: list = [None] * 8
    errors: list = []

    def work(i):
        try:
            for _ in range(5):
                got[i] = jax.block_until_ready(f(params, xs[i]))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for g, w in zip(got, want):
        chex.assert_trees_all_close(g, w, atol=2e-5)


def test_auto_picks_cpu_where_built(monkeypatch):
    monkeypatch.delenv(backends.ENV, raising=False)
    monkeypatch.setattr(backends.jax, "default_backend", lambda: "cpu")
    monkeypatch.setattr(backends, "gpu_device_node", lambda: None)
    assert backends.automatic()[0] == "cpu"
    monkeypatch.setattr(native, "available", lambda: False)
    choice, reason = backends.automatic()
    assert choice == "xla" and "not built" in reason


def test_explicit_cpu_without_the_extension_says_so(monkeypatch):
    monkeypatch.setattr(native, "available", lambda: False)
    params = jaxgru.init_gru(jax.random.key(0), 3, 4)
    with pytest.raises(backends.NativeUnavailableError, match="backend='cpu'"):
        jaxgru.gru(params, jnp.ones((2, 1, 3)), backend="cpu")


def test_backend_info_reports_the_native_lowering():
    info = jaxgru.backend_info()
    assert info["cpu_native"]["available"] and info["cpu_native"]["isa"] in ("avx512", "avx2", "generic")
