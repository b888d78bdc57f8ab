"""The native CPU lowering (``backend="cpu"``) against onnxruntime, PyTorch and jaxgru's own
``xla`` lowering: forward and training step, interleaved rounds, medians.

    python benchmarks/cpu_native.py [--repeats 15] [--only gru] [--cpu-time]

The forward shapes are the ones of the design note (shared/design/cpu-native.md); the training
shapes are benchmarks/train_step.py's. Writes benchmarks/results/cpu_native.json and prints the
tables docs/performance.md quotes (ratios to the best of onnxruntime / PyTorch).

``--cpu-time`` runs every peer on one thread and times process CPU seconds instead of wall time:
on a machine shared with other work, wall time mostly measures the waits for a core; CPU time
measures the work (it also counts XLA's and the peers' own spinning threads, if any).

A wall-time sample is as many back-to-back calls as the suite's (run.calls_per_sample, from
2026-12-04 21:50): single calls measured each call's cold start (the GRU at L = 128, N = 1,
H = 256 took 1.34x onnxruntime's time in single calls, in the suite's samples 0.66x). A CPU-time
sample is one call, as in cpu_native_ab.py.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from _timing import geo, save
from cases import Case
from peers import JaxgruPeer, OnnxRuntimePeer, TorchPeer, Unsupported, make_data
from run import sampled_medians

FORWARD = [Case("gru", "forward", 128, 1, 256, 256), Case("gru", "forward", 128, 16, 256, 256),
           Case("gru", "forward", 128, 64, 256, 256), Case("gru", "forward", 64, 64, 512, 512),
           Case("lstm", "forward", 128, 1, 256, 256), Case("lstm", "forward", 128, 32, 256, 256),
           Case("lstm", "forward", 100, 8, 128, 128, bidirectional=True),
           Case("gru", "forward", 100, 16, 128, 128, ragged=True)]
TRAIN = [Case("gru", "train", 100, 16, 128, 128), Case("lstm", "train", 100, 16, 128, 128),
         Case("gru", "train", 50, 64, 256, 256), Case("lstm", "train", 50, 64, 256, 256)]
PEERS = ("jaxgru-cpu", "jaxgru-xla", "onnxruntime", "torch")


def run(cases, repeats, cpu_time=False):
    rows = []
    for case in cases:
        data = make_data(case)
        fns = {}
        for peer in (JaxgruPeer("cpu"), JaxgruPeer("xla"), OnnxRuntimePeer(), TorchPeer("cpu")):
            try:
                fn = peer.build(case, data)
                fn()
                fns[peer.name] = fn
            except Unsupported:
                pass
        med, inner = sampled_medians(fns, repeats, cpu_time)
        best = min(v for k, v in med.items() if k in ("onnxruntime", "torch"))
        row = {"case": case.name, "median_ms": {k: v * 1e3 for k, v in med.items()}, "calls_per_sample": inner,
               "cpu_vs_best": med["jaxgru-cpu"] / best, "xla_vs_best": med["jaxgru-xla"] / best,
               "cpu_vs_torch": med["jaxgru-cpu"] / med["torch"] if "torch" in med else None}
        rows.append(row)
        cells = " | ".join(f"{row['median_ms'].get(p, float('nan')):.2f}" for p in PEERS)
        print(f"| {case.name} | {cells} | {row['cpu_vs_best']:.2f} | {row['xla_vs_best']:.2f} |", flush=True)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--only", default="", help="cases whose name contains this text")
    ap.add_argument("--cpu-time", action="store_true", help="one thread per peer, process CPU time")
    args = ap.parse_args(argv)
    if args.cpu_time:
        import peers

        os.environ["JAXGRU_CPU_THREADS"] = "1"
        peers.THREADS = 1
    print("| case | " + " | ".join(f"{p} ms" for p in PEERS) + " | cpu vs best | xla vs best |")
    print("|---" * (len(PEERS) + 3) + "|")
    fwd = run([c for c in FORWARD if args.only in c.name], args.repeats, args.cpu_time)
    train = run([c for c in TRAIN if args.only in c.name], args.repeats, args.cpu_time)
    summary = {"forward_cpu_geomean_vs_best": geo([r["cpu_vs_best"] for r in fwd]),
               "forward_cpu_worst_vs_best": max((r["cpu_vs_best"] for r in fwd), default=None),
               "train_cpu_geomean_vs_torch": geo([r["cpu_vs_torch"] for r in train])}
    print(summary)
    save("cpu_native_cputime" if args.cpu_time else "cpu_native",
         {"forward": fwd, "train": train, "summary": summary, "timing": "cpu" if args.cpu_time else "wall"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
