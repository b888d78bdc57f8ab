"""The WGSL backward (``backend="wgsl"`` under ``jax.grad``): gradients against the xla backend's
(the ``lax.scan`` reference, itself checked against numerical gradients in test_transforms.py)
across the feature matrix, against numerical gradients (``check_grads``), the compiled program
(no XLA while loop), the counters, the ensemble axis and the empty shapes."""

from __future__ import annotations

import dataclasses
import re

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import wgsl_support
from jax.test_util import check_grads
from oracles import random_case, seed_of

import jaxgru
from jaxgru._src import reference
from jaxgru._src.activations import NAMES, lookup
from jaxgru._src.cells import spec
from jaxgru._src.options import make_config
from jaxgru._src.webgpu import backward, counters, plan, runtime

pytestmark = pytest.mark.wgsl
F32 = dict(atol=1e-5, rtol=1e-4)
LENS = [5, 0, 3, 1]


@pytest.fixture(scope="module", autouse=True)
def adapter():
    return wgsl_support.require_adapter()


def _matrix():
    """Both cells and their flags, every direction, both layouts, clip, ragged lengths (with a 0)
    or none, initial states given or absent, and activations cycling through all 11 (alpha/beta
    given) over the cases' activation slots."""
    rows = [  # cell, flags, direction, layout, clip, initial states, lengths
        ("gru", {"linear_before_reset": 0}, "forward", 0, 0.7, True, LENS),
        ("gru", {"linear_before_reset": 0}, "bidirectional", 1, None, False, LENS),
        ("gru", {"linear_before_reset": 1}, "reverse", 0, None, True, None),
        ("gru", {"linear_before_reset": 1}, "bidirectional", 1, 0.7, True, LENS),
        ("lstm", {"peep": True}, "forward", 1, None, True, LENS),
        ("lstm", {"peep": True}, "bidirectional", 0, 0.7, False, LENS),
        ("lstm", {"input_forget": 1}, "reverse", 1, 0.7, True, LENS),
        ("lstm", {"peep": True, "input_forget": 1}, "bidirectional", 0, None, True, None),
        ("lstm", {}, "reverse", 0, None, False, LENS),
    ]
    out, slot = [], 0
    for cell, flags, direction, layout, clip, states, lens in rows:
        n = spec(cell).num_activations * (2 if direction == "bidirectional" else 1)
        acts = [NAMES[(slot + j) % len(NAMES)] for j in range(n)]
        slot += n
        opts = dict(flags, direction=direction, h0=states, c0=states and cell == "lstm", lens=lens,
                    activations=acts)
        opts["activation_alpha"] = [0.6] * sum(lookup(a).takes_alpha for a in acts)
        opts["activation_beta"] = [0.4] * sum(lookup(a).takes_beta for a in acts)
        if clip is not None:
            opts["clip"] = clip
        name = f"{cell}-{'-'.join(f'{k}{int(v)}' for k, v in flags.items())}-{direction}-l{layout}"
        out.append((f"{name}-clip{clip}-states{int(states)}-ragged{int(lens is not None)}", cell, opts, layout))
    assert slot >= len(NAMES)  # every activation at least once
    return out


MATRIX = _matrix()


def _grads(case, layout, backend, dtype=None):
    """jit(grad) of a loss of every output w.r.t. the params, x and the given initial states."""
    fn = jaxgru.gru if case.cell == "gru" else jaxgru.lstm
    x = case.x if layout == 0 else np.swapaxes(case.x, 0, 1)
    kw = case.kwargs(layout)
    states = {k: kw.pop(k) for k in ("initial_h", "initial_c") if k in kw}
    params = case.params
    if dtype is not None:
        cast = lambda a: None if a is None else jnp.asarray(a, dtype)
        x, params, states = cast(x), jax.tree.map(cast, params), jax.tree.map(cast, states)

    def loss(p, x, states):
        outs = fn(p, x, **kw, **states, backend=backend)
        return sum(jnp.sum(jnp.sin(o.astype(jnp.float32)) * (k + 1)) for k, o in enumerate(outs))

    return jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(params, x, states)


