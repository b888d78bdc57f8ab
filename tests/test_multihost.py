"""Multi-host data parallelism: 2 local processes in JAX's multi-process runtime (gloo on the
CPU, 127.0.0.1) train with the batch split between them; their gradients equal a single
process's on the full batch, on both backends.

The processes run tests/multihost_worker.py; each computes one training step with a
batch-sharded ``jit`` and with ``jaxgru.sharded`` and writes its loss and gradients, which are
compared here with ``multihost_worker.loss`` on the whole batch in this (single) process.
"""

from __future__ import annotations

import os
import pathlib
import socket
import subprocess
import sys
import time

import jax
import multihost_worker as worker
import numpy as np
import pytest
import wgsl_support

WORKER = pathlib.Path(worker.__file__)
PROCESSES = 2
TIMEOUT_S = 120  # for the whole group (start, rendezvous, compile, run)
TOL = dict(rtol=1e-5, atol=2e-6)
VARIANTS = ("jit", "shard_map")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run_group(backend: str, tmp: pathlib.Path, attempt: int) -> tuple[list[int], list[str]]:
    """Start the processes, wait for all of them (bounded), and always reap them."""
    env = {k: v for k, v in os.environ.items() if k not in ("JAXGRU_BACKEND", "JAX_NUM_CPU_DEVICES")}
    env.update(JAX_PLATFORMS="cpu", XDG_RUNTIME_DIR=env.get("XDG_RUNTIME_DIR", "/tmp"))
    port = _free_port()
    procs: list[subprocess.Popen] = []
    logs = [tmp / f"worker{i}.{attempt}.log" for i in range(PROCESSES)]
    try:
        for i in range(PROCESSES):
            with logs[i].open("w") as log:  # a file, not a pipe: a full pipe could block a worker
                procs.append(subprocess.Popen(
                    [sys.executable, str(WORKER), str(port), str(PROCESSES), str(i), backend,
                     str(tmp / f"worker{i}.npz")],
                    env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))
        deadline = time.monotonic() + TIMEOUT_S
        for p in procs:
            p.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        pytest.fail(f"the {PROCESSES} workers did not finish in {TIMEOUT_S} s:\n"
                    + "\n".join(log.read_text()[-2000:] for log in logs))
    finally:
        for p in procs:  # only our own children, by their handles
            if p.poll() is None:
                p.kill()
                p.wait()
    return [p.returncode for p in procs], [log.read_text() for log in logs]


def _multihost(backend: str, tmp: pathlib.Path) -> list[dict[str, np.ndarray]]:
    for attempt in range(2):  # a second port if another program took the first meanwhile
        codes, texts = _run_group(backend, tmp, attempt)
        if all(c == 0 for c in codes):
            break
        if attempt == 0 and any("address already in use" in t.lower() for t in texts):
            continue
        pytest.fail(f"workers exited with {codes}:\n" + "\n---\n".join(t[-3000:] for t in texts))
    return [dict(np.load(tmp / f"worker{i}.npz")) for i in range(PROCESSES)]


def _single_process(backend: str) -> dict[str, np.ndarray]:
    params, batch = worker.problem()
    value, grads = jax.jit(jax.value_and_grad(lambda p, b: worker.loss(p, b, backend)))(params, batch)
    flat = {"loss": np.asarray(value)}
    for path, g in jax.tree_util.tree_flatten_with_path(grads)[0]:
        flat[jax.tree_util.keystr(path)] = np.asarray(g)
    return flat


def _check(backend: str, tmp: pathlib.Path) -> float:
    want = _single_process(backend)
    worst = 0.0
    for pid, got in enumerate(_multihost(backend, tmp)):
        for variant in VARIANTS:
            calls = int(got[f"{variant}/wgsl_calls"])
            assert (calls > 0) == (backend == "wgsl"), (pid, variant, calls)  # the backend ran
            for key, value in want.items():
                g = got[f"{variant}/{key}"]
                np.testing.assert_allclose(g, value, **TOL, err_msg=f"process {pid}, {variant}, {key}")
                worst = max(worst, float(np.max(np.abs(g - value))))
    print(f"{backend}: max |multi-host - single-process| = {worst:.2e}")
    return worst


def test_multihost_gradients_equal_single_process_xla(tmp_path):
    assert _check("xla", tmp_path) < 1e-5


@pytest.mark.wgsl
def test_multihost_gradients_equal_single_process_wgsl(tmp_path):
    wgsl_support.require_adapter()  # skips without an adapter; fails under CI=true
    assert _check("wgsl", tmp_path) < 1e-5


@pytest.mark.parametrize("states", ["absent", "replicated"])
def test_explicit_batch_sharding_with_unsharded_initial_states(states):
    # jax.make_mesh's default axes are Explicit: the zeros of an absent initial_h, or a replicated
    # initial_h, follow x's batch sharding (the lowering reshards them; lax.scan's carry and
    # linear_before_reset's recurrent term would otherwise mix shardings)
    import jax.numpy as jnp
    from jax.sharding import AxisType, NamedSharding
    from jax.sharding import PartitionSpec as P

    import jaxgru

    mesh = jax.make_mesh((4,), ("batch",), axis_types=(AxisType.Explicit,))
    params, batch = worker.problem()
    h0 = jnp.ones((worker.BATCH, 2, worker.HIDDEN)) * 0.1
    kw = {} if states == "absent" else {"initial_h": jax.device_put(h0, NamedSharding(mesh, P()))}

    def loss(p, b):
        _, h = jaxgru.gru(p["gru"], b["x"], sequence_lens=b["lens"], direction="bidirectional", layout=1,
                          linear_before_reset=True, backend="xla", **kw)
        return jnp.mean((h.reshape(h.shape[0], -1) @ p["head"] - b["target"]) ** 2)

    sharded = {k: jax.device_put(v, NamedSharding(mesh, P("batch"))) for k, v in batch.items()}
    step = jax.jit(jax.value_and_grad(loss))
    replicated = jax.device_put(params, NamedSharding(mesh, P()))
    got, want = step(replicated, sharded), step(params, batch)
    jax.tree.map(lambda g, w: np.testing.assert_allclose(g, w, **TOL), got, want)
    y, h = jax.jit(lambda p, x: jaxgru.gru(p["gru"], x, direction="bidirectional", layout=1,
                                           linear_before_reset=True, **kw))(params, sharded["x"])
    assert y.sharding.spec[0] == h.sharding.spec[0] == "batch"
