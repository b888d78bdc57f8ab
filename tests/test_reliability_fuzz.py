"""Differential and invalid-input fuzzing (hypothesis): random valid calls agree on ``xla``,
``wgsl`` and onnxruntime; random malformed calls raise a ValueError/TypeError naming the argument.

Example counts: the suite's "ci" profile runs the explicit CI counts below (derandomised); any
other profile (``make fuzz`` loads "fuzz") runs that profile's ``max_examples``.

The helpers (``Config``, ``build_case``, ``to_layout0``, ``assert_agree``, ``expected_from_ort``)
are shared with the other ``test_reliability_*`` files.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import itertools
import os

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
import wgsl_support
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracles import Case, numpy_run, ort_run

import jaxgru
from jaxgru._src import native
from jaxgru._src.activations import NAMES, lookup
from jaxgru._src.backends import NativeUnavailableError
from jaxgru._src.webgpu.runtime import WGPUUnavailableError

PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")


def examples(ci: int) -> int:
    """``ci`` examples under the CI profile; the loaded profile's count under any other."""
    return ci if PROFILE == "ci" else settings.default.max_examples


FUZZ = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
# (atol, rtol); atol is scaled by max(1, |expected|) (unbounded activations grow the state)
TOL = {"float32": (1e-5, 1e-4), "float16": (2e-3, 2e-3), "bfloat16": (1.6e-2, 1.6e-2)}
BOUNDED_GATES = ("Sigmoid", "HardSigmoid")  # f for half precision: keeps |h| from growing
BOUNDED = ("sigmoid", "hardsigmoid", "tanh", "scaledtanh", "softsign")  # |f(x)| bounded for every x


@pytest.fixture(scope="module")
def adapter():
    return wgsl_support.require_adapter()


# --------------------------------------------------------------------------------------
# valid configurations
# --------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Config:
    """One random valid GRU/LSTM call (everything but the random values)."""

    cell: str
    L: int
    N: int
    I: int
    H: int
    direction: str = "forward"
    layout: int = 0
    lens: tuple[int, ...] | None = None
    h0: bool = False
    c0: bool = False
    bias: bool = True
    lbr: bool = False
    peep: bool = False
    input_forget: bool = False
    clip: float | None = None
    acts: tuple[str, ...] | None = None
    alpha: tuple[float, ...] = ()
    beta: tuple[float, ...] = ()
    dtype: str = "float32"
    scale: float = 0.5
    seed: int = 0

    @property
    def d(self) -> int:
        return 2 if self.direction == "bidirectional" else 1


def _activation_lists(draw, cell, d, dtype):
    per = 2 if cell == "gru" else 3
    names = []
    for _ in range(d):
        f = draw(st.sampled_from(BOUNDED_GATES if dtype != "float32" else NAMES))
        names += [f] + [draw(st.sampled_from(NAMES)) for _ in range(per - 1)]
    # alpha/beta always explicit: onnxruntime uses 0 for missing Affine/ScaledTanh/ThresholdedRelu ones
    n_alpha = sum(lookup(n).takes_alpha for n in names)
    n_beta = sum(lookup(n).takes_beta for n in names)
    alpha = tuple(draw(st.lists(st.floats(0.1, 1.5), min_size=n_alpha, max_size=n_alpha)))
    beta = tuple(draw(st.lists(st.floats(-0.5, 1.0), min_size=n_beta, max_size=n_beta)))
    # names are case-insensitive: every third one in another spelling (onnxruntime gets the canonical one)
    return tuple(draw(st.sampled_from([n.upper(), n.lower()])) if k % 3 == 0 else n
                 for k, n in enumerate(names)), alpha, beta


@st.composite
def configs(draw, dtypes=("float32", "float16", "bfloat16"), min_length=0):
    """Random valid calls: 1-sized and prime sizes, every option, lengths including 0 and L."""
    cell = draw(st.sampled_from(["gru", "lstm"]))
    L = draw(st.sampled_from([0, 1, 1, 2, 3, 5, 7]).filter(lambda v: v >= min_length))
    N, I, H = (draw(st.sampled_from(s)) for s in ([1, 2, 3, 5], [1, 2, 3, 5], [1, 2, 3, 5, 7]))
    direction = draw(st.sampled_from(["forward", "reverse", "bidirectional"]))
    d = 2 if direction == "bidirectional" else 1
    dtype = draw(st.sampled_from(dtypes))
    lens = None
    if draw(st.booleans()):
        lens = tuple(draw(st.lists(st.sampled_from([0, L, *range(L + 1)]), min_size=N, max_size=N)))
    acts, alpha, beta = (None, (), ())
    if draw(st.booleans()):
        acts, alpha, beta = _activation_lists(draw, cell, d, dtype)
    return Config(
        cell=cell, L=L, N=N, I=I, H=H, direction=direction, layout=draw(st.sampled_from([0, 1])),
        lens=lens, h0=draw(st.booleans()), c0=cell == "lstm" and draw(st.booleans()),
        bias=draw(st.booleans()), lbr=cell == "gru" and draw(st.booleans()),
        peep=cell == "lstm" and draw(st.booleans()), input_forget=cell == "lstm" and draw(st.booleans()),
        clip=draw(st.none() | st.floats(0.1, 5.0)), acts=acts, alpha=alpha, beta=beta, dtype=dtype,
        scale=draw(st.sampled_from([0.1, 0.5, 1.0])), seed=draw(st.integers(0, 2**31 - 1)),
    )


