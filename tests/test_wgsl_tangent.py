"""The tangent map (``jax.jvp`` / ``jax.linearize``) on backend="wgsl": every feature against the
xla backend's jvp (the ``lax.scan`` reference tangent, itself checked against numerical
derivatives in test_transforms.py), numerical derivatives on wgsl itself, the compiled program
(no XLA loop), counters, f16, the ensemble axis, batch chunks and second order."""

from __future__ import annotations

import zlib

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import wgsl_support
from jax.test_util import check_grads
from oracles import random_case

import jaxgru
from jaxgru._src.activations import NAMES, lookup
from jaxgru._src.webgpu import counters, runtime

pytestmark = pytest.mark.wgsl
F32 = dict(atol=1e-5, rtol=1e-4)


@pytest.fixture(scope="module", autouse=True)
def adapter():
    return wgsl_support.require_adapter()


# (cell, flags, direction, layout, initial states, ragged, clip): 8 cases that together cover
# every flag, direction, layout, clip, ragged lengths with a 0, states given and absent
_CASES = [
    ("gru", {"linear_before_reset": 0}, "forward", 0, True, True, True),
    ("gru", {"linear_before_reset": 0}, "bidirectional", 1, False, False, False),
    ("gru", {"linear_before_reset": 1}, "reverse", 1, True, True, False),
    ("gru", {"linear_before_reset": 1}, "bidirectional", 0, False, True, True),
    ("lstm", {"peep": True}, "forward", 1, True, True, True),
    ("lstm", {"input_forget": 1}, "reverse", 0, False, True, False),
    ("lstm", {"peep": True, "input_forget": 1}, "bidirectional", 1, True, True, False),
    ("lstm", {}, "bidirectional", 0, False, False, True),
]


def _matrix():
    """The cases above, activations cycling through all 11 with alpha/beta."""
    out, k = [], 0
    for cell, flag, direction, layout, states, ragged, clip in _CASES:
        per = (2 if cell == "gru" else 3) * (2 if direction == "bidirectional" else 1)
        acts = [NAMES[(k + j) % len(NAMES)] for j in range(per)]
        k += per
        opts = dict(flag, direction=direction, h0=states, c0=states and cell == "lstm", activations=acts)
        if ragged:
            opts["lens"] = [5, 0, 3, 1]
        opts["activation_alpha"] = [0.6] * sum(lookup(a).takes_alpha for a in acts)
        opts["activation_beta"] = [0.4] * sum(lookup(a).takes_beta for a in acts)
        if clip:
            opts["clip"] = 0.7
        name = f"{cell}-{'-'.join(f'{a}{int(b)}' for a, b in flag.items())}-{direction}-l{layout}"
        out.append((name, opts, layout))
    return out


MATRIX = _matrix()


def test_the_matrix_covers_every_activation():
    assert {a for _, opts, _ in MATRIX for a in opts["activations"]} == set(NAMES)


def _jvp_problem(case, layout, seed=0):
    """(f(backend) of the float arguments, the arguments, random tangents of them)."""
    x = case.x if layout == 0 else np.swapaxes(case.x, 0, 1)
    kw = case.kwargs(layout)
    states = {k: kw.pop(k) for k in ("initial_h", "initial_c") if k in kw}
    fn = jaxgru.gru if case.cell == "gru" else jaxgru.lstm

    def f(backend):
        return lambda p, x, s: fn(p, x, **kw, **s, backend=backend)

    args = (case.params, jnp.asarray(x), {k: jnp.asarray(v) for k, v in states.items()})
    keys = iter(jax.random.split(jax.random.key(seed), 16))
    tangents = jax.tree.map(lambda a: jax.random.normal(next(keys), a.shape, a.dtype), args)
    return f, args, tangents


def _jvp(fun, primals, tangents):
    """``jax.jvp`` of ``fun``, jitted (one compilation; the reference's eager ops compile one by one)."""
    return jax.jit(lambda a, t: jax.jvp(fun, a, t))(primals, tangents)


