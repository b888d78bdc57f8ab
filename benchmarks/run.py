"""The benchmark suite: jaxgru against every peer, side by side, with the machine's limits.

    python benchmarks/run.py            # quick mode (under 2 minutes)
    python benchmarks/run.py --full     # every case (make bench)

For each case, every available peer is built (the first call, compile included, is timed
apart), checked against jaxgru-xla where they share weights, then all peers run interleaved
for the same number of rounds (each round in its own shuffled order, so that no peer always runs
right after the same one) and the medians are compared; the native lowering's ratio to the
best compared peer is also taken round by round, with a bootstrap interval
(``_timing.paired_ratio``). Writes
benchmarks/results/bench_{quick,full}.json, after every case (marked ``partial`` until the last, so
that a run stopped at a time limit keeps what it measured); ``benchmarks/report.py`` turns the
full results into docs/performance.md and its plot.
"""

from __future__ import annotations

import argparse
import math
import os
import pathlib
import sys
import time
from collections.abc import Iterable

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")

import numpy as np
import roofline
from _timing import geo, interleaved_medians, interleaved_times, medians, paired_ratio, save, warm_seconds
from cases import FULL, QUICK, Case
from peers import JaxgruPeer, Unsupported, all_peers, make_data

COMPARED = ("onnxruntime", "torch", "torch-cuda")  # the peers jaxgru must beat (forward)
SAMPLE_MS = 5.0  # a timed sample lasts at least this long for the fastest peer (calls_per_sample)


def _memory_mb(peer) -> float | None:
    """Peak extra memory of a JAX peer's compiled program (temporaries + outputs), in MB."""
    compiled = getattr(peer, "compiled", None)
    if compiled is None:
        return None
    try:
        m = compiled.memory_analysis()
        return (m.temp_size_in_bytes + m.output_size_in_bytes) / 2**20
    except Exception:  # memory_analysis is best effort on some backends
        return None


def _onnx_y(case: Case, y) -> np.ndarray:
    """A peer's forward output as ONNX Y [L, D, N, H]."""
    y = np.asarray(y)
    if y.ndim == 3:  # torch: [L, N, D*H]
        y = y.reshape(case.L, case.N, case.D, case.H).transpose(0, 2, 1, 3)
    return y


def _agreement(case, data, built) -> dict:
    """Max abs difference of the shared-weight peers' forward outputs from jaxgru-xla's."""
    if case.mode != "forward" or "jaxgru-xla" not in built:
        return {}
    ref = JaxgruPeer("xla").function(case, data)(data["params"], data["x"])
    out = {}
    for name, peer in built.items():
        check = getattr(peer, "check", None)
        if name.startswith("jaxgru") or check is None:
            continue
        out[name] = float(np.abs(_onnx_y(case, check()) - np.asarray(ref)).max())
    return out


def run_case(case: Case, peers, repeats: int, budget_s: float, min_sample_s: float) -> dict:
    data = make_data(case)
    built, fns, compile_s, memory, skipped = {}, {}, {}, {}, {}
    for peer in peers:
        try:
            t = time.perf_counter()
            fn = peer.build(case, data)
            fn()
            compile_s[peer.name] = time.perf_counter() - t
            built[peer.name], fns[peer.name] = peer, fn
            memory[peer.name] = _memory_mb(peer) if peer.is_jax else None
            peer.compiled = None
        except Unsupported as e:
            skipped[peer.name] = str(e)
    agree = _agreement(case, data, built)
    # a few warm calls of each peer tell the cost of a call, of a sample and of a round
    warm = warm_seconds(fns)
    inner = calls_per_sample(warm, min_sample_s)
    # a software adapter's wgsl calls (lavapipe: 20-40x XLA's time) would take most of the budget
    # and leave the compared peers a third of their rounds; they run in every round but do not
    # set the count
    paced = [k for k, p in built.items() if not p.software_wgsl()]
    per_round = inner * sum(warm[k] for k in paced)
    rounds = int(min(repeats, max(3, budget_s / max(per_round, 1e-6))))
    times = interleaved_times(fns, rounds, inner=inner)
    med = medians(times)
    return {"case": case.__dict__ | {"name": case.name}, "median_s": med, "times_s": times, "compile_s": compile_s,
            "memory_mb": memory, "skipped": skipped, "agreement": agree, "rounds": rounds,
            "calls_per_sample": inner}