def _close(got, want, atol, rtol):
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        g, w = np.asarray(g, np.float32), np.asarray(w, np.float32)
        scale = max(1.0, float(np.abs(w).max())) if w.size else 1.0
        np.testing.assert_allclose(g, w, atol=atol * scale, rtol=rtol)


@pytest.mark.parametrize(("name", "cell", "opts", "layout"), MATRIX, ids=[m[0] for m in MATRIX])
def test_gradients_match_xla(name, cell, opts, layout):
    case = random_case(np.random.default_rng(seed_of(name)), cell, L=5, N=4, I=3, H=5, scale=0.4,
                       **opts)
    _close(_grads(case, layout, "wgsl"), _grads(case, layout, "xla"), **F32)


@pytest.mark.parametrize("tiled", [True, False])
def test_both_gemm_forms_match_xla(tiled, monkeypatch):
    # the workgroup-memory GEMMs (hardware adapters) and the barrier-free ones (software adapters)
    monkeypatch.setattr(backward, "GEMM_TILED", tiled)
    _name, cell, opts, layout = MATRIX[5]  # LSTM with peepholes, bidirectional, clip, ragged
    case = random_case(np.random.default_rng(7), cell, L=5, N=4, I=70, H=5, scale=0.4, **opts)
    _close(_grads(case, layout, "wgsl"), _grads(case, layout, "xla"), **F32)


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_float16_gradients(cell):
    flags = {"linear_before_reset": 1} if cell == "gru" else {"peep": True}
    case = random_case(np.random.default_rng(3), cell, h0=True, c0=cell == "lstm", lens=[5, 2, 0],
                       direction="bidirectional", **flags)
    _close(_grads(case, 1, "wgsl", jnp.float16), _grads(case, 1, "xla", jnp.float16), atol=4e-3, rtol=4e-3)


def _problem(cell):
    init = jaxgru.init_gru if cell == "gru" else jaxgru.init_lstm
    params = init(jax.random.key(0), 3, 4, bidirectional=True)
    x = jax.random.normal(jax.random.key(1), (5, 3, 3))
    lens = jnp.array([5, 0, 2])
    fn = jaxgru.gru if cell == "gru" else jaxgru.lstm

    def loss(p, x, backend="wgsl"):
        outs = fn(p, x, direction="bidirectional", sequence_lens=lens, backend=backend)
        return sum(jnp.sum(jnp.tanh(o) * (k + 1)) for k, o in enumerate(outs))

    return loss, params, x


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_grad_compiles_to_callbacks_without_a_while_loop_and_is_counted(cell):
    loss, params, x = _problem(cell)
    step = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))
    hlo = step.lower(params, x).compile().as_text()
    loop = re.compile(r"\swhile\(")  # an HLO while instruction
    assert not loop.search(hlo)  # neither the forward nor the backward runs on XLA
    if cell == "gru":
        xla = jax.jit(jax.grad(lambda p, x: loss(p, x, "xla"))).lower(params, x).compile().as_text()
        assert loop.search(xla)  # the pattern finds the reference's loops
    assert hlo.count("xla_buffer_python_cpu_callback") == 2  # the forward and the backward
    jax.block_until_ready(step(params, x))
    counters.reset_counters()
    jax.block_until_ready(step(params, x))
    c = counters.counters()
    assert (c["forward"]["calls"], c["backward"]["calls"], c["total"]["calls"]) == (1, 1, 2)
    bwd = c["backward"]
    assert bwd["submits"] == 1 and bwd["passes"] == 1 and bwd["kind"] == "backward"
    phases = len(backward.entries(make_config(cell, "t", direction="bidirectional")))
    assert bwd["dispatches"] > 5 * phases  # every step's phases, then the GEMMs
    # x, W, R, Y, the residuals and dY go up; the gradients (at least dW, dR) come back
    d, g, h, i = 2, spec(cell).num_gates, 4, 3
    assert bwd["bytes_read_back"] >= 4 * d * g * h * (i + h)
    assert bwd["bytes_uploaded"] >= 4 * d * 5 * 3 * spec(cell).residuals(make_config(cell, "t")) * h


