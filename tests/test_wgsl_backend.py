"""backend="wgsl" through the public API: every feature against backend="xla", transforms,
counters, concurrency, bounded caches, device loss, and the backend choice."""

from __future__ import annotations

import contextlib
import ctypes
import gc
import itertools
import threading

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import wgsl_support
from oracles import random_case, seed_of

import jaxgru
from jaxgru._src import backends, native
from jaxgru._src.activations import NAMES, lookup
from jaxgru._src.webgpu import counters, plan, runtime

pytestmark = pytest.mark.wgsl
F32 = dict(atol=1e-5, rtol=1e-4)


@pytest.fixture(scope="module", autouse=True)
def adapter():
    return wgsl_support.require_adapter()


def _both(case, layout=0, **extra):
    """The case through the public API on each backend, jitted."""
    out = {}
    for be in ("xla", "wgsl"):
        out[be] = case.run(layout, backend=be, **extra)
    return out["xla"], out["wgsl"]


def _matrix():
    """Every cell variant x direction x layout, with ragged lengths (incl. 0 and L), initial
    states, clip, and activations cycling through all 11 with alpha/beta, per direction."""
    out = []
    flags = [("gru", {"linear_before_reset": 0}), ("gru", {"linear_before_reset": 1}),
             ("lstm", {"peep": True}), ("lstm", {"input_forget": 1}), ("lstm", {"peep": True, "input_forget": 1})]
    for k, ((cell, flag), direction, layout) in enumerate(itertools.product(
            flags, ["forward", "reverse", "bidirectional"], [0, 1])):
        d = 2 if direction == "bidirectional" else 1
        per = 2 if cell == "gru" else 3
        acts = [NAMES[(3 * k + j) % len(NAMES)] for j in range(per * d)]
        opts = dict(flag, direction=direction, h0=True, c0=cell == "lstm", lens=[5, 0, 3, 1], activations=acts)
        # exactly as many alpha/beta values as the activations consume
        opts["activation_alpha"] = [0.6] * sum(lookup(a).takes_alpha for a in acts)
        opts["activation_beta"] = [0.4] * sum(lookup(a).takes_beta for a in acts)
        if k % 3 == 0:
            opts["clip"] = 0.7
        out.append((f"{cell}-{'-'.join(f'{a}{int(b)}' for a, b in flag.items())}-{direction}-l{layout}", opts, layout))
    return out


MATRIX = _matrix()


@pytest.mark.parametrize(("name", "opts", "layout"), MATRIX, ids=[m[0] for m in MATRIX])
def test_feature_matrix_matches_xla(name, opts, layout):
    rng = np.random.default_rng(seed_of(name))
    cell = name.split("-")[0]
    case = random_case(rng, cell, L=5, N=4, I=3, H=5, scale=0.4, **opts)
    want, got = _both(case, layout)
    for w, g in zip(want, got, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        scale = max(1.0, float(np.abs(np.asarray(w)).max()))
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), atol=F32["atol"] * scale, rtol=F32["rtol"])


# one of each cell variant, direction and layout
TILED = [m for m in MATRIX if m[0] in ("gru-linear_before_reset0-bidirectional-l0",
                                        "gru-linear_before_reset1-reverse-l1",
                                        "lstm-peepTrue-input_forget1-bidirectional-l1")]


