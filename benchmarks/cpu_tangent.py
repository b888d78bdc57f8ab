"""The tangent map (``jax.jvp``) on the native CPU lowering against jaxgru's ``xla`` lowering, on
one thread: a jitted jvp in every weight and x, interleaved rounds, medians.

    python benchmarks/cpu_tangent.py [--repeats 15]

One thread for both (``JAXGRU_CPU_THREADS=1``; XLA without its multi-threaded Eigen), timed in
process CPU seconds and in wall seconds: on a machine shared with other work, wall time mostly
measures the waits for a core, CPU time the work. Writes benchmarks/results/cpu_tangent.json.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ["JAXGRU_CPU_THREADS"] = "1"
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                           " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1").strip()

import jax

import jaxgru

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _timing import save

# (cell, L, N, I = H, options)
CASES = [("gru", 100, 16, 128, {}), ("lstm", 100, 16, 128, {}),
         ("gru", 50, 64, 256, {"linear_before_reset": True}),
         ("lstm", 100, 8, 128, {"direction": "bidirectional"})]


def build(cell: str, L: int, N: int, H: int, opts: dict, backend: str):
    init = jaxgru.init_gru if cell == "gru" else jaxgru.init_lstm
    params = init(jax.random.key(0), H, H, bidirectional=opts.get("direction") == "bidirectional")
    x = jax.random.normal(jax.random.key(1), (L, N, H))
    fn = jaxgru.gru if cell == "gru" else jaxgru.lstm
    f = jax.jit(lambda p, x, tp, tx: jax.jvp(lambda p, x: fn(p, x, **opts, backend=backend), (p, x), (tp, tx)))
    tp = jax.tree.map(lambda a: a * 0.1, params)
    return lambda: jax.block_until_ready(f(params, x, tp, x))


def medians(fns: dict, repeats: int) -> tuple[dict, dict]:
    """(CPU seconds, wall seconds) medians per candidate over interleaved rounds."""
    cpu: dict = {k: [] for k in fns}
    wall: dict = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            c, w = time.process_time(), time.perf_counter()
            fn()
            cpu[k].append(time.process_time() - c)
            wall[k].append(time.perf_counter() - w)
    return ({k: statistics.median(v) for k, v in cpu.items()}, {k: statistics.median(v) for k, v in wall.items()})


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=15)
    args = ap.parse_args(argv)
    rows = []
    print("| case | cpu ms (CPU time) | xla ms (CPU time) | cpu / xla | cpu / xla (wall) |")
    print("|---|---|---|---|---|")
    for cell, L, N, H, opts in CASES:
        fns = {b: build(cell, L, N, H, opts, b) for b in ("cpu", "xla")}
        for fn in fns.values():
            fn()  # compile
        cpu, wall = medians(fns, args.repeats)
        name = f"{cell} L={L} N={N} H={H}" + "".join(f" {k}={v}" for k, v in opts.items())
        rows.append({"case": name, "cpu_time_ms": {k: v * 1e3 for k, v in cpu.items()},
                     "wall_ms": {k: v * 1e3 for k, v in wall.items()}})
        print(f"| {name} | {cpu['cpu'] * 1e3:.2f} | {cpu['xla'] * 1e3:.2f} | {cpu['cpu'] / cpu['xla']:.2f} "
              f"| {wall['cpu'] / wall['xla']:.2f} |", flush=True)
    save("cpu_tangent", {"jvp": rows, "threads": 1, "repeats": args.repeats})
    return 0


if __name__ == "__main__":
    sys.exit(main())
