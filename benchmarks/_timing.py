"""Timing helpers shared by the benchmarks: interleaved repeats, medians, compile time apart."""

from __future__ import annotations

import json
import math
import os
import pathlib
import platform
import random
import statistics
import threading
import time
from collections.abc import Callable

import jax
import numpy as np

RESULTS = pathlib.Path(__file__).resolve().parent / "results"


def block(out):
    return jax.block_until_ready(out)


def compile_seconds(fn: Callable, *args) -> float:
    """Wall time of the first call (trace + compile + one run); later calls reuse the executable."""
    t = time.perf_counter()
    block(fn(*args))
    return time.perf_counter() - t


def _others_running() -> bool | None:
    """Whether another thread of this process is running or runnable (None: cannot tell)."""
    me = str(threading.get_native_id())
    try:
        for task in os.scandir("/proc/self/task"):
            if task.name != me:
                with open(f"{task.path}/stat") as f:
                    if f.read().rpartition(")")[2].split()[0] == "R":
                        return True
    except OSError:
        return None
    return False


def settle(max_s: float = 0.05) -> None:
    """Wait (untimed) until no other thread of this process is running, at most ``max_s``.

    Peers' thread pools keep spinning after a call returns: PyTorch's OpenMP threads for about
    10 ms (measured here). Whatever runs next would share the cores with them, so each
    candidate's timed call starts on idle cores. onnxruntime spins until its next run unless told
    to stop (peers.py sets ``session.force_spinning_stop``). The threads' states are read from
    /proc (the process's CPU clock only sees other threads' time at the scheduler's ticks);
    where there is no /proc this sleeps 20 ms.
    """
    end = time.perf_counter() + max_s
    idle = 0
    while idle < 2 and time.perf_counter() < end:
        running = _others_running()
        if running is None:
            time.sleep(0.02)
            return
        idle = 0 if running else idle + 1
        time.sleep(0.0005)


def warm_seconds(
    candidates: dict[str, Callable[[], object]], calls: int = 3, budget_s: float = 0.5
) -> dict[str, float]:
    """Each candidate's warm cost (sizes samples and rounds): the least wall seconds of up to
    ``calls`` calls, fewer once its calls have taken ``budget_s``.

    One call's time moves with the machine's noise, and the rounds a case gets moved with it: the
    GRU at N = 1, H = 64 got 45, 18 and 36 rounds in three runs with one call. The least of a few
    is the call's cost with the least noise in it.
    """
    out = {}
    for name, fn in candidates.items():
        best, spent = math.inf, 0.0
        for _ in range(calls):
            t = time.perf_counter()
            block(fn())
            dt = time.perf_counter() - t
            best, spent = min(best, dt), spent + dt
            if spent >= budget_s:
                break
        out[name] = best
    return out


def interleaved_medians(
    candidates: dict[str, Callable[[], object]],
    repeats: int,
    inner: int = 1,
    clock: Callable[[], float] = time.perf_counter,
    shuffle: bool = True,
) -> dict:
    """Median seconds per call of each candidate over ``interleaved_times``' rounds (same arguments)."""
    return medians(interleaved_times(candidates, repeats, inner, clock, shuffle))


def medians(times: dict[str, list[float]]) -> dict[str, float]:
    """The median of each candidate's samples."""
    return {name: statistics.median(ts) for name, ts in times.items()}


def interleaved_times(
    candidates: dict[str, Callable[[], object]],
    repeats: int,
    inner: int = 1,
    clock: Callable[[], float] = time.perf_counter,
    shuffle: bool = True,
) -> dict[str, list[float]]:
    """Run every candidate once per round, ``repeats`` rounds; seconds per call, round by round.

    Interleaving spreads the machine's noise (other tenants, frequency changes) evenly over the
    candidates, so ratios between them are fair even when absolute times drift. Each timed call
    starts after the previous candidate's threads have gone idle (``settle``). ``clock``: wall
    time by default, ``time.process_time`` for CPU seconds. Each round runs in its own order
    (seeded: a run repeats), so that no candidate always runs right after the same one (a
    candidate may leave the caches warm or cold for the next). A fixed or rotated order keeps each
    one's predecessor in nearly every round; there the first of two identical builds took
    1.09-1.36x the time of the second (4 of 4 cases: batch 1, H = 64, one thread, 21 rounds), in
    shuffled rounds 0.89-1.05x (2 of 4; benchmarks/cpu_native_ab.py). ``shuffle=False`` keeps
    the listed order (every benchmark shuffles: from 2026-12-04 17:00 the suite and the A/B
    tools, from 21:00 cpu_native.py, train_step.py, loop_layouts.py and wgsl_backward.py too).
    """
    names = list(candidates)
    times: dict[str, list[float]] = {name: [] for name in names}
    rng = random.Random(0)
    for _ in range(repeats):
        order = rng.sample(names, len(names)) if shuffle else names
        for name in order:
            settle()
            t = clock()
            for _ in range(inner):
                block(candidates[name]())
            times[name].append((clock() - t) / inner)
    return times


def paired_ratio(a: list[float], b: list[float], resamples: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """Median of the per-round ratios a[r] / b[r] and its 95% bootstrap interval: (median, low, high).

    Rounds pair the two candidates' samples taken a moment apart, so a round on a busy machine
    slows both and cancels out of its ratio; the interval says how far the median ratio moves when
    the rounds are resampled. An interval that contains 1 is a difference within this run's noise.
    """
    ratios = np.asarray(a, float) / np.asarray(b, float)
    picks = np.random.default_rng(seed).integers(0, len(ratios), size=(resamples, len(ratios)))
    meds = np.median(ratios[picks], axis=1)
    return float(np.median(ratios)), float(np.quantile(meds, 0.025)), float(np.quantile(meds, 0.975))


def geo(values) -> float | None:
    """Geometric mean of the values that are set (None and 0 left out); None if there are none."""
    values = [v for v in values if v]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def machine() -> dict:
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
