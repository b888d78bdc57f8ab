"""The WGSL training step: one ``jit(value_and_grad)`` of a GRU layer with ``backend="wgsl"``
(forward and backward on the device) against ``backend="xla"``, with the WebGPU counters of one
step (bytes up and down, dispatches) and the XLA while loops left in the compiled step; and the
figures behind the choice of how the backward gets the forward's residuals.

    python benchmarks/wgsl_backward.py [--L 128 --N 64 --I 512 --H 512] [--repeats 3] [--out PATH]

Runs on whatever jaxgru is on the path (the counters of a tree whose backward runs on XLA count
the forward only), so the same script measures the code before and after a change. Writes
benchmarks/results/wgsl_backward.json (or ``--out``) and prints the figures.

Residuals (``--residuals``, default on, at the small shape L=32 N=16 I=H=128): (a) uploading the
``y`` and ``res`` arrays the forward returned costs their upload (bytes and host time, measured
by timing ``write_buffer`` of arrays of their size); (b) recomputing the forward inside the
backward would cost a device forward per step (measured: ``host_wait_s`` of a forward call,
its device time) and save that upload and the forward's read-back of ``res``.
"""

from __future__ import annotations

import argparse
import re
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
import wgpu
from _timing import block, interleaved_medians, save

import jaxgru
from jaxgru._src.webgpu import counters, runtime

MIB = 1 << 20


def _step(L: int, N: int, I: int, H: int, backend: str):
    params = jaxgru.init_gru(jax.random.key(0), I, H)
    x = jax.random.normal(jax.random.key(1), (L, N, I))

    def loss(p, x):
        y, y_h = jaxgru.gru(p, x, linear_before_reset=True, backend=backend)
        return jnp.mean(y**2) + jnp.mean(y_h**2)

    return jax.jit(jax.value_and_grad(loss, argnums=(0, 1))), params, x


def _counted(fn, *args) -> dict:
    counters.reset_counters()
    block(fn(*args))
    return counters.counters()


def _kinds(c: dict) -> dict:
    """Per kind (forward / backward, where the counters have them) and in total."""
    keys = ("calls", "dispatches", "submits", "bytes_uploaded", "bytes_read_back", "host_upload_s",
            "host_wait_s", "host_readback_s", "host_total_s")
    return {k: {f: c[k][f] for f in keys} for k in ("total", "forward", "backward") if k in c}


def training_step(L: int, N: int, I: int, H: int, repeats: int) -> dict:
    steps = {be: _step(L, N, I, H, be) for be in ("wgsl", "xla")}
    loops = {}
    for be, (fn, p, x) in steps.items():
        hlo = fn.lower(p, x).compile().as_text()
        loops[be] = len(re.findall(r"\swhile\(", hlo))
        block(fn(p, x))  # compile, pipelines
    c = _counted(steps["wgsl"][0], *steps["wgsl"][1:])
    med = interleaved_medians({be: (lambda s=s: s[0](*s[1:])) for be, s in steps.items()}, repeats)
    out = {
        "shape": dict(cell="gru", linear_before_reset=True, L=L, N=N, I=I, H=H),
        "median_s": med,
        "while_loops": loops,
        "counters_per_step": _kinds(c),
        "mib_up": c["total"]["bytes_uploaded"] / MIB,
        "mib_down": c["total"]["bytes_read_back"] / MIB,
        "dispatches": c["total"]["dispatches"],
    }
    print(f"GRU lbr=1 L={L} N={N} I={I} H={H}: wgsl {med['wgsl']:.2f} s, xla {med['xla']:.2f} s (median of "
          f"{repeats}); per wgsl step {out['mib_up']:.1f} MiB up, {out['mib_down']:.1f} MiB down, "
          f"{out['dispatches']} dispatches; XLA while loops: {loops}", flush=True)
    return out


def residual_choice(L: int, N: int, I: int, H: int, repeats: int) -> dict:
    """The measured parts of options (a) upload y/res and (b) recompute on the device."""
    fn, p, x = _step(L, N, I, H, "wgsl")
    block(fn(p, x))
    fwd = jax.jit(lambda p, x: jaxgru.gru(p, x, linear_before_reset=True, backend="wgsl"))
    block(fwd(p, x))
    step_c = [_counted(fn, p, x) for _ in range(repeats)]
    fwd_c = [_counted(fwd, p, x) for _ in range(repeats)]
    med = lambda cs, kind, f: statistics.median(c[kind][f] for c in cs)
    # (a)'s extra upload: Y [L, 1, N, H] and res [1, L, N, 4H], float32, timed as the backward writes them
    y_res_bytes = 4 * L * N * H * (1 + 4)
    rt = runtime.runtime()
    buf = rt.device.create_buffer(size=y_res_bytes, usage=wgpu.BufferUsage.STORAGE
                                  | wgpu.BufferUsage.COPY_DST)
    data = np.ones(y_res_bytes, np.uint8)
    times = []
    for _ in range(max(repeats, 5)):
        t = time.perf_counter()
        rt.queue.write_buffer(buf, 0, data)
        times.append(time.perf_counter() - t)
    buf.destroy()
    out = {
        "shape": dict(cell="gru", linear_before_reset=True, L=L, N=N, I=I, H=H),
        "step_total_s": statistics.median(c["total"]["host_total_s"] for c in step_c),
        "backward": {f: med(step_c, "backward", f) for f in ("bytes_uploaded", "host_upload_s", "host_total_s")},
        "forward_with_residuals": {f: med(step_c, "forward", f) for f in ("bytes_read_back", "host_wait_s",
                                                                          "host_readback_s", "host_total_s")},
        "forward_without_residuals": {f: med(fwd_c, "total", f) for f in ("bytes_read_back", "host_wait_s",
                                                                          "host_total_s")},
        "a_upload_y_res": {"bytes": y_res_bytes, "write_s": statistics.median(times)},
    }
    a_cost = out["a_upload_y_res"]["write_s"]
    b_cost = out["forward_with_residuals"]["host_wait_s"]
    out["b_minus_a_s"] = b_cost - a_cost
    saved = out["forward_with_residuals"]["bytes_read_back"] - out["forward_without_residuals"]["bytes_read_back"]
    print(f"residuals at L={L} N={N} I=H={H}: (a) uploads {y_res_bytes / MIB:.2f} MiB of y+res in "
          f"{a_cost * 1e3:.2f} ms; (b) would add a device forward of {b_cost * 1e3:.1f} ms to each backward "
          f"(and save {saved / MIB:.2f} "
          f"MiB of read-back); backward call {out['backward']['host_total_s'] * 1e3:.1f} ms, "
          f"step {out['step_total_s'] * 1e3:.1f} ms", flush=True)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--L", type=int, default=128)
    ap.add_argument("--N", type=int, default=64)
    ap.add_argument("--I", type=int, default=512)
    ap.add_argument("--H", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-residuals", dest="residuals", action="store_false")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    payload = {"repeats": args.repeats, "adapter": runtime.runtime().adapter_info["name"]}
    if args.residuals:
        payload["residuals"] = residual_choice(32, 16, 128, 128, args.repeats)
    payload["training_step"] = training_step(args.L, args.N, args.I, args.H, args.repeats)
    print(f"wrote {save('wgsl_backward', payload, args.out)}")


if __name__ == "__main__":
    main()
