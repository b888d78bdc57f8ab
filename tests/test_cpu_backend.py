"""The native CPU lowering (``backend="cpu"``, csrc/ through the XLA FFI): every ONNX feature
against onnxruntime and the xla reference, every instruction set's kernels, the thread counts,
autodiff, vmap, jit, concurrent calls, the backend choice and the fallbacks."""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import re
import subprocess
import sys
import threading

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from native_build import CHECK, cmake_build
from oracles import ort_run, random_case

import jaxgru
from jaxgru._src import activations, backends, native
from jaxgru._src.options import make_config

pytestmark = pytest.mark.native
ROOT = pathlib.Path(__file__).resolve().parents[1]
# calls whose steps two threads share, probe or lead: a second thread in XLA's pool
needs_two_cpus = pytest.mark.skipif(
    len(os.sched_getaffinity(0)) < 2 if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1) < 2,
    reason="a second thread in XLA's pool")


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
    _check_ragged(case, layout)


def _check_ragged(case, layout=0):
    """_check, where onnxruntime gives zero final states for length 0 while jaxgru keeps the
    initial state (docs/semantics.md): those rows against xla only."""
    if case.lens is None or not (case.lens == 0).any():
        return _check(case, layout)
    _check(case, layout, ort=False)
    keep = case.lens > 0
    got = _outs(case, 0, backend="cpu")
    want = ort_run(case)
    np.testing.assert_allclose(got[0], want[0], atol=2e-5)
    for g, w in zip(got[1:], want[1:]):
        np.testing.assert_allclose(g[:, keep], w[:, keep], atol=2e-5)


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


def _saturating_lstm(x):
    """A one-step LSTM, I = 1, H = 16, whose cell state is exactly one activation of x:
    units 0-7 c = tanh(x) (i saturates to 1), units 8-15 c = sigmoid(x) (g = tanh saturates to 1);
    f saturates to 0 and o to 1, so Y_h = tanh(c). x is the pre-activation exactly (weight 1,
    bias 0). Returns Y_h and Y_c as float64 [N, 16]."""
    H = 16
    w = np.zeros((1, 4 * H, 1), np.float32)  # gates i, o, f, c
    b = np.zeros((1, 8 * H), np.float32)
    w[0, 3 * H : 3 * H + 8] = 1.0  # g's input: x
    b[0, 8:H] = 0.0
    w[0, 8:H] = 1.0  # i's input: x
    b[0, :8] = 20.0  # i = sigmoid(20) = 1 in float32
    b[0, 3 * H + 8 : 4 * H] = 20.0  # g = tanh(20) = 1
    b[0, H : 2 * H] = 20.0  # o = 1
    b[0, 2 * H : 3 * H] = -100.0  # f = 0
    params = jaxgru.LSTMParams(jnp.asarray(w), jnp.zeros((1, 4 * H, H), jnp.float32), jnp.asarray(b))
    return params, jnp.asarray(x, jnp.float32).reshape(1, -1, 1)


def _host_isas() -> list[str]:
    """The x86 kernel sets this processor runs: those the extension's cpuid check picks when
    capped at them (none where the extension is not built)."""
    mod, _ = native._module()
    return [] if mod is None else [isa for isa in ("avx512", "avx2") if mod.isa(native.ISAS.index(isa)) == isa]


def _use_isa(monkeypatch, isa: str) -> None:
    """Calls lowered from now on run the x86 kernel set `isa`; the test skips where this processor
    does not run it."""
    if isa not in _host_isas():
        pytest.skip(f"this processor has no {isa}")
    monkeypatch.setenv(native.ISA_ENV, isa)


