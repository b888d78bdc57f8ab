"""The machine's physical limits, measured in the same run: sgemm GFLOP/s and memory bandwidth.

A case's roofline time is the larger of its matmul FLOPs at the sgemm peak and, for the
recurrence that cannot be batched over time, the bytes of the recurrent weights read per step
at the memory bandwidth (what bounds small batches).
"""

from __future__ import annotations

import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
from cases import Case


def _median_seconds(fn, repeats):
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def sgemm_gflops(n: int = 2048, repeats: int = 7) -> dict:
    """Best of XLA's and numpy's (BLAS) single-precision GEMM on an n x n problem."""
    a = np.random.default_rng(0).standard_normal((n, n)).astype(np.float32)
    ja = jnp.asarray(a)
    f = jax.jit(lambda a: a @ a)
    f(ja).block_until_ready()
    np.matmul(a, a)
    flops = 2.0 * n**3
    xla = flops / _median_seconds(lambda: f(ja).block_until_ready(), repeats) / 1e9
    blas = flops / _median_seconds(lambda: np.matmul(a, a), repeats) / 1e9
    return {"xla": xla, "numpy": blas, "peak": max(xla, blas)}


def bandwidth_gbs(nbytes: int = 256 << 20, repeats: int = 7) -> float:
    """Memory bandwidth from a large copy (bytes read + bytes written per second)."""
    src = np.ones(nbytes // 4, np.float32)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    return 2 * nbytes / _median_seconds(lambda: np.copyto(dst, src), repeats) / 1e9


def roofline_seconds(case: Case, gflops: float, gbs: float) -> float:
    """max(FLOPs at the sgemm peak, recurrent-weight bytes per step at the bandwidth)."""
    steps = case.L * (1 if case.mode == "forward" else 2)  # the backward reads R once more per step
    return max(case.flops() / (gflops * 1e9), steps * case.weight_bytes_per_step() / (gbs * 1e9))


def measure() -> dict:
    gemm = sgemm_gflops()
    return {"sgemm_gflops": gemm, "bandwidth_gbs": bandwidth_gbs()}