def test_check_grads_on_wgsl():
    loss, params, x = _problem("gru")
    check_grads(lambda w, x: loss(params._replace(w=w), x), (params.w, x), order=1, modes=["rev"],
                atol=2e-2, rtol=2e-2)
    loss, params, x = _problem("lstm")
    check_grads(lambda p, x: loss(params._replace(p=p), x), (params.p, x), order=1, modes=["rev"],
                atol=2e-2, rtol=2e-2)


def test_ensemble_axis():
    # vmapped weights reach the backward as an ensemble axis (rules.batch_rule): each member's
    # gradient equals its own un-vmapped one (whose agreement with xla the matrix checks)
    loss, params, x = _problem("gru")
    ens = jax.tree.map(lambda a: jnp.stack([a, -0.5 * a]), params)
    grad = jax.jit(jax.grad(loss))
    got = jax.jit(jax.vmap(grad, in_axes=(0, None)))(ens, x)
    for e in range(2):
        chex.assert_trees_all_close(jax.tree.map(lambda a: a[e], got), grad(jax.tree.map(lambda a: a[e], ens), x),
                                    **F32)


def test_second_order_goes_through_the_reference_rules():
    loss, params, x = _problem("gru")
    hvp = lambda be: jax.jit(lambda b: jax.jvp(jax.grad(lambda b: loss(params._replace(b=b), x, be)), (b,),
                                               (jnp.ones_like(b),))[1])(params.b)
    chex.assert_trees_all_close(hvp("wgsl"), hvp("xla"), **F32)


@pytest.mark.parametrize(("L", "N", "I"), [(0, 3, 2), (4, 0, 2), (4, 3, 0)])
def test_empty_shapes_match_the_reference(L, N, I):
    cfg = make_config("lstm", "t", peepholes=True, direction="bidirectional", ragged=True)
    rng = np.random.default_rng(0)
    f = lambda *s: rng.standard_normal(s).astype(np.float32)
    H, D = 3, 2
    ops = [f(L, N, I), f(D, 4 * H, I), f(D, 4 * H, H), f(D, 8 * H), f(D, 3 * H), f(D, N, H), f(D, N, H),
           np.minimum(np.arange(N), L).astype(np.int32)]
    y, *_, res = reference.forward(cfg, *ops, residuals=True)
    cts = [f(L, D, N, H), f(D, N, H), f(D, N, H)]
    want = reference.backward(cfg, ops, y, res, cts)
    got = backward.backward(cfg, [*ops, np.asarray(y), np.asarray(res), *cts])
    _close(got, want, **F32)