def calls_per_sample(warm_s: dict[str, float], min_sample_s: float, most: int = 64, ours: Iterable[str] = ()) -> int:
    """Back-to-back calls per timed sample, the same for every peer of a case (``warm_s``: one
    warm call's seconds per peer; ``ours``: more names that time jaxgru, as ``jaxgru*`` do).

    A call that starts after the others' turns (and ``settle``'s sleep) finds this VM's caches
    and TLBs cold: measured here, a 0.09 ms onnxruntime call took 0.98 ms after 20 ms of
    idleness, a trivial jitted function 0.34 ms instead of 6 us. Timing single calls of the
    small cases measured that more than the peers. A sample is as many calls (at most ``most``)
    as make the fastest peer's (jaxgru's or a compared one's) last ``min_sample_s``: its first
    call still pays the cold start, once per sample for every peer alike. 0: one call.
    """
    sizing = set(COMPARED) | set(ours)
    fastest = min((v for k, v in warm_s.items() if k in sizing or k.startswith("jaxgru")), default=0.0)
    if min_sample_s <= 0 or fastest <= 0:
        return 1
    return max(1, min(most, math.ceil(min_sample_s / fastest)))


def sampled_medians(
    fns: dict, repeats: int, cpu_time: bool = False, ours: Iterable[str] = ()
) -> tuple[dict[str, float], int]:
    """Medians of seconds per call over ``repeats`` interleaved rounds, for the scripts that time
    peers or builds outside the suite: wall time, a sample as many back-to-back calls as the
    suite's (``calls_per_sample``, with ``ours`` the timers of jaxgru builds or ISAs named
    otherwise); or, ``cpu_time``, process CPU seconds of single calls.

    Returns the medians and the calls per sample.
    """
    if cpu_time:
        return interleaved_medians(fns, repeats, clock=time.process_time), 1
    times, inner = sampled_times(fns, repeats, ours)
    return medians(times), inner


def sampled_times(fns: dict, repeats: int, ours: Iterable[str] = ()) -> tuple[dict[str, list[float]], int]:
    """sampled_medians' wall-time samples, round by round (seconds per call), and the calls per sample."""
    inner = calls_per_sample(warm_seconds(fns), SAMPLE_MS / 1e3, ours=ours)
    return interleaved_times(fns, repeats, inner=inner), inner


def summarise(rows: list[dict], limits: dict) -> dict:
    peak, bw = limits["sgemm_gflops"]["peak"], limits["bandwidth_gbs"]

    out = {"forward": {}, "train": {}}
    for row in rows:
        case = Case(**{k: v for k, v in row["case"].items() if k != "name"})
        med = row["median_s"]
        jx = med.get("jaxgru-xla")
        row["roofline_s"] = roofline.roofline_seconds(case, peak, bw)
        row["roofline_fraction"] = row["roofline_s"] / jx if jx else None
        best = min((v for k, v in med.items() if k in COMPARED), default=None)
        row["best_compared"] = best
        row["ratio_vs_best"] = jx / best if (jx and best) else None
        cpu = med.get("jaxgru-cpu")  # the native CPU lowering, where built
        row["cpu_ratio_vs_best"] = cpu / best if (cpu and best) else None
        times = row.get("times_s", {})
        rival = min((k for k in med if k in COMPARED), key=med.__getitem__, default=None)
        if cpu and rival and "jaxgru-cpu" in times:  # the same ratio round by round, and its interval
            row["cpu_paired_vs_best"] = paired_ratio(times["jaxgru-cpu"], times[rival])
        if cpu and "torch" in med:
            row["cpu_ratio_vs_torch"] = cpu / med["torch"]
        for peer in ("torch", "flax", "equinox"):
            if peer in med and jx:
                row[f"speedup_vs_{peer}"] = med[peer] / jx
    for mode in ("forward", "train"):
        sel = [r for r in rows if r["case"]["mode"] == mode]
        s = out[mode]
        s["cases"] = len(sel)
        s["geomean_ratio_vs_best"] = geo([r["ratio_vs_best"] for r in sel])
        s["cases_slower_than_best"] = sum(1 for r in sel if r["ratio_vs_best"] and r["ratio_vs_best"] > 1)
        s["geomean_ratio_vs_torch"] = geo([1 / r["speedup_vs_torch"] for r in sel if r.get("speedup_vs_torch")])
        s["cpu_geomean_ratio_vs_best"] = geo([r.get("cpu_ratio_vs_best") for r in sel])
        s["cpu_cases_slower_than_best"] = sum(1 for r in sel if (r.get("cpu_ratio_vs_best") or 0) > 1)
        # of those, the cases whose paired interval lies above 1 (the others are within the noise)
        s["cpu_cases_slower_beyond_noise"] = sum(1 for r in sel if r.get("cpu_paired_vs_best", (0, 0, 0))[1] > 1)
        s["cpu_geomean_ratio_vs_torch"] = geo([r.get("cpu_ratio_vs_torch") for r in sel])
        for peer in ("flax", "equinox"):
            s[f"geomean_speedup_vs_{peer}"] = geo([r.get(f"speedup_vs_{peer}") for r in sel])
        big = [r for r in sel if r["case"]["N"] >= 64]
        s["large_batch_roofline_fraction"] = geo([r["roofline_fraction"] for r in big])
    return out