@st.composite
def pipelined_configs(draw):
    """Random valid one-direction calls whose native lowering runs pipelined on two threads
    (csrc plan_threads): N = 16, H = 56-64 (301-524 kFLOP a step, above probing's 256), and
    70-90 steps, 4-6 chunks of projections (16-21 steps) through a ring of three. Bounded
    activations only: over so many steps an unbounded one grows the state until rounding
    differences between implementations are all that is compared."""
    bounded = lambda c: c.acts is None or all(a.lower() in BOUNDED for a in c.acts)
    cfg = draw(configs(min_length=1).filter(lambda c: c.direction != "bidirectional" and bounded(c)))
    L, N = draw(st.sampled_from([70, 90])), 16
    lens = None
    if cfg.lens is not None:
        lens = tuple(draw(st.lists(st.sampled_from([0, L, 16, 17, 21, 22, 63, 64, *range(L + 1)]), min_size=N,
                                   max_size=N)))
    # weights of ~1/sqrt(H): larger ones make the recurrence chaotic over so many steps (at 0.5,
    # H = 64 and 40 steps, xla's and the native outputs' rounding grew to 8e-4 apart)
    return dataclasses.replace(cfg, L=L, N=N, I=draw(st.sampled_from([5, 24])), H=draw(st.sampled_from([56, 64])),
                               lens=lens, scale=draw(st.sampled_from([0.05, 0.1])))


# (cell, N, H): 25-41 kFLOP a step, which the native lowering runs on one core while a second
# thread projects the inputs ahead (csrc lead_chunk): the GRU's too small a step for two
# threads, the others probed first (two threads at most, whatever XLA's pool holds)
LEAD_SHAPES = [("gru", 1, 64), ("lstm", 1, 64), ("lstm", 4, 32), ("gru", 3, 48)]
LEAD_FLOPS = 3 << 20  # csrc kLeadFlops: the projections' work of a call that leads