@pytest.mark.parametrize("isa", ["generic", *_host_isas()])
def test_kernel_building_blocks_on_this_processor(tmp_path, isa):
    """tests/native/kernels_check.cc built for each instruction set this processor runs, with
    CMakeLists.txt's options and that set's flags: the register tiles at every row and gate count,
    on panels of one stream of all gates and of one stream per gate (AVX2's layout), packing,
    batch 1's product and the activations, against double-precision loops."""
    build = cmake_build()
    flags = [] if isa == "generic" else [f"-DJAXGRU_CHECK_{isa.upper()}", *build.x86_sources[f"kernels_{isa}.cc"]]
    exe = tmp_path / "kernels_check"
    out = subprocess.run([os.environ.get("CXX", "g++"), *build.options, *flags, str(CHECK), "-o", str(exe)],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and " 0 failures" in run.stdout, run.stdout[-3000:]
    assert run.stdout.startswith(f"{isa} kernels"), run.stdout


@pytest.mark.parametrize("isa", ["avx512", "avx2", "generic"])
def test_default_activations_keep_float32_accuracy(monkeypatch, isa):
    """The kernels' own exp/sigmoid/tanh (a fitted polynomial, csrc/kernels.inc) against float64
    numpy on 131k pre-activations over [-30, 30] and the edges (tiny, huge, NaN): tanh
    within 2.5e-7 absolute, sigmoid within 1.5e-7 absolute and 4e-7 relative (float32's spacing
    at 1 is 1.2e-7; an error of a coefficient shows as 1e-5)."""
    monkeypatch.setenv(native.ISA_ENV, isa)
    jax.clear_caches()
    grid = np.linspace(-30.0, 30.0, 131_000, dtype=np.float32)
    # (not +-inf: the other gates' zero weights make 0 * inf = NaN, as IEEE says)
    edges = np.array([0.0, -0.0, 1e-30, -1e-30, 1e-7, -1e-7, 88.0, -88.0, 89.0, -89.0, 1e4, -1e4, np.nan], np.float32)
    x = np.concatenate([grid, edges])
    params, xs = _saturating_lstm(x)
    _, y_h, y_c = jaxgru.lstm(params, xs, backend="cpu")
    c = np.asarray(y_c[0], np.float64)
    h = np.asarray(y_h[0], np.float64)
    xd = x.astype(np.float64)[:, None]
    with np.errstate(over="ignore"):
        sig = 1.0 / (1.0 + np.exp(-xd))
    finite = ~np.isnan(x)
    assert np.isnan(c[~finite]).all() and np.isnan(h[~finite]).all()
    tanh_err = np.abs(c[finite, :8] - np.tanh(xd[finite]))
    sig_err = np.abs(c[finite, 8:] - sig[finite])
    assert tanh_err.max() <= 2.5e-7, f"tanh: {tanh_err.max():.3g} at x = {x[finite][tanh_err.max(1).argmax()]}"
    assert sig_err.max() <= 1.5e-7, f"sigmoid: {sig_err.max():.3g}"
    tiny = sig[finite] > 1e-30
    rel = sig_err[tiny[:, 0]] / sig[finite][tiny[:, 0]]
    assert rel.max() <= 4e-7, f"sigmoid relative: {rel.max():.3g}"
    # and tanh again, on the cell state itself (Y_h = tanh(c))
    np.testing.assert_allclose(h[finite], np.tanh(c[finite]), atol=2.5e-7, rtol=0)


@pytest.mark.parametrize("isa", ["avx512", "avx2", "generic"])
@pytest.mark.parametrize("lbr", [0, 1])
def test_gru_step_keeps_float32_accuracy(monkeypatch, isa, lbr):
    """The GRU step's own sigmoid and tanh (its epilogue, not the LSTM's) against float64 numpy,
    on the pre-activations of test_default_activations_keep_float32_accuracy. One step, I = 1,
    H = 16, H0 = 1, R = 0: units 0-7 have h~ = tanh(0) = 0, so Y_h = z = sigmoid(x); units 8-15
    have z = sigmoid(-100) (0 in float32), so Y_h = h~ = tanh(x). Same bounds as the LSTM's (z and
    r from one division, tried, put z 1.7e-7 off)."""
    monkeypatch.setenv(native.ISA_ENV, isa)
    jax.clear_caches()
    H = 16
    x = np.linspace(-30.0, 30.0, 131_000, dtype=np.float32)
    w = np.zeros((1, 3 * H, 1), np.float32)  # gates z, r, h
    w[0, :8] = 1.0  # z's input, units 0-7: x
    w[0, H : 2 * H] = 1.0  # r's: x (no effect on Y_h, but a z and r computed together would round differently)
    w[0, 2 * H + 8 : 3 * H] = 1.0  # h's input, units 8-15: x
    b = np.zeros((1, 6 * H), np.float32)
    b[0, 8:H] = -100.0  # z = 0, units 8-15
    params = jaxgru.GRUParams(jnp.asarray(w), jnp.zeros((1, 3 * H, H), jnp.float32), jnp.asarray(b))
    h0 = jnp.ones((1, x.size, H), jnp.float32)
    _, y_h = jaxgru.gru(params, jnp.asarray(x).reshape(1, -1, 1), initial_h=h0, linear_before_reset=lbr,
                        backend="cpu")
    h = np.asarray(y_h[0], np.float64)
    xd = x.astype(np.float64)[:, None]
    sig = 1.0 / (1.0 + np.exp(-xd))
    sig_err = np.abs(h[:, :8] - sig)
    assert sig_err.max() <= 1.5e-7, f"sigmoid: {sig_err.max():.3g} at x = {x[sig_err.max(1).argmax()]}"
    assert (sig_err / sig).max() <= 4e-7, f"sigmoid relative: {(sig_err / sig).max():.3g}"
    tanh_err = np.abs(h[:, 8:] - np.tanh(xd))
    assert tanh_err.max() <= 2.5e-7, f"tanh: {tanh_err.max():.3g} at x = {x[tanh_err.max(1).argmax()]}"


BATCH1 = [("gru", {"linear_before_reset": 0}), ("gru", {"linear_before_reset": 1, "direction": "reverse"}),
          ("lstm", {"peep": True, "direction": "bidirectional"}), ("lstm", {"clip": 0.9, "c0": True})]


@pytest.mark.parametrize("isa", ["avx512", "avx2", "generic"])
@pytest.mark.parametrize(("cell", "opts"), BATCH1, ids=[f"{c}-{i}" for i, (c, _) in enumerate(BATCH1)])
@pytest.mark.parametrize("L", [5, 17])
def test_batch_one(monkeypatch, isa, cell, opts, L):
    """Batch 1 with H a multiple of 16 (H = 48, three blocks): under 16 steps the steps read R's
    rows, from 16 on its panels through one-row tiles (GRU lbr=0 in both phases; the default
    activations and a clip): agrees with onnxruntime and xla on each instruction set."""
    monkeypatch.setenv(native.ISA_ENV, isa)
    opts = dict(opts)
    kw = {k: opts.pop(k) for k in ("c0", "peep", "direction") if k in opts}
    case = random_case(np.random.default_rng(7), cell, L=L, N=1, I=20, H=48, h0=True, **kw, **opts)
    jax.clear_caches()
    _check(case)


FEW_ROWS = [("gru", {"linear_before_reset": 0, "lens": [3, 0, 2, 1, 3]}),
            ("gru", {"linear_before_reset": 1, "direction": "bidirectional"}),
            ("lstm", {"peep": True, "c0": True, "direction": "reverse", "lens": [1, 3, 3, 2, 0]}),
            ("lstm", {"clip": 0.9})]


@pytest.mark.parametrize("isa", ["avx512", "avx2", "generic"])
@pytest.mark.parametrize(("cell", "opts"), FEW_ROWS, ids=[f"{c}-{i}" for i, (c, _) in enumerate(FEW_ROWS)])
@pytest.mark.parametrize(("L", "N"), [(1, 1), (2, 3), (2, 4), (3, 3), (3, 5)])
def test_few_rows_project_through_w_unpacked(monkeypatch, isa, cell, opts, L, N):
    """At most 8 rows of X in all (L * N = 1, 6, 8; 9 and 15 pack), with I and H multiples of 16,
    the projection and the steps read W's and R's rows instead of packed panels (csrc:
    Layer::w_rows, r_rows, kFewRows): outputs against onnxruntime and xla, and the gradients (its
    forward keeps residuals) against xla, on each instruction set; ragged rows and rows that end
    at once included."""
    monkeypatch.setenv(native.ISA_ENV, isa)
    opts = dict(opts)
    kw = {k: opts.pop(k) for k in ("c0", "peep", "direction", "lens") if k in opts}
    if "lens" in kw:
        kw["lens"] = [min(n, L) for n in kw["lens"][:N]]
    case = random_case(np.random.default_rng(5), cell, L=L, N=N, I=32, H=48, h0=True, scale=0.3, **kw, **opts)
    jax.clear_caches()
    _check_ragged(case)
    chex.assert_trees_all_close(_grad_y(case, "cpu"), _grad_y(case, "xla"), atol=5e-5, rtol=1e-4)


@pytest.mark.parametrize(("cell", "opts"), [("gru", {"linear_before_reset": 0}), ("gru", {"linear_before_reset": 1}),
                                           ("lstm", {"peep": True})])
@pytest.mark.parametrize(("N", "threads"), [(1, "1"), (1, "2"), (3, "2")])
def test_steps_in_alternating_unit_order_match_xla(monkeypatch, cell, opts, N, threads):
    """Where a step's rows fit one tile (N = 1 and 3 here), every other step runs its units last to
    first (csrc/plan.inc, Planner::add), on each thread's range and under stealing: with 20
    steps (R in panels) and H = 80 (5 blocks, split unevenly over the threads), the outputs,
    gradients and jvp equal xla's."""
    monkeypatch.setenv(native.THREADS_ENV, threads)
    case = random_case(np.random.default_rng(11), cell, L=20, N=N, I=6, H=80, h0=True, scale=0.15, **opts)
    jax.clear_caches()
    _check(case)
    chex.assert_trees_all_close(_grad_y(case, "cpu"), _grad_y(case, "xla"), atol=5e-5, rtol=1e-4)
    _check_jvp(case, atol=5e-5, rtol=1e-4)


def test_isa_report_and_cap(monkeypatch):
    monkeypatch.delenv(native.ISA_ENV, raising=False)  # the suite may run with a cap set
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


@pytest.mark.parametrize(("cell", "opts"), [("gru", {}), ("gru", {"linear_before_reset": 1}), ("lstm", {"peep": True})])
@pytest.mark.parametrize("order", ["sorted", "shuffled"])
def test_ended_rows_drop_out_of_the_products(cell, opts, order):
    """20 rows whose sequences end at different steps, in decreasing order (PyTorch's packed order)
    or shuffled: the steps' products run on a tile's live rows only (forward, backward and tangent;
    GRU lbr=0's two phases and its backward's d(r*H) product), so shuffled, ended rows sit between
    live ones. Outputs, gradients and jvp equal xla's, and the outputs onnxruntime's."""
    lens = [9, 9, 8, 8, 7, 6, 6, 5, 4, 4, 3, 3, 3, 2, 2, 1, 1, 1, 0, 0]
    if order == "shuffled":
        lens = np.random.default_rng(3).permutation(lens).tolist()
    case = random_case(np.random.default_rng(11), cell, L=9, N=20, I=7, H=21, direction="bidirectional",
                       h0=True, c0=cell == "lstm", lens=lens, **opts)
    _check_ragged(case)
    fn = jaxgru.gru if cell == "gru" else jaxgru.lstm
    kw = case.kwargs(0)
    states = {k: kw.pop(k) for k in ("initial_h", "initial_c") if k in kw}

    def loss(backend):
        def f(params, x, states):
            return sum(jnp.sum(jnp.sin(o)) for o in fn(params, x, **kw, **states, backend=backend))
        return jax.jit(jax.grad(f, argnums=(0, 1, 2)))

    chex.assert_trees_all_close(loss("cpu")(case.params, case.x, states), loss("xla")(case.params, case.x, states),
                                atol=5e-5, rtol=1e-4)
    _check_jvp(case, atol=5e-5, rtol=1e-4)


def _grad_y(case, backend):
    """jit(grad) of sum(sin(Y)) in the weights and x, on `backend` (the case's options, layout 0)."""
    fn = jaxgru.gru if case.cell == "gru" else jaxgru.lstm
    kw = case.kwargs(0)
    f = lambda p, x: jnp.sum(jnp.sin(fn(p, x, **kw, backend=backend)[0]))
    return jax.jit(jax.grad(f, argnums=(0, 1)))(case.params, case.x)


@pytest.mark.parametrize(("cell", "opts"), [("gru", {"linear_before_reset": 1}), ("lstm", {"peep": True})])
@pytest.mark.parametrize(("H", "N", "isa"), [(150, 13, "best"), (700, 13, "best"), (700, 96, "best"),
                                             (700, 96, "avx2")])
def test_gradients_match_xla_at_many_blocks_and_uneven_row_tiles(monkeypatch, cell, opts, H, N, isa):
    """The backward with its work spread over many units: H = 150 is 10 blocks of 16 units (the
    last one padded), the rows make uneven row tiles, and the lengths include 0 and L
    (bidirectional; weights scaled by 1/sqrt(H), so that the gates do not saturate). At H = 700
    and 96 rows, dG's rows and R's panels exceed the backward's cache budget and dH = dG . R runs
    its reduction in parts (the call counts it: 3 parts with AVX-512's pairs of blocks, 2 or 3 with
    AVX2's single blocks); for the GRU (lbr=1) one part's rows of R run from dG's columns into
    dgh's. Gradients equal xla's, to 1e-4: the bias gradient sums dG over every row and step, and
    at H = 700, N = 13 both float32 results lie ~5e-5 from the float64 one (GRU: xla 5.0e-5, the
    native lowering 5.4e-5; a change of the forward's summation order moved them 6.9e-5 apart)."""
    monkeypatch.setenv(native.ISA_ENV, isa)
    lens = np.random.default_rng(N).integers(0, 5, N)
    lens[:2] = [0, 4]
    case = random_case(np.random.default_rng(15), cell, L=4, N=N, I=5, H=H, direction="bidirectional",
                       h0=True, lens=lens.tolist(), scale=0.5 * min(1.0, (150 / H) ** 0.5), **opts)
    mod, _ = native._module()
    before = mod.split_products()
    jax.clear_caches()  # the ISA is read when a call is lowered
    chex.assert_trees_all_close(_grad_y(case, "cpu"), _grad_y(case, "xla"), atol=1e-4, rtol=1e-4)
    assert (mod.split_products() > before) == (N == 96)


GROUP_CASES = [("gru", {"linear_before_reset": 0}), ("gru", {"linear_before_reset": 1}),
               ("lstm", {"peep": True, "input_forget": 1})]


@pytest.mark.parametrize(("cell", "opts"), GROUP_CASES, ids=[f"{c}-{i}" for i, (c, _) in enumerate(GROUP_CASES)])
@pytest.mark.parametrize(("direction", "threads"), [("forward", "2"), ("bidirectional", "4")])
def test_row_groups_match_xla(monkeypatch, cell, opts, direction, threads):
    """Rows split into one group per thread (each group's steps on their own, csrc plan_threads):
    25 rows make groups of 12 and 13 rows (two full tiles each: AVX2's inference forward groups
    no fewer) and uneven tiles in them, the lengths include 0 and differ within a group; the
    forward, grad and jvp equal xla's, and the calls did run grouped."""
    monkeypatch.setenv(native.THREADS_ENV, threads)
    lens = [6, 1, 0, 3, 6, 2, 5, 6, 1, 3, 6, 0, 2, 4, 6, 6, 5, 4, 0, 6, 2, 3, 5, 1, 6]
    case = random_case(np.random.default_rng(21), cell, L=6, N=25, I=5, H=40, direction=direction,
                       h0=True, lens=lens, **opts)
    mod, _ = native._module()
    before = mod.grouped_calls()
    jax.clear_caches()  # the threads are read when a call is lowered
    _check(case, ort=False)
    chex.assert_trees_all_close(_grad_y(case, "cpu"), _grad_y(case, "xla"), atol=5e-5, rtol=1e-4)
    _check_jvp(case, atol=5e-5, rtol=1e-4)
    assert mod.grouped_calls() - before >= 4  # forward, forward + backward (grad), tangent


@pytest.mark.parametrize("isa", ["avx2", "avx512"])
def test_inference_groups_hold_two_full_tiles(monkeypatch, isa):
    """16 rows on 2 threads (AVX2 and AVX-512: 6-row LSTM tiles): groups of 8 rows would hold one
    full tile, so the inference forward runs one group whose threads meet per step; the forward
    with residuals and the backward (grad) split the rows into 2 groups. Results equal xla's
    either way."""
    mod, _ = native._module()
    _use_isa(monkeypatch, isa)
    monkeypatch.setenv(native.THREADS_ENV, "2")
    case = random_case(np.random.default_rng(4), "lstm", L=5, N=16, I=5, H=40, h0=True, c0=True)
    jax.clear_caches()  # the ISA and threads are read when a call is lowered
    before = mod.grouped_calls()
    _check(case, ort=False)
    assert mod.grouped_calls() == before
    chex.assert_trees_all_close(_grad_y(case, "cpu"), _grad_y(case, "xla"), atol=5e-5, rtol=1e-4)
    assert mod.grouped_calls() - before == 2  # the forward with residuals, the backward


def test_inference_groups_of_one_tile_where_two_would_leave_threads_idle(monkeypatch):
    """16 rows, H = 16 (one block of units) on 4 threads: one group of two full tiles would give
    the threads one block to share, so the inference forward splits the rows into groups of one
    tile instead (here 2, each a thread's own); ragged lengths with 0 and an initial state; the
    output equals xla's and the call ran grouped."""
    monkeypatch.setenv(native.THREADS_ENV, "4")
    lens = [5, 0, 3, 5, 1, 5, 2, 4, 5, 5, 0, 1, 3, 5, 2, 4]
    case = random_case(np.random.default_rng(8), "lstm", L=5, N=16, I=5, H=16, h0=True, c0=True, lens=lens)
    mod, _ = native._module()
    jax.clear_caches()  # the threads are read when a call is lowered
    before = mod.grouped_calls()
    _check(case, ort=False)
    assert mod.grouped_calls() > before


@pytest.mark.parametrize("isa", ["avx2", "avx512"])
@pytest.mark.parametrize(("cell", "opts"), GROUP_CASES, ids=[f"{c}-{i}" for i, (c, _) in enumerate(GROUP_CASES)])
@pytest.mark.parametrize(("direction", "threads"), [("forward", "8"), ("bidirectional", "16")])
def test_inference_groups_per_thread_on_many_threads(monkeypatch, cell, opts, direction, threads, isa):
    """Eight threads a direction (JAXGRU_CPU_THREADS asks for them) and a small R (H = 40): the
    inference forward gives each thread its own row group, down to one row (13 rows: groups of 1
    and 2 rows, where the rules for fewer threads make 2 at most with AVX2's and AVX-512's tiles of
    6-7 rows; x86's generic kernels, tiles of one row, make 8 groups either way), with ragged
    lengths from 1 to L and an initial state. Outputs equal onnxruntime's and xla's, the calls
    counted the plan, and a training call (grad) keeps its own groups and equals xla's. With empty
    sequences among the rows (one-row groups with no live step), against xla only: onnxruntime's
    Y_h of an empty sequence differs by design (docs/semantics.md)."""
    mod, _ = native._module()
    _use_isa(monkeypatch, isa)
    monkeypatch.setenv(native.THREADS_ENV, threads)
    lens = [6, 1, 3, 6, 1, 5, 2, 6, 4, 2, 6, 3, 1]
    case = random_case(np.random.default_rng(23), cell, L=6, N=13, I=5, H=40, direction=direction,
                       h0=True, lens=lens, **opts)
    empty = random_case(np.random.default_rng(24), cell, L=6, N=13, I=5, H=40, direction=direction,
                        h0=True, lens=[0 if i % 4 == 1 else n for i, n in enumerate(lens)], **opts)
    jax.clear_caches()  # the ISA and threads are read when a call is lowered
    before = mod.thread_group_calls()
    _check(case)
    _check(empty, ort=False)
    assert mod.thread_group_calls() - before >= 2
    before = mod.thread_group_calls()
    chex.assert_trees_all_close(_grad_y(case, "cpu"), _grad_y(case, "xla"), atol=5e-5, rtol=1e-4)
    assert mod.thread_group_calls() == before


@pytest.mark.parametrize(("cell", "opts"), GROUP_CASES, ids=[f"{c}-{i}" for i, (c, _) in enumerate(GROUP_CASES)])
@pytest.mark.parametrize("direction", ["forward", "reverse"])
def test_pipelined_projections_match_xla(monkeypatch, cell, opts, direction):
    """One chain on two threads whose steps are larger than probing's (N = 16, H = 56: 301-401
    kFLOP a step) over 1000 steps, 48 or 63 chunks of projections (21 or 16 steps, ~256 KiB): the
    helper projects ahead into a ring of 16 slots (~4 MiB), so the chunks from the 17th on reuse
    slots (csrc work_pipelined), and the call counts that (wrapped_rings). With I = 2 a chunk's
    projection is far cheaper than its steps, so the helper reaches the ring's end and must wait
    for each slot's steps: a control build whose helper did not wait failed all six, three runs
    out of three. Ragged lengths include 0, the full length and ends on both sides of the chunks'
    boundaries, before and after the ring wraps; the forward equals xla's (onnxruntime's Y_h of a
    length-0 sequence is 0, not the initial state: semantics.md) and ran pipelined."""
    monkeypatch.setenv(native.THREADS_ENV, "2")
    lens = [1000, 0, 16, 17, 21, 22, 255, 256, 257, 336, 337, 352, 500, 777, 999, 1]
    # weights of ~1/sqrt(H): at 0.5, long sequences are chaotic and xla's rounding and ours grow apart
    case = random_case(np.random.default_rng(31), cell, L=1000, N=16, I=2, H=56, direction=direction,
                       h0=True, lens=lens, scale=0.1, **opts)
    mod, _ = native._module()
    jax.clear_caches()  # the threads are read when a call is lowered
    before, wrapped = mod.pipelined_calls(), mod.wrapped_rings()
    _check(case, ort=False)
    assert mod.pipelined_calls() > before
    assert mod.wrapped_rings() > wrapped


# (cell, options, L, N, I, H, verdict): forwards whose steps run faster on one core than shared
# (32-41 kFLOP a step: two threads at most, whatever XLA's pool holds, as probing needs),
# while a second thread projects their inputs ahead (csrc lead_chunk). force_probe's verdict: None
# where a step is too small for two threads (no probe: every call leads), 1 ("shared": every call
# probes afresh, shares its first steps and leads after them), 2 ("alone": the first call probes,
# the next ones are planned to lead).
LEAD_CASES = [
    ("gru", {"linear_before_reset": 1}, 400, 1, 64, 64, None),
    ("gru", {"linear_before_reset": 0, "direction": "reverse"}, 400, 1, 48, 64, None),  # two phases a step
    ("lstm", {"peep": True, "input_forget": 1}, 300, 4, 24, 32, 1),
    ("lstm", {"clip": 2.0, "h0": True, "c0": True}, 300, 4, 24, 32, 2),
    ("gru", {"linear_before_reset": 1, "direction": "reverse", "h0": True}, 300, 3, 40, 48, 2),
    # 9.8 MiB of projections: the ring's 4 MiB (2,048 steps) wrap, and with I = 2 the helper
    # reaches its end and waits for each slot's steps (a control build whose helper did not wait
    # failed both; at N = 1, H = 64 its helper never got a ring ahead in 5,000 steps)
    ("lstm", {}, 5000, 4, 2, 32, 2),
]


@needs_two_cpus
@pytest.mark.parametrize(("cell", "opts", "L", "N", "I", "H", "verdict"), LEAD_CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(LEAD_CASES)])
@pytest.mark.parametrize("ragged", [False, True])
def test_steps_led_by_a_projecting_helper_match_xla(monkeypatch, cell, opts, L, N, I, H, verdict, ragged):
    """Small steps that one core runs alone while the other projects the inputs ahead of them,
    chunk by chunk into a ring (csrc lead_chunk, work_pipelined; Call::lead_from): planned so, or
    switched to mid-call by a probe that shared the first steps. Three calls
    each: the outputs equal xla's and onnxruntime's (where they agree: not with an initial state
    and a length 0), the gradients (the forward keeping residuals leads too) xla's, every call
    ran pipelined, and the 5,000 steps wrapped their ring. Ragged lengths include 0, the full
    length and ends on both sides of the chunks' boundaries."""
    monkeypatch.delenv(native.THREADS_ENV, raising=False)
    opts = dict(opts)
    direction = opts.pop("direction", "forward")
    h0, c0 = opts.pop("h0", False), opts.pop("c0", False)
    lens = None
    if ragged:
        lens = [L, 0, 15, 17][:N] if N > 1 else [L - 37]
    case = random_case(np.random.default_rng(L + N), cell, L=L, N=N, I=I, H=H, direction=direction, h0=h0,
                       c0=c0, lens=lens, scale=0.1, **opts)
    mod, _ = native._module()
    jax.clear_caches()  # the threads are read when a call is lowered
    # onnxruntime's Y_h of a length-0 sequence is 0, not the initial state (semantics.md)
    ort = L < 1000 and not (ragged and (h0 or c0))
    try:
        before, wrapped = mod.pipelined_calls(), mod.wrapped_rings()
        for i in range(3):
            if verdict == 1 or (verdict == 2 and i == 0):
                mod.force_probe(verdict)  # clears the kept verdicts: the next call probes
            _check(case, ort=ort)
        assert mod.pipelined_calls() - before == 3
        assert (mod.wrapped_rings() > wrapped) == (L > 4096)
        if L < 1000:
            chex.assert_trees_all_close(_grad_y(case, "cpu"), _grad_y(case, "xla"), atol=1e-4, rtol=1e-4)
    finally:
        mod.force_probe(0)