def table(rows: list[dict], peers: list[str]) -> str:
    head = ["case", *peers, "roofline", "xla vs best", "cpu vs best", "of roofline"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        med = r["median_s"]
        cells = [r["case"]["name"]]
        cells += [f"{med[p] * 1e3:.2f}" if p in med else "—" for p in peers]
        cells.append(f"{r['roofline_s'] * 1e3:.2f} ms")
        cells.append(f"{r['ratio_vs_best']:.2f}" if r.get("ratio_vs_best") else "—")
        cells.append(f"{r['cpu_ratio_vs_best']:.2f}" if r.get("cpu_ratio_vs_best") else "—")
        cells.append(f"{r['roofline_fraction']:.0%}" if r.get("roofline_fraction") else "—")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--full", action="store_true", help="every case (default: the quick mode)")
    ap.add_argument("--repeats", type=int, default=None,
                    help="rounds per case, at most as many as fit in --budget (default 7 quick, 45 full)")
    ap.add_argument("--budget", type=float, default=None, help="seconds of timed rounds per case")
    ap.add_argument("--only", default=None, help="run cases whose name contains this text")
    ap.add_argument("--peers", default=None, help="comma-separated peer names to run")
    ap.add_argument("--sample-ms", type=float, default=SAMPLE_MS,
                    help="calls per timed sample: enough for this many ms of the fastest peer (0: one call)")
    ap.add_argument("--out", default=None, help="write the JSON here instead of benchmarks/results/")
    args = ap.parse_args(argv)
    from tqdm import tqdm

    cases = FULL if args.full else QUICK
    if args.only:
        cases = [c for c in cases if args.only in c.name]
    repeats = args.repeats or (45 if args.full else 7)
    budget = args.budget or (6.0 if args.full else 2.0)
    peers = []
    for p in all_peers():
        why = p.available()
        if args.peers and p.name not in args.peers.split(","):
            continue
        if why is None:
            peers.append(p)
        else:
            print(f"skipping {p.name}: {why}")
    t0 = time.perf_counter()
    limits = roofline.measure()
    print(f"sgemm peak {limits['sgemm_gflops']['peak']:.0f} GFLOP/s (XLA {limits['sgemm_gflops']['xla']:.0f}, "
          f"numpy {limits['sgemm_gflops']['numpy']:.0f}); memory bandwidth {limits['bandwidth_gbs']:.1f} GB/s")
    rows = []
    names = [p.name for p in peers]
    name = "bench_full" if args.full else "bench_quick"
    bar = tqdm(cases, unit="case", dynamic_ncols=True)
    for case in bar:
        bar.set_description(case.name[:40])
        rows.append(run_case(case, peers, repeats, budget, args.sample_ms / 1e3))
        # the rows so far, so that a run stopped part-way (a time limit) keeps what it measured
        save(name, {"limits": limits, "peers": names, "sample_ms": args.sample_ms, "rows": rows,
                    "partial": True}, path=args.out)
    summary = summarise(rows, limits)
    print(table(rows, names))
    for mode, s in summary.items():
        if s["cases"]:
            print(f"{mode}: " + ", ".join(f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}"
                                            for k, v in s.items()))
    payload = {"limits": limits, "peers": names, "sample_ms": args.sample_ms, "rows": rows, "summary": summary,
               "wall_s": time.perf_counter() - t0}
    path = save(name, payload, path=args.out)
    print(f"wrote {path} in {time.perf_counter() - t0:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
