"""Where the time of one WGSL forward call goes, for a few shapes and both recurrence variants.

Per call (medians over repeats): GPU time of the compute pass (timestamp queries when the
adapter has them), host time to prepare (dtype conversions, weight digests), upload and set
up, record, wait (submit until the read-back is mapped, GPU time included), unpack, and the
host overhead (total minus GPU time); counts of dispatches, submits and bytes moved. Then the
same shapes through the public API under ``jax.jit`` (the kernel variant chosen by shape):
the wall time of the JAX call and the share of it spent outside the kernel call (the
``buffer_callback`` into Python and back).

Then the host path alone at the shape of a training step (GRU L=4 N=64 I=H=512): host overhead
(host total minus the wait for the device) with unchanged weights and with new weights on every
call, as a training step has them.

    python benchmarks/wgsl_overhead.py [--repeats 7] [--out benchmarks/results/wgsl_overhead.json]
    python benchmarks/wgsl_overhead.py --host-path-only [--repeats 15]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import time

import numpy as np

os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")  # silences Mesa on headless Linux

from jaxgru._src.activations import Activation
from jaxgru._src.cells import spec
from jaxgru._src.options import DEFAULT_ACTIVATIONS, RNNConfig
from jaxgru._src.webgpu import counters, kernels, runtime

# (name, cell, direction, L, N, I, H)
SHAPES = (
    ("small", "gru", "forward", 16, 4, 16, 32),
    ("medium", "lstm", "forward", 64, 8, 64, 128),
    ("bidir", "gru", "bidirectional", 100, 16, 64, 64),
)
VARIANTS = ("persistent", "stepwise")


def operands(cell: str, d: int, L: int, N: int, I: int, H: int) -> tuple[RNNConfig, list]:
    """A config with default activations and random operands (layout 0, all lengths L)."""
    rng = np.random.default_rng(0)
    g = spec(cell).num_gates
    f = lambda *s: (rng.standard_normal(s) * 0.1).astype(np.float32)
    acts = tuple(tuple(Activation(n) for n in DEFAULT_ACTIVATIONS[cell]) for _ in range(d))
    cfg = RNNConfig(cell=cell, direction="bidirectional" if d == 2 else "forward", activations=acts)
    ops = [f(L, N, I), f(d, g * H, I), f(d, g * H, H), f(d, 2 * g * H)]
    ops += [f(d, 3 * H), f(d, N, H), f(d, N, H)] if cell == "lstm" else [f(d, N, H)]
    return cfg, [*ops, np.full(N, L, np.int32)]


def measure(cfg: RNNConfig, ops: list, variant: str, repeats: int) -> dict:
    """Median per-call figures (ms) and the counts of the last call."""
    kernels.forward(cfg, ops, residuals=False, variant=variant)  # compile pipelines, fill caches
    rows = []
    for _ in range(repeats):
        kernels.forward(cfg, ops, residuals=False, variant=variant)
        rows.append(counters.counters()["last"])
    med = lambda key: statistics.median(r[key] for r in rows) * 1e3
    gpu = [r["gpu_ns"] for r in rows if r["gpu_ns"] is not None]
    gpu_ms = statistics.median(gpu) / 1e6 if gpu else None
    total = med("host_total_s")
    last = rows[-1]
    return {
        "variant": last["variant"],
        "gpu_ms": gpu_ms,
        "total_ms": total,
        "prepare_ms": med("host_prepare_s"),
        "upload_ms": med("host_upload_s"),
        "record_ms": med("host_record_s"),
        "wait_ms": med("host_wait_s"),
        "readback_ms": med("host_readback_s"),
        "host_overhead_ms": None if gpu_ms is None else total - gpu_ms,
        "dispatches": last["dispatches"],
        "submits": last["submits"],
        "bytes_uploaded": last["bytes_uploaded"],
        "bytes_read_back": last["bytes_read_back"],
    }


# The host-path shape: one small call whose weights are large (6 MiB of W and R).
HOST_PATH_SHAPE = ("gru", "forward", 4, 64, 512, 512)


def measure_host_path(repeats: int) -> list[dict]:
    """Host overhead (total minus wait) per call, unchanged vs new weights, interleaved."""
    cell, _, L, N, I, H = HOST_PATH_SHAPE
    cfg, ops = operands(cell, 1, L, N, I, H)
    kernels.forward(cfg, ops, residuals=False)  # pipelines
    rows: dict[str, list[dict]] = {"unchanged weights": [], "new weights": []}
    for k in range(repeats):
        # new weights: values never seen before (as after an optimiser step), made outside the call
        new = [ops[0], *(a + np.float32(1e-6 * (k + 1)) for a in ops[1:4]), *ops[4:]]
        for case in rows:
            kernels.forward(cfg, ops if case == "unchanged weights" else new, residuals=False)
            rows[case].append(counters.counters()["last"])
    out = []
    for case, rs in rows.items():
        med = lambda key, rs=rs: statistics.median(r[key] for r in rs) * 1e3
        overhead = statistics.median((r["host_total_s"] - r["host_wait_s"]) for r in rs) * 1e3
        out.append({"shape": f"{cell} L={L} N={N} I={I} H={H}", "case": case, "host_overhead_ms": overhead,
                    "total_ms": med("host_total_s"), "wait_ms": med("host_wait_s"), "prepare_ms": med("host_prepare_s"),
                    "upload_ms": med("host_upload_s"), "readback_ms": med("host_readback_s"),
                    "bytes_uploaded": rs[-1]["bytes_uploaded"], "dispatches": rs[-1]["dispatches"]})
    return out


def measure_api(cell: str, direction: str, L: int, N: int, I: int, H: int, repeats: int) -> dict:
    """The public API under jit: wall time per call vs the kernel call inside the callback."""
    import jax

    import jaxgru

    init = jaxgru.init_gru if cell == "gru" else jaxgru.init_lstm
    fn = jaxgru.gru if cell == "gru" else jaxgru.lstm
    params = init(jax.random.key(0), I, H, bidirectional=direction == "bidirectional")
    x = jax.random.normal(jax.random.key(1), (L, N, I))
    f = jax.jit(lambda p, x: fn(p, x, direction=direction, backend="wgsl"))
    jax.block_until_ready(f(params, x))
    walls, inner = [], []
    for _ in range(repeats):
        t = time.perf_counter()
        jax.block_until_ready(f(params, x))
        walls.append(time.perf_counter() - t)
        inner.append(counters.counters()["last"]["host_total_s"])
    wall, kernel = statistics.median(walls) * 1e3, statistics.median(inner) * 1e3
    return {"jax_call_ms": wall, "kernel_call_ms": kernel, "callback_ms": wall - kernel,
            "callback_share": (wall - kernel) / wall}


def table(results: list[dict], cols=None) -> str:
    cols = cols or ("shape", "variant", "gpu_ms", "total_ms", "host_overhead_ms", "prepare_ms", "upload_ms",
                    "record_ms", "wait_ms", "readback_ms", "dispatches", "submits", "bytes_uploaded",
                    "bytes_read_back")
    fmt = lambda v: "n/a" if v is None else (f"{v:.2f}" if isinstance(v, float) else str(v))
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(fmt(r[c]) for c in cols) + " |" for r in results]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--out", default="benchmarks/results/wgsl_overhead.json")
    parser.add_argument("--host-path-only", action="store_true", help="only the host-path measurement")
    args = parser.parse_args()
    host_cols = ("shape", "case", "host_overhead_ms", "total_ms", "wait_ms", "prepare_ms", "upload_ms",
                 "readback_ms", "bytes_uploaded", "dispatches")
    if args.host_path_only:
        rows = measure_host_path(args.repeats)
        print(table(rows, host_cols))
        if args.out != parser.get_default("out"):
            pathlib.Path(args.out).write_text(json.dumps({"repeats": args.repeats, "host_path": rows}, indent=2))
            print(f"wrote {args.out}")
        return
    timed = runtime.set_timestamps(True)
    results = []
    for name, cell, direction, L, N, I, H in SHAPES:
        cfg, ops = operands(cell, 2 if direction == "bidirectional" else 1, L, N, I, H)
        for variant in VARIANTS:
            row = measure(cfg, ops, variant, args.repeats)
            results.append({"shape": f"{name} {cell} L={L} N={N} I={I} H={H} D={cfg.num_directions}", **row})
    api_rows = []
    for name, cell, direction, L, N, I, H in SHAPES:
        row = measure_api(cell, direction, L, N, I, H, args.repeats)
        api_rows.append({"shape": f"{name} {cell} L={L} N={N} I={I} H={H}", **row})
    info = runtime.runtime().adapter_info
    print(f"adapter: {info['name']} ({info['adapter_type']}, {info['backend_type']}); "
          f"GPU timestamps: {'on' if timed else 'unavailable (gpu_ms n/a)'}; medians of {args.repeats}")
    print(table(results))
    print()
    print(table(api_rows, ("shape", "jax_call_ms", "kernel_call_ms", "callback_ms", "callback_share")))
    runtime.set_timestamps(False)
    host_rows = measure_host_path(max(args.repeats, 9))
    print()
    print(table(host_rows, host_cols))
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    adapter = {k: info[k] for k in ("name", "adapter_type", "backend_type", "description")}
    out.write_text(json.dumps({"adapter": adapter, "repeats": args.repeats, "results": results,
                               "api": api_rows, "host_path": host_rows}, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
