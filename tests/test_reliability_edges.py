"""Edge cases: L = 1 and very long sequences, sizes of 1 and 0, huge, infinite and NaN inputs,
float16 overflow, determinism, and the bugs these tests found (``test_bug_*``).

Oracles: onnxruntime, the other backend, numpy, and metamorphic relations (an input size of 0
is an input size of 1 with zero weights; batch rows are independent). onnxruntime aborts the
process on some zero-sized calls (GRU with seq_length 0 or batch 0, LSTM with batch 0), so it is
never run on them.
"""

from __future__ import annotations

import dataclasses
import itertools
import warnings

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import wgsl_support
from backend_cases import AGAINST_XLA, BACKENDS
from oracles import Case, ort_run
from test_reliability_fuzz import Config, assert_agree, build_case, expected, run, to_layout0

import jaxgru
from jaxgru._src.activations import NAMES, lookup
from jaxgru._src.webgpu import runtime

BOUNDED = ("Sigmoid", "Tanh", "HardSigmoid", "Softsign", "ScaledTanh")  # outputs in [-1, 1]
UNBOUNDED = tuple(n for n in NAMES if n not in BOUNDED)
DEFAULTS = {"gru": ("Sigmoid", "Tanh"), "lstm": ("Sigmoid", "Tanh", "Tanh")}


@pytest.fixture(scope="module")
def adapter():
    return wgsl_support.require_adapter()


def _alpha_beta(names):
    """alpha = 0.7, beta = 0.3 for every activation that takes them (always explicit: onnxruntime
    uses 0 for missing ones)."""
    n_alpha = sum(lookup(n).takes_alpha for n in names)
    n_beta = sum(lookup(n).takes_beta for n in names)
    return (0.7,) * n_alpha, (0.3,) * n_beta