@needs_two_cpus
@pytest.mark.parametrize(("cell", "opts", "N", "I", "H"), [("lstm", {"peep": True}, 4, 24, 32),
                                                         ("gru", {"linear_before_reset": 1}, 3, 40, 48)])
def test_a_caller_that_finds_its_helper_led_late_runs_no_step_twice(monkeypatch, cell, opts, N, I, H):
    """A probe's helper that leads switches the caller to running the steps alone from the phase
    after the steps it shared (csrc Call::lead_from). Here the caller, having found the call's
    first step unfinished, stops there (force_stall: as one that lost its core there) until its
    helper has run every step of the probe alone and led: it runs none of them again, and the
    outputs equal xla's. (Where the switch was a flag, the caller ran that step again, alone: the
    LSTM's cell state updated twice, the GRU's step from a state steps later; a stress loop of
    two processes beside two spinning ones met that in 2 calls of 49,415.)"""
    monkeypatch.delenv(native.THREADS_ENV, raising=False)
    case = random_case(np.random.default_rng(N + H), cell, L=300, N=N, I=I, H=H, scale=0.1, **opts)
    mod, _ = native._module()
    jax.clear_caches()  # the threads are read when a call is lowered
    stalls, piped = mod.led_stalls(), mod.pipelined_calls()
    try:
        for _ in range(3):
            mod.force_probe(1)  # every call probes afresh, and its helper leads after its steps
            mod.force_stall(2)  # the packing, the first chunk's projection, then its first step
            _check(case, ort=False)
    finally:
        mod.force_stall(-1)
        mod.force_probe(0)
    assert mod.pipelined_calls() - piped == 3
    assert mod.led_stalls() - stalls == 3  # each call's caller stopped there and saw its helper lead