@st.composite
def lead_configs(draw):
    """Random valid one-direction calls whose small steps one thread runs while another projects
    the inputs ahead of them, into a ring of chunks: the shapes above, I = 24 or 40, and as many
    steps as make the projections worth it (128-410, plus up to 40). Bounded activations, small
    weights: over so many steps anything else grows apart by rounding alone."""
    bounded = lambda c: c.acts is None or all(a.lower() in BOUNDED for a in c.acts)
    cell, N, H = draw(st.sampled_from(LEAD_SHAPES))
    cfg = draw(configs(min_length=1).filter(
        lambda c: c.cell == cell and c.direction != "bidirectional" and bounded(c)))
    I = draw(st.sampled_from([24, 40]))
    G = 3 if cell == "gru" else 4
    L = -(-LEAD_FLOPS // (2 * N * G * H * I)) + draw(st.integers(0, 40))
    lens = None
    if cfg.lens is not None:
        lens = tuple(draw(st.lists(st.sampled_from([0, L, 1, 15, 16, 17, 21, *range(L + 1)]), min_size=N,
                                   max_size=N)))
    return dataclasses.replace(cfg, L=L, N=N, I=I, H=H, lens=lens, scale=draw(st.sampled_from([0.05, 0.1])))


def build_case(cfg: Config) -> tuple[Case, Case]:
    """(case in cfg.dtype for jaxgru, the same values in float32 for onnxruntime), layout 0."""
    rng = np.random.default_rng(cfg.seed)
    g = 3 if cfg.cell == "gru" else 4
    d = cfg.d
    f = lambda *s: (rng.standard_normal(s) * cfg.scale).astype(np.float32)
    attrs = {}
    if cfg.direction != "forward":
        attrs["direction"] = cfg.direction
    if cfg.lbr:
        attrs["linear_before_reset"] = 1
    if cfg.input_forget:
        attrs["input_forget"] = 1
    if cfg.clip is not None:
        attrs["clip"] = cfg.clip
    if cfg.acts is not None:
        attrs["activations"] = [lookup(n).name for n in cfg.acts]
        if cfg.alpha:
            attrs["activation_alpha"] = list(cfg.alpha)
        if cfg.beta:
            attrs["activation_beta"] = list(cfg.beta)
    c32 = Case(cfg.cell, f(cfg.L, cfg.N, cfg.I) * 2, f(d, g * cfg.H, cfg.I), f(d, g * cfg.H, cfg.H), attrs=attrs)
    c32.b = f(d, 2 * g * cfg.H) if cfg.bias else None
    c32.p = f(d, 3 * cfg.H) if cfg.peep else None
    c32.h0 = f(d, cfg.N, cfg.H) if cfg.h0 else None
    c32.c0 = f(d, cfg.N, cfg.H) if cfg.c0 else None
    c32.lens = None if cfg.lens is None else np.asarray(cfg.lens, np.int32)
    low = copy.copy(c32)
    if cfg.acts is not None:
        low.attrs = dict(attrs, activations=list(cfg.acts))
    dt = DTYPES[cfg.dtype]
    for name in ("x", "w", "r", "b", "p", "h0", "c0"):
        v = getattr(c32, name)
        if v is not None:
            setattr(low, name, v.astype(dt))
            setattr(c32, name, v.astype(dt).astype(np.float32))  # the values jaxgru sees
    return low, c32


def to_layout0(outs, layout: int) -> list[np.ndarray]:
    """Outputs of a layout-1 call in layout 0 (y [L, D, N, H], states [D, N, H])."""
    outs = [np.asarray(o) for o in outs]
    if layout == 0:
        return outs
    return [np.transpose(outs[0], (1, 2, 0, 3))] + [np.swapaxes(o, 0, 1) for o in outs[1:]]


def expected_from_ort(c32: Case, dtype: str) -> list[np.ndarray]:
    """onnxruntime's outputs (float32), with jaxgru's documented decision for length-0 rows
    (the initial state, where onnxruntime gives zeros), rounded to the call's dtype."""
    want = [np.array(o) for o in ort_run(c32)]
    if c32.lens is not None:
        empty = np.flatnonzero(c32.lens == 0)
        for i, init in ((1, c32.h0), (2, c32.c0)):
            if i < len(want) and len(empty):
                want[i][:, empty] = 0.0 if init is None else init[:, empty]
    return rounded(want, dtype)


def rounded(outputs, dtype: str) -> list[np.ndarray]:
    """An oracle's outputs rounded to the call's dtype, as float32 (beyond the dtype's range:
    ±inf, as jaxgru's outputs)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return [np.asarray(w).astype(np.float32).astype(DTYPES[dtype]).astype(np.float32) for w in outputs]


def assert_agree(got, want, dtype: str = "float32", what: str = "") -> None:
    """Same shape, same NaN/±inf positions, finite values within the dtype's tolerance."""
    got, want = np.asarray(got).astype(np.float64), np.asarray(want).astype(np.float64)
    assert got.shape == want.shape, (what, got.shape, want.shape)
    for name, test in (("NaN", np.isnan), ("+inf", np.isposinf), ("-inf", np.isneginf)):
        np.testing.assert_array_equal(test(got), test(want), err_msg=f"{what}: {name} positions")
    finite = np.isfinite(want)
    atol, rtol = TOL[dtype]
    scale = max(1.0, float(np.abs(want[finite]).max(initial=0.0)))
    np.testing.assert_allclose(got[finite], want[finite], atol=atol * scale, rtol=rtol, err_msg=what)


OVERFLOW = 1e30  # beyond this, the next step of an unbounded activation overflows float32


def overflowed(outputs) -> bool:
    """Whether onnxruntime's outputs overflowed float32 (unbounded activations growing the state)."""
    return any(not np.isfinite(w).all() or np.abs(w).max(initial=0.0) > OVERFLOW for w in outputs)


def assert_agree_with_overflowed(got, want, dtype: str = "float32", what: str = "") -> None:
    """After float32 overflowed, inf and NaN depend on the evaluation order (onnxruntime computes
    (1 - z)·h~ + z·h, jaxgru h~ + z·(h - h~); onnxruntime's Relu maps NaN to 0): compare the
    values that are finite and below OVERFLOW on both sides (the backends are compared exactly)."""
    got, want = np.asarray(got).astype(np.float64), np.asarray(want).astype(np.float64)
    assert got.shape == want.shape, (what, got.shape, want.shape)
    keep = np.isfinite(got) & np.isfinite(want) & (np.abs(want) <= OVERFLOW)
    assert_agree(got[keep], want[keep], dtype, what)


_CALLS = itertools.count(1)


def _bounded_caches(every: int = 200) -> None:
    """Clear JAX's caches every ``every`` fuzz examples. Each distinct configuration compiles
    new XLA:CPU executables (about 45 memory mappings each); a 2000-example run in one
    process would exhaust vm.max_map_count (65530) and crash the compiler (seen: SIGSEGV
    after ~1400 examples)."""
    if next(_CALLS) % every == 0:
        jax.clear_caches()


def run(case: Case, cfg: Config, backend: str) -> list[np.ndarray]:
    """The case through the public API in cfg's layout; outputs in layout 0 (float32)."""
    outs = case.run(cfg.layout, backend=backend)
    for o in outs:
        assert o.dtype == jnp.dtype(DTYPES[cfg.dtype]), (o.dtype, cfg.dtype)
    return [o.astype(np.float32) for o in to_layout0(outs, cfg.layout)]


def uses_softplus(cfg: Config) -> bool:
    return cfg.acts is not None and any(a.lower() == "softplus" for a in cfg.acts)


def expected_from_numpy(c32: Case, dtype: str) -> list[np.ndarray]:
    """The float64 numpy oracle, rounded to the call's dtype (beyond its range: ±inf)."""
    return rounded(numpy_run(c32), dtype)


def expected(cfg: Config, c32: Case) -> list[np.ndarray]:
    """The oracle: onnxruntime; the float64 numpy oracle where a Softplus is used (onnxruntime's
    overflows above x ≈ 88.7 and the inf spreads through the state, a documented difference);
    the documented decision for L = 0 (onnxruntime aborts the process on a GRU of length 0, and
    gives zero states for an LSTM)."""
    if cfg.L > 0 and uses_softplus(cfg):
        return expected_from_numpy(c32, cfg.dtype)
    if cfg.L > 0:
        return expected_from_ort(c32, cfg.dtype)
    st_ = lambda s: np.zeros((cfg.d, cfg.N, cfg.H), np.float32) if s is None else s
    outs = [np.zeros((0, cfg.d, cfg.N, cfg.H), np.float32), st_(c32.h0)]
    return outs + ([st_(c32.c0)] if cfg.cell == "lstm" else [])


# --------------------------------------------------------------------------------------
# differential fuzzing
# --------------------------------------------------------------------------------------
@settings(max_examples=examples(30), **FUZZ)
@given(cfg=configs())
def test_fuzz_xla_matches_onnxruntime(cfg):
    _bounded_caches()
    case, c32 = build_case(cfg)
    want = expected(cfg, c32)
    vs_ort = assert_agree_with_overflowed if overflowed(want) else assert_agree
    for i, (g, w) in enumerate(zip(run(case, cfg, "xla"), want, strict=True)):
        vs_ort(g, w, cfg.dtype, f"xla output {i} vs onnxruntime, {cfg}")


@pytest.mark.wgsl
@settings(max_examples=examples(30), **FUZZ)
@given(cfg=configs())
def test_fuzz_wgsl_matches_xla_and_onnxruntime(adapter, cfg):
    _bounded_caches()
    case, c32 = build_case(cfg)
    want = expected(cfg, c32)
    xla, wgsl = run(case, cfg, "xla"), run(case, cfg, "wgsl")
    vs_ort = assert_agree_with_overflowed if overflowed(want) else assert_agree
    for i, (w, x, g) in enumerate(zip(want, xla, wgsl, strict=True)):
        vs_ort(g, w, cfg.dtype, f"wgsl output {i} vs onnxruntime, {cfg}")
        assert_agree(g, x, cfg.dtype, f"wgsl output {i} vs xla, {cfg}")


@pytest.mark.native
@settings(max_examples=examples(30), **FUZZ)
@given(cfg=configs())
def test_fuzz_cpu_matches_xla_and_onnxruntime(cfg):
    """The native CPU lowering (backend="cpu") against onnxruntime and the xla reference."""
    _bounded_caches()
    case, c32 = build_case(cfg)
    want = expected(cfg, c32)
    xla, cpu = run(case, cfg, "xla"), run(case, cfg, "cpu")
    vs_ort = assert_agree_with_overflowed if overflowed(want) else assert_agree
    vs_xla = assert_agree_with_overflowed if overflowed(want) else assert_agree
    for i, (w, x, g) in enumerate(zip(want, xla, cpu, strict=True)):
        vs_ort(g, w, cfg.dtype, f"cpu output {i} vs onnxruntime, {cfg}")
        vs_xla(g, x, cfg.dtype, f"cpu output {i} vs xla, {cfg}")


@contextlib.contextmanager
def cpu_threads(n: int | None):
    """The native lowering's calls on n threads (JAXGRU_CPU_THREADS, read when a call is lowered;
    None: its own choice). A context, not the monkeypatch fixture: hypothesis runs many examples
    in one test call."""
    with pytest.MonkeyPatch.context() as mp:
        if n is None:
            mp.delenv(native.THREADS_ENV, raising=False)
        else:
            mp.setenv(native.THREADS_ENV, str(n))
        jax.clear_caches()
        try:
            yield native._module()[0]
        finally:
            jax.clear_caches()


def _agree_and_match_one_thread(case: Case, cfg: Config, want, xla, cpu, how: str) -> None:
    """The native outputs `cpu` against onnxruntime's (`want`) and xla's, and bit for bit against
    the same call on one thread (a unit's arithmetic does not depend on which thread runs it)."""
    with cpu_threads(1):
        one = run(case, cfg, "cpu")
    for i, (w, x, g, o) in enumerate(zip(want, xla, cpu, one, strict=True)):
        assert_agree(g, w, cfg.dtype, f"cpu output {i} vs onnxruntime, {cfg}")
        assert_agree(g, x, cfg.dtype, f"cpu output {i} vs xla, {cfg}")
        np.testing.assert_array_equal(g, o, err_msg=f"cpu output {i}, {how} vs one thread, {cfg}")


@pytest.mark.native
@settings(max_examples=examples(10), **FUZZ)
@given(cfg=pipelined_configs())
def test_fuzz_cpu_pipelined_matches_xla_and_onnxruntime(cfg):
    """The native lowering where its helper projects ahead of the caller's steps (csrc
    work_pipelined), every option and storage type: against onnxruntime and the xla reference,
    and bit for bit against the same lowering on one thread (a unit's arithmetic does not depend
    on which thread runs it, nor when)."""
    case, c32 = build_case(cfg)
    want = expected(cfg, c32)
    xla = run(case, cfg, "xla")
    with cpu_threads(2) as module:
        before = module.pipelined_calls()
        cpu = run(case, cfg, "cpu")
        assert module.pipelined_calls() > before, cfg
    _agree_and_match_one_thread(case, cfg, want, xla, cpu, "pipelined")


@pytest.mark.native
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2 if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1) < 2,
                    reason="a second thread in XLA's pool")
