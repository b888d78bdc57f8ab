"""One process of the multi-host test (tests/test_multihost.py): a data-parallel training step.

Run as ``python multihost_worker.py PORT NUM_PROCESSES PROCESS_ID BACKEND OUT.npz``. Every
process joins JAX's multi-process runtime on 127.0.0.1:PORT (gloo collectives on the CPU),
builds the same model and the same full batch from fixed seeds, keeps only its own slice of the
batch (``jax.make_array_from_process_local_data``), and computes the loss and the gradients of
one training step twice: with a batch-sharded ``jit`` and with ``jaxgru.sharded``
(``shard_map``). It writes its (replicated) results to OUT.npz for the test to compare with a
single-process run of :func:`problem` and :func:`loss` on the full batch.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

BATCH, LENGTH, INPUT, HIDDEN = 8, 6, 3, 5


def problem() -> tuple[dict, dict]:
    """The model's parameters and the full batch (the same in every process: fixed seeds)."""
    import jaxgru

    k = jax.random.split(jax.random.key(0), 5)
    params = {"gru": jaxgru.init_gru(k[0], INPUT, HIDDEN, bidirectional=True),
              "head": jax.random.normal(k[1], (2 * HIDDEN, 2)) * 0.3}
    batch = {"x": jax.random.normal(k[2], (BATCH, LENGTH, INPUT)),  # layout 1: batch first
             "lens": jnp.arange(BATCH, dtype=jnp.int32) % (LENGTH + 1),
             "target": jax.random.normal(k[3], (BATCH, 2))}
    return params, batch


def loss(params: dict, batch: dict, backend: str, gru: Any = None) -> jax.Array:
    """Mean squared error of a linear head on the bidirectional GRU's final states."""
    import jaxgru

    gru = gru or jaxgru.gru
    _, h = gru(params["gru"], batch["x"], sequence_lens=batch["lens"], direction="bidirectional",
               layout=1, linear_before_reset=True, backend=backend)  # h: [N, 2, H]
    pred = h.reshape(h.shape[0], -1) @ params["head"]
    return jnp.mean((pred - batch["target"]) ** 2)


def main(port: int, num_processes: int, process_id: int, backend: str, out: str) -> None:
    jax.config.update("jax_cpu_collectives_implementation", "gloo")  # cross-process CPU collectives
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=num_processes,
                               process_id=process_id, initialization_timeout=60)
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    import jaxgru
    import jaxgru.webgpu

    assert jax.process_count() == num_processes and jax.device_count() == num_processes * jax.local_device_count()
    mesh = jax.make_mesh((jax.device_count(),), ("batch",))  # every process's devices
    params, batch = problem()
    per = BATCH // jax.process_count()
    mine = slice(process_id * per, (process_id + 1) * per)  # this process's rows of the batch
    local = {k: np.asarray(v)[mine] for k, v in batch.items()}
    batch_g = {k: jax.make_array_from_process_local_data(NamedSharding(mesh, P("batch")), v,
                                                         (BATCH, *v.shape[1:]))
               for k, v in local.items()}
    replicated = NamedSharding(mesh, P())
    params_g = jax.tree.map(lambda a: jax.make_array_from_process_local_data(replicated, np.asarray(a)), params)

    results: dict[str, np.ndarray] = {}
    par = jaxgru.sharded(jaxgru.gru, mesh, "batch")
    for name, gru in (("jit", None), ("shard_map", par)):
        jaxgru.webgpu.reset_counters()
        step = jax.jit(jax.value_and_grad(lambda p, b, gru=gru: loss(p, b, backend, gru)),
                       out_shardings=replicated)
        value, grads = step(params_g, batch_g)
        results[f"{name}/loss"] = np.asarray(value.addressable_data(0))
        for path, g in jax.tree_util.tree_flatten_with_path(grads)[0]:
            results[f"{name}/{jax.tree_util.keystr(path)}"] = np.asarray(g.addressable_data(0))
        results[f"{name}/wgsl_calls"] = np.asarray(jaxgru.webgpu.counters()["total"]["calls"])
    np.savez(out, **results)
    jax.distributed.shutdown()


if __name__ == "__main__":
    os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")
    port, n, pid, backend, out = sys.argv[1:6]
    main(int(port), int(n), int(pid), backend, out)