@needs_two_cpus
def test_the_led_stress_loop_runs_and_finds_no_wrong_call():
    """benchmarks/cpu_led_stress.py, the loop that showed the led calls' race (a step run twice, a
    call that hung: performance_notes.md, 2026-12-06), in a short run beside a spinning process:
    each verdict's loop makes calls, none wrong, none hung, and it exits 0."""
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "cpu_led_stress.py"), "--seconds", "3",
                          "--spinners", "1"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    for verdict in ("shared", "alone"):
        line = next(x for x in out.stdout.splitlines() if x.startswith(f"{verdict}:"))
        m = re.fullmatch(rf"{verdict}: (\d+) calls, (.*)", line)
        assert m and int(m[1]) > 0 and m[2] == "0 wrong, no hang", line


# (cell, options, L, H, threads): batch-1 forwards whose steps one thread runs alone, each step one
# unit of all its blocks (csrc plan_threads, run_step_wide). threads None: XLA's pool, steps too
# small for two threads: the caller runs them while a helper projects ahead (a planned lead).
WIDE_CASES = [
    ("gru", {"linear_before_reset": 1}, 40, 64, "1"),
    ("gru", {"linear_before_reset": 0, "direction": "reverse", "h0": True}, 30, 200, "1"),  # 13 blocks, the last of 8
    # two passes of 8 blocks (the LSTM's 4 gates x 8 blocks fill the accumulators); clip: the general activations
    ("lstm", {"peep": True, "input_forget": 1, "clip": 1.5, "c0": True}, 25, 200, "1"),
    # 9 steps: R's rows, unpacked (Layer::r_rows); both directions on one thread
    ("lstm", {"direction": "bidirectional", "activations": ["HardSigmoid", "Softsign", "Elu"] * 2,
              "activation_alpha": [0.3, 0.9] * 2, "activation_beta": [0.45] * 2}, 9, 48, "1"),
    ("gru", {"linear_before_reset": 1}, 400, 64, None),
]


@pytest.mark.parametrize(("cell", "opts", "L", "H", "threads"), WIDE_CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(WIDE_CASES)])
@pytest.mark.parametrize("ragged", [False, True])
def test_batch1_steps_as_units_of_all_blocks_match_xla(monkeypatch, cell, opts, L, H, threads, ragged):
    """At batch 1, where one thread runs the steps alone, a step is one unit of all its blocks: the
    products of as many blocks as the accumulators hold, then their epilogues (csrc
    Layer::step_blocks, run_step_wide): with several passes of blocks, a last block of 8 units,
    the GRU's two phases, the general activations with clip, R's rows read unpacked, both
    directions, a row that ends mid-sequence. The outputs equal xla's and onnxruntime's, the
    gradients xla's (the forward keeping residuals runs so too), and the calls ran so."""
    if threads is None:
        if len(os.sched_getaffinity(0)) < 2:
            pytest.skip("a second thread in XLA's pool")
        monkeypatch.delenv(native.THREADS_ENV, raising=False)
    else:
        monkeypatch.setenv(native.THREADS_ENV, threads)
    opts = dict(opts)
    direction = opts.pop("direction", "forward")
    h0, c0 = opts.pop("h0", False), opts.pop("c0", False)
    case = random_case(np.random.default_rng(L + H), cell, L=L, N=1, I=24, H=H, direction=direction, h0=h0,
                       c0=c0, lens=[L - 7] if ragged else None, scale=0.1, **opts)
    mod, _ = native._module()
    jax.clear_caches()  # the threads are read when a call is lowered
    before = mod.wide_step_calls()
    _check(case)
    assert mod.wide_step_calls() - before == 1
    chex.assert_trees_all_close(_grad_y(case, "cpu"), _grad_y(case, "xla"), atol=1e-4, rtol=1e-4)
    assert mod.wide_step_calls() - before == 2