@settings(max_examples=examples(10), **FUZZ)
@given(cfg=lead_configs(), verdict=st.sampled_from([0, 1, 2]))
def test_fuzz_cpu_led_steps_match_xla_and_onnxruntime(cfg, verdict):
    """The native lowering where one thread runs the small steps while another projects ahead of
    them (csrc lead_chunk, work_pipelined), planned so or after a probe (any verdict: the probing
    call leads after the steps it shares), every option and storage type: against onnxruntime
    and the xla reference, and bit for bit against the same lowering on one thread."""
    case, c32 = build_case(cfg)
    want = expected(cfg, c32)
    xla = run(case, cfg, "xla")
    with cpu_threads(None) as module:
        module.force_probe(verdict)  # clears the kept verdicts: a call in the probes' range probes
        try:
            before = module.pipelined_calls()
            cpu = run(case, cfg, "cpu")
            assert module.pipelined_calls() > before, cfg
        finally:
            module.force_probe(0)
    _agree_and_match_one_thread(case, cfg, want, xla, cpu, "led")


@pytest.mark.wgsl
@settings(max_examples=examples(6), **FUZZ)
@given(cfg=configs(dtypes=("float32",), min_length=1))
def test_fuzz_gradients_agree_across_backends(adapter, cfg):
    """grad on wgsl (the WGSL forward, residuals and backward) equals grad on xla."""
    _assert_gradients_match_xla(cfg, "wgsl")


