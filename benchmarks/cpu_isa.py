"""The native CPU lowering's kernels of each instruction set against the xla lowering, wall time,
in one process: the evidence behind ``backend="auto"``'s choice (native.AUTO_ISAS).

    python benchmarks/cpu_isa.py [--only lstm] [--repeats 9] [--isas avx512,avx2,generic] [--out PATH]

Each ISA's kernels run on this machine capped by ``JAXGRU_CPU_ISA`` (read at lowering), so one
machine times them all; the xla lowering is jaxgru-xla, with the suite's cases (cases.FULL) and
samples (run.py). Caveat: XLA's matrix products (YNNPACK) pick their kernels by cpuid and cannot
be capped, so on an AVX-512 machine the AVX2 and portable kernels race an xla that keeps its
AVX-512 products. Writes benchmarks/results/cpu_isa.json and prints one line per case (ms, each
ISA over xla), then per ISA the geo-mean of those ratios and the cases under 1.0.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from _timing import geo, save
from cases import FULL
from peers import JaxgruPeer, jaxgru_cpu_with, make_data
from run import sampled_medians

from jaxgru._src import native


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="", help="cases whose name contains this text")
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--isas", default="avx512,avx2,generic", help="the ISAs to time, where this CPU runs them")
    ap.add_argument("--out", default=None, help="write the JSON here instead of benchmarks/results/")
    args = ap.parse_args(argv)
    if not native.available():
        raise SystemExit("the native CPU extension is not built")
    best = native.status()["isa"]
    isas = [i for i in args.isas.split(",") if native.ISAS.index(i) >= native.ISAS.index(best)]
    rows = []
    for case in [c for c in FULL if args.only in c.name]:
        data = make_data(case)
        fns = {"xla": JaxgruPeer("xla").build(case, data)}
        fns["xla"]()
        fns.update({isa: jaxgru_cpu_with(case, data, native.ISA_ENV, isa) for isa in isas})
        # every timer is jaxgru's, so all of them size the samples
        secs, inner = sampled_medians(fns, args.repeats, ours=fns)
        med = {k: v * 1e3 for k, v in secs.items()}
        row = {"case": case.name, "median_ms": med, "vs_xla": {i: med[i] / med["xla"] for i in isas},
               "calls_per_sample": inner}
        rows.append(row)
        cells = " ".join(f"{k}={v:.3f}" for k, v in med.items())
        ratios = " ".join(f"{i}/xla={r:.2f}" for i, r in row["vs_xla"].items())
        print(f"{case.name}: {cells} | {ratios}", flush=True)
    summary = {}
    for isa in isas:
        rs = [r["vs_xla"][isa] for r in rows]
        if rs:
            summary[isa] = {"geo_mean_vs_xla": geo(rs),
                            "faster_cases": sum(r < 1.0 for r in rs), "cases": len(rs)}
            s = summary[isa]
            print(f"{isa}: geo-mean {s['geo_mean_vs_xla']:.2f}x xla, faster on {s['faster_cases']} of {s['cases']}")
    save("cpu_isa", {"isas": isas, "rows": rows, "summary": summary}, path=args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