# --------------------------------------------------------------------------------------
# the projected LSTM (proj_size P: h' = proj·(o ⊙ h(c')), R [D, 4H, P]): the same two kernels
# per step under PROJ and one more GEMM (d proj), against the xla backend's gradients (checked
# against PyTorch and numerical gradients in test_projection.py)
# --------------------------------------------------------------------------------------
def _proj_problem(name, *, direction="forward", layout=0, H=5, P=2, states=True, lens=None, peepholes=False,
                  N=4, **opts):
    """(loss(params, x, states, backend), params, x, states) of a projected LSTM; data seeded by ``name``."""
    rng = np.random.default_rng(seed_of(name))
    d = 2 if direction == "bidirectional" else 1
    L, I = 5, 3
    f32 = lambda *s: jnp.asarray(rng.standard_normal(s) * 0.5, jnp.float32)
    params = jaxgru.LSTMParams(f32(d, 4 * H, I), f32(d, 4 * H, P), f32(d, 8 * H),
                               f32(d, 3 * H) if peepholes else None, f32(d, P, H))
    x = f32(L, N, I) * 2 if layout == 0 else f32(N, L, I) * 2
    st = {}
    if states:
        st = {"initial_h": f32(d, N, P), "initial_c": f32(d, N, H)}
        if layout == 1:
            st = {k: jnp.swapaxes(v, 0, 1) for k, v in st.items()}
    kw = dict(opts, direction=direction, layout=layout)
    if lens is not None:
        kw["sequence_lens"] = jnp.asarray(lens, jnp.int32)

    def loss(p, x, s, backend):
        outs = jaxgru.lstm(p, x, **kw, **s, backend=backend)
        return sum(jnp.sum(jnp.sin(o.astype(jnp.float32)) * (k + 1)) for k, o in enumerate(outs))

    return loss, params, x, st


def _proj_grads(loss, params, x, st, backend):
    return jax.jit(jax.grad(loss, argnums=(0, 1, 2)), static_argnums=3)(params, x, st, backend)


# (name, options): every direction and layout, P < H and P > H (the elementwise kernel's units
# are max(H, P)), peepholes, input_forget, clip, ragged lengths with a 0 or none, initial states
# given and absent, other activations
PROJ_CASES = [
    ("proj-forward-l0-peep-if-clip", dict(P=2, peepholes=True, input_forget=1, clip=0.7, lens=[5, 0, 3, 1])),
    ("proj-bidirectional-l1-wide", dict(direction="bidirectional", layout=1, H=3, P=7, states=False)),
    ("proj-reverse-l1-peep-ragged", dict(direction="reverse", layout=1, P=3, peepholes=True, lens=[2, 5, 0, 4])),
    ("proj-bidirectional-l0-if-clip-acts", dict(direction="bidirectional", P=4, input_forget=1, clip=0.5,
                                                 states=False, lens=[5, 0, 3, 1],
                                                 activations=["HardSigmoid", "Softsign", "Elu"] * 2,
                                                 activation_alpha=[0.6, 0.6, 0.6, 0.6],
                                                 activation_beta=[0.4, 0.4])),
]


@pytest.mark.parametrize(("name", "opts"), PROJ_CASES, ids=[c[0] for c in PROJ_CASES])
def test_projected_gradients_match_xla(name, opts):
    loss, params, x, st = _proj_problem(name, **opts)
    want = _proj_grads(loss, params, x, st, "xla")
    counters.reset_counters()
    got = jax.block_until_ready(_proj_grads(loss, params, x, st, "wgsl"))  # counted once it ran
    c = counters.counters()["backward"]
    assert c["calls"] == 1 and c["submits"] == 1  # the backward ran on the device, one submit
    # two kernels per step (as without a projection), then dW, dR, the two db, dx, d proj (and dP)
    assert c["dispatches"] == 2 * 5 + 6 + int(bool(opts.get("peepholes")))
    assert got[0].proj.shape == params.proj.shape
    _close(got, want, **F32)


def test_projected_grad_compiles_to_callbacks_without_a_while_loop():
    loss, params, x, st = _proj_problem("proj-hlo", direction="bidirectional", P=3, peepholes=True,
                                        lens=[5, 2, 0, 4])
    lower = lambda be: jax.jit(jax.grad(lambda p, x, s: loss(p, x, s, be), argnums=(0, 1, 2))).lower(
        params, x, st).compile().as_text()
    loop = re.compile(r"\swhile\(")
    hlo = lower("wgsl")
    assert not loop.search(hlo)  # neither the forward nor the backward runs on XLA
    assert hlo.count("xla_buffer_python_cpu_callback") == 2  # the forward and the backward
    assert loop.search(lower("xla"))  # the pattern finds the reference's loops