def packed_activations(cell, gates, others):
    """Bidirectional activation lists putting every name of ``gates`` in the gate position f and
    every name of ``others`` in each other position (g, and h for LSTM), two directions a call."""
    out = []
    per = len(DEFAULTS[cell])
    calls = max(-(-len(others) // 2), -(-len(gates) // 2))
    for k in range(calls):
        names = []
        for d in range(2):
            i = 2 * k + d
            row = [gates[i % len(gates)], others[i % len(others)]]
            if per == 3:
                row.append(others[(i + len(others) // 2) % len(others)])
            names += row
        out.append(tuple(names))
    return out


def huge_case(cell, acts, length, seed=0, clip=None):
    """A bidirectional case whose inputs are all ±1e20."""
    alpha, beta = _alpha_beta(acts)
    cfg = Config(cell=cell, L=length, N=3, I=2, H=3, direction="bidirectional", acts=acts,
                 alpha=alpha, beta=beta, clip=clip, h0=True, c0=cell == "lstm", seed=seed)
    case, c32 = build_case(cfg)
    signs = np.where(np.random.default_rng(seed + 1).random(case.x.shape) < 0.5, -1.0, 1.0)
    case.x = c32.x = (signs * 1e20).astype(np.float32)
    return cfg, case, c32


# --------------------------------------------------------------------------------------
# sizes of 1, long sequences
# --------------------------------------------------------------------------------------
UNIT_SHAPES = [(1, 1, 1, 1), (1, 3, 2, 5), (4, 1, 3, 2), (3, 2, 1, 3), (3, 2, 4, 1)]


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("cell", ["gru", "lstm"])
@pytest.mark.parametrize(("L", "N", "I", "H"), UNIT_SHAPES, ids=["x".join(map(str, s)) for s in UNIT_SHAPES])
def test_length_1_and_sizes_of_1_match_onnxruntime(backend, cell, L, N, I, H):
    for layout in (0, 1):
        cfg = Config(cell=cell, L=L, N=N, I=I, H=H, direction="bidirectional", layout=layout, h0=True,
                     c0=cell == "lstm", peep=cell == "lstm", lbr=cell == "gru",
                     lens=tuple(np.arange(N) % (L + 1)), seed=L * 100 + N * 10 + H)
        case, c32 = build_case(cfg)
        for i, (g, w) in enumerate(zip(run(case, cfg, backend), expected(cfg, c32), strict=True)):
            assert_agree(g, w, "float32", f"{backend} output {i}, {cfg}")


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_10000_steps_on_xla_match_onnxruntime(cell):
    cfg = Config(cell=cell, L=10_000, N=2, I=3, H=4, direction="bidirectional", lens=(10_000, 6_001),
                 h0=True, seed=7)
    case, c32 = build_case(cfg)
    got = run(case, cfg, "xla")
    for i, (g, w) in enumerate(zip(got, expected(cfg, c32), strict=True)):
        assert_agree(g, w, "float32", f"output {i}")
    assert np.isfinite(got[0]).all() and not np.any(got[0][6_001:, :, 1])  # masked past the length


@pytest.mark.wgsl
@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_10000_steps_on_wgsl_match_onnxruntime_and_xla(adapter, cell):
    """10 000 steps through the API (the persistent kernel, in segments of 256 steps); 2000
    stepwise (one dispatch per step, 4000 for GRU lbr=0) through the kernel entry point."""
    from test_webgpu_kernels import check, make_cfg, make_operands

    cfg = Config(cell=cell, L=10_000, N=2, I=3, H=4, direction="bidirectional", lens=(10_000, 6_001), h0=True,
                 c0=cell == "lstm", seed=11)
    case, c32 = build_case(cfg)
    want = expected(cfg, c32)
    for i, (g, x, w) in enumerate(zip(run(case, cfg, "wgsl"), run(case, cfg, "xla"), want, strict=True)):
        assert_agree(g, w, "float32", f"wgsl output {i} vs onnxruntime")
        assert_agree(g, x, "float32", f"wgsl output {i} vs xla")
    kcfg = make_cfg(cell, "bidirectional", ragged=True, layout=1, **({"peepholes": True} if cell == "lstm" else {}))
    check(kcfg, make_operands(kcfg, L=2000, N=2, I=3, H=4, lens=[2000, 999], seed=3), variant="stepwise",
          residuals=False)


# --------------------------------------------------------------------------------------
# sizes of 0 (decision: they work; docs/semantics.md "Decisions")
# --------------------------------------------------------------------------------------
ZERO_SHAPES = {"L=0": (0, 3, 2, 4), "N=0": (5, 0, 2, 4), "H=0": (5, 3, 2, 0), "L=N=0": (0, 0, 2, 4)}


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("cell", ["gru", "lstm"])
@pytest.mark.parametrize("layout", [0, 1])
@pytest.mark.parametrize("which", list(ZERO_SHAPES))
def test_zero_sized_calls_return_empty_outputs_and_the_initial_states(backend, cell, layout, which):
    L, N, I, H = ZERO_SHAPES[which]
    cfg = Config(cell=cell, L=L, N=N, I=I, H=H, direction="bidirectional", layout=layout, h0=True,
                 c0=cell == "lstm", lens=(0,) * N, seed=1)
    case, c32 = build_case(cfg)
    fn = jaxgru.gru if cell == "gru" else jaxgru.lstm
    kw = case.kwargs(layout)
    call = lambda p, x: fn(p, x, **kw, backend=backend)
    for jit in (False, True):
        x = case.x if layout == 0 else np.swapaxes(case.x, 0, 1)
        outs = (jax.jit(call) if jit else call)(case.params, x)
        got = to_layout0(outs, layout)
        assert got[0].shape == (L, 2, N, H) and not np.any(got[0])
        np.testing.assert_array_equal(got[1], c32.h0)
        if cell == "lstm":
            np.testing.assert_array_equal(got[2], c32.c0)


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_bug_wgsl_input_size_0_divided_by_zero(backend, cell):
    """input_size 0 (X·Wᵀ is empty: only the biases drive the gates) equals input_size 1 with a
    zero input column, checked by onnxruntime. Was: ZeroDivisionError in the wgsl planner, then
    an empty upload and a 4-byte weight binding."""
    for layout in (0, 1):
        cfg = Config(cell=cell, L=4, N=3, I=1, H=5, direction="bidirectional", layout=layout, h0=True,
                     lens=(4, 0, 2), lbr=cell == "gru", peep=cell == "lstm", seed=5)
        case, c32 = build_case(cfg)
        case.x[:] = 0.0
        c32.x[:] = 0.0
        want = expected(cfg, c32)
        empty = dataclasses.replace(case, x=case.x[..., :0], w=case.w[..., :0])
        for i, (g, w) in enumerate(zip(run(empty, cfg, backend), want, strict=True)):
            assert_agree(g, w, "float32", f"output {i}")


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("which", ["N=0", "H=0", "I=0"])
def test_gradients_of_zero_sized_calls(backend, which):
    L, N, I, H = {"N=0": (4, 0, 2, 3), "H=0": (4, 2, 2, 0), "I=0": (4, 2, 0, 3)}[which]
    rng = np.random.default_rng(0)
    f = lambda *s: rng.standard_normal(s).astype(np.float32) * 0.5
    params = jaxgru.LSTMParams(f(2, 4 * H, I), f(2, 4 * H, H), f(2, 8 * H), f(2, 3 * H))
    def grad(be):
        loss = lambda p, x: sum(jnp.sum(jnp.sin(o)) for o in jaxgru.lstm(p, x, direction="bidirectional", backend=be))
        return jax.jit(jax.grad(loss, argnums=(0, 1)))(params, jnp.ones((L, N, I)))

    grads = grad(backend)
    want = grad("xla") if backend == "wgsl" else None
    for k, g in enumerate(jax.tree.leaves(grads)):
        assert np.isfinite(np.asarray(g)).all()
        if N == 0 or H == 0:
            assert not np.any(np.asarray(g))  # nothing depends on anything
        if want is not None:
            assert_agree(g, jax.tree.leaves(want)[k], "float32", f"gradient leaf {k}")


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_gradient_of_a_length_0_sequence(cell):
    init = jaxgru.init_gru if cell == "gru" else jaxgru.init_lstm
    fn = jaxgru.gru if cell == "gru" else jaxgru.lstm
    params = init(jax.random.key(0), 3, 4)
    h0 = jnp.ones((1, 2, 4))
    # Y_h = h0 for L = 0, so d sum(Y_h) / d h0 = 1 and every other gradient is 0
    g = jax.grad(lambda p, h: jnp.sum(fn(p, jnp.ones((0, 2, 3)), initial_h=h)[1]), argnums=(0, 1))(params, h0)
    np.testing.assert_array_equal(np.asarray(g[1]), np.ones((1, 2, 4)))
    assert not any(np.any(np.asarray(a)) for a in jax.tree.leaves(g[0]))


# --------------------------------------------------------------------------------------
# huge inputs: saturation as onnxruntime's, overflow alike on every backend
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", AGAINST_XLA, indirect=True)
@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_huge_inputs_saturate_like_onnxruntime(cell, backend):
    """x = ±1e20 with a bounded gate activation f and any g (and h): every output is finite and
    equals onnxruntime's, on every backend. Softplus is compared with xla only:
    onnxruntime's log(1 + e^x) overflows to inf above x ≈ 88.7 (a documented difference)."""
    for acts in packed_activations(cell, BOUNDED, NAMES):
        cfg, case, c32 = huge_case(cell, acts, length=4)
        xla, got = run(case, cfg, "xla"), run(case, cfg, backend)
        want = expected(cfg, c32) if "Softplus" not in acts else xla
        for i, (x, g, w) in enumerate(zip(xla, got, want, strict=True)):
            assert np.isfinite(x).all(), (acts, i)
            assert_agree(x, w, "float32", f"xla output {i} vs onnxruntime, {acts}")
            assert_agree(g, x, "float32", f"{backend} output {i} vs xla, {acts}")


@pytest.mark.parametrize("backend", AGAINST_XLA, indirect=True)
@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_huge_inputs_with_an_unbounded_gate_activation(cell, backend):
    """f unbounded (Relu, Affine, LeakyRelu, ThresholdedRelu, Elu, Softplus): one step stays
    finite and equals onnxruntime; over 4 steps the state overflows float32 (inf, then inf - inf
    = NaN): every backend gives xla's NaN/inf pattern and finite values (onnxruntime's pattern
    differs: it evaluates (1 - z)·h~ + z·h where jaxgru evaluates h~ + z·(h - h~))."""
    for acts in packed_activations(cell, UNBOUNDED, BOUNDED):
        cfg, case, c32 = huge_case(cell, acts, length=1)
        xla = run(case, cfg, "xla")
        want = expected(cfg, c32) if "Softplus" not in acts else xla
        for i, (x, g, w) in enumerate(zip(xla, run(case, cfg, backend), want, strict=True)):
            assert np.isfinite(x).all(), (acts, i)
            assert_agree(x, w, "float32", f"one step, xla output {i} vs onnxruntime, {acts}")
            assert_agree(g, x, "float32", f"one step, {backend} output {i} vs xla, {acts}")
        cfg, case, c32 = huge_case(cell, acts, length=4)
        xla = run(case, cfg, "xla")
        assert not np.isfinite(xla[0]).all(), acts  # it does overflow
        for i, (x, g) in enumerate(zip(xla, run(case, cfg, backend), strict=True)):
            assert_agree(g, x, "float32", f"4 steps, {backend} output {i} vs xla, {acts}")


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_softplus_is_overflow_free_unlike_onnxruntime(backend):
    """One GRU step from h0 = 0 with g = Softplus: h' = (1 - z)·softplus(a_h). jaxgru computes
    softplus without overflow (checked with numpy's logaddexp); onnxruntime's overflows."""
    cfg = Config(cell="gru", L=1, N=4, I=2, H=3, acts=("Sigmoid", "Softplus"), bias=False, seed=2)
    case, c32 = build_case(cfg)
    case.x = c32.x = np.array([[[100.0, 50.0], [-100.0, 30.0], [1e20, 1.0], [-1e20, -1.0]]], np.float32)
    x, w = c32.x[0].astype(np.float64), c32.w[0].astype(np.float64)
    with np.errstate(over="ignore"):  # exp(1e20): inf, so z = 0 exactly
        z = 1 / (1 + np.exp(-(x @ w[:3].T)))
    want = (1 - z) * np.logaddexp(0, x @ w[6:].T)  # r·h = 0: the reset gate does not matter
    y, y_h = run(case, cfg, backend)
    np.testing.assert_allclose(y[0, 0], want, rtol=1e-5)
    np.testing.assert_allclose(y_h[0], want, rtol=1e-5)
    assert not np.isfinite(ort_run(c32)[0]).all()  # the documented difference holds


# --------------------------------------------------------------------------------------
# NaN and infinities
# --------------------------------------------------------------------------------------
def _special_inputs(case, c32):
    """NaN at x[1, 0], +inf at x[2, 1], -inf at x[0, 2]; batch row 3 stays finite."""
    for c in (case, c32):
        c.x = c.x.copy()
        c.x[1, 0, 0], c.x[2, 1, 1], c.x[0, 2, 0] = np.nan, np.inf, -np.inf


def _special_inputs_agree_with_xla(backend, cell, clip):
    """NaN and ±inf inputs (_special_inputs): `backend` gives the same NaN/±inf positions and
    finite values as xla with every activation as f, g and h; the finite batch row equals
    onnxruntime's run of that row alone."""
    for acts in packed_activations(cell, NAMES, NAMES):
        alpha, beta = _alpha_beta(acts)
        cfg = Config(cell=cell, L=4, N=4, I=2, H=3, direction="bidirectional", acts=acts, alpha=alpha,
                     beta=beta, clip=clip, h0=True, seed=3)
        case, c32 = build_case(cfg)
        _special_inputs(case, c32)
        xla, got = run(case, cfg, "xla"), run(case, cfg, backend)
        clean = dataclasses.replace(c32, x=c32.x[:, 3:], h0=c32.h0[:, 3:])
        for i, (x, g, w) in enumerate(zip(xla, got, ort_run(clean), strict=True)):
            assert_agree(g, x, "float32", f"{backend} output {i} vs xla, {acts}, clip={clip}")
            row = x[:, :, 3] if i == 0 else x[:, 3]
            assert_agree(row, w[:, :, 0] if i == 0 else w[:, 0], "float32", f"finite row, output {i}, {acts}")


@pytest.mark.wgsl
@pytest.mark.parametrize("clip", [None, 2.0])
@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_bug_wgsl_clamps_turned_nan_into_numbers(cell, clip, adapter):
    """NaN and ±inf inputs agree with xla on wgsl, with and without clip. Was: WGSL's
    clamp/max/min return the non-NaN operand, so Tanh, HardSigmoid, Relu, Elu, Softplus and clip
    mapped NaN to numbers on wgsl, and ±inf times a zero padding weight put NaN into the padding
    lanes (seen with Sigmoid as g)."""
    _special_inputs_agree_with_xla("wgsl", cell, clip)


@pytest.mark.native
@pytest.mark.parametrize("clip", [None, 2.0])
@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_native_clamps_keep_nan_and_infinities(cell, clip):
    """NaN and ±inf inputs agree with xla on the native CPU lowering, with and without clip: its
    exponential's and clip's clamps are min/max instructions with the constant first (csrc
    simd.inc min_c / max_c), which return x where x is NaN; in the other operand order they would
    return the bound."""
    _special_inputs_agree_with_xla("cpu", cell, clip)


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("clip", [None, 2.0])
@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_nan_propagates_forward_in_time_only(backend, cell, clip):
    """Default activations, NaN at x[t=2, n=0]: the forward direction is NaN from t = 2 on and
    equals onnxruntime before; the reverse direction is NaN up to t = 2 and equals onnxruntime
    after; Y_h of both is NaN; the other rows are untouched. clip does not hide the NaN
    (onnxruntime's clip maps NaN to a bound: a documented difference)."""
    cfg = Config(cell=cell, L=5, N=2, I=3, H=4, direction="bidirectional", clip=clip, h0=True, seed=4)
    case, c32 = build_case(cfg)
    want = expected(cfg, c32)
    case.x = case.x.copy()
    case.x[2, 0, 1] = np.nan
    y, y_h, *rest = run(case, cfg, backend)
    assert np.isnan(y[2:, 0, 0]).all() and np.isnan(y[:3, 1, 0]).all()
    assert np.isnan(y_h[:, 0]).all() and all(np.isnan(s[:, 0]).all() for s in rest)
    assert_agree(y[:2, 0, 0], want[0][:2, 0, 0], "float32", "forward before the NaN")
    assert_agree(y[3:, 1, 0], want[0][3:, 1, 0], "float32", "reverse after the NaN")
    for got, w in zip([y, y_h, *rest], want, strict=True):
        row = (slice(None), slice(None), 1) if got.ndim == 4 else (slice(None), 1)
        assert_agree(got[row], w[row], "float32", "the other batch row")
    if clip is not None:  # the documented difference: onnxruntime's clip maps the NaN to a bound
        nan_in = dataclasses.replace(c32, x=case.x.astype(np.float32))
        assert np.isfinite(ort_run(nan_in)[0][2:, 0, 0]).all()


@pytest.mark.wgsl
def test_bug_wgsl_inf_input_poisoned_padding_lanes(adapter):
    """H = 3 (one padding lane per vec4): x = +inf at one element. X·Wᵀ of the padding lane was
    inf·0 = NaN; with Sigmoid as g, r⊙h of that lane fed NaN into every unit of the h-gate
    mat-vec. Same result as xla and onnxruntime now (all finite here)."""
    cfg = Config(cell="gru", L=4, N=3, I=2, H=3, acts=("Sigmoid", "Sigmoid"), h0=True, seed=0)
    case, c32 = build_case(cfg)
    case.x[1, 0, 0] = c32.x[1, 0, 0] = np.inf
    want = expected(cfg, c32)
    for i, (g, x, w) in enumerate(zip(run(case, cfg, "wgsl"), run(case, cfg, "xla"), want, strict=True)):
        assert np.isfinite(w).all()
        assert_agree(x, w, "float32", f"xla output {i}")
        assert_agree(g, w, "float32", f"wgsl output {i}")


# --------------------------------------------------------------------------------------
# float16 overflow
# --------------------------------------------------------------------------------------
def _float16_overflow(cell, backend):
    """float16 computes in float32 and rounds the outputs: values beyond 65504 become ±inf,
    exactly the float32 result cast to float16 (the state itself is carried in float32, so an
    overflowing Y does not make the next step inf). No warning escapes (-W error)."""
    per = len(DEFAULTS[cell])
    acts = ("Sigmoid", "Affine", "Affine")[:per]
    alpha = (3e4,) if cell == "gru" else (3e4, 1.0)  # g scales the state beyond float16's range
    cfg = Config(cell=cell, L=5, N=3, I=2, H=3, acts=acts, alpha=alpha, beta=(0.0,) * (per - 1),
                 dtype="float16", seed=9)
    case, c32 = build_case(cfg)
    want = expected(cfg, c32)  # onnxruntime in float32, cast to float16
    assert np.isinf(want[0]).any() and np.isfinite(want[0]).any()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for i, (g, w) in enumerate(zip(run(case, cfg, backend), want, strict=True)):
            assert_agree(g, w, "float16", f"{backend} output {i}")


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_float16_overflow_is_the_float32_result_cast(cell, backend):
    _float16_overflow(cell, backend)  # wgsl: with shader-f16 where the adapter has it


@pytest.mark.wgsl
@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_bug_wgsl_float16_overflow_warned_in_the_callback(cell, adapter, monkeypatch):
    """wgsl without shader-f16 (the cast to float16 on the host) overflows as the others.
    Was: the float32 -> float16 cast on the host warned "overflow encountered in cast" from
    inside the callback (an error under -W error)."""
    monkeypatch.setattr(runtime.runtime(), "has_f16", False)
    _float16_overflow(cell, "wgsl")


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_bfloat16_has_the_float32_range(backend):
    """bfloat16 has float32's exponent: the values that overflow float16 stay finite."""
    cfg = Config(cell="gru", L=5, N=3, I=2, H=3, acts=("Sigmoid", "Affine"), alpha=(3e4,), beta=(0.0,),
                 dtype="bfloat16", seed=9)
    case, c32 = build_case(cfg)
    want = expected(cfg, c32)
    assert np.abs(want[0]).max() > 65504 and np.isfinite(want[0]).all()
    for i, (g, w) in enumerate(zip(run(case, cfg, backend), want, strict=True)):
        assert_agree(g, w, "bfloat16", f"{backend} output {i}")


# --------------------------------------------------------------------------------------
# determinism
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_repeated_calls_are_bit_identical(backend, cell):
    """Forward and gradients, eager and jitted, each called again gives the same bits (eager: also
    on a freshly created wgsl device). Eager and jitted agree to float32 rounding, not bit for bit:
    XLA fuses the loss's elementwise ops (and, on xla, the step's) differently in the two."""
    cfg = Config(cell=cell, L=6, N=5, I=3, H=7, direction="bidirectional", lens=(6, 0, 3, 1, 6), h0=True,
                 peep=cell == "lstm", lbr=cell == "gru", seed=12)
    case, _ = build_case(cfg)
    fn = jaxgru.gru if cell == "gru" else jaxgru.lstm
    kw = case.kwargs(0)
    fwd = lambda p, x: fn(p, x, **kw, backend=backend)
    grad = jax.grad(lambda p, x: sum(jnp.sum(jnp.sin(o)) for o in fwd(p, x)), argnums=(0, 1))
    jfwd, jgrad = jax.jit(fwd), jax.jit(grad)
    eager = lambda: (fwd(case.params, case.x), grad(case.params, case.x))
    jitted = lambda: (jfwd(case.params, case.x), jgrad(case.params, case.x))
    leaves = lambda outs: [np.asarray(a) for a in jax.tree.leaves(outs)]
    first = {"eager": leaves(eager()), "jit": leaves(jitted())}
    runs = [("jit", jitted)] * 3 + [("eager", eager)]
    if backend == "wgsl":
        runs.append(("eager", lambda: (runtime.reset(), eager())[1]))
    for mode, again in runs:
        for a, b in zip(first[mode], leaves(again()), strict=True):
            np.testing.assert_array_equal(b, a, err_msg=mode)
    for a, b in zip(first["eager"], first["jit"], strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)


# --------------------------------------------------------------------------------------
# errors that named the wrong argument, or none
# --------------------------------------------------------------------------------------
CELL_ARGS = {
    "h-batch": (lambda p, lp: jaxgru.gru_cell(p, jnp.zeros((3, 2)), jnp.zeros((4, 5))), ValueError,
                ["h", "(batch, hidden)=(3, 5)", "(4, 5)"]),
    "h-hidden": (lambda p, lp: jaxgru.gru_cell(p, jnp.zeros((3, 2)), jnp.zeros((3, 6))), ValueError,
                 ["h", "(3, 5)", "(3, 6)"]),
    "c-hidden": (lambda p, lp: jaxgru.lstm_cell(lp, jnp.zeros((3, 2)), jnp.zeros((3, 5)), jnp.zeros((3, 4))),
                 ValueError, ["c", "(3, 5)", "(3, 4)"]),
    "x_t-dtype": (lambda p, lp: jaxgru.gru_cell(p, jnp.zeros((3, 2), jnp.int32), jnp.zeros((3, 5))), TypeError,
                  ["x_t", "int32"]),
    "h-dtype": (lambda p, lp: jaxgru.lstm_cell(lp, jnp.zeros((3, 2)), jnp.zeros((3, 5), bool), jnp.zeros((3, 5))),
                TypeError, ["h", "bool"]),
}


@pytest.mark.parametrize("case_id", list(CELL_ARGS))
def test_bug_cell_errors_named_initial_h_instead_of_h(case_id):
    """gru_cell / lstm_cell reported their h, c and x_t as the layer's initial_h, initial_c and x,
    with the layer's 3-D shapes."""
    thunk, exc, pieces = CELL_ARGS[case_id]
    p, lp = jaxgru.init_gru(jax.random.key(0), 2, 5), jaxgru.init_lstm(jax.random.key(0), 2, 5)
    with pytest.raises(exc) as info:
        thunk(p, lp)
    message = str(info.value)
    assert "initial_" not in message and message.startswith("jaxgru."), message
    for piece in pieces:
        assert piece in message, (piece, message)


@pytest.mark.parametrize("bad", ["bool-size", "numpy-size", "str-bidirectional"])
def test_init_sizes_refuse_bools_and_accept_numpy_ints(bad):
    key = jax.random.key(0)
    if bad == "numpy-size":
        assert jaxgru.init_gru(key, np.int64(3), np.int32(4)).w.shape == (1, 12, 3)
        return
    with pytest.raises((TypeError, ValueError), match=r"hidden_size|bidirectional"):
        if bad == "bool-size":
            jaxgru.init_gru(key, 3, True)
        else:
            jaxgru.init_lstm(key, 3, 4, bidirectional="no")


@pytest.mark.parametrize("bad", ["mesh", "x", "x-rank"])
def test_sharded_names_a_bad_mesh_or_x(bad):
    params = jaxgru.init_gru(jax.random.key(0), 3, 4)
    mesh = jax.make_mesh((1,), ("batch",))
    if bad == "mesh":
        with pytest.raises(TypeError, match=r"mesh must be a jax\.sharding\.Mesh; got NoneType"):
            jaxgru.sharded(jaxgru.gru, None)
    elif bad == "x":
        with pytest.raises(TypeError, match="x must be an array; got object"):
            jaxgru.sharded(jaxgru.gru, mesh)(params, object())
    else:
        with pytest.raises(ValueError, match=r"x must have rank 3 .* got shape \(3,\)"):
            jaxgru.sharded(jaxgru.gru, mesh)(params, jnp.ones(3))


def test_sharded_takes_array_likes_as_the_layers_do():
    """A nested list x works as it does for jaxgru.gru, with the same result."""
    params = jaxgru.init_gru(jax.random.key(0), 3, 4)
    x = [[[1.0, 2.0, 3.0]], [[0.5, -1.0, 2.0]]]
    got = jaxgru.sharded(jaxgru.gru, jax.make_mesh((1,), ("batch",)))(params, x)
    chex.assert_trees_all_close(got, jaxgru.gru(params, jnp.asarray(x)), rtol=1e-6)


def test_every_activation_is_covered_by_the_packed_lists():
    """Guard for the packing above: each name reaches each position."""
    for cell, gates in itertools.product(["gru", "lstm"], [BOUNDED, UNBOUNDED, NAMES]):
        per = len(DEFAULTS[cell])
        lists = packed_activations(cell, gates, NAMES)
        for role in range(per):
            seen = {a[d * per + role] for a in lists for d in range(2)}
            assert seen == set(gates if role == 0 else NAMES), (cell, role)


def test_case_helpers_build_what_onnxruntime_runs():
    """build_case gives jaxgru and onnxruntime the same (rounded) values."""
    cfg = Config(cell="lstm", L=2, N=2, I=2, H=2, dtype="float16", acts=("sigmoid", "TANH", "Tanh"), seed=1)
    low, c32 = build_case(cfg)
    assert isinstance(c32, Case) and c32.attrs["activations"] == ["Sigmoid", "Tanh", "Tanh"]
    assert low.attrs["activations"] == ["sigmoid", "TANH", "Tanh"]
    np.testing.assert_array_equal(low.x.astype(np.float32), c32.x)