@pytest.mark.parametrize(("name", "opts", "layout"), TILED, ids=[m[0] for m in TILED])
def test_auto_tiled_matches_xla(name, opts, layout, monkeypatch):
    """The tiled kernels through the public API, as auto picks them on a GPU-class target (patched
    in: lavapipe's target of 1 keeps stepwise), under jit."""
    monkeypatch.setitem(plan.TARGET_WORKGROUPS, runtime.runtime().adapter_info["adapter_type"], 256)
    monkeypatch.setattr(plan, "PERSISTENT_MAX_HIDDEN", 0)
    rng = np.random.default_rng(seed_of(name))
    case = random_case(rng, name.split("-")[0], L=5, N=4, I=3, H=5, scale=0.4, **opts)
    want, got = jax.block_until_ready(_both(case, layout))
    assert counters.counters()["last"]["variant"] == "tiled"
    for w, g in zip(want, got, strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), atol=F32["atol"], rtol=F32["rtol"])


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_float16_and_bfloat16(cell):
    rng = np.random.default_rng(1)
    flag = {"linear_before_reset": 1} if cell == "gru" else {"peep": True}
    case = random_case(rng, cell, h0=True, lens=[5, 2, 0], **flag)
    for dtype, tol in ((jnp.float16, 3e-3), (jnp.bfloat16, 2e-2)):
        for field in ("x", "w", "r", "b", "p", "h0"):
            if getattr(case, field) is not None:
                setattr(case, field, jnp.asarray(np.asarray(getattr(case, field), np.float32), dtype))
        want, got = _both(case)
        for w, g in zip(want, got, strict=True):
            assert g.dtype == dtype
            np.testing.assert_allclose(np.asarray(g, np.float32), np.asarray(w, np.float32), atol=tol, rtol=tol)


def test_float64_is_refused_at_trace_time(jax_x64):
    params = jaxgru.init_gru(jax.random.key(0), 3, 4, dtype=jnp.float64)
    x = jnp.ones((5, 2, 3), jnp.float64)
    with pytest.raises(NotImplementedError, match="backend='wgsl' has no float64"):
        jax.eval_shape(lambda p, x: jaxgru.gru(p, x, backend="wgsl"), params, x)
    # auto never picks wgsl for float64
    assert backends.resolve("auto", "f", np.float64) == "xla"


# --------------------------------------------------------------------------------------
# transforms on this backend
# --------------------------------------------------------------------------------------
def _problem(cell="lstm"):
    init = jaxgru.init_gru if cell == "gru" else jaxgru.init_lstm
    params = init(jax.random.key(0), 3, 5, bidirectional=True)
    x = jax.random.normal(jax.random.key(1), (6, 4, 3))
    lens = jnp.array([6, 3, 0, 1])
    fn = jaxgru.gru if cell == "gru" else jaxgru.lstm
    return fn, params, x, lens


@pytest.mark.parametrize("variant", ["auto", "tiled"])
@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_grad_jit_vmap_on_wgsl(cell, variant, monkeypatch):
    if variant == "tiled":  # as auto picks it on a GPU-class target (lavapipe's target of 1 keeps stepwise)
        monkeypatch.setitem(plan.TARGET_WORKGROUPS, runtime.runtime().adapter_info["adapter_type"], 256)
        monkeypatch.setattr(plan, "PERSISTENT_MAX_HIDDEN", 0)
    fn, params, x, lens = _problem(cell)
    call = lambda be: lambda p, x: fn(p, x, direction="bidirectional", sequence_lens=lens, backend=be)
    loss = lambda be: lambda p, x: sum(jnp.sum(jnp.sin(o)) for o in call(be)(p, x))
    g_w = jax.jit(jax.grad(loss("wgsl"), argnums=(0, 1)))(params, x)
    chex.assert_trees_all_close(g_w, jax.grad(loss("xla"), argnums=(0, 1))(params, x), **F32)
    jaxpr = jax.make_jaxpr(jax.grad(loss("wgsl")))(params, x)
    fwd = [e for e in jaxpr.eqns if e.primitive.name == f"jaxgru_{cell}"]
    assert len(fwd) == 1 and fwd[0].params["cfg"].backend == "wgsl" and fwd[0].params["residuals"]
    xs = jnp.stack([x, 2 * x, -x])
    v = jax.jit(jax.vmap(call("wgsl"), in_axes=(None, 0)))(params, xs)
    chex.assert_trees_all_close(v, jax.vmap(call("xla"), in_axes=(None, 0))(params, xs), **F32)
    ens = jax.tree.map(lambda a: jnp.stack([a, 0.5 * a]), params)
    e = jax.vmap(call("wgsl"), in_axes=(0, None))(ens, x)
    chex.assert_trees_all_close(e, jax.vmap(call("xla"), in_axes=(0, None))(ens, x), **F32)
    assert counters.counters()["last"]["variant"] == (variant if variant == "tiled" else "persistent")


