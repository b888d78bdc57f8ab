"""The native CPU lowering's thread choice at small steps, wall time: its default against one
thread (``JAXGRU_CPU_THREADS=1``), onnxruntime and PyTorch, on a quiet machine and with other
processes spinning on the cores (``--busy K`` starts K of them for the run).

    python benchmarks/cpu_threads.py [--repeats 31] [--busy 0] [--only N=1] [--caps 2,4,8]
        [--case CELL,MODE,L,N,I,H ...] [--out PATH]

Forward cases also run onnxruntime on one thread ("onnxruntime-1-thread"), so that a deficit
against onnxruntime splits into one core's work (one thread against one thread) and how the
threads share it (each one's default over its one thread: the speed-up).

A step of these cases is 25-600 kFLOP: a few microseconds, so the threads of a call meet
thousands of times per call, and a thread that loses its core while holding a unit stalls the
others (csrc/schedule.inc). The busy run measures what that costs: with the stall bounded,
the default should stay near one thread's time when the cores are taken. ``--case`` times cases
of its own instead (repeatable; e.g. the short training calls of csrc's kCallFlops). Samples are
the suite's (run.sampled_medians: as many back-to-back calls as make 5 ms). Writes
benchmarks/results/cpu_threads.json (cpu_threads_busy.json with --busy) and prints one line
per case: medians in ms, the default over one thread, and over the best peer.
"""

from __future__ import annotations

import argparse
import pathlib
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from _timing import save
from cases import Case, parse_case
from peers import OnnxRuntimePeer, TorchPeer, jaxgru_cpu_with, make_data
from run import sampled_medians

from jaxgru._src import native

CASES = [Case("gru", "forward", 100, 1, 256, 256), Case("lstm", "forward", 100, 1, 256, 256),
         Case("gru", "forward", 1000, 1, 64, 64), Case("lstm", "forward", 1000, 1, 64, 64),
         Case("gru", "forward", 100, 16, 128, 128), Case("lstm", "forward", 100, 16, 128, 128),
         Case("lstm", "forward", 100, 16, 128, 128, ragged=True), Case("lstm", "forward", 1000, 16, 64, 64),
         Case("lstm", "forward", 100, 64, 128, 128), Case("lstm", "train", 100, 16, 128, 128)]
ORT_ONE = OnnxRuntimePeer(threads=1).name


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=31)
    ap.add_argument("--busy", type=int, default=0, help="processes spinning on the cores during the run")
    ap.add_argument("--only", default="", help="cases whose name contains this text")
    ap.add_argument("--caps", default="", help="more JAXGRU_CPU_THREADS caps to time beside one thread, e.g. 2,4,8")
    ap.add_argument("--case", action="append", default=[], metavar="CELL,MODE,L,N,I,H",
                    help="a case of its own instead (repeatable), e.g. lstm,train,1,1,64,64")
    ap.add_argument("--out", default=None, help="write the JSON here instead of benchmarks/results/")
    args = ap.parse_args(argv)
    caps = [int(c) for c in args.caps.split(",") if c]
    own = [parse_case(spec) for spec in args.case]
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    rows = []
    try:
        for case in [c for c in (own or CASES) if args.only in c.name]:
            data = make_data(case)
            fns = {"default": jaxgru_cpu_with(case, data, native.THREADS_ENV, None),
                   "one thread": jaxgru_cpu_with(case, data, native.THREADS_ENV, "1")}
            fns.update({f"{c} threads": jaxgru_cpu_with(case, data, native.THREADS_ENV, str(c)) for c in caps})
            ours = list(fns)  # every timer of jaxgru's sizes the samples
            others = [TorchPeer("cpu")]
            if case.mode == "forward":
                others += [OnnxRuntimePeer(), OnnxRuntimePeer(threads=1)]
            for peer in others:
                fn = peer.build(case, data)
                fn()
                fns[peer.name] = fn
            secs, inner = sampled_medians(fns, args.repeats, ours=ours)
            med = {k: v * 1e3 for k, v in secs.items()}
            best = min(v for k, v in med.items() if k in ("onnxruntime", "torch"))
            row = {"case": case.name, "median_ms": med, "calls_per_sample": inner,
                   "default_vs_one": med["default"] / med["one thread"],
                   "default_vs_best": med["default"] / best, "one_vs_best": med["one thread"] / best}
            line = f"default/one {row['default_vs_one']:.2f} default/best {row['default_vs_best']:.2f}"
            if ORT_ONE in med:  # one core's work, and each one's speed-up from its threads
                row["one_vs_ort_one"] = med["one thread"] / med[ORT_ONE]
                row["ort_default_vs_one"] = med["onnxruntime"] / med[ORT_ONE]
                line += (f" | one thread/onnxruntime one thread {row['one_vs_ort_one']:.2f}, speed-ups "
                         f"{1 / row['default_vs_one']:.2f} and {1 / row['ort_default_vs_one']:.2f}")
            rows.append(row)
            cells = " ".join(f"{k}={v:.3f}" for k, v in med.items())
            print(f"{case.name}: {cells} | {line}", flush=True)
    finally:
        for h in hogs:
            h.kill()
    save("cpu_threads_busy" if args.busy else "cpu_threads", {"busy": args.busy, "rows": rows}, path=args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
