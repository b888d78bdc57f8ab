"""Two (or more) builds of the native CPU extension side by side in one process: before/after
figures for a kernel change, measured as benchmarks/cpu_native.py --cpu-time measures (one
thread each, process CPU seconds, medians) with onnxruntime and PyTorch, the order of the
builds and peers shuffled every round.

    python benchmarks/cpu_native_ab.py before=/tmp/old/_jaxgru_cpu.so after=jaxgru/_jaxgru_cpu*.so \
        [--only N=1] [--case lstm,forward,100,1,1024,1024] [--repeats 9] [--L 1] [--wall] [--shuffle-lengths]

Each build's FFI targets are registered under ``NAME_<target>``; jaxgru-cpu is lowered once per
build with native.TARGETS / BACKWARD_TARGETS pointing at that build's names. ``--L`` overrides
the cases' sequence length (``--L 1`` vs the default splits a call's fixed cost from its
per-step cost). ``--wall`` measures a change in how a call's threads share it instead: every
peer with its default threads, wall time, a sample as many back-to-back calls as the suite's
(run.py). ``--shuffle-lengths`` gives the ragged cases their lengths in a random order (the suite's
are decreasing, as PyTorch packs them). Prints one line per case (ms, and the ratio over the best peer).

In rotated rounds the first build listed ran 1.09-1.36x the time of an identical copy listed
after it (batch 1, H = 64, one thread, 21 rounds: slower in 4 of 4 cases; the cause was not
found). Rounds are now shuffled (_timing.interleaved_times): there the two copies took
0.89-1.05x each other's time (the first slower in 2 of 4), the noise between identical builds
at these 0.3-1 ms cases. List a throwaway copy first all the same, to read that noise.

A training step's XLA temporaries above glibc's mmap threshold are mapped fresh on every call,
and their page faults (7.7% of the samples of an LSTM step at L = 1000, N = 16, H = 64) add
their own noise to a kernel comparison. Running this under cpu_malloc.REUSE
(``GLIBC_TUNABLES=glibc.malloc.mmap_threshold=1073741824:glibc.malloc.trim_threshold=4294967296``)
takes them out for every build and peer alike.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.machinery
import importlib.util
import os
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import jax
import numpy as np
import peers
from cases import FULL, parse_case
from cpu_native import FORWARD, TRAIN
from peers import JaxgruPeer, OnnxRuntimePeer, TorchPeer, Unsupported, make_data
from run import sampled_medians

from jaxgru._src import native


def load_build(name: str, path: str) -> None:
    """Load the extension at `path` and register its FFI targets as NAME_<target>."""
    loader = importlib.machinery.ExtensionFileLoader("jaxgru._jaxgru_cpu", path)
    spec = importlib.util.spec_from_file_location("jaxgru._jaxgru_cpu", path, loader=loader)
    if spec is None:
        raise SystemExit(f"cannot load {path}")
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    for target, capsule in mod.registrations().items():
        jax.ffi.register_ffi_target(f"{name}_{target}", capsule, platform="cpu")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("builds", nargs="+", help="NAME=path/to/_jaxgru_cpu*.so")
    ap.add_argument("--only", default="", help="cases whose name contains this text")
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--L", type=int, default=0, help="override the sequence length")
    ap.add_argument("--wall", action="store_true", help="default threads, wall time")
    ap.add_argument("--full", action="store_true", help="the suite's cases (cases.FULL)")
    ap.add_argument("--case", action="append", default=[], metavar="CELL,MODE,L,N,I,H",
                    help="a case of its own instead (repeatable), e.g. lstm,forward,100,1,1024,1024")
    ap.add_argument("--shuffle-lengths", action="store_true",
                    help="ragged cases: the suite's lengths in a random order instead of decreasing")
    args = ap.parse_args(argv)
    if not args.wall:
        os.environ[native.THREADS_ENV] = "1"
        peers.THREADS = 1
    builds = [b.split("=", 1) for b in args.builds]
    for name, path in builds:
        load_build(name, path)
    if not native.available():
        raise SystemExit("the native CPU extension of this checkout is not built")
    targets, backward = dict(native.TARGETS), dict(native.BACKWARD_TARGETS)
    own = [parse_case(spec) for spec in args.case]
    for case in [c for c in (own or (FULL if args.full else FORWARD + TRAIN)) if args.only in c.name]:
        if args.L:
            case = dataclasses.replace(case, L=args.L)
        data = make_data(case)
        if args.shuffle_lengths:
            data["lens"] = np.random.default_rng(0).permutation(data["lens"])
        fns = {}
        for name, _ in builds:
            native.TARGETS = {k: f"{name}_{v}" for k, v in targets.items()}
            native.BACKWARD_TARGETS = {k: f"{name}_{v}" for k, v in backward.items()}
            fns[name] = JaxgruPeer("cpu").build(case, data)
            fns[name]()
        native.TARGETS, native.BACKWARD_TARGETS = targets, backward
        for peer in (OnnxRuntimePeer(), TorchPeer("cpu")):
            try:
                fns[peer.name] = peer.build(case, data)
                fns[peer.name]()
            except Unsupported:
                pass
        secs, _ = sampled_medians(fns, args.repeats, cpu_time=not args.wall, ours=dict(builds))
        med = {k: v * 1e3 for k, v in secs.items()}
        best = min(v for k, v in med.items() if k in ("onnxruntime", "torch"))
        print(case.name, " ".join(f"{k}={v:.3f}({v / best:.2f})" for k, v in med.items()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
