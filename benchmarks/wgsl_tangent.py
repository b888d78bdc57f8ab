"""The cost of a jitted ``jax.jvp`` on each backend, and of the WGSL tangent call inside it.

For one shape (one direction, I = H): the median wall time of a compiled ``jax.jvp`` with
``backend="wgsl"`` and with ``backend="xla"``, and the counters of the last tangent call
(dispatches, bytes moved, host total and wait). Prints one JSON line. Run it from two
checkouts alternately (``PYTHONPATH=<checkout>``) to compare versions, interleaved.

    python benchmarks/wgsl_tangent.py [--cell lstm] [--L 32] [--N 16] [--H 64] [--proj 32] [--repeats 7]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")  # silences Mesa on headless Linux

import jax
import jax.numpy as jnp

import jaxgru
from jaxgru._src.webgpu import counters


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cell", choices=("gru", "lstm"), default="gru")
    ap.add_argument("--L", type=int, default=32)
    ap.add_argument("--N", type=int, default=16)
    ap.add_argument("--H", type=int, default=64)
    ap.add_argument("--proj", type=int, default=0, help="an LSTM's proj_size (0: none)")
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    init = jaxgru.init_gru if args.cell == "gru" else jaxgru.init_lstm
    fn = jaxgru.gru if args.cell == "gru" else jaxgru.lstm
    params = init(jax.random.key(0), args.H, args.H, **({"proj_size": args.proj} if args.proj else {}))
    x = jax.random.normal(jax.random.key(1), (args.L, args.N, args.H))
    tangents = jax.tree.map(lambda a: jnp.full_like(a, 0.1), (params, x))
    out: dict[str, object] = {"cell": args.cell, "L": args.L, "N": args.N, "H": args.H, "proj": args.proj}
    for backend in ("wgsl", "xla"):
        f = jax.jit(lambda p, x, be=backend: jax.jvp(lambda p, x: fn(p, x, backend=be), (p, x), tangents))
        jax.block_until_ready(f(params, x))
        times = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            jax.block_until_ready(f(params, x))
            times.append(time.perf_counter() - t0)
        out[f"{backend}_ms"] = statistics.median(times) * 1e3
    last = counters.counters().get("tangent")  # absent before the WGSL tangent
    if last is not None:
        out["tangent_calls"] = last["calls"]
        out["tangent_last"] = {k: counters.counters()["last"][k] for k in (
            "dispatches", "bytes_uploaded", "bytes_read_back", "host_total_s", "host_wait_s")}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
