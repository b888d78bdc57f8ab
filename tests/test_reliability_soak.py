"""Soak and concurrency: thousands of mixed-shape calls on each backend with bounded process
memory and bounded device caches (and native calls that run pipelined on two threads), 8
threads calling both backends at once (with a device loss
in the middle), repeated device losses, and a clean interpreter exit with work in flight.

The default run makes ``SOAK_CALLS`` calls per backend; the ``slow`` soak makes
``SOAK_CALLS_SLOW`` (run it with ``pytest -m slow tests/test_reliability_soak.py`` or with
``JAXGRU_SLOW=1``; it skips itself otherwise, so ``make test`` stays within its budget).
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import textwrap
import threading
import time
import weakref

import jax
import numpy as np
import pytest
import wgsl_support
from backend_cases import BACKENDS
from test_reliability_fuzz import Config, assert_agree, build_case, expected_from_ort
from test_wgsl_backend import _rss_mib

import jaxgru
from jaxgru._src import native
from jaxgru._src.webgpu import counters, runtime

SOAK_CALLS = 10_000  # per backend, in the default run (about 3 s on xla, 20 s on lavapipe)
SOAK_CALLS_SLOW = 100_000  # per backend, @pytest.mark.slow
RSS_BOUND_MIB = 16  # growth of VmRSS allowed after the warm-up, over a whole soak (measured: < 1)
RSS_BOUND_DEVICE_LOSS_MIB = 32  # over 20 device losses (measured: about 8, driver allocations)
CHECK_EVERY = 97  # every this many calls, compare with onnxruntime
THREADS = 8

# mixed shapes and options: every call of the soak picks one of these
SHAPES = [
    Config(cell="gru", L=3, N=2, I=3, H=4),
    Config(cell="lstm", L=5, N=3, I=2, H=5, direction="bidirectional", layout=1, lens=(5, 0, 2), peep=True),
    Config(cell="gru", L=1, N=1, I=1, H=1, direction="reverse", lens=(1,), lbr=True),
    Config(cell="lstm", L=7, N=1, I=3, H=2, layout=1, h0=True, c0=True, input_forget=True),
    Config(cell="gru", L=4, N=5, I=2, H=3, direction="bidirectional", lens=(4, 1, 0, 3, 4), h0=True,
           acts=("HardSigmoid", "Softsign", "Sigmoid", "Elu"), alpha=(0.3, 0.9), beta=(0.4,)),
    Config(cell="lstm", L=2, N=4, I=1, H=7, direction="reverse", clip=0.8, lens=(2, 2, 1, 0)),
]

# one-direction calls that the native lowering runs pipelined on two threads (csrc
# work_pipelined: N = 16, H = 56-64, 4-5 chunks of projections through a ring of three); weights
# of ~1/sqrt(H), as in the fuzz's pipelined calls (larger ones make 70 steps chaotic, and rounding
# is all that differs)
PIPELINED_SHAPES = [
    Config(cell="lstm", L=70, N=16, I=8, H=64, lens=(70, 0, 17, 33, 70, 16, 1, 69, 48, 70, 15, 49, 8, 64, 24, 2),
           peep=True, scale=0.05),
    Config(cell="gru", L=70, N=16, I=5, H=56, direction="reverse", layout=1, lbr=True, scale=0.05),
    Config(cell="gru", L=70, N=16, I=24, H=64, acts=("HardSigmoid", "Softsign"), alpha=(0.3,), beta=(0.4,),
           scale=0.05),
]


def _slow_requested(config) -> bool:
    return os.environ.get("JAXGRU_SLOW") == "1" or "slow" in (config.getoption("-m") or "")


class Soak:
    """Jitted calls for every shape of `shapes` on one backend; inputs change on every call."""

    def __init__(self, backend: str, shapes: list[Config] = SHAPES):
        self.backend = backend
        self.shapes = shapes
        self.cases = [build_case(cfg)[0] for cfg in shapes]
        self.fns = []
        for cfg, case in zip(shapes, self.cases, strict=True):
            fn = jaxgru.gru if cfg.cell == "gru" else jaxgru.lstm
            kw = {k: v for k, v in case.kwargs(cfg.layout).items() if k not in ("initial_h", "initial_c")}
            self.fns.append(jax.jit(lambda p, x, h, c, fn=fn, kw=kw: fn(
                p, x, initial_h=h, **({} if c is None else {"initial_c": c}), **kw, backend=backend)))

    def inputs(self, k: int):
        """Call k: its shape, and values that differ from call to call (new weights every 50
        calls, so the device weight cache sees misses and evictions)."""
        i = k % len(self.shapes)
        cfg, case = self.shapes[i], self.cases[i]
        x = case.x * np.float32(1 + (k % 11) / 5)
        params = jax.tree.map(lambda a: a * np.float32(1 + (k // 50) % 13 / 20), case.params)
        rng = np.random.default_rng(k)
        st_ = (cfg.d, cfg.N, cfg.H)
        h = rng.standard_normal(st_).astype(np.float32) * 0.3
        c = rng.standard_normal(st_).astype(np.float32) * 0.3 if cfg.cell == "lstm" else None
        return i, params, x, h, c

    def call(self, k: int):
        i, params, x, h, c = self.inputs(k)
        cfg = self.shapes[i]
        if cfg.layout == 1:
            x, h, c = np.swapaxes(x, 0, 1), np.swapaxes(h, 0, 1), None if c is None else np.swapaxes(c, 0, 1)
        return jax.block_until_ready(self.fns[i](params, x, h, c))

    def check(self, k: int, outs) -> None:
        """Compare call k's outputs with onnxruntime."""
        i, params, x, h, c = self.inputs(k)
        cfg, case = self.shapes[i], self.cases[i]
        ref = dataclasses.replace(case, x=x, w=np.asarray(params.w), r=np.asarray(params.r),
                                  b=None if params.b is None else np.asarray(params.b),
                                  p=getattr(params, "p", None), h0=h, c0=c)
        if ref.p is not None:
            ref.p = np.asarray(ref.p)
        got = [np.asarray(o) for o in outs]
        if cfg.layout == 1:
            got = [np.transpose(got[0], (1, 2, 0, 3))] + [np.swapaxes(o, 0, 1) for o in got[1:]]
        for j, (g, w) in enumerate(zip(got, expected_from_ort(ref, "float32"), strict=True)):
            assert_agree(g, w, "float32", f"call {k} ({cfg}), output {j}")