FUSED_CASES = [  # (cell, options, H, N): 8 rows or more a step, or one step's projections over 128 KiB
    ("lstm", {"peep": True, "input_forget": 1}, 48, 12),  # chunks of several steps
    ("lstm", {"peep": True}, 256, 40),  # R 1 MiB: one group, its threads meet per step
    ("lstm", {"input_forget": 1, "clip": 2.0}, 176, 48),  # R 496 KiB: a row group per thread
    ("gru", {"linear_before_reset": 0}, 192, 60),  # two phases a step (z, r; then h): R 432 KiB
    ("gru", {"linear_before_reset": 1}, 256, 48),
]


@pytest.mark.parametrize(("cell", "opts", "H", "N"), FUSED_CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(FUSED_CASES)])
@pytest.mark.parametrize("isa", ["avx2", "avx512"])
@pytest.mark.parametrize(("direction", "threads"), [("forward", "2"), ("bidirectional", "1")])
def test_steps_making_their_own_projections_match_xla(monkeypatch, cell, opts, H, N, isa, direction, threads):
    """Where no helper projects ahead and a step has 8 rows or more (or its projections are a chunk
    of their own), the steps' units make their own rows' X.W^T + b (csrc plan_threads,
    Layer::fused): with AVX2's panels of one gate each and AVX-512's of all gates, chunks of one
    step or several, one thread or two, one row group or two, the GRU's two phases a step; ragged
    lengths include 0 and end mid-sequence, initial states given. The forward, grad and jvp equal
    xla's (onnxruntime's Y_h of a length-0 sequence is 0, not the initial state: semantics.md),
    and the calls ran fused."""
    mod, _ = native._module()
    _use_isa(monkeypatch, isa)
    monkeypatch.setenv(native.THREADS_ENV, threads)
    lens = np.random.default_rng(N).integers(0, 5, N)
    lens[:3] = [0, 4, 1]
    case = random_case(np.random.default_rng(H), cell, L=4, N=N, I=24, H=H, direction=direction, h0=True,
                       c0=cell == "lstm", lens=lens.tolist(), scale=0.5 * (64 / H) ** 0.5, **opts)
    jax.clear_caches()  # the ISA and threads are read when a call is lowered
    before = mod.fused_calls()
    _check(case, ort=False)
    assert mod.fused_calls() > before
    chex.assert_trees_all_close(_grad_y(case, "cpu"), _grad_y(case, "xla"), atol=5e-5, rtol=1e-4)
    _check_jvp(case, atol=5e-5, rtol=1e-4)
    # the forward, and the forwards with residuals of grad and jvp (on two threads these split the
    # rows into two groups: at N = 12, groups of 6 rows keep the projection phases)
    assert mod.fused_calls() - before >= (1 if N < 16 and threads == "2" else 3)


@pytest.mark.parametrize("wrong", [None, "gy", "dgh", "y", "res", "sums", "dr"])
def test_backward_target_rejects_operands_and_results_of_the_wrong_size(wrong):
    """The GRU lbr=1 backward reads Y's cotangent and the forward's Y (both [L, D, N, H]) and
    residuals ([D, L, N, 4H]) and writes the h gate's cotangent ([D, L, N, H]), the bias sums
    ([D, 4H]) and dR ([D, 3H, H] or nothing): a caller passing or declaring another size (here
    3H for dgh, the full gate width) gets an error, not an access past a buffer."""
    L, N, H = 2, 3, 16
    cfg = make_config("gru", "test", linear_before_reset=1)
    f32 = lambda *s: jnp.zeros(s, jnp.float32)
    dgh = (1, L, N, 3 * H if wrong == "dgh" else H)
    sums = (1, 3 * H if wrong == "sums" else 4 * H)
    dr = (1, 3 * H, H + 1) if wrong == "dr" else (1, 3 * H, H)
    shapes = [jax.ShapeDtypeStruct(s, jnp.float32) for s in ((1, L, N, 3 * H), dgh, (1, N, H), sums, dr)]
    call = jax.ffi.ffi_call(native.BACKWARD_TARGETS["gru"], shapes)
    args = (f32(L, 1, N, H + (wrong == "gy")), f32(1, L, N, 3 * H if wrong == "res" else 4 * H),
            f32(L + (wrong == "y"), 1, N, H), f32(1, N, H), f32(1, 3 * H, H), f32(1, N, H),
            jnp.full((N,), L, jnp.int32))
    if wrong is None:
        outs = call(*args, **native._attrs(cfg, True))
        assert all(np.all(np.asarray(o) == 0) for o in outs)
    else:
        with pytest.raises(Exception, match="unexpected shape"):
            jax.block_until_ready(call(*args, **native._attrs(cfg, True)))


DR_CASES = [("gru", {"linear_before_reset": 1, "clip": 2.0}),
            ("lstm", {"peep": True}),
            ("lstm", {"input_forget": 1, "activations": ["HardSigmoid", "Softsign", "Elu"],
                      "activation_alpha": [0.3, 0.9], "activation_beta": [0.45]})]  # per direction


@pytest.mark.parametrize(("cell", "opts"), DR_CASES, ids=[f"{c}-{i}" for i, (c, _) in enumerate(DR_CASES)])
@pytest.mark.parametrize(("N", "direction", "threads", "isa"),
                         [(40, "bidirectional", "1", "best"), (64, "reverse", "2", "best"),
                          (40, "forward", "2", "avx2"), (64, "bidirectional", "2", "generic")])
def test_native_dr_matches_xla(monkeypatch, cell, opts, N, direction, threads, isa):
    """At N >= dr_min_rows() (32) the backward's call computes dR = sum dG^T.H_prev itself (from
    Y in place for the GRU, from the residuals for the LSTM, in chunks of steps): every gradient
    equals xla's. H = 40 pads its last block; 40 rows in one group make chunks of 7 steps (17 steps:
    7, 7, 3), 64 rows on 2 threads two groups of 32 reduced step by step; ragged lengths include
    0 and the full length; initial states are given; the AVX2 and generic kernels' tiles too."""
    monkeypatch.setenv(native.THREADS_ENV, threads)
    monkeypatch.setenv(native.ISA_ENV, isa)
    L, H = 17, 40
    lens = np.random.default_rng(N).integers(0, L + 1, N)
    lens[:2] = [0, L]
    d, g = (2 if direction == "bidirectional" else 1), (3 if cell == "gru" else 4)
    opts = {k: v * d if k.startswith("activation") else v for k, v in opts.items()}
    case = random_case(np.random.default_rng(31), cell, L=L, N=N, I=6, H=H, direction=direction,
                       h0=True, c0=cell == "lstm", lens=lens.tolist(), **opts)
    cfg = make_config(cell, "test", **{k: v for k, v in opts.items() if k == "linear_before_reset"})
    assert native.native_dr(cfg, N, H)
    fn = jaxgru.gru if cell == "gru" else jaxgru.lstm
    kw = case.kwargs(0)
    states = {k: kw.pop(k) for k in ("initial_h", "initial_c") if k in kw}

    def grad(backend):
        f = lambda p, x, s: sum(jnp.sum(jnp.sin(o)) for o in fn(p, x, **kw, **s, backend=backend))
        return jax.jit(jax.grad(f, argnums=(0, 1, 2)))

    jax.clear_caches()  # the threads are read when a call is lowered
    hlo = grad("cpu").lower(case.params, case.x, states).compile().as_text()
    call = next(line for line in hlo.splitlines() if f'custom_call_target="jaxgru_{cell}_backward"' in line)
    assert f"f32[{d},{g * H},{H}]" in call  # the call returns dR
    # gradients up to ~20, each a float32 sum over 680 (step, row) terms: summed in another order,
    # entries near 0 differ by up to ~1e-4 (dW, which both backends compute the same way, too)
    chex.assert_trees_all_close(grad("cpu")(case.params, case.x, states), grad("xla")(case.params, case.x, states),
                                atol=2e-4, rtol=1e-4)



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


def test_scratch_is_kept_between_calls_and_initialised_by_each():
    """A call's scratch (packed weights, projections, states) is a block an earlier call gave back
    (csrc/memory.h ScratchPool; of the smallest that fit, the one given back last), not cleared:
    after a call of the same shapes whose every input is NaN (its scratch left full of NaN), the
    call and its gradient equal xla's, for both cells, ragged, with initial states; and the calls
    did take kept blocks."""
    mod, _ = native._module()
    before = mod.scratch_reuses()
    for cell, seed in (("gru", 1), ("lstm", 2)):
        case = random_case(np.random.default_rng(seed), cell, L=7, N=5, I=6, H=20, direction="bidirectional",
                           h0=True, c0=cell == "lstm", lens=[7, 0, 3, 7, 1])
        nan = dataclasses.replace(case, **{k: getattr(case, k) * np.nan for k in ("x", "w", "r", "b", "h0", "c0")
                                           if getattr(case, k) is not None})
        assert np.isnan(_outs(nan, backend="cpu")[0][:, :, 0]).all()  # row 0 runs all 7 steps
        _check(case, ort=False)
        assert np.isnan(_outs(nan, backend="cpu")[1]).all()
        chex.assert_trees_all_close(_grad_y(case, "cpu"), _grad_y(case, "xla"), atol=5e-5, rtol=1e-4)
    assert mod.scratch_reuses() - before >= 8  # each cell: 2 NaN calls, the forward, the grad's two