@pytest.mark.native
@settings(max_examples=examples(8), **FUZZ)
@given(cfg=configs(dtypes=("float32",), min_length=1))
def test_fuzz_cpu_gradients_match_xla(cfg):
    """grad on cpu (native forward, residuals and reverse recurrence) equals grad on xla."""
    _assert_gradients_match_xla(cfg, "cpu")


def _assert_gradients_match_xla(cfg, backend: str) -> None:
    _bounded_caches(50)  # four programs an example
    case, _ = build_case(cfg)
    fn = jaxgru.gru if cfg.cell == "gru" else jaxgru.lstm
    kw = case.kwargs(0)

    # a linear loss with random cotangents: a nonlinear one (sin(o)) is ill-conditioned where an
    # unbounded activation grows the outputs to 1e7 and would compare rounding, not gradients
    rng = np.random.default_rng(cfg.seed)
    cts = [rng.standard_normal(o.shape).astype(np.float32) for o in case.run(0, backend="xla")]

    def loss(backend):
        def f(params, x):
            outs = fn(params, x, **kw, backend=backend)
            return sum(jnp.sum(o * c) for o, c in zip(outs, cts, strict=True))
        return jax.jit(jax.grad(f, argnums=(0, 1)))

    want = loss("xla")(case.params, case.x)
    got = loss(backend)(case.params, case.x)
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        assert_agree(g, w, "float32", f"gradient, {cfg}")