def _soak(backend: str, calls: int, shapes: list[Config] = SHAPES) -> dict:
    soak = Soak(backend, shapes)
    for k in range(3 * len(shapes)):  # warm-up: compile, pipelines, pool size classes, the oracle
        soak.check(k, soak.call(k))
    if backend == "wgsl":
        runtime.runtime().finish_call()
        warm = runtime.stats()
        c0 = counters.counters()["total"]
    rss0 = _rss_mib()
    t0 = time.perf_counter()
    for k in range(calls):
        outs = soak.call(k)
        if k % CHECK_EVERY == 0:
            soak.check(k, outs)
    seconds = time.perf_counter() - t0
    rss1 = _rss_mib()
    report = {"backend": backend, "calls": calls, "seconds": round(seconds, 1),
              "rss_before_mib": rss0, "rss_after_mib": rss1}
    if rss0 is not None:
        assert rss1 - rss0 < RSS_BOUND_MIB, report
    if backend == "wgsl":
        end = runtime.stats()
        c1 = counters.counters()["total"]
        report.update(stats_before=warm, stats_after=end)
        assert c1["calls"] - c0["calls"] == calls and c1["submits"] - c0["submits"] == calls, (c0, c1)
        assert end["pipelines"] == warm["pipelines"] <= end["max_pipelines"], report
        pool, tables = end["pool"], end["tables"]
        assert pool["created"] == warm["pool"]["created"], report  # every scratch buffer reused
        assert pool["idle_bytes"] <= pool["max_idle_bytes"], report
        assert tables["entries"] <= tables["max_entries"] and tables["bytes"] <= tables["max_bytes"], report
        groups = end["bind_groups"]  # every call after the warm-up binds buffers it bound before
        assert groups["misses"] == warm["bind_groups"]["misses"] and groups["entries"] <= groups["max_entries"], report
        # weights go up raw on every call (nothing keyed by their content is kept on the device)
        assert c1["bytes_uploaded"] - c0["bytes_uploaded"] > 0, report
    print(report)  # the figures (pytest -s shows them)
    return report


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_soak_mixed_shapes(backend):
    _soak(backend, SOAK_CALLS)


@pytest.mark.native
def test_soak_pipelined_native_calls(monkeypatch):
    """3,000 native calls on two threads whose helper projects ahead of the caller's steps (ragged
    lengths with 0, reverse, layout 1, other activations): process memory bounded, every 97th
    against onnxruntime, and every call ran pipelined."""
    monkeypatch.setenv(native.THREADS_ENV, "2")
    jax.clear_caches()  # the threads are read when a call is lowered
    module, _ = native._module()
    before = module.pipelined_calls()
    report = _soak("cpu", 3000, PIPELINED_SHAPES)
    assert module.pipelined_calls() - before == 3000 + 3 * len(PIPELINED_SHAPES), report


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_soak_mixed_shapes_long(backend, request):
    if not _slow_requested(request.config):
        pytest.skip("the long soak runs with -m slow (or JAXGRU_SLOW=1)")
    _soak(backend, SOAK_CALLS_SLOW)