@pytest.mark.parametrize(("direction", "shape", "led"), [("bidirectional", (9, 4, 8, 32), False),
                                                    ("forward", (70, 16, 8, 64), False),
                                                    ("forward", (400, 4, 24, 32), True)],
                         ids=["bidirectional", "pipelined", "led"])
def test_concurrent_calls_from_eight_threads(monkeypatch, request, direction, shape, led):
    """No state shared between calls: 8 Python threads running one jitted layer at once, a small
    bidirectional one and one whose helper projects ahead into its ring (csrc work_pipelined:
    two threads a call, the pool's tasks start late under the load, and the callers take their
    share), and one whose small steps a thread runs alone while its helper projects ahead (the
    verdict "alone", shared by the calls: lead_chunk)."""
    L, N, I, H = shape
    if led:
        monkeypatch.delenv(native.THREADS_ENV, raising=False)
        module = native._module()[0]
        module.force_probe(2)
        request.addfinalizer(lambda: module.force_probe(0))
    else:
        monkeypatch.setenv(native.THREADS_ENV, "2")
    jax.clear_caches()  # the threads are read when a call is lowered
    params = jaxgru.init_lstm(jax.random.key(0), I, H, bidirectional=direction == "bidirectional")
    f = jax.jit(lambda p, x: jaxgru.lstm(p, x, direction=direction, backend="cpu"))
    xs = [jax.random.normal(jax.random.key(i), (L, N, I)) for i in range(8)]
    want = [jaxgru.lstm(params, x, direction=direction, backend="xla") for x in xs]
    mod, _ = native._module()
    before = mod.pipelined_calls()
    jax.block_until_ready(f(params, xs[0]))  # compile once (and wait: dispatch is asynchronous)
    assert (mod.pipelined_calls() > before) == (direction == "forward")
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


# Run in a process of its own, with one CPU device: in the suite's process (4 CPU devices,
# conftest) the same run saw no late exit in 200 calls, a cause not found (both threads of a call
# do run there: 2.18 vs 3.59 ms for one at GRU N=16); a fresh process saw the first in 4-15
# calls. Both threads of a call and two spinning processes are pinned to one core, so a thread
# loses the core while it holds a unit.
_LOSE_CORE = r"""
import json, os, subprocess, sys
probe, pipelined = bool(os.environ.get("PROBE")), bool(os.environ.get("PIPELINED"))
if probe:  # XLA's pool: two threads, whose small steps probe (the helper may sit some out)
    os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:2])
import jax, numpy as np
import jaxgru
from jaxgru._src import native

I = int(os.environ.get("INPUTS", "16"))
params = jaxgru.init_lstm(jax.random.key(0), I, 64)
x = jax.random.normal(jax.random.key(1), (200, 16 if pipelined else 4, I))
want = [np.asarray(o) for o in jaxgru.lstm(params, x, backend="xla")]
f = jax.jit(lambda p, x: jaxgru.lstm(p, x, backend="cpu"))
module, _ = native._module()
piped = module.pipelined_calls()
jax.block_until_ready(f(params, x))
piped = module.pipelined_calls() - piped
before, sleeps, lost = module.late_exits(), module.sleeps(), module.lost_wakes()
callers, kept = module.caller_late_exits(), module.kept_callers()
cpu = min(os.sched_getaffinity(0))
hog = f"import os; os.sched_setaffinity(0, {{{cpu}}})\nwhile True: pass"
hogs = [subprocess.Popen([sys.executable, "-c", hog]) for _ in range(2)]
for task in os.listdir("/proc/self/task"):
    try:
        os.sched_setaffinity(int(task), {cpu})
    except OSError:  # a thread that ended meanwhile
        pass
err, calls = 0.0, 0
try:
    # (a probe's helper that leads keeps its caller: there the phases it held up count)
    while calls < 1000 and module.late_exits() - before + module.kept_callers() - kept < (5 if probe else 1):
        if probe:
            module.force_probe(1)  # a fresh probe in every call
        got = f(params, x)
        err = max(err, max(float(np.abs(np.asarray(g) - w).max()) for g, w in zip(got, want)))
        calls += 1
finally:
    for h in hogs:
        h.kill()
    module.force_probe(0)
print(json.dumps({"late_exits": module.late_exits() - before, "caller_exits": module.caller_late_exits() - callers,
                  "kept_callers": module.kept_callers() - kept, "calls": calls, "max_err": err, "pipelined": piped,
                  "sleeps": module.sleeps() - sleeps, "lost_wakes": module.lost_wakes() - lost}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux") or len(os.sched_getaffinity(0)) < 2,
                    reason="thread affinity and CPU clocks: Linux, two CPUs")
@pytest.mark.parametrize("mode", ["two-threads", "probing", "probing-lead", "pipelined"])
def test_threads_that_lose_their_core_leave_the_call(mode):
    """A thread that loses its core while it holds a unit: the waiter sees from its CPU clock
    that it is not running, marks the phase late, the thread leaves the call after that unit
    (late_exits counts it) and every call still computes the layer. Probing: the calls' small
    steps probe (work_chain), and where the caller leaves while the helper sits steps out, the
    helper runs the rest (it waited for them forever before); with I = 2 its projections are too
    small for the helper to lead. Probing-lead (I = 16): after the steps it shares, the helper
    leads (it projects ahead of the caller's steps), and the caller of such a call stays in it
    where it held a phase up (kept_callers counts it; csrc Call::may_lead: a caller that left
    where it had read the switch late hung the call). Pipelined (N = 16: the helper
    projects ahead, work_pipelined): whichever thread leaves, the other runs the rest. The waiters
    sleep, and every change they wait for wakes them (lost_wakes counts one that did not: a build
    whose bump never woke anyone counted 2, 18 and 3 in the three modes)."""
    env = {k: v for k, v in os.environ.items() if k != native.THREADS_ENV}
    env.update({"PROBE": "1"} if mode.startswith("probing") else {native.THREADS_ENV: "2"})
    if mode == "probing":
        env["INPUTS"] = "2"
    if mode == "pipelined":
        env["PIPELINED"] = "1"
    out = subprocess.run([sys.executable, "-c", _LOSE_CORE], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    if mode == "probing-lead":  # the caller held up phases and stayed
        assert report["kept_callers"] > 0 and report["caller_exits"] == 0, report
    else:
        assert report["late_exits"] > 0, report
    assert report["max_err"] < 2e-5, report
    assert (report["pipelined"] > 0) == (mode in ("probing-lead", "pipelined")), report
    assert report["sleeps"] > 0 and report["lost_wakes"] == 0, report


# Run in a process of its own on two CPUs, so that XLA's pool has two threads and the calls'
# small steps are shared by two: they probe (work_chain), long enough for a helper that starts
# late. The forward (LSTM N = 20, H = 32: 164 kFLOP a step) and the training step's (N = 4,
# H = 64) forward and backward each probe: the forwards' helpers lead after the steps they
# share (they project ahead: csrc lead_chunk), the backward's sits steps out and leaves.
# force_probe fixes the probe's verdict (what it measures depends on the cores' distance at the
# time) and clears the kept verdicts.
_PROBE = r"""
import json, os, time
os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:2])
import jax, jax.numpy as jnp, numpy as np
import jaxgru
from jaxgru._src import native

fwd = (jaxgru.init_lstm(jax.random.key(0), 16, 32), jax.random.normal(jax.random.key(1), (1000, 20, 16)))
train = (jaxgru.init_lstm(jax.random.key(2), 16, 64), jax.random.normal(jax.random.key(3), (1000, 4, 16)))
loss = lambda backend: lambda p, x: jnp.mean(jaxgru.lstm(p, x, backend=backend)[0] ** 2)
want = [np.asarray(o) for o in jaxgru.lstm(*fwd, backend="xla")]
want_grad = jax.tree.leaves(jax.grad(loss("xla"))(*train))
f = jax.jit(lambda p, x: jaxgru.lstm(p, x, backend="cpu"))
g = jax.jit(jax.grad(loss("cpu")))
module, _ = native._module()
err = 0.0

def run(fn, ref):
    global err
    out = jax.tree.leaves(jax.block_until_ready(fn(*(fwd if fn is f else train))))
    err = max(err, max(float(np.abs(np.asarray(a) - np.asarray(b)).max()) for a, b in zip(out, ref)))