def test_the_callback_is_zero_copy_buffer_callback():
    fn, params, x, _lens = _problem()
    text = jax.jit(lambda p, x: fn(p, x, direction="bidirectional", backend="wgsl")).lower(params, x).as_text()
    assert "xla_buffer_python_cpu_callback" in text


def test_shard_map_on_wgsl():
    fn, params, x, lens = _problem("gru")
    mesh = jax.make_mesh((4,), ("batch",))
    par = jaxgru.sharded(fn, mesh)
    got = jax.jit(lambda p, x: par(p, x, direction="bidirectional", sequence_lens=lens, backend="wgsl"))(params, x)
    chex.assert_trees_all_close(got, fn(params, x, direction="bidirectional", sequence_lens=lens, backend="xla"), **F32)


def test_export_refuses_host_callbacks_with_a_clear_error():
    fn, params, x, _ = _problem()
    with pytest.raises(NotImplementedError, match=r"backend='wgsl' cannot be exported.*Use backend='xla'"):
        jax.export.export(jax.jit(lambda p, x: fn(p, x, direction="bidirectional", backend="wgsl")))(params, x)


# --------------------------------------------------------------------------------------
# counters, concurrency, bounded caches, device loss
# --------------------------------------------------------------------------------------
def test_one_submit_per_call_and_counters():
    fn, params, x, lens = _problem("gru")
    f = jax.jit(lambda p, x: fn(p, x, direction="bidirectional", sequence_lens=lens, backend="wgsl"))
    jax.block_until_ready(f(params, x))
    before = counters.counters()["total"]
    for k in range(3):
        jax.block_until_ready(f(params, x * (k + 1)))
    after = counters.counters()
    assert after["total"]["calls"] - before["calls"] == 3
    assert after["total"]["submits"] - before["submits"] == 3  # exactly one per call
    last = after["last"]
    assert last["submits"] == 1 and last["dispatches"] >= 2 and last["bytes_read_back"] > 0
    assert last["bytes_uploaded"] >= x.size * 4  # at least x goes up; cached weights need not


def test_threads_calling_at_once():
    fn, params, x, lens = _problem("lstm")
    f = jax.jit(lambda p, x: fn(p, x, direction="bidirectional", sequence_lens=lens, backend="wgsl"))
    ref = jax.jit(lambda p, x: fn(p, x, direction="bidirectional", sequence_lens=lens, backend="xla"))
    inputs = [x * (k + 1) / 4 for k in range(8)]
    want = [ref(params, xi) for xi in inputs]
    got, errors = [None] * 8, []

    def work(k):
        try:
            for _ in range(3):
                got[k] = jax.block_until_ready(f(params, inputs[k]))
        except Exception as e:  # surfaced below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for g, w in zip(got, want, strict=True):
        chex.assert_trees_all_close(g, w, **F32)


def test_many_calls_keep_caches_bounded():
    fns = []
    for cell, (L, N, H) in itertools.product(["gru", "lstm"], [(4, 2, 3), (7, 5, 8), (3, 9, 4)]):
        init = jaxgru.init_gru if cell == "gru" else jaxgru.init_lstm
        fn = jaxgru.gru if cell == "gru" else jaxgru.lstm
        p = init(jax.random.key(L), 3, H)
        fns.append((jax.jit(lambda p, x, fn=fn: fn(p, x, backend="wgsl")), p, (L, N, 3)))
    def calls(n):
        for k in range(n):
            f, p, shape = fns[k % len(fns)]
            jax.block_until_ready(f(jax.tree.map(lambda a, k=k: a * (1 + k % 7), p), jnp.full(shape, k % 5 / 5)))

    for f, p, shape in fns:  # warm up every shape
        jax.block_until_ready(f(p, jnp.ones(shape)))
    warm = runtime.stats()
    # one round first for JAX's own caches (the eager ops that make new weights and inputs
    # compile per value: ~31 MiB once, measured; flat over the next 360 calls)
    calls(120)
    rss0 = _rss_mib()
    calls(120)
    end = runtime.stats()
    assert end["pipelines"] == warm["pipelines"] <= end["max_pipelines"]
    pool, tables = end["pool"], end["tables"]
    assert pool["idle_bytes"] <= pool["max_idle_bytes"]
    assert pool["created"] == warm["pool"]["created"]  # every scratch buffer was reused
    assert pool["reused"] > warm["pool"]["reused"]
    assert tables["bytes"] <= tables["max_bytes"] and tables["entries"] <= tables["max_entries"]
    if rss0 is not None:  # process memory: no growth beyond noise (allocator slack)
        assert _rss_mib() - rss0 < 32, (rss0, _rss_mib())