def _close(want, got, atol=F32["atol"], rtol=F32["rtol"]):
    for w, g in zip(jax.tree.leaves(want), jax.tree.leaves(got), strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        scale = max(1.0, float(np.abs(np.asarray(w, np.float32)).max()))
        np.testing.assert_allclose(np.asarray(g, np.float32), np.asarray(w, np.float32), atol=atol * scale,
                                   rtol=rtol)


@pytest.mark.parametrize(("name", "opts", "layout"), MATRIX, ids=[m[0] for m in MATRIX])
def test_jvp_feature_matrix_matches_xla(name, opts, layout):
    rng = np.random.default_rng(zlib.crc32(name.encode()))  # the same data in every process
    case = random_case(rng, name.split("-")[0], L=5, N=4, I=3, H=5, scale=0.4, **opts)
    f, args, tangents = _jvp_problem(case, layout)
    want = _jvp(f("xla"), args, tangents)
    counters.reset_counters()
    got = jax.jit(lambda a, t: jax.jvp(f("wgsl"), a, t))(args, tangents)
    _close(want, got)
    kinds = counters.counters()
    assert kinds["tangent"]["calls"] == 1 and kinds["forward"]["calls"] == 1  # both ran on the device


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_compiled_jvp_has_no_loop_and_two_callbacks(cell):
    case = random_case(np.random.default_rng(0), cell, h0=True, lens=[5, 0, 3], direction="bidirectional")
    f, args, tangents = _jvp_problem(case, 0)
    text = {be: jax.jit(lambda a, t, be=be: jax.jvp(f(be), a, t)).lower(args, tangents).as_text()
            for be in ("xla", "wgsl")}
    assert "while" in text["xla"]  # the reference forward and tangent are lax.scan loops
    assert "while" not in text["wgsl"]
    assert text["wgsl"].count("xla_buffer_python_cpu_callback") == 2  # the forward and the tangent


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_linearize_and_partial_tangents(cell):
    flag = {"linear_before_reset": 1} if cell == "gru" else {"peep": True}
    case = random_case(np.random.default_rng(1), cell, h0=True, c0=cell == "lstm", lens=[5, 2, 0], **flag)
    f, args, tangents = _jvp_problem(case, 1, seed=1)
    out, lin = jax.linearize(f("wgsl"), *args)
    want_out, want_t = _jvp(f("xla"), args, tangents)
    _close(want_out, out)
    _close(want_t, lin(*tangents))
    # symbolic-zero tangents (of the weights and states): a jvp in x only
    p, x, s = args
    g = lambda be: lambda x: f(be)(p, x, s)
    _close(_jvp(g("xla"), (x,), (tangents[1],)), _jvp(g("wgsl"), (x,), (tangents[1],)))


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_check_grads_forward_mode_on_wgsl(cell):
    flag = {"linear_before_reset": 0} if cell == "gru" else {"peep": True}
    case = random_case(np.random.default_rng(2), cell, L=4, N=2, I=2, H=3, h0=True, c0=cell == "lstm",
                       lens=[4, 2], direction="bidirectional", **flag)
    f, args, _ = _jvp_problem(case, 0)
    fw = jax.jit(f("wgsl"))
    check_grads(fw, args, order=1, modes=["fwd"], atol=1e-2, rtol=1e-2, eps=1e-2)


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_float16(cell):
    flag = {"linear_before_reset": 1} if cell == "gru" else {"peep": True}
    # I=3, H=5: the f16 weights of GRU are not whole words (their upload joins W and dW on the host)
    case = random_case(np.random.default_rng(3), cell, I=3, H=5, h0=True, c0=cell == "lstm", lens=[5, 2, 0], **flag)
    f, args, tangents = _jvp_problem(case, 0)
    args, tangents = jax.tree.map(lambda a: a.astype(jnp.float16), (args, tangents))
    want = _jvp(f("xla"), args, tangents)
    got = jax.jit(lambda a, t: jax.jvp(f("wgsl"), a, t))(args, tangents)
    assert all(g.dtype == jnp.float16 for g in jax.tree.leaves(got))
    _close(want, got, atol=1e-2, rtol=1e-2)


def test_ensemble():
    case = random_case(np.random.default_rng(4), "lstm", h0=True, c0=True, lens=[5, 0, 3], peep=True,
                       direction="bidirectional")
    f, (p, x, s), (tp, _, _) = _jvp_problem(case, 0)
    ens = jax.tree.map(lambda a: jnp.stack([a, 0.5 * a]), p)
    t_ens = jax.tree.map(lambda a: jnp.stack([a, -a]), tp)
    jvp = lambda be: lambda p, tp: jax.jvp(lambda p: f(be)(p, x, s), (p,), (tp,))
    _close(jax.jit(jax.vmap(jvp("xla")))(ens, t_ens), jax.jit(jax.vmap(jvp("wgsl")))(ens, t_ens))


def test_batch_chunks_and_counters():
    case = random_case(np.random.default_rng(5), "gru", L=6, N=5, h0=True, lens=[6, 0, 3, 1, 4])
    f, args, tangents = _jvp_problem(case, 1)
    want = _jvp(f("xla"), args, tangents)
    run = jax.jit(lambda a, t: jax.jvp(f("wgsl"), a, t))
    counters.reset_counters()
    _close(want, run(args, tangents))
    last = counters.counters()["tangent"]
    assert last["submits"] == 1 and last["passes"] == 1
    # prep (Wᵀ|dWᵀ, Rᵀ|dRᵀ, bias tangents) + the projection + two dispatches per step (lbr=0)
    assert last["dispatches"] == 3 + 1 + 2 * 6
    x, dy = args[1], want[1][0]
    assert last["bytes_uploaded"] >= 2 * x.nbytes and last["bytes_read_back"] >= dy.nbytes
    with runtime.limit_override(max_storage_buffer_binding_size=2048):  # 2 chunks: rows of 3, 2
        counters.reset_counters()
        got = jax.block_until_ready(jax.jit(lambda a, t: jax.jvp(f("wgsl"), a, t))(args, tangents))
        assert counters.counters()["tangent"]["dispatches"] == 3 + 2 * (1 + 2 * 6)
    _close(want, got)


def test_second_order_goes_through_the_reference():
    case = random_case(np.random.default_rng(6), "gru", L=4, N=2, I=2, H=3, h0=True, lens=[4, 1])
    f, (p, x, s), (_, tx, _) = _jvp_problem(case, 0)
    second = lambda be: lambda x: jax.jvp(lambda x: jax.jvp(lambda x: f(be)(p, x, s), (x,), (tx,))[1],
                                          (x,), (tx,))
    chex.assert_trees_all_close(jax.jit(second("wgsl"))(x), jax.jit(second("xla"))(x), **F32)


def test_jacfwd_and_shard_map():
    params = jaxgru.init_gru(jax.random.key(0), 2, 3, bidirectional=True)
    x = jax.random.normal(jax.random.key(1), (4, 4, 2))
    lens = jnp.array([4, 3, 0, 1])
    h = lambda be: lambda x: jaxgru.gru(params, x, direction="bidirectional", sequence_lens=lens, backend=be)[1]
    chex.assert_trees_all_close(jax.jit(jax.jacfwd(h("wgsl")))(x), jax.jit(jax.jacfwd(h("xla")))(x), **F32)
    par = jaxgru.sharded(jaxgru.gru, jax.make_mesh((4,), ("batch",)))
    f = lambda be: lambda p, x: par(p, x, direction="bidirectional", sequence_lens=lens, backend=be)
    t = jax.tree.map(jnp.ones_like, (params, x))
    counters.reset_counters()
    got = jax.block_until_ready(jax.jit(lambda p, x: jax.jvp(f("wgsl"), (p, x), t))(params, x))
    assert counters.counters()["tangent"]["calls"] == 4  # one per device, on its shard
    _close(_jvp(f("xla"), (params, x), t), got)


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_derivatives_at_ties_match_jax(cell):
    """W = R = 0 and biases 0 or ±clip put every activation input exactly on a tie (0, the clip
    bound, HardSigmoid's bend): where jax's max/clip split the derivative 0.5 / 0.5."""
    hidden, clip = 4, 0.5
    d, g = 2, 3 if cell == "gru" else 4
    acts = ["Relu", "HardSigmoid"] if cell == "gru" else ["Relu", "Relu", "HardSigmoid"]
    acts += acts[::-1]
    n_hs = acts.count("HardSigmoid")
    b = np.zeros((d, 2 * g * hidden), np.float32)
    b[:, hidden : 2 * hidden] = clip  # the second gate's input sits on the clip bound
    b[1, :hidden] = -clip
    init = jaxgru.init_gru if cell == "gru" else jaxgru.init_lstm
    params = init(jax.random.key(0), 2, hidden, bidirectional=True)
    params = jax.tree.map(jnp.zeros_like, params)._replace(b=jnp.asarray(b))
    fn = jaxgru.gru if cell == "gru" else jaxgru.lstm
    kw = dict(direction="bidirectional", activations=acts, activation_alpha=[0.5] * n_hs,
              activation_beta=[0.0] * n_hs, clip=clip)
    f = lambda be: lambda p, x: fn(p, x, **kw, backend=be)
    x = jnp.ones((3, 2, 2))
    keys = iter(jax.random.split(jax.random.key(1), 8))
    t = jax.tree.map(lambda a: jax.random.normal(next(keys), a.shape, a.dtype), (params, x))
    _close(_jvp(f("xla"), (params, x), t), _jvp(f("wgsl"), (params, x), t))


def test_no_steps_returns_the_initial_state_tangents():
    params = jaxgru.init_lstm(jax.random.key(0), 3, 5)
    x, h0, c0 = jnp.ones((0, 2, 3)), jnp.ones((1, 2, 5)), jnp.ones((1, 2, 5))
    f = lambda p, x, h0, c0: jaxgru.lstm(p, x, initial_h=h0, initial_c=c0, backend="wgsl")
    t = jax.tree.map(lambda a: 2 * jnp.ones_like(a), (params, x, h0, c0))
    _, (dy, dh, dc) = _jvp(f, (params, x, h0, c0), t)
    assert dy.shape == (0, 1, 2, 5)
    np.testing.assert_array_equal(np.asarray(dh), np.asarray(t[2]))
    np.testing.assert_array_equal(np.asarray(dc), np.asarray(t[3]))


# --------------------------------------------------------------------------------------
# the projected LSTM (proj_size P: h' = proj·(o ⊙ h(c')), R [D, 4H, P]): lstm_tangent_step then
# lstm_tangent_proj per step, against the xla jvp (reference/lstm.py's tangent_step)
# --------------------------------------------------------------------------------------
def _proj_problem(name, *, direction="forward", layout=0, H=5, P=2, states=True, lens=None, peepholes=False,
                  seed=0, **opts):
    """(f(backend), arguments, random tangents) of a projected LSTM; data seeded by ``name``."""
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    d = 2 if direction == "bidirectional" else 1
    L, N, I = 5, 4, 3
    f32 = lambda *s: jnp.asarray(rng.standard_normal(s) * 0.5, jnp.float32)
    params = jaxgru.init_lstm(jax.random.key(seed), I, H, bidirectional=d == 2, proj_size=P)
    params = params._replace(b=f32(d, 8 * H), p=f32(d, 3 * H) if peepholes else None)
    x = f32(L, N, I) * 2 if layout == 0 else f32(N, L, I) * 2
    st = {}
    if states:
        st = {"initial_h": f32(d, N, P), "initial_c": f32(d, N, H)}
        if layout == 1:
            st = {k: jnp.swapaxes(v, 0, 1) for k, v in st.items()}
    kw = dict(opts, direction=direction, layout=layout)
    if lens is not None:
        kw["sequence_lens"] = jnp.asarray(lens, jnp.int32)

    def f(backend):
        return lambda p, x, s: jaxgru.lstm(p, x, **kw, **s, backend=backend)

    args = (params, x, st)
    keys = iter(jax.random.split(jax.random.key(seed + 1), 16))
    tangents = jax.tree.map(lambda a: jax.random.normal(next(keys), a.shape, a.dtype), args)
    return f, args, tangents


# (name, options): every direction and layout, P < H and P > H (stepwise-only in the forward),
# peepholes + input_forget + clip, ragged lengths with a 0, initial states given and absent
PROJ_CASES = [
    ("proj-forward-l0-peep-if-clip", dict(P=2, peepholes=True, input_forget=1, clip=0.7, lens=[5, 0, 3, 1])),
    ("proj-bidirectional-l1-wide", dict(direction="bidirectional", layout=1, P=9, states=False)),  # P4 > H4
    ("proj-reverse-l1-peep", dict(direction="reverse", layout=1, P=3, peepholes=True, lens=[2, 5, 0, 4])),
    ("proj-bidirectional-l0-if-clip-acts", dict(direction="bidirectional", P=4, input_forget=1, clip=0.5,
                                                 states=False, lens=[5, 0, 3, 1],
                                                 activations=["HardSigmoid", "Softsign", "Elu"] * 2,
                                                 activation_alpha=[0.6, 0.6, 0.6, 0.6],
                                                 activation_beta=[0.4, 0.4])),
]


@pytest.mark.parametrize(("name", "opts"), PROJ_CASES, ids=[c[0] for c in PROJ_CASES])
def test_projected_jvp_matches_xla(name, opts):
    f, args, tangents = _proj_problem(name, **opts)
    want = _jvp(f("xla"), args, tangents)
    counters.reset_counters()
    got = jax.jit(lambda a, t: jax.jvp(f("wgsl"), a, t))(args, tangents)
    _close(want, got)
    assert got[1][1].shape[-1] == opts["P"] and got[1][2].shape[-1] == 5  # dY_h has P features, dY_c H
    tan = counters.counters()["tangent"]
    assert tan["calls"] == 1 and counters.counters()["forward"]["calls"] == 1
    # prep (Wᵀ|dWᵀ, Rᵀ|dRᵀ, projt|dprojt, the bias tangents[, P|dP]) + projection + 2 per step
    assert tan["dispatches"] == 4 + int(bool(opts.get("peepholes"))) + 1 + 2 * 5


def test_projected_compiled_jvp_has_no_loop_linearize_and_partial_tangents():
    f, args, tangents = _proj_problem("proj-linearize", direction="bidirectional", P=3, peepholes=True,
                                      lens=[5, 2, 0, 4])
    text = {be: jax.jit(lambda a, t, be=be: jax.jvp(f(be), a, t)).lower(args, tangents).as_text()
            for be in ("xla", "wgsl")}
    assert "while" in text["xla"] and "while" not in text["wgsl"]
    assert text["wgsl"].count("xla_buffer_python_cpu_callback") == 2  # the forward and the tangent
    out, lin = jax.linearize(f("wgsl"), *args)
    want_out, want_t = _jvp(f("xla"), args, tangents)
    _close(want_out, out)
    _close(want_t, lin(*tangents))
    p, x, s = args  # a jvp in proj alone (every other tangent a symbolic zero)
    g = lambda be: lambda proj: f(be)(p._replace(proj=proj), x, s)
    _close(_jvp(g("xla"), (p.proj,), (tangents[0].proj,)), _jvp(g("wgsl"), (p.proj,), (tangents[0].proj,)))


def test_projected_check_grads_forward_mode_on_wgsl():
    f, args, _ = _proj_problem("proj-check", direction="bidirectional", H=3, P=6, peepholes=True,
                               lens=[5, 2, 0, 1])  # P4 = 2 > H4 = 1: state rows of P4 vec4s
    check_grads(jax.jit(f("wgsl")), args, order=1, modes=["fwd"], atol=1e-2, rtol=1e-2, eps=1e-2)


def test_projected_float16_and_ensemble():
    f, args, tangents = _proj_problem("proj-f16", direction="bidirectional", layout=1, P=3, peepholes=True,
                                      lens=[5, 2, 0, 4])
    a16, t16 = jax.tree.map(lambda a: a.astype(jnp.float16), (args, tangents))
    got = jax.jit(lambda a, t: jax.jvp(f("wgsl"), a, t))(a16, t16)
    assert all(g.dtype == jnp.float16 for g in jax.tree.leaves(got))
    _close(_jvp(f("xla"), a16, t16), got, atol=1e-2, rtol=1e-2)
    (p, x, s), tp = args, tangents[0]
    ens = jax.tree.map(lambda a: jnp.stack([a, 0.5 * a]), p)
    t_ens = jax.tree.map(lambda a: jnp.stack([a, -a]), tp)
    jvp = lambda be: lambda p, tp: jax.jvp(lambda p: f(be)(p, x, s), (p,), (tp,))
    counters.reset_counters()
    got = jax.jit(jax.vmap(jvp("wgsl")))(ens, t_ens)
    assert counters.counters()["tangent"]["calls"] == 1  # one call for both members
    _close(jax.jit(jax.vmap(jvp("xla")))(ens, t_ens), got)


def test_projected_batch_chunks():
    f, args, tangents = _proj_problem("proj-chunks", direction="reverse", layout=1, H=3, P=6, lens=[5, 0, 3, 1])
    want = _jvp(f("xla"), args, tangents)
    with runtime.limit_override(max_storage_buffer_binding_size=1536):  # rows of P4 > H4 vec4s, in chunks
        counters.reset_counters()
        got = jax.block_until_ready(jax.jit(lambda a, t: jax.jvp(f("wgsl"), a, t))(args, tangents))
        dispatches = counters.counters()["tangent"]["dispatches"]
    chunks = (dispatches - 4) // (1 + 2 * 5)  # 4 prep, then per chunk the projection and 2 per step
    assert chunks > 1 and dispatches == 4 + chunks * (1 + 2 * 5)
    _close(want, got)