def probing_round(verdict):  # calls with fresh probes: their exits, when the probes began, the round's time
    module.force_probe(verdict)  # fixes the verdict and clears the kept ones
    start, fresh = module.costly_meeting_exits(), time.monotonic()
    run(f, want), run(g, want_grad)
    return module.costly_meeting_exits() - start, fresh, time.monotonic() - fresh

# Calls while a round's verdicts hold (kept 100 ms from each probe, all after `fresh`): a pair
# starts only where it ends within 90 ms of `fresh` at the last pair's pace (on a loaded machine
# fewer fit, and none runs past the verdicts). Their count and exits.
def fresh_calls(fresh, pace):
    calls = exits = 0
    while calls < 5 and time.monotonic() + pace - fresh < 0.09:
        t, start = time.monotonic(), module.costly_meeting_exits()
        run(f, want), run(g, want_grad)
        pace, calls, exits = time.monotonic() - t, calls + 1, exits + module.costly_meeting_exits() - start
    return calls, exits

run(f, want), run(g, want_grad)  # compile
report = {}
for verdict, name in ((1, "shared"), (2, "alone")):
    rounds = exits = last = 0
    while rounds < (5 if verdict == 1 else 50) and last < 3:  # until one round sees all three probes
        last, fresh, pace = probing_round(verdict)
        exits, rounds = exits + last, rounds + 1
    # Within the verdicts' lifetime calls plan one thread or a leading helper: no probe. Only after a round
    # whose three calls all probed ("alone": all left; on a busy machine a helper may start too
    # late to probe, and the next call would probe instead).
    after = exits_after = 0
    for _ in range(20):
        if verdict == 1 or last >= 3:
            calls, left = fresh_calls(fresh, pace)
            after, exits_after = after + calls, exits_after + left
        if after >= 3:
            break
        last, fresh, pace = probing_round(verdict)
    report[name] = {"rounds": rounds, "exits": exits, "after": after, "exits_after": exits_after}
module.force_probe(0)
report["max_err"] = err
print(json.dumps(report))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux") or len(os.sched_getaffinity(0)) < 2,
                    reason="thread affinity: Linux, two CPUs")
def test_probe_of_small_shared_steps():
    """A call whose small steps two threads share probes whether they should (work_chain): its
    helper shares some steps, then sits out as many (a forward's: leads, projecting ahead of the
    caller's steps) and leaves the call where alone was not slower. Leaving, leading or staying,
    the layer is finished: outputs and gradients as xla computes them (the forward, the forward
    keeping residuals and the backward each probe), and while an "alone" verdict is fresh, calls
    plan one thread or a leading helper (no probe, no exit). Those
    calls run only within the verdicts' 100 ms and after a round whose calls all probed: on a
    loaded CI machine a call after the probes once probed again (five calls can outlast 100 ms
    there, and a helper that starts too late to probe leaves its verdict unset)."""
    env = {k: v for k, v in os.environ.items() if k != native.THREADS_ENV}
    out = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["shared"]["exits"] == 0 and report["shared"]["exits_after"] == 0, report
    assert report["alone"]["exits"] >= 3 and report["alone"]["exits_after"] == 0, report
    assert report["shared"]["after"] >= 3 and report["alone"]["after"] >= 3, report
    assert report["alone"]["rounds"] < 50, report
    assert report["max_err"] < 2e-5, report


def test_auto_picks_cpu_where_built_with_avx2_or_avx512(monkeypatch):
    """auto runs the native kernels where they have AVX2 or AVX-512; with the portable kernels
    (here: capped by JAXGRU_CPU_ISA) it picks xla and says why."""
    monkeypatch.delenv(backends.ENV, raising=False)
    monkeypatch.delenv(native.ISA_ENV, raising=False)
    monkeypatch.setattr(backends.jax, "default_backend", lambda: "cpu")
    monkeypatch.setattr(backends, "gpu_device_node", lambda: None)
    best = native.status()["isa"]
    assert backends.automatic()[0] == ("xla" if best == "generic" else "cpu")
    if best == "avx512":
        monkeypatch.setenv(native.ISA_ENV, "avx2")
        choice, reason = backends.automatic()
        assert choice == "cpu" and "avx2 kernels" in reason
    monkeypatch.setenv(native.ISA_ENV, "generic")
    choice, reason = backends.automatic()
    assert choice == "xla" and "its generic kernels are slower" in reason and "backend='cpu'" in reason
    monkeypatch.delenv(native.ISA_ENV)
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


# --------------------------------------------------------------------------------------
# the tangent map (jax.jvp): its native recurrence against the xla reference
# --------------------------------------------------------------------------------------
def _jvp_fn(case, backend, layout=0, **extra):
    """jit(jvp) of the layer in every float operand (weights, x, initial states given or zero)."""
    fn = jaxgru.gru if case.cell == "gru" else jaxgru.lstm
    kw = case.kwargs(layout)
    states = {k: kw.pop(k) for k in ("initial_h", "initial_c") if k in kw}
    f = lambda p, x, s: fn(p, x, **kw, **s, **extra, backend=backend)
    return jax.jit(lambda prim, tan: jax.jvp(f, prim, tan)), states


def _jvp(case, backend, layout=0, seed=7, **extra):
    """(primal outputs, output tangents) in layout 0, float32, for random tangents of every operand."""
    f, states = _jvp_fn(case, backend, layout, **extra)
    x = case.x if layout == 0 else np.swapaxes(case.x, 0, 1)
    prim = (case.params, x, states)
    rng = np.random.default_rng(seed)
    tan = jax.tree.map(lambda a: rng.standard_normal(np.shape(a)).astype(np.asarray(a).dtype), prim)
    outs = f(prim, tan)

    def to0(o):
        o = [np.asarray(a, np.float32) for a in o]
        if layout == 1:
            o = [np.transpose(o[0], (1, 2, 0, 3))] + [np.swapaxes(a, 0, 1) for a in o[1:]]
        return o

    return to0(outs[0]), to0(outs[1])


def _check_jvp(case, layout=0, atol=2e-5, rtol=1e-5, **extra):
    """cpu against xla; atol scales with the outputs' size (unbounded gates, e.g. LeakyRelu, grow
    the tangents to ~50 at these shapes, where float32 rounding alone differs by ~1e-6 of that)."""
    got, want = _jvp(case, "cpu", layout, **extra), _jvp(case, "xla", layout, **extra)
    for g, w in zip(got[0] + got[1], want[0] + want[1], strict=True):
        np.testing.assert_allclose(g, w, atol=atol * max(1.0, float(np.abs(w).max(initial=0.0))), rtol=rtol)


JVP_FEATURES = [
    *FEATURES,
    ("gru", {"direction": "bidirectional", "lens": [5, 0, 3], "h0": True, "clip": 0.7}),
    ("lstm", {"direction": "bidirectional", "peep": True, "h0": True, "c0": True, "lens": [0, 5, 2]}),
]


@pytest.mark.parametrize(("cell", "opts", "layout"), [(c, o, i % 2) for i, (c, o) in enumerate(JVP_FEATURES)],
                         ids=[f"{c}-{i}-layout{i % 2}" for i, (c, _) in enumerate(JVP_FEATURES)])
def test_jvp_features_match_xla(cell, opts, layout):
    """jvp on cpu (native forward with residuals, native tangent recurrence) equals jvp on xla
    (whose tangent is checked against numerical derivatives in test_transforms), for tangents of
    every float operand: GRU lbr 0/1, LSTM peepholes/input_forget, clip, ragged incl. 0, every
    direction, initial states given or absent, both layouts (alternating over the cases)."""
    opts = dict(opts)
    kw = {k: opts.pop(k) for k in ("h0", "c0", "peep", "lens", "direction") if k in opts}
    case = random_case(np.random.default_rng(8), cell, L=5, N=3, I=4, H=6, **kw, **opts)
    hlo = _jvp_fn(case, "cpu", layout)[0].lower(*_prim_tan(case, layout)).as_text()
    assert f"jaxgru_{cell}_tangent" in hlo and f"jaxgru_{cell}_forward" in hlo
    _check_jvp(case, layout)


def _prim_tan(case, layout=0):
    fn_kw = case.kwargs(layout)
    states = {k: fn_kw[k] for k in ("initial_h", "initial_c") if k in fn_kw}
    x = case.x if layout == 0 else np.swapaxes(case.x, 0, 1)
    prim = (case.params, x, states)
    return prim, jax.tree.map(np.ones_like, prim)


ACT_GROUPS = [activations.NAMES[k : k + 4] for k in range(0, len(activations.NAMES), 4)]