def _rss_mib():
    """Resident memory (MiB) of live objects: garbage collected and free heap pages handed back
    first, so that freed-but-retained malloc memory does not read as growth."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmRSS"))
    except OSError:
        return None


def test_new_weight_values_are_never_stale():
    fn, params, x, _ = _problem("gru")
    f = jax.jit(lambda p, x: fn(p, x, direction="bidirectional", backend="wgsl"))
    a = f(params, x)
    params2 = jax.tree.map(lambda v: v * 0.5, params)
    b = f(params2, x)
    chex.assert_trees_all_close(b, fn(params2, x, direction="bidirectional", backend="xla"), **F32)
    assert not np.allclose(np.asarray(a[0]), np.asarray(b[0]))


def test_a_lost_device_is_recreated():
    fn, params, x, _ = _problem("gru")
    f = jax.jit(lambda p, x: fn(p, x, direction="bidirectional", backend="wgsl"))
    first = f(params, x)
    runtime.runtime().device.destroy()
    chex.assert_trees_all_close(f(params, x), first, atol=0, rtol=0)


# --------------------------------------------------------------------------------------
# the backend choice
# --------------------------------------------------------------------------------------
def _forward_backend(**kw):
    params = jaxgru.init_gru(jax.random.key(0), 3, 4)
    jaxpr = jax.make_jaxpr(lambda p, x: jaxgru.gru(p, x, **kw))(params, jnp.ones((5, 2, 3)))
    return next(e.params["cfg"].backend for e in jaxpr.eqns if e.primitive.name == "jaxgru_gru")


def test_auto_choice_and_env_override(monkeypatch, adapter):
    monkeypatch.delenv(backends.ENV, raising=False)
    choice, reason = backends.automatic()
    if jax.default_backend() == "cpu" and native.auto_choice()[0]:  # the native lowering, GPU or not
        assert choice == "cpu" and reason
    elif adapter["adapter_type"] in backends.HARDWARE_ADAPTERS and jax.default_backend() == "cpu":
        assert choice == "wgsl"
    else:
        assert choice == "xla" and reason
    assert _forward_backend() == choice
    monkeypatch.setenv(backends.ENV, "wgsl")
    assert _forward_backend() == "wgsl"
    assert _forward_backend(backend="xla") == "xla"  # an explicit argument wins
    monkeypatch.setenv(backends.ENV, "tpu")
    with pytest.raises(ValueError, match="JAXGRU_BACKEND must be one of"):
        _forward_backend()


def test_no_adapter_says_how_to_get_one(monkeypatch):
    monkeypatch.setenv(runtime.ADAPTER_ENV, "no-such-adapter-anywhere")
    with pytest.raises(runtime.WGPUUnavailableError) as info:
        _forward_backend(backend="wgsl")
    assert "jaxgru.gru" in str(info.value) and "apt-get install mesa-vulkan-drivers" in str(info.value)
    monkeypatch.delenv(backends.ENV, raising=False)
    assert _forward_backend() == ("cpu" if native.available() else "xla")  # auto falls back


def test_backend_info_reports_adapters():
    info = jaxgru.backend_info()
    assert info["auto"] in ("xla", "wgsl", "cpu") and info["reason"]
    assert info["adapters"] and sum(a["selected"] for a in info["adapters"]) == 1
    a = info["adapters"][0]
    for key in ("name", "adapter_type", "backend_type", "features", "limits"):
        assert key in a
