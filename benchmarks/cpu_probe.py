"""The native lowering's probe of small shared steps (csrc/schedule.inc, work_chain), wall time:
the default (two threads that probe whether they should share), the same two threads without
the probe (the plans before it), and one thread (``JAXGRU_CPU_THREADS=1``).

    python benchmarks/cpu_probe.py [--repeats 41] [--case CELL,MODE,L,N,I,H ...] [--out PATH]

What a step's meeting costs depends on how far apart the two cores are, and on a VM that
changes while a process runs: the probe is for that. So this prints each variant's median over
all rounds and over two kinds of round, told apart by the variants themselves: "far" rounds,
where two threads without the probe took over 1.15x one thread's time, and "near" ones, the
others. Samples are the suite's (run.sampled_medians' sizes: as many back-to-back calls as make
5 ms). Writes benchmarks/results/cpu_probe.json.
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from _timing import save
from cases import parse_case
from peers import jaxgru_cpu_with, make_data
from run import sampled_times

from jaxgru._src import native

# small steps, where two threads meet every few microseconds: forwards and a training step
CASES = ["lstm,forward,1000,4,64,64", "lstm,forward,100,4,64,64", "gru,forward,1000,2,64,64",
         "lstm,forward,1000,1,64,64", "lstm,forward,100,1,64,64", "gru,forward,1000,1,64,64",
         "lstm,train,100,4,64,64"]
FAR = 1.15
MEASURE, NO_PROBE = 0, 3


def with_mode(fn, module, mode: int, current: list[int]):
    """fn, run with the probe measuring or off (`mode`; the verdicts kept across the switches, as
    calls keep them for 100 ms)."""

    def call():
        if current[0] != mode:
            module.force_probe(mode)
            current[0] = mode
        return fn()

    return call


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=41)
    ap.add_argument("--case", action="append", default=[], metavar="CELL,MODE,L,N,I,H")
    ap.add_argument("--out", default=None, help="write the JSON here instead of benchmarks/results/")
    args = ap.parse_args(argv)
    module, _ = native._module()
    current = [-1]
    rows = []
    try:
        for case in [parse_case(spec) for spec in (args.case or CASES)]:
            data = make_data(case)
            default = jaxgru_cpu_with(case, data, native.THREADS_ENV, None)
            fns = {"probe": with_mode(default, module, MEASURE, current),
                   "no probe": with_mode(default, module, NO_PROBE, current),
                   "one thread": jaxgru_cpu_with(case, data, native.THREADS_ENV, "1")}
            times, inner = sampled_times(fns, args.repeats, ours=list(fns))
            far = [r for r in range(args.repeats) if times["no probe"][r] > FAR * times["one thread"][r]]
            near = [r for r in range(args.repeats) if r not in far]

            def med(rounds, times=times):
                return {k: statistics.median(v[r] for r in rounds) * 1e3 for k, v in times.items()} if rounds else None

            row = {"case": case.name, "calls_per_sample": inner, "rounds": args.repeats, "far_rounds": len(far),
                   "median_ms": med(range(args.repeats)), "far_ms": med(far), "near_ms": med(near)}
            rows.append(row)
            parts = [f"{label} ({len(rs)} rounds): " + " ".join(f"{k}={v:.3f}" for k, v in m.items())
                     for label, rs, m in (("far", far, row["far_ms"]), ("near", near, row["near_ms"])) if m]
            print(f"{case.name}: " + " | ".join(parts), flush=True)
    finally:
        module.force_probe(MEASURE)
    save("cpu_probe", {"far_threshold": FAR, "rows": rows}, path=args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
