"""jax.export of backend="auto" is the same portable (xla) artifact on every machine; an explicit
backend="wgsl" refuses export with a jaxgru message; plain jit keeps auto's choice; and auto's
choice skips the adapter probe where no hardware GPU can exist."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import wgsl_support

import jaxgru
import jaxgru.webgpu
from jaxgru._src import backends, native
from jaxgru._src.webgpu import runtime

TOL = dict(rtol=1e-6, atol=1e-6)


def _problem():
    params = jaxgru.init_lstm(jax.random.key(0), 3, 4, bidirectional=True)
    x = jax.random.normal(jax.random.key(1), (5, 2, 3))
    lens = jnp.array([5, 3])
    return params, x, lens


def _loss(p, x, lens):
    y, h, c = jaxgru.lstm(p, x, direction="bidirectional", sequence_lens=lens)  # backend="auto"
    return jnp.mean(y**2) + jnp.sum(jnp.sin(h)) + jnp.sum(c)


def _train_step(p, x, lens):
    value, grads = jax.value_and_grad(_loss)(p, x, lens)
    return value, jax.tree.map(lambda a, g: a - 0.1 * g, p, grads)


def _export(fn, *args):
    return jax.export.export(jax.jit(fn))(*args)


def _cfg(fn, *args):
    jaxpr = jax.make_jaxpr(fn)(*args)
    return next(e.params["cfg"] for e in jaxpr.eqns if e.primitive.name.startswith("jaxgru_"))


def test_auto_exports_the_same_artifact_whatever_the_machine_picks(monkeypatch):
    params, x, lens = _problem()
    blobs = {}
    for env in ("wgsl", "xla"):
        monkeypatch.setenv(backends.ENV, env)
        cfg = _cfg(lambda p, x: jaxgru.lstm(p, x, direction="bidirectional"), params, x)
        assert (cfg.backend, cfg.auto) == (env, True)  # traced with this machine's choice...
        exported = _export(lambda p, x, lens: _train_step(p, x, lens), params, x, lens)
        text = exported.mlir_module()
        assert "custom_call" not in text and "callback" not in text  # ...lowered as plain XLA
        blobs[env] = exported.serialize()
    assert blobs["wgsl"] == blobs["xla"]
    monkeypatch.setenv(backends.ENV, "wgsl")
    restored = jax.export.deserialize(blobs["wgsl"])
    got = restored.call(params, x, lens)
    monkeypatch.setenv(backends.ENV, "xla")
    chex.assert_trees_all_close(got, jax.jit(_train_step)(params, x, lens), **TOL)
    assert isinstance(got[1], type(params))


def test_grad_and_vmap_under_export(monkeypatch):
    params, x, lens = _problem()
    xs = jnp.stack([x, 2 * x, -x])  # vmapped over 3 batches of sequences
    monkeypatch.setenv(backends.ENV, "xla")
    want_grad = jax.jit(jax.grad(_loss, argnums=(0, 1)))(params, x, lens)
    want_vmap = jax.jit(jax.vmap(jax.grad(_loss, argnums=1), in_axes=(None, 0, None)))(params, xs, lens)
    monkeypatch.setenv(backends.ENV, "wgsl")
    grad_fn = jax.grad(lambda p, x, lens: _loss(p, x, lens), argnums=(0, 1))
    vmap_fn = jax.vmap(jax.grad(lambda p, x, lens: _loss(p, x, lens), argnums=1), in_axes=(None, 0, None))
    for fn, args, want in ((grad_fn, (params, x, lens), want_grad), (vmap_fn, (params, xs, lens), want_vmap)):
        exported = _export(fn, *args)
        assert "custom_call" not in exported.mlir_module()
        got = jax.export.deserialize(exported.serialize()).call(*args)
        chex.assert_trees_all_close(got, want, **TOL)


def test_auto_exports_without_an_adapter_even_when_forced_to_wgsl(monkeypatch):
    # JAXGRU_BACKEND=wgsl on a machine without a usable adapter: export needs none; plain jit
    # says why it cannot run (when lowered; the trace records the choice)
    monkeypatch.setenv(backends.ENV, "wgsl")
    monkeypatch.setenv(runtime.ADAPTER_ENV, "no-such-adapter-anywhere")
    params = jaxgru.init_gru(jax.random.key(0), 3, 4)
    x = jnp.ones((5, 2, 3))
    exported = _export(lambda p, x: jaxgru.gru(p, x)[0], params, x)
    got = jax.export.deserialize(exported.serialize()).call(params, x)
    chex.assert_trees_all_close(got, jaxgru.gru(params, x, backend="xla")[0], **TOL)
    with pytest.raises(runtime.WGPUUnavailableError, match=r"jaxgru\.gru, backend='wgsl'"):
        jax.jit(lambda p, x: jaxgru.gru(p, x)[1] + 1.0)(params, x)


@pytest.mark.wgsl
def test_explicit_wgsl_refuses_export_with_a_jaxgru_message():
    wgsl_support.require_adapter()
    params = jaxgru.init_gru(jax.random.key(0), 3, 4)
    x = jnp.ones((5, 2, 3))
    for fn in (lambda p, x: jaxgru.gru(p, x, backend="wgsl")[0],
               jax.grad(lambda p, x: jnp.sum(jaxgru.gru(p, x, backend="wgsl")[0]))):
        with pytest.raises(NotImplementedError, match=r"backend='wgsl' cannot be exported.*Use backend='xla'"):
            _export(fn, params, x)
    # an explicit xla exports as before
    assert "custom_call" not in _export(lambda p, x: jaxgru.gru(p, x, backend="xla")[0], params, x).mlir_module()


@pytest.mark.wgsl
def test_plain_jit_still_runs_auto_on_wgsl(monkeypatch):
    wgsl_support.require_adapter()
    monkeypatch.setenv(backends.ENV, "wgsl")
    params, x, lens = _problem()
    jaxgru.webgpu.reset_counters()
    step = jax.jit(lambda p, x, lens: _train_step(p, x, lens))  # a function of its own: traced here
    text = step.lower(params, x, lens).as_text()
    assert "custom_call" in text  # the host callback into the WGSL kernels
    got = step(params, x, lens)
    assert jaxgru.webgpu.counters()["total"]["calls"] >= 1
    monkeypatch.setenv(backends.ENV, "xla")
    want = jax.jit(lambda p, x, lens: _train_step(p, x, lens))(params, x, lens)
    chex.assert_trees_all_close(got, want, rtol=1e-4, atol=1e-5)


# --------------------------------------------------------------------------------------
# auto's choice without the adapter probe
# --------------------------------------------------------------------------------------
def _no_probe():
    raise AssertionError("auto probed the WebGPU adapters")


def _no_native(monkeypatch):
    """As on a host where the native lowering does not run (not built, or only portable kernels)."""
    monkeypatch.setattr(native, "auto_choice", lambda: (False, "the native CPU lowering is not built"))


def test_auto_skips_the_probe_without_a_gpu_device_node(monkeypatch):
    monkeypatch.delenv(backends.ENV, raising=False)
    monkeypatch.setattr(backends.jax, "default_backend", lambda: "cpu")
    monkeypatch.setattr(backends, "gpu_device_node", lambda: None)
    monkeypatch.setattr(backends, "adapter_status", _no_probe)
    _no_native(monkeypatch)
    choice, reason = backends.automatic()
    assert choice == "xla" and "no GPU device node" in reason and "not built" in reason
    params = jaxgru.init_gru(jax.random.key(0), 3, 4)
    y, _ = jaxgru.gru(params, jnp.ones((5, 2, 3)))  # the public call does not probe either
    assert y.shape == (5, 1, 2, 4)


@pytest.mark.parametrize(("adapter_type", "want"), [("DiscreteGPU", "wgsl"), ("IntegratedGPU", "wgsl"),
                                                    ("CPU", "xla")])
def test_without_the_native_lowering_a_gpu_host_probes_and_picks_a_hardware_adapter(monkeypatch, adapter_type,
                                                                                     want):
    monkeypatch.delenv(backends.ENV, raising=False)
    monkeypatch.setattr(backends.jax, "default_backend", lambda: "cpu")
    monkeypatch.setattr(backends, "gpu_device_node", lambda: "/dev/dri/renderD128")
    adapter = {"name": "Some GPU", "adapter_type": adapter_type, "backend_type": "Vulkan"}
    monkeypatch.setattr(backends, "adapter_status", lambda: {"available": True, "adapter": adapter})
    _no_native(monkeypatch)
    assert backends.automatic()[0] == want  # a software adapter (type CPU): xla
    monkeypatch.setattr(backends.jax, "default_backend", lambda: "gpu")  # JAX on the GPU: xla
    assert backends.automatic()[0] == "xla"


@pytest.mark.parametrize("node", [None, "/dev/nvidia0"])
def test_auto_picks_the_native_lowering_on_a_gpu_host_too_without_probing(monkeypatch, node):
    """Where the native lowering runs, auto picks it with or without a GPU (it was ahead of wgsl on
    every case measured with one: docs/backends.md) and never pays the adapter probe."""
    if not native.auto_choice()[0]:
        pytest.skip("the native CPU lowering does not run here")
    monkeypatch.delenv(backends.ENV, raising=False)
    monkeypatch.setattr(backends.jax, "default_backend", lambda: "cpu")
    monkeypatch.setattr(backends, "gpu_device_node", lambda: node)
    monkeypatch.setattr(backends, "adapter_status", _no_probe)
    choice, reason = backends.automatic()
    assert choice == "cpu" and "native CPU lowering is built" in reason
    monkeypatch.setenv(backends.ENV, "wgsl")  # the override still reaches the GPU path
    assert backends.automatic()[0] == "wgsl"


def test_gpu_device_node_looks_for_device_nodes(monkeypatch, tmp_path):
    if not backends.sys.platform.startswith("linux"):
        assert backends.gpu_device_node() is not None  # elsewhere: always probe
        return
    monkeypatch.setattr(backends, "GPU_DEVICE_NODES", (str(tmp_path / "renderD*"), str(tmp_path / "nvidia[0-9]*")))
    assert backends.gpu_device_node() is None
    (tmp_path / "nvidia0").touch()
    assert backends.gpu_device_node() == str(tmp_path / "nvidia0")
    (tmp_path / "renderD128").touch()
    assert backends.gpu_device_node() == str(tmp_path / "renderD128")


def test_float64_auto_stays_on_xla_under_export(monkeypatch, jax_x64):
    monkeypatch.setenv(backends.ENV, "wgsl")
    params = jaxgru.init_gru(jax.random.key(0), 3, 4, dtype=jnp.float64)
    x = jnp.ones((5, 2, 3), jnp.float64)
    assert _cfg(lambda p, x: jaxgru.gru(p, x), params, x).backend == "xla"
    got = jax.export.deserialize(_export(lambda p, x: jaxgru.gru(p, x)[0], params, x).serialize()).call(params, x)
    np.testing.assert_allclose(got, jaxgru.gru(params, x, backend="xla")[0], rtol=1e-12)
