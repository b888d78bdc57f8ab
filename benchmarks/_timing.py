"""Timing helpers shared by the benchmarks: interleaved repeats, medians, compile time apart."""

from __future__ import annotations

import json
import pathlib
import platform
import statistics
import time
from collections.abc import Callable

import jax

RESULTS = pathlib.Path(__file__).resolve().parent / "results"


def block(out):
    return jax.block_until_ready(out)


def compile_seconds(fn: Callable, *args) -> float:
    """Wall time of the first call (trace + compile + one run); later calls reuse the executable."""
    t = time.perf_counter()
    block(fn(*args))
    return time.perf_counter() - t


def interleaved_medians(candidates: dict[str, Callable[[], object]], repeats: int, inner: int = 1) -> dict:
    """Run every candidate once per round, ``repeats`` rounds; median seconds per call.

    Interleaving spreads the machine's noise (other tenants, frequency changes) evenly over the
    candidates, so ratios between them are fair even when absolute times drift.
    """
    times = {name: [] for name in candidates}
    for _ in range(repeats):
        for name, fn in candidates.items():
            t = time.perf_counter()
            for _ in range(inner):
                block(fn())
            times[name].append((time.perf_counter() - t) / inner)
    return {name: statistics.median(ts) for name, ts in times.items()}


def machine() -> dict:
    import os

    return {
        "python": platform.python_version(),
        "jax": jax.__version__,
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "devices": [str(d) for d in jax.devices()],
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


def save(name: str, payload: dict, path: str | None = None) -> pathlib.Path:
    """Write ``payload`` with the machine's description as JSON (benchmarks/results/{name}.json)."""
    RESULTS.mkdir(exist_ok=True)
    path = pathlib.Path(path) if path else RESULTS / f"{name}.json"
    path.write_text(json.dumps({"machine": machine(), **payload}, indent=2) + "\n")
    return path