@pytest.mark.native
@settings(max_examples=examples(8), **FUZZ)
@given(cfg=configs())
def test_fuzz_cpu_jvp_matches_xla(cfg):
    """jvp on cpu (native forward with residuals, native tangent recurrence) equals jvp on xla,
    for random tangents of every float operand, in every storage dtype and layout, L = 0 too."""
    _bounded_caches(50)
    case, _ = build_case(cfg)
    fn = jaxgru.gru if cfg.cell == "gru" else jaxgru.lstm
    kw = case.kwargs(cfg.layout)
    states = {k: kw.pop(k) for k in ("initial_h", "initial_c") if k in kw}
    x = case.x if cfg.layout == 0 else np.swapaxes(case.x, 0, 1)
    prim = (case.params, x, states)
    rng = np.random.default_rng(cfg.seed)
    tan = jax.tree.map(lambda a: rng.standard_normal(np.shape(a)).astype(np.asarray(a).dtype), prim)

    def jvp(backend):
        f = lambda p, x, s: fn(p, x, **kw, **s, backend=backend)
        primal, tangent = jax.jit(lambda a, b: jax.jvp(f, a, b))(prim, tan)
        return [o.astype(np.float32) for o in to_layout0(primal, cfg.layout) + to_layout0(tangent, cfg.layout)]

    want, got = jvp("xla"), jvp("cpu")
    check = assert_agree_with_overflowed if overflowed(want) else assert_agree
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        check(g, w, cfg.dtype, f"cpu jvp output {i} vs xla, {cfg}")


@settings(max_examples=examples(30), **FUZZ)
@given(cfg=configs(dtypes=("float32",), min_length=1))
def test_fuzz_numpy_oracle_matches_onnxruntime(cfg):
    """Guard for the float64 numpy oracle (used for Softplus): it agrees with onnxruntime
    wherever onnxruntime is right (no Softplus)."""
    if uses_softplus(cfg):
        cfg = dataclasses.replace(cfg, acts=tuple("Softsign" if a.lower() == "softplus" else a for a in cfg.acts))
    _, c32 = build_case(cfg)
    want = expected_from_ort(c32, "float32")
    vs_ort = assert_agree_with_overflowed if overflowed(want) else assert_agree
    for i, (g, w) in enumerate(zip(expected_from_numpy(c32, "float32"), want, strict=True)):
        vs_ort(g, w, "float32", f"numpy oracle output {i} vs onnxruntime, {cfg}")


# --------------------------------------------------------------------------------------
# invalid-input fuzzing
# --------------------------------------------------------------------------------------
ALLOWED = (ValueError, TypeError, NotImplementedError, WGPUUnavailableError, NativeUnavailableError)
NOT_ARRAYS = st.sampled_from([None, "abc", {"a": 1}, object(), [["x", 1]]])
BAD_DTYPES = st.sampled_from([np.int32, np.int8, np.uint8, np.bool_, np.complex64])


def _valid_call(cell, d, layout):
    """A valid call, as (function, kwargs) with every operand given."""
    L, N, I, H = 4, 3, 2, 5
    g = 3 if cell == "gru" else 4
    rng = np.random.default_rng(0)
    f = lambda *s: rng.standard_normal(s).astype(np.float32)
    params = (jaxgru.GRUParams(f(d, g * H, I), f(d, g * H, H), f(d, 2 * g * H)) if cell == "gru" else
              jaxgru.LSTMParams(f(d, g * H, I), f(d, g * H, H), f(d, 2 * g * H), f(d, 3 * H)))
    st_ = (d, N, H) if layout == 0 else (N, d, H)
    kw = dict(params=params, x=f(L, N, I) if layout == 0 else f(N, L, I), initial_h=f(*st_),
              sequence_lens=np.array([4, 0, 2], np.int32), layout=layout,
              direction="bidirectional" if d == 2 else "forward")
    if cell == "lstm":
        kw["initial_c"] = f(*st_)
    return kw