def test_projected_check_grads_on_wgsl():
    loss, params, x, st = _proj_problem("proj-check", direction="bidirectional", H=3, P=2, peepholes=True,
                                        lens=[5, 2, 0, 1])
    check_grads(lambda proj, x: loss(params._replace(proj=proj), x, st, "wgsl"), (params.proj, x), order=1,
                modes=["rev"], atol=2e-2, rtol=2e-2)


def test_projected_float16_and_ensemble():
    loss, params, x, st = _proj_problem("proj-f16", direction="bidirectional", layout=1, P=3, peepholes=True,
                                        lens=[5, 2, 0, 4])
    half = jax.tree.map(lambda a: a.astype(jnp.float16), (params, x, st))
    got = _proj_grads(loss, *half, "wgsl")
    assert all(g.dtype == jnp.float16 for g in jax.tree.leaves(got))
    _close(got, _proj_grads(loss, *half, "xla"), atol=4e-3, rtol=4e-3)
    # vmapped weights: one backward call for both members, each equal to its own xla gradient
    ens = jax.tree.map(lambda a: jnp.stack([a, -0.5 * a]), params)
    grad = lambda be: jax.jit(jax.vmap(jax.grad(lambda p: loss(p, x, st, be))))
    counters.reset_counters()
    got = jax.block_until_ready(grad("wgsl")(ens))
    assert counters.counters()["backward"]["calls"] == 1
    _close(got, grad("xla")(ens), **F32)


@pytest.mark.parametrize(("L", "N"), [(0, 3), (4, 0)])
def test_projected_empty_shapes_match_the_reference(L, N):
    cfg = make_config("lstm", "t", direction="bidirectional", ragged=True, proj=True)
    rng = np.random.default_rng(1)
    f = lambda *s: rng.standard_normal(s).astype(np.float32)
    H, P, D, I = 3, 2, 2, 2
    ops = [f(L, N, I), f(D, 4 * H, I), f(D, 4 * H, P), f(D, 8 * H), f(D, 3 * H), f(D, N, P), f(D, N, H),
           f(D, P, H), np.minimum(np.arange(N), L).astype(np.int32)]
    y, *_, res = reference.forward(cfg, *ops, residuals=True)
    cts = [f(L, D, N, P), f(D, N, P), f(D, N, H)]
    want = reference.backward(cfg, ops, y, res, cts)
    got = backward.backward(cfg, [*ops, np.asarray(y), np.asarray(res), *cts])
    _close(got, want, **F32)
# ---- batch chunks: a call beyond the device limits runs in chunks, weight gradients summed ----
CHUNKED = [  # cell, flags, layout, dtype (every case bidirectional, ragged with a 0, initial states)
    ("gru", {"linear_before_reset": 0}, 0, None),
    ("gru", {"linear_before_reset": 1}, 1, None),
    ("lstm", {"peep": True}, 0, None),
    ("lstm", {"peep": True}, 1, jnp.float16),
]


def _chunk_case(cell, flags, L=4, N=5):
    return random_case(np.random.default_rng(seed_of(f"chunks-{cell}-{flags}")), cell, L=L, N=N, I=3, H=3,
                       scale=0.4, h0=True, c0=cell == "lstm", lens=[4, 0, 2, 1, 3][:N], direction="bidirectional",
                       **flags)


def _case_config(case, layout):
    flags = {"linear_before_reset": case.attrs["linear_before_reset"]} if case.cell == "gru" else {}
    return make_config(case.cell, "t", direction="bidirectional", layout=layout, ragged=True,
                       peepholes=case.p is not None, **flags)


def _binding_limit(cfg, x, r, rows, itemsize=4):
    """The backward's geometry, and the max-storage-buffer-binding-size at which its chunks hold
    at most ``rows`` batch rows: the largest of its buffers (fixed part + ``rows`` rows) just fits."""
    geo = backward.geometry(cfg, backward.sizes(cfg, np.asarray(x), np.asarray(r)), itemsize)
    fixed = geo.fixed_bytes()
    return geo, 4 + max(fixed.get(k, 0) + rows * b for k, b in geo.row_bytes().items())