@pytest.mark.parametrize("names", ACT_GROUPS, ids=["-".join(g) for g in ACT_GROUPS])
def test_jvp_every_activation(names):
    """Each activation's derivative in the tangent step, with alpha/beta: four at a time as
    (f, g) of both directions of a GRU (the LSTM's h(C), which act_d takes unclipped, is in
    JVP_FEATURES)."""
    acts = list(names) + ["Sigmoid"] * (4 - len(names))
    kinds = [activations.lookup(a) for a in acts]
    alpha = [0.6 + 0.1 * k for k, a in enumerate(kinds) if a.takes_alpha]
    beta = [0.3 + 0.1 * k for k, a in enumerate(kinds) if a.takes_beta]
    ab = ({"activation_alpha": alpha} if alpha else {}) | ({"activation_beta": beta} if beta else {})
    case = random_case(np.random.default_rng(9), "gru", L=4, N=2, I=3, H=5, direction="bidirectional",
                       activations=acts, **ab)
    _check_jvp(case)


@pytest.mark.parametrize("isa", ["avx512", "avx2", "generic"])
@pytest.mark.parametrize(("cell", "lbr"), [("gru", 0), ("lstm", 0)])
def test_jvp_every_isa_and_tile_tail(monkeypatch, isa, cell, lbr):
    """Each instruction set's tangent kernels (both GRU lbr=0 phases; the one-phase steps of
    lbr=1 run the same tile as the LSTM's), H not a multiple of 16, batch rows beyond one tile,
    ragged lengths with zeros, bidirectional, initial states."""
    monkeypatch.setenv(native.ISA_ENV, isa)
    opts = {"linear_before_reset": lbr} if cell == "gru" else {"peep": True, "c0": True}
    case = random_case(np.random.default_rng(11), cell, L=4, N=9, I=5, H=20, direction="bidirectional",
                       lens=[4, 1, 0, 3, 4, 2, 4, 1, 3], h0=True, **opts)
    jax.clear_caches()  # the ISA is read when a call is lowered
    _check_jvp(case, atol=5e-5, rtol=1e-4)


@pytest.mark.parametrize(("threads", "lbr"), [("1", 0), ("2", 1), ("5", 0)])
def test_jvp_thread_counts_agree(monkeypatch, threads, lbr):
    """Tangent steps split over 1, 2 and 5 threads (each step reads the whole dH, or lbr=0's
    r-phase operand, that the other threads wrote)."""
    monkeypatch.setenv(native.THREADS_ENV, threads)
    case = random_case(np.random.default_rng(12), "gru", L=5, N=10, I=6, H=40, direction="bidirectional",
                       h0=True, linear_before_reset=lbr)
    jax.clear_caches()
    _check_jvp(case, atol=5e-5, rtol=1e-4)


@pytest.mark.parametrize("dtype", [jnp.float16, jnp.bfloat16])
def test_jvp_half_precision_storage_computes_in_float32(dtype):
    case = random_case(np.random.default_rng(13), "lstm", L=5, N=2, I=3, H=7, peep=True, h0=True)
    for name in ("x", "w", "r", "b", "p", "h0"):
        setattr(case, name, np.asarray(jnp.asarray(getattr(case, name), dtype)))
    got, want = _jvp(case, "cpu"), _jvp(case, "xla")
    for g, w in zip(got[0] + got[1], want[0] + want[1], strict=True):
        np.testing.assert_allclose(g, w, atol=3e-2, rtol=2e-2)


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_jvp_check_grads_forward_mode(cell):
    """The native jvp against numerical derivatives (float32: central differences at eps 1e-2)."""
    case = random_case(np.random.default_rng(14), cell, L=4, N=2, I=3, H=5, h0=True, direction="bidirectional",
                       lens=[4, 2], **({"peep": True} if cell == "lstm" else {"linear_before_reset": 1}))
    fn = jaxgru.gru if cell == "gru" else jaxgru.lstm
    kw = case.kwargs(0)
    h0 = kw.pop("initial_h")
    f = jax.jit(lambda p, x, h: fn(p, x, **kw, initial_h=h, backend="cpu"))
    jax.test_util.check_grads(f, (case.params, case.x, h0), order=1, modes=("fwd",), eps=1e-2, atol=2e-2, rtol=2e-2)


def test_jvp_compiles_to_ffi_calls_without_a_loop():
    params = jaxgru.init_lstm(jax.random.key(0), 3, 4, bidirectional=True)
    x = jnp.ones((5, 2, 3))
    f = lambda p, x: jaxgru.lstm(p, x, direction="bidirectional", backend="cpu")
    hlo = jax.jit(lambda p, x, tp, tx: jax.jvp(f, (p, x), (tp, tx))).lower(params, x, params, x).compile().as_text()
    assert hlo.count("jaxgru_lstm_tangent") >= 1 and "jaxgru_lstm_forward" in hlo
    assert not re.search(r"\bwhile\b", hlo)
    ref = jax.jit(lambda p, x, tp, tx: jax.jvp(lambda p, x: jaxgru.lstm(p, x, direction="bidirectional",
                                                                          backend="xla"), (p, x), (tp, tx)))
    assert re.search(r"\bwhile\b", ref.lower(params, x, params, x).compile().as_text())  # the check can fail


def test_jvp_export_and_projection_keep_the_reference():
    """jax.export and the projected LSTM (no native kernel) keep the reference tangent."""
    params = jaxgru.init_gru(jax.random.key(0), 3, 4)
    x = jnp.ones((5, 2, 3))
    g = jax.jit(lambda p, x, tp, tx: jax.jvp(lambda p, x: jaxgru.gru(p, x, backend="cpu"), (p, x), (tp, tx)))
    assert "jaxgru_gru_tangent" in g.lower(params, x, params, x).as_text()  # the check can fail
    assert "jaxgru_gru_tangent" not in jax.export.export(g)(params, x, params, x).mlir_module()
    proj = jaxgru.init_lstm(jax.random.key(1), 3, 6, proj_size=2)
    h = jax.jit(lambda p, x, tp, tx: jax.jvp(lambda p, x: jaxgru.lstm(p, x, backend="cpu"), (p, x), (tp, tx)))
    assert "jaxgru_lstm_tangent" not in h.lower(proj, x, proj, x).as_text()


def test_jvp_float64_stays_on_xla(jax_x64):
    params = jaxgru.init_gru(jax.random.key(0), 3, 4, dtype=jnp.float64)
    x = jnp.ones((5, 2, 3), jnp.float64)
    g = jax.jit(lambda p, x: jax.jvp(lambda x: jaxgru.gru(p, x, backend="cpu"), (x,), (x,)))
    assert "jaxgru_gru_tangent" not in g.lower(params, x).as_text()


def test_jvp_partitioned_jit_falls_back_and_shard_map_runs_native():
    """A batch-sharded jit keeps the reference tangent (the FFI call has no partitioning rule);
    inside shard_map each device runs the native tangent on its shard."""
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    mesh = jax.make_mesh((4,), ("batch",), axis_types=(jax.sharding.AxisType.Explicit,))
    params = jaxgru.init_gru(jax.random.key(0), 3, 5, bidirectional=True)
    x = jax.random.normal(jax.random.key(1), (6, 8, 3))
    tx = jax.random.normal(jax.random.key(2), (6, 8, 3))
    opts = dict(direction="bidirectional", sequence_lens=jnp.arange(8) % 7)
    want = jax.jvp(lambda x: jaxgru.gru(params, x, **opts, backend="xla"), (x,), (tx,))
    xs = jax.device_put(x, NamedSharding(mesh, P(None, "batch")))
    txs = jax.device_put(tx, NamedSharding(mesh, P(None, "batch")))
    g = jax.jit(lambda x, t: jax.jvp(lambda x: jaxgru.gru(params, x, **opts, backend="cpu"), (x,), (t,)))
    assert "jaxgru_gru_tangent" not in g.lower(xs, txs).as_text()
    chex.assert_trees_all_close(g(xs, txs), want, atol=2e-5)
    par = jaxgru.sharded(jaxgru.gru, mesh)
    s = jax.jit(lambda x, t: jax.jvp(lambda x: par(params, x, **opts, backend="cpu"), (x,), (t,)))
    assert "jaxgru_gru_tangent" in s.lower(xs, txs).as_text()
    chex.assert_trees_all_close(s(xs, txs), want, atol=2e-5)


def test_jvp_under_vmap_over_weights():
    """vmapped weights: the ensemble axis, one FFI call per member (vmap_method sequential)."""
    stacked = jax.tree.map(lambda *a: jnp.stack(a), *[jaxgru.init_lstm(jax.random.key(k), 3, 5) for k in (0, 1)])
    x = jax.random.normal(jax.random.key(3), (4, 2, 3))
    f = lambda backend: jax.jit(jax.vmap(lambda p, tp: jax.jvp(lambda p: jaxgru.lstm(p, x, backend=backend),
                                                                (p,), (tp,))))
    chex.assert_trees_all_close(f("cpu")(stacked, stacked), f("xla")(stacked, stacked), atol=2e-5)