def _reshape(draw, a):
    """An array of another shape: a changed size on one axis, or another rank."""
    shape = list(a.shape)
    if draw(st.booleans()) or not shape:
        shape = draw(st.lists(st.integers(1, 4), max_size=5).filter(lambda s: len(s) != a.ndim))
    else:
        k = draw(st.integers(0, len(shape) - 1))
        shape[k] = draw(st.integers(0, shape[k] + 3).filter(lambda v, old=shape[k]: v != old))
    return np.zeros(shape, a.dtype)


@st.composite
def malformed_calls(draw):
    """(function, kwargs, exception types, argument the message must name)."""
    cell = draw(st.sampled_from(["gru", "lstm"]))
    d = draw(st.sampled_from([1, 2]))
    kw = _valid_call(cell, d, draw(st.sampled_from([0, 1])))
    kw["backend"] = draw(st.sampled_from(["xla", "wgsl", "auto", "cpu"]))
    # the fields the call sets (an absent optional weight, e.g. proj, is None: not a malformed array)
    fields = [f for f in kw["params"]._fields if getattr(kw["params"], f) is not None]
    arrays = ["x", "initial_h", *(["initial_c"] if cell == "lstm" else [])]
    kind = draw(st.sampled_from([
        "array-shape", "array-dtype", "array-type", "field-shape", "field-dtype", "field-type",
        "field-none", "params-type", "lens", "direction", "layout", "flag", "clip", "activations",
        "alpha-beta", "backend", "extra-option",
    ]))
    if kind in ("array-shape", "array-dtype", "array-type"):
        name = draw(st.sampled_from(arrays))
        a = kw[name]
        if kind == "array-shape" and name == "x" and draw(st.booleans()):
            # an input size w does not have (another L or N would be a valid call, or blame a state)
            kw["x"] = np.zeros((*a.shape[:2], draw(st.integers(0, 9).filter(lambda v: v != a.shape[2]))), np.float32)
            return cell, kw, (ValueError,), "params.w"
        if kind == "array-shape" and name == "x":
            kw["x"] = np.zeros(draw(st.lists(st.integers(1, 4), max_size=5).filter(lambda s: len(s) != 3)), np.float32)
            return cell, kw, (ValueError,), "x"
        not_arrays = NOT_ARRAYS if name == "x" else NOT_ARRAYS.filter(lambda v: v is not None)  # None: absent
        kw[name] = {"array-shape": lambda: _reshape(draw, a), "array-dtype": lambda: a.astype(draw(BAD_DTYPES)),
                    "array-type": lambda: draw(not_arrays)}[kind]()
        return cell, kw, ({"array-shape": ValueError}.get(kind, TypeError),), name
    if kind.startswith("field"):
        field = draw(st.sampled_from(fields[:2] if kind == "field-none" else fields))
        a = getattr(kw["params"], field)
        new = {"field-shape": lambda: _reshape(draw, a), "field-dtype": lambda: a.astype(draw(BAD_DTYPES)),
               "field-type": lambda: draw(NOT_ARRAYS.filter(lambda v: v is not None)),
               "field-none": lambda: None}[kind]()
        kw["params"] = kw["params"]._replace(**{field: new})
        if kind == "field-shape":
            # a wrong size of r's last axis is a wrong hidden size: every other field then
            # disagrees; the first one checked (r itself) is named
            return cell, kw, (ValueError,), f"params.{field}"
        return cell, kw, (TypeError,), f"params.{field}"
    if kind == "params-type":
        other = jaxgru.LSTMParams if cell == "gru" else jaxgru.GRUParams
        kw["params"] = draw(st.sampled_from([tuple(kw["params"]), kw["params"]._asdict(), None, "params",
                                             other(kw["params"].w, kw["params"].r)]))
        return cell, kw, (TypeError,), "params"
    if kind == "lens":
        n = kw["x"].shape[1 if kw["layout"] == 0 else 0]
        length = kw["x"].shape[0 if kw["layout"] == 0 else 1]
        choice = draw(st.sampled_from(["shape", "dtype", "range", "type"]))
        if choice == "shape":
            kw["sequence_lens"] = _reshape(draw, kw["sequence_lens"])
            return cell, kw, (ValueError,), "sequence_lens"
        if choice == "dtype":
            kw["sequence_lens"] = np.ones(n, draw(st.sampled_from([np.float32, np.bool_, np.complex64])))
            return cell, kw, (TypeError,), "sequence_lens"
        if choice == "range":
            bad = draw(st.integers(-(2**31), -1) | st.integers(length + 1, 2**31 - 1))
            lens = np.full(n, min(length, 1), np.int32)
            lens[draw(st.integers(0, n - 1))] = bad
            kw["sequence_lens"] = lens
            return cell, kw, (ValueError,), "sequence_lens"
        kw["sequence_lens"] = draw(NOT_ARRAYS.filter(lambda v: v is not None))
        return cell, kw, (TypeError,), "sequence_lens"
    if kind == "direction":
        kw["direction"] = draw(st.text(max_size=12).filter(lambda s: s not in ("forward", "reverse", "bidirectional"))
                               | st.sampled_from([None, 1, ["forward"], b"forward", "Forward"]))
        return cell, kw, (ValueError,), "direction"
    if kind == "layout":
        kw["layout"] = draw(st.integers().filter(lambda v: v not in (0, 1))
                            | st.sampled_from([True, False, 0.0, 1.0, "0", None, [0]]))
        return cell, kw, (ValueError,), "layout"
    if kind == "flag":
        name = "linear_before_reset" if cell == "gru" else "input_forget"
        kw[name] = draw(st.integers().filter(lambda v: v not in (0, 1))
                        | st.sampled_from([0.5, 1.0, "yes", "True", None, [1], np.array(True)]))
        return cell, kw, (ValueError,), name
    if kind == "clip":
        v = draw(st.floats(max_value=0.0) | st.just(float("nan")) | st.sampled_from(["1", [1.0], True, jnp.ones(())]))
        kw["clip"] = v
        return cell, kw, ((ValueError,) if isinstance(v, float) else (TypeError,)), "clip"
    if kind == "activations":
        per = (2 if cell == "gru" else 3) * d
        choice = draw(st.sampled_from(["count", "unknown", "type"]))
        if choice == "count":
            kw["activations"] = ["Tanh"] * draw(st.integers(0, 8).filter(lambda n: n != per))
            return cell, kw, (ValueError,), "activations"
        if choice == "unknown":
            bad = draw(st.text(min_size=1, max_size=10).filter(lambda s: s.lower() not in {n.lower() for n in NAMES})
                       | st.sampled_from([None, 1, b"Tanh", ("Tanh",)]))
            names = ["Sigmoid"] * per
            names[draw(st.integers(0, per - 1))] = bad
            kw["activations"] = names
            return cell, kw, (ValueError,), "activations"
        kw["activations"] = draw(st.sampled_from(["Sigmoid", 3, {"Tanh": 1}, np.array(["Tanh"] * per), iter(["Tanh"])]))
        return cell, kw, (TypeError,), "activations"
    if kind == "alpha-beta":
        name = draw(st.sampled_from(["activation_alpha", "activation_beta"]))
        if draw(st.booleans()):  # default activations take no alpha/beta at all
            kw[name] = draw(st.lists(st.floats(-2, 2), min_size=1, max_size=4))
            return cell, kw, (ValueError,), name
        kw[name] = draw(st.sampled_from([["a"], [None], [[1.0]], "0.5", {"a": 1}, [float("nan")], [True]]))
        return cell, kw, (TypeError,), name
    if kind == "backend":
        kw["backend"] = draw(st.text(max_size=8).filter(lambda s: s not in ("auto", "xla", "wgsl", "cpu"))
                             | st.sampled_from([None, "XLA", "cuda", 0]))
        return cell, kw, (ValueError,), "backend"
    other = {"gru": ["initial_c", "input_forget", "peepholes"], "lstm": ["linear_before_reset", "peepholes"]}
    name = draw(st.sampled_from(other[cell]))
    kw[name] = True
    return cell, kw, (TypeError,), name


@settings(max_examples=examples(200), **FUZZ)
@given(call=malformed_calls())
def test_fuzz_malformed_calls_raise_errors_naming_the_argument(call):
    cell, kw, exc, name = call
    fn = jaxgru.gru if cell == "gru" else jaxgru.lstm
    params, x = kw.pop("params"), kw.pop("x")
    try:
        out = fn(params, x, **kw)
    except ALLOWED as e:
        assert isinstance(e, exc), (type(e), e, exc)
        message = str(e)
        assert name in message, f"{name!r} not in {message!r}"
        # python's own "unexpected keyword argument" is the only message not from jaxgru
        assert message.startswith("jaxgru.") or "unexpected keyword argument" in message, message
    else:
        raise AssertionError(f"no error for {cell} with a bad {name}: got shapes {[o.shape for o in out]}")
