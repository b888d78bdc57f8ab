"""JAX transformations of the primitives, each compared with an independent computation:
the plain ``lax.scan`` reference differentiated by JAX itself, per-member loops, numerical
gradients. Jaxpr assertions check that the primitives (and no loop) are what runs."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from absl.testing import parameterized
from jax.test_util import check_grads

import jaxgru
from jaxgru._src import api, reference

TOL = dict(rtol=2e-4, atol=2e-5)


# --------------------------------------------------------------------------------------
# a problem: operands, the public call, and the same computation without the primitives
# --------------------------------------------------------------------------------------
class Problem:
    def __init__(self, cell, *, direction="bidirectional", layout=0, ragged=True, lbr=True,
                 peep=True, input_forget=False, activations=None, alpha=None, beta=None,
                 clip=None, L=5, N=3, I=4, H=3, dtype=jnp.float32, seed=0):
        self.cell, self.layout = cell, layout
        d = 2 if direction == "bidirectional" else 1
        g = 3 if cell == "gru" else 4
        keys = iter(jax.random.split(jax.random.key(seed), 10))
        rnd = lambda *s, scale=0.5: (jax.random.normal(next(keys), s) * scale).astype(dtype)
        self.params = (jaxgru.GRUParams(rnd(d, g * H, I), rnd(d, g * H, H), rnd(d, 2 * g * H))
                       if cell == "gru" else
                       jaxgru.LSTMParams(rnd(d, g * H, I), rnd(d, g * H, H), rnd(d, 2 * g * H),
                                         rnd(d, 3 * H) if peep else None))
        self.x = rnd(L, N, I, scale=1.0) if layout == 0 else rnd(N, L, I, scale=1.0)
        st = (d, N, H) if layout == 0 else (N, d, H)
        self.states = [rnd(*st)] + ([rnd(*st)] if cell == "lstm" else [])
        self.lens = jnp.asarray((np.arange(N) * 3 + 2) % (L + 1), jnp.int32) if ragged else None
        self.opts = dict(direction=direction, layout=layout, activations=activations,
                         activation_alpha=alpha, activation_beta=beta, clip=clip)
        if cell == "gru":
            self.opts["linear_before_reset"] = lbr
        else:
            self.opts["input_forget"] = input_forget

    @property
    def fn(self):
        return jaxgru.gru if self.cell == "gru" else jaxgru.lstm

    def call(self, params, x, *states, lens=None):
        lens = self.lens if lens is None else lens
        kw = dict(initial_h=states[0], sequence_lens=lens, **self.opts)
        if self.cell == "lstm":
            kw["initial_c"] = states[1]
        return self.fn(params, x, **kw)

    def ref(self, params, x, *states, lens=None):
        """The same layer through the lax.scan reference directly: no primitive involved."""
        lens = self.lens if lens is None else lens
        opts = {k: v for k, v in self.opts.items() if k not in ("layout",)}
        cfg = api.make_config(self.cell, "ref", layout=self.layout, ragged=lens is not None,
                              peepholes=self.cell == "lstm" and params.p is not None, **opts)
        batch = x.shape[1] if self.layout == 0 else x.shape[0]
        length = x.shape[0] if self.layout == 0 else x.shape[1]
        lens = jnp.full((batch,), length, jnp.int32) if lens is None else lens
        ops = [x, params.w, params.r, params.b]
        if self.cell == "lstm":
            ops.append(params.p if params.p is not None else jnp.zeros((params.w.shape[0], 3 * params.r.shape[-1])))
        return reference.forward(cfg, *ops, *states, lens)

    def loss(self, fn):
        def f(params, x, *states):
            outs = fn(params, x, *states)
            return sum(jnp.sum(jnp.sin(o) * (k + 1)) for k, o in enumerate(outs))
        return f

    @property
    def args(self):
        return (self.params, self.x, *self.states)


def primitives_in(jaxpr) -> list[str]:
    """Names of every primitive in a (closed) jaxpr, recursively through sub-jaxprs."""
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    names = []
    for eqn in jaxpr.eqns:
        names.append(eqn.primitive.name)
        for v in eqn.params.values():
            for sub in (v if isinstance(v, (list, tuple)) else [v]):
                if hasattr(sub, "eqns") or hasattr(getattr(sub, "jaxpr", None), "eqns"):
                    names += primitives_in(sub)
    return names


def assert_no_loops(names):
    assert not {"scan", "while", "cond"} & set(names), names


PROBLEMS = {
    "gru": dict(cell="gru"),
    "gru-lbr0-layout1": dict(cell="gru", lbr=False, layout=1),
    "lstm": dict(cell="lstm"),
    "lstm-if-layout1": dict(cell="lstm", input_forget=True, layout=1, direction="reverse"),
}


def problem(name, **kw):
    return Problem(**{**PROBLEMS[name], **kw})


# --------------------------------------------------------------------------------------
# jit / eager (chex variants), retracing
# --------------------------------------------------------------------------------------
class JitTest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    @parameterized.parameters(*PROBLEMS)
    def test_matches_reference(self, name):
        pb = problem(name)
        got = self.variant(pb.call)(*pb.args)
        chex.assert_trees_all_close(got, pb.ref(*pb.args), **TOL)

    @chex.variants(with_jit=True, without_jit=True)
    @parameterized.parameters(*PROBLEMS)
    def test_grad_matches_reference(self, name):
        pb = problem(name)
        got = self.variant(jax.grad(pb.loss(pb.call), argnums=(0, 1, 2)))(*pb.args)
        want = jax.grad(pb.loss(pb.ref), argnums=(0, 1, 2))(*pb.args)
        chex.assert_trees_all_close(got, want, **TOL)


def test_no_retracing_for_new_values():
    pb = problem("lstm")
    traced = chex.assert_max_traces(pb.call, n=1)
    f = jax.jit(traced)
    for seed in range(3):
        q = problem("lstm", seed=seed + 1)
        f(*q.args, lens=q.lens)
    loss = pb.loss(pb.call)
    g = jax.jit(chex.assert_max_traces(lambda *a: jax.grad(loss)(*a), n=1))
    for seed in range(3):
        g(*problem("lstm", seed=seed + 1).args)


# --------------------------------------------------------------------------------------
# vmap
# --------------------------------------------------------------------------------------
def _stack_loop(fn, batched_args, in_axes, size):
    outs = []
    for k in range(size):
        args = [a if ax is None else jax.tree.map(lambda v, ax=ax, k=k: jnp.take(v, k, axis=ax), a)
                for a, ax in zip(batched_args, in_axes)]
        outs.append(fn(*args))
    return jax.tree.map(lambda *o: jnp.stack(o), *outs)


@pytest.mark.parametrize("name", list(PROBLEMS))
@pytest.mark.parametrize(("what", "axis"), [("x", 0), ("x", 2), ("x", -1), ("state", 1), ("lens", 0),
                                            ("all-data", 0)])
def test_vmap_data_folds_into_batch(name, what, axis):
    pb = problem(name)
    size = 2
    qs = [problem(name, seed=s) for s in (5, 6)]
    x_b = jnp.stack([q.x for q in qs], axis=axis)
    s_b = [jnp.stack([q.states[i] for q in qs], axis=1) for i in range(len(pb.states))]
    lens_b = jnp.stack([qs[0].lens, jnp.flip(qs[1].lens)])

    def f(x, lens, *states):
        return pb.call(pb.params, x, *states, lens=lens)

    in_axes = {
        "x": (axis, None) + (None,) * len(s_b),
        "state": (None, None) + (1,) * len(s_b),
        "lens": (None, 0) + (None,) * len(s_b),
        "all-data": (axis, 0) + (1,) * len(s_b),
    }[what]
    args = [x_b if in_axes[0] is not None else pb.x, lens_b if in_axes[1] is not None else pb.lens]
    args += [s if ax is not None else st for s, st, ax in zip(s_b, pb.states, in_axes[2:])]
    got = jax.vmap(f, in_axes=in_axes, out_axes=1)(*args)
    want = _stack_loop(f, args, in_axes, size)
    chex.assert_trees_all_close(got, jax.tree.map(lambda a: jnp.moveaxis(a, 0, 1), want), **TOL)
    names = primitives_in(jax.make_jaxpr(jax.vmap(f, in_axes=in_axes))(*args))
    assert names.count(f"jaxgru_{pb.cell}") == 1
    assert_no_loops(names)


def test_nested_vmap_and_vmap_of_jit():
    pb = problem("gru")
    xs = jax.random.normal(jax.random.key(1), (2, 3, *pb.x.shape))  # [A, B, L, N, I]
    f = jax.jit(lambda x: pb.call(pb.params, x, *pb.states))
    got = jax.vmap(jax.vmap(f), in_axes=1, out_axes=1)(jnp.swapaxes(xs, 0, 1))
    for a in range(2):
        for b in range(3):
            want = pb.call(pb.params, xs[a, b], *pb.states)
            chex.assert_trees_all_close(jax.tree.map(lambda o, b=b, a=a: o[b, a], got), want, **TOL)
    names = primitives_in(jax.make_jaxpr(jax.vmap(jax.vmap(f)))(xs))
    assert names.count("jaxgru_gru") == 1


@pytest.mark.parametrize("name", ["gru", "lstm"])
def test_vmap_weights_is_an_ensemble(name):
    pb = problem(name)
    members = [problem(name, seed=s).params for s in (1, 2, 3)]
    stacked = jax.tree.map(lambda *a: jnp.stack(a), *members)
    f = lambda p, x: pb.call(p, x, *pb.states)
    got = jax.vmap(f, in_axes=(0, None))(stacked, pb.x)
    want = _stack_loop(f, [stacked, pb.x], (0, None), 3)
    chex.assert_trees_all_close(got, want, **TOL)
    jaxpr = jax.make_jaxpr(jax.vmap(f, in_axes=(0, None)))(stacked, pb.x)
    fwd = [e for e in jaxpr.jaxpr.eqns if e.primitive.name == f"jaxgru_{pb.cell}"]
    assert len(fwd) == 1 and fwd[0].params["ensemble"] == 3
    # weights and data both batched, gradients per member
    xs = jnp.stack([problem(name, seed=s).x for s in (4, 5, 6)])
    g = jax.vmap(jax.grad(pb.loss(lambda p, x: f(p, x))))(stacked, xs)
    g_want = _stack_loop(jax.grad(pb.loss(lambda p, x: pb.ref(p, x, *pb.states))), [stacked, xs], (0, 0), 3)
    chex.assert_trees_all_close(g, g_want, **TOL)


def test_per_example_gradients():
    """vmap(grad): weight gradients stay per example (not summed over the vmapped axis)."""
    pb = problem("lstm")
    xs = jnp.stack([problem("lstm", seed=s).x for s in (1, 2)])
    loss = pb.loss(lambda p, x: pb.call(p, x, *pb.states))
    got = jax.vmap(jax.grad(loss), in_axes=(None, 0))(pb.params, xs)
    want = _stack_loop(jax.grad(pb.loss(lambda p, x: pb.ref(p, x, *pb.states))), [pb.params, xs], (None, 0), 2)
    chex.assert_trees_all_close(got, want, **TOL)


# --------------------------------------------------------------------------------------
# autodiff
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(PROBLEMS))
def test_grad_jaxpr_has_one_forward_one_backward_no_loop(name):
    pb = problem(name)
    jaxpr = jax.make_jaxpr(jax.grad(pb.loss(pb.call), argnums=(0, 1, 2)))(*pb.args)
    names = primitives_in(jaxpr)
    assert names.count(f"jaxgru_{pb.cell}") == 1, names
    assert names.count(f"jaxgru_{pb.cell}_vjp") == 1, names
    assert f"jaxgru_{pb.cell}_jvp" not in names
    assert_no_loops(names)


@pytest.mark.parametrize("name", list(PROBLEMS))
def test_jvp_and_vjp(name):
    pb = problem(name)
    tangents = jax.tree.map(lambda a: jax.random.normal(jax.random.key(9), a.shape, a.dtype), pb.args)
    p1, t1 = jax.jvp(pb.call, pb.args, tangents)
    p2, t2 = jax.jvp(pb.ref, pb.args, tangents)
    chex.assert_trees_all_close((p1, t1), (p2, t2), **TOL)
    names = primitives_in(jax.make_jaxpr(lambda *a: jax.jvp(pb.call, a, tangents))(*pb.args))
    assert f"jaxgru_{pb.cell}_jvp" in names
    assert_no_loops(names)
    out, vjp = jax.vjp(pb.call, *pb.args)
    cts = jax.tree.map(lambda a: jax.random.normal(jax.random.key(3), a.shape, a.dtype), out)
    _, vjp_ref = jax.vjp(pb.ref, *pb.args)
    chex.assert_trees_all_close(vjp(cts), vjp_ref(cts), **TOL)


@pytest.mark.parametrize("name", ["gru", "lstm"])
def test_jacfwd_jacrev(name):
    pb = problem(name, L=3, N=2, I=2, H=2)
    f = lambda x: pb.call(pb.params, x, *pb.states)[1]
    r = lambda x: pb.ref(pb.params, x, *pb.states)[1]
    # each Jacobian under jit: one program instead of one per vmapped, differentiated op
    chex.assert_trees_all_close(jax.jit(jax.jacfwd(f))(pb.x), jax.jit(jax.jacfwd(r))(pb.x), **TOL)
    chex.assert_trees_all_close(jax.jit(jax.jacrev(f))(pb.x), jax.jit(jax.jacrev(r))(pb.x), **TOL)
    g = lambda p: pb.call(p, pb.x, *pb.states)[0]
    gr = lambda p: pb.ref(p, pb.x, *pb.states)[0]
    chex.assert_trees_all_close(jax.jit(jax.jacrev(g))(pb.params), jax.jit(jax.jacrev(gr))(pb.params), **TOL)
    chex.assert_trees_all_close(jax.jit(jax.jacfwd(g))(pb.params), jax.jit(jax.jacfwd(gr))(pb.params), **TOL)


@pytest.mark.parametrize("name", ["gru", "lstm"])
def test_hessian_vector_product(name):
    pb = problem(name)
    loss, loss_ref = pb.loss(pb.call), pb.loss(pb.ref)
    v = jax.tree.map(lambda a: jax.random.normal(jax.random.key(4), a.shape, a.dtype), pb.params)
    hvp = jax.jit(lambda lf: jax.jvp(lambda p: jax.grad(lf)(p, pb.x, *pb.states), (pb.params,), (v,))[1],
                  static_argnums=0)
    chex.assert_trees_all_close(hvp(loss), hvp(loss_ref), rtol=1e-3, atol=1e-4)
    gg = jax.jit(lambda lf: jax.grad(lambda p: jnp.sum(jax.grad(lf, argnums=1)(p, pb.x, *pb.states) ** 2))(pb.params),
                 static_argnums=0)
    chex.assert_trees_all_close(gg(loss), gg(loss_ref), rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("name", ["gru", "lstm"])
def test_checkpoint(name):
    pb = problem(name)
    loss = pb.loss(pb.call)
    got = jax.jit(jax.grad(jax.checkpoint(loss)))(*pb.args)
    chex.assert_trees_all_close(got, jax.grad(pb.loss(pb.ref))(*pb.args), **TOL)
    names = primitives_in(jax.make_jaxpr(jax.grad(jax.checkpoint(loss)))(*pb.args))
    assert any("remat" in n or "checkpoint" in n for n in names), names
    # the forward runs again inside the rematerialised backward instead of storing residuals
    assert names.count(f"jaxgru_{pb.cell}") == 2 and names.count(f"jaxgru_{pb.cell}_vjp") == 1, names


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_streaming_state_through_an_outer_scan(cell):
    """Chunks carried through lax.scan equal one long call; so do the gradients."""
    pb = Problem(cell, direction="forward", ragged=False, L=12)
    chunks = pb.x.reshape(4, 3, *pb.x.shape[1:])

    def streamed(params, x, *states):
        def step(carry, xc):
            outs = pb.call(params, xc, *carry)
            return tuple(outs[1:]), outs[0]
        last, ys = jax.lax.scan(step, tuple(states), x.reshape(4, 3, *x.shape[1:]))
        return (ys.reshape(-1, *ys.shape[2:]), *last)

    del chunks
    chex.assert_trees_all_close(streamed(*pb.args), pb.call(*pb.args), **TOL)
    g1 = jax.jit(jax.grad(pb.loss(streamed), argnums=(0, 1, 2)))(*pb.args)
    g2 = jax.grad(pb.loss(pb.call), argnums=(0, 1, 2))(*pb.args)
    chex.assert_trees_all_close(g1, g2, **TOL)


@pytest.mark.parametrize(("which", "cell"), [(0, "gru"), (1, "gru"), (2, "lstm"), (1, "lstm")])
def test_zero_cotangents(which, cell):
    """A loss of one output only: the other cotangents are symbolic zeros."""
    pb = problem(cell)
    loss = lambda f: lambda p: jnp.sum(jnp.sin(f(p, pb.x, *pb.states)[which]))
    chex.assert_trees_all_close(jax.grad(loss(pb.call))(pb.params), jax.grad(loss(pb.ref))(pb.params), **TOL)


def test_unused_outputs_are_not_computed(monkeypatch):
    """Only y_h used: XLA drops the stacked Y from the compiled loop (of the xla lowering: the
    native cpu lowering's FFI call always writes Y)."""
    monkeypatch.setenv("JAXGRU_BACKEND", "xla")
    pb = problem("gru", ragged=False, L=7, N=5, H=11)
    hlo = jax.jit(lambda *a: pb.call(*a)[1]).lower(*pb.args).compile().as_text()
    assert "f32[7,2,5,11]" not in hlo and "f32[7,5,2,11]" not in hlo
    full = jax.jit(lambda *a: pb.call(*a)[0]).lower(*pb.args).compile().as_text()
    assert "f32[7,2,5,11]" in full


# --------------------------------------------------------------------------------------
# numerical gradients, second order, both modes (float64)
# --------------------------------------------------------------------------------------
SMOOTH = ["Sigmoid", "Tanh", "Softplus", "ScaledTanh"]


@pytest.mark.parametrize("spec", [
    dict(cell="gru", lbr=True),
    dict(cell="gru", lbr=False, activations=["Sigmoid", "Softplus", "ScaledTanh", "Tanh"], alpha=[0.7], beta=[1.3]),
    dict(cell="lstm", peep=True),
    dict(cell="lstm", peep=True, input_forget=True, layout=1,
         activations=["Sigmoid", "ScaledTanh", "Softplus"] * 2, alpha=[1.1, 0.9], beta=[0.8, 1.2]),
], ids=["gru-lbr1", "gru-lbr0-acts", "lstm-peep", "lstm-peep-if-acts-layout1"])
def test_check_grads_second_order(spec, jax_x64):
    pb = Problem(**spec, L=4, N=3, I=2, H=2, dtype=jnp.float64)
    # under jit, as models run it: each derivative compiles once instead of op by op
    check_grads(jax.jit(pb.call), pb.args, order=2, modes=("fwd", "rev"), atol=1e-4, rtol=1e-4)