@pytest.mark.parametrize(("cell", "flags", "layout", "dtype"), CHUNKED,
                         ids=[f"{c}-{f}-l{lay}-{'f16' if dt else 'f32'}" for c, f, lay, dt in CHUNKED])
def test_batch_chunks_match_xla_in_one_submit(cell, flags, layout, dtype):
    case = _chunk_case(cell, flags)
    want = _grads(case, layout, "xla", dtype)
    counters.reset_counters()
    whole = jax.block_until_ready(_grads(case, layout, "wgsl", dtype))  # counted before the reset below
    one = counters.counters()["backward"]
    x = case.x if layout == 0 else np.swapaxes(case.x, 0, 1)
    itemsize = 2 if dtype is not None and runtime.runtime().has_f16 else 4
    geo, limit = _binding_limit(_case_config(case, layout), x, case.r, rows=3, itemsize=itemsize)
    with runtime.limit_override(max_storage_buffer_binding_size=limit):
        assert plan.batch_chunks(geo, runtime.runtime().plan_limits()) == ((0, 3), (3, 5))  # uneven
        counters.reset_counters()
        got = jax.block_until_ready(_grads(case, layout, "wgsl", dtype))
        c = counters.counters()["backward"]
    # the same work in two jobs (every step's phases and the GEMMs twice), one submit, one pass
    assert (c["calls"], c["submits"], c["passes"]) == (1, 1, 1)
    assert one["dispatches"] and c["dispatches"] == 2 * one["dispatches"]
    tol = F32 if dtype is None else dict(atol=4e-3, rtol=4e-3)
    _close(got, want, **tol)
    _close(whole, want, **tol)


def test_ensemble_members_in_chunks():
    # each member's weight gradients are summed over its own chunks only
    loss, params, x = _problem("lstm")  # N = 3, lengths 5, 0, 2
    ens = jax.tree.map(lambda a: jnp.stack([a, -0.5 * a]), params)
    grads = lambda be: jax.jit(jax.vmap(jax.grad(lambda p, x: loss(p, x, be)), in_axes=(0, None)))(ens, x)
    want = grads("xla")
    counters.reset_counters()
    jax.block_until_ready(grads("wgsl"))
    one = counters.counters()["backward"]
    cfg = make_config("lstm", "t", direction="bidirectional", ragged=True)
    _, limit = _binding_limit(cfg, x, params.r, rows=2)  # chunks of 2 and 1 rows
    with runtime.limit_override(max_storage_buffer_binding_size=limit):
        counters.reset_counters()
        got = jax.block_until_ready(grads("wgsl"))
        c = counters.counters()["backward"]
    assert c["submits"] == 1 and c["dispatches"] == 2 * one["dispatches"]  # 2 members x 2 chunks
    _close(got, want, **F32)


def test_a_row_beyond_the_limits_still_raises():
    case = _chunk_case("lstm", {"peep": True}, L=12, N=2)  # a row of residuals outweighs the weights
    cfg = _case_config(case, 0)
    geo, _ = _binding_limit(cfg, case.x, case.r, rows=1)
    ops = [case.x, case.w, case.r, case.b, case.p, case.h0, case.c0, case.lens]
    y, *_, res = reference.forward(cfg, *ops, residuals=True)
    cts = [np.ones_like(y), np.ones_like(case.h0), np.ones_like(case.c0)]
    per_row = (2 * 12 * 5 * 3 + 2 * 2 * 3) * 4  # res [D, L, K·H] + h0, c0 [S, D, H] of one row, f32
    fixed = 2 * 3 * 3 * 4 + 3 * 16  # P [D, 3H], and 16 bytes to align each of its 3 regions
    assert (geo.row_bytes()["residuals"], geo.fixed_bytes()["residuals"]) == (per_row, fixed)
    limit = fixed + per_row  # 4 bytes short of one row (byte sizes round up to words)
    with runtime.limit_override(max_storage_buffer_binding_size=limit), pytest.raises(
        ValueError, match=rf"one batch row of the residuals buffer needs {per_row} bytes \(plus {fixed} bytes per "
        rf"call\), more than the device limit max-storage-buffer-binding-size={limit}"):
        backward.backward(cfg, [*ops, np.asarray(y), np.asarray(res), *cts])
    with runtime.limit_override(max_storage_buffer_binding_size=limit + 4):  # one row fits: chunks of one
        got = backward.backward(cfg, [*ops, np.asarray(y), np.asarray(res), *cts])
    _close(got, reference.backward(cfg, ops, y, res, cts), **F32)