@pytest.mark.wgsl
def test_threads_calling_both_backends_with_a_device_loss():
    """8 threads, each alternating xla and wgsl calls over the mixed shapes; the main thread
    destroys the wgpu device half-way. Every xla result is bit-identical to the serial one;
    every wgsl result agrees with it."""
    wgsl_support.require_adapter()
    soaks = {be: Soak(be) for be in ("xla", "wgsl")}
    per_thread = 2 * len(SHAPES)
    want = {k: soaks["xla"].call(k) for k in range(THREADS * per_thread)}  # serial reference
    for k in range(len(SHAPES)):
        soaks["wgsl"].call(k)  # compiled before the threads start
    got, errors = {}, []
    half = threading.Barrier(THREADS + 1)

    def work(t):
        try:
            for j in range(per_thread):
                k = t * per_thread + j
                if j == per_thread // 2:
                    half.wait(timeout=300)  # the device is destroyed here ...
                    half.wait(timeout=300)  # ... and every thread carries on
                be = "wgsl" if (t + j) % 2 else "xla"
                got[k, be] = soaks[be].call(k)
        except Exception as e:  # surfaced below
            errors.append(e)
            half.abort()

    threads = [threading.Thread(target=work, args=(t,)) for t in range(THREADS)]
    for t in threads:
        t.start()
    half.wait(timeout=300)
    old = weakref.ref(runtime.runtime().device)
    runtime.runtime().device.destroy()
    half.wait(timeout=300)
    for t in threads:
        t.join(timeout=600)
    assert not errors, errors
    assert len(got) == THREADS * per_thread
    for (k, be), outs in got.items():
        for a, b in zip(outs, want[k], strict=True):
            if be == "xla":
                np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
            else:
                assert_agree(a, b, "float32", f"call {k} on wgsl")
    assert old() is None  # the lost device was freed


@pytest.mark.wgsl
def test_lost_devices_are_freed_at_once():
    """Repeated device losses (and resets) each recreate the device; the old one is freed at
    once and process memory stays bounded. Was: wgpu's device and queue form a reference cycle,
    so every lost device (about 5 MiB of lavapipe memory) lived until the next full garbage
    collection: +110 MiB over 20 losses."""
    wgsl_support.require_adapter()
    soak = Soak("wgsl")
    for k in range(len(SHAPES)):
        soak.check(k, soak.call(k))  # compiled, and the oracle's own allocations made
    for k in range(3):  # warm-up: the driver's first re-creations allocate pools it keeps
        runtime.reset()
        soak.call(k)
    rss0 = _rss_mib()
    checked = {}
    for k in range(20):
        old = weakref.ref(runtime.runtime().device)
        if k % 2:
            runtime.runtime().device.destroy()
        else:
            runtime.reset()
        outs = soak.call(k)
        assert old() is None, f"the device dropped at step {k} is still alive"
        if k % 5 == 0:
            checked[k] = outs
    rss1 = _rss_mib()
    for k, outs in checked.items():  # after the measurement: onnxruntime allocates too
        soak.check(k, outs)
    if rss0 is not None:
        print({"device_losses": 20, "rss_before_mib": rss0, "rss_after_mib": rss1})
        assert rss1 - rss0 < RSS_BOUND_DEVICE_LOSS_MIB, (rss0, rss1)


EXIT_SCRIPT = textwrap.dedent("""
    import os
    os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")
    import jax, jax.numpy as jnp, jaxgru
    params = jaxgru.init_gru(jax.random.key(0), 3, 64)
    x = jnp.ones((1500, 8, 3))
    jax.block_until_ready(jaxgru.gru(params, x, backend="wgsl"))  # device, pipelines
    pending = [jaxgru.gru(params, x * k, backend="wgsl") for k in range(3)]  # never awaited
    print("dispatched", flush=True)
""")


@pytest.mark.wgsl
def test_exit_with_wgsl_calls_in_flight_is_clean(tmp_path):
    """A script that ends while wgsl calls are still running exits cleanly. Was: the callback
    waited for wgpu's polling thread, which the interpreter's finalisation stops: the process
    hung forever or aborted ("Fatal Python error: PyGILState_Release", SIGABRT), about half the
    time."""
    wgsl_support.require_adapter()
    script = tmp_path / "exit_in_flight.py"
    script.write_text(EXIT_SCRIPT)
    for _ in range(3):
        out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                             check=False)
        assert out.returncode == 0 and out.stdout.strip() == "dispatched", (out.returncode, out.stderr[-2000:])


def test_soak_oracle_sees_the_inputs_the_calls_use():
    """Guard for Soak.check: a wrong output is caught (the oracle is not the call itself)."""
    soak = Soak("xla")
    outs = soak.call(4)
    soak.check(4, outs)
    with pytest.raises(AssertionError):
        soak.check(4, [o + 1e-2 for o in outs])