def test_grid_limits_chunk_the_batch():
    # max-compute-workgroups-per-dimension = 2: dx's GEMM tiles L·n rows by 64 along y, so a
    # chunk holds floor(2·64 / 40) = 3 rows of L = 40 steps (the steps' grids would hold 42)
    case = random_case(np.random.default_rng(seed_of("grid-chunks")), "gru", L=40, N=7, I=2, H=3, scale=0.4,
                       h0=True, lens=[40, 0, 17, 3, 40, 1, 25], linear_before_reset=1)
    want = _grads(case, 0, "xla")
    counters.reset_counters()
    jax.block_until_ready(_grads(case, 0, "wgsl"))
    one = counters.counters()["backward"]
    cfg = make_config("gru", "t", linear_before_reset=1, ragged=True)
    geo = backward.geometry(cfg, backward.sizes(cfg, case.x, case.r), 4)
    with runtime.limit_override(max_compute_workgroups_per_dimension=2):
        assert plan.batch_chunks(geo, runtime.runtime().plan_limits()) == ((0, 3), (3, 6), (6, 7))
        counters.reset_counters()
        got = jax.block_until_ready(_grads(case, 0, "wgsl"))
        c = counters.counters()["backward"]
    assert c["submits"] == 1 and c["dispatches"] == 3 * one["dispatches"]
    _close(got, want, **F32)
    limits = {**runtime.runtime().plan_limits(), "max-compute-workgroups-per-dimension": 1}
    long = dataclasses.replace(geo, L=65)  # 65 rows of dx need 2 tiles along y
    with pytest.raises(ValueError, match="one batch row needs more workgroups than max-compute-workgroups-per-"
                                         "dimension=1 allows"):
        plan.batch_chunks(long, limits)


@pytest.mark.parametrize("P", [2, 7], ids=["p-narrow", "p-wide"])  # P < H and P > H (rows of max(H, P))
def test_projected_batch_chunks_match_xla(P):
    loss, params, x, st = _proj_problem(f"proj-chunks-{P}", direction="bidirectional", H=3, P=P, peepholes=True,
                                        lens=[5, 2, 0, 4])
    want = _proj_grads(loss, params, x, st, "xla")
    cfg = make_config("lstm", "t", direction="bidirectional", ragged=True, peepholes=True, proj=True)
    geo, limit = _binding_limit(cfg, x, params.r, rows=3)
    with runtime.limit_override(max_storage_buffer_binding_size=limit):
        assert plan.batch_chunks(geo, runtime.runtime().plan_limits()) == ((0, 2), (2, 4))  # balanced
        counters.reset_counters()
        got = jax.block_until_ready(_proj_grads(loss, params, x, st, "wgsl"))
        c = counters.counters()["backward"]
    # two jobs: 2 kernels per step each, their GEMMs (dW, dR, 2 db, dx, dproj, dP) each; one submit
    assert (c["calls"], c["submits"]) == (1, 1) and c["dispatches"] == 2 * (2 * 5 + 7)
    _close(got, want, **F32)
