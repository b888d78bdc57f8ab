"""The training step's page faults: the suite's batch-64 training cases under glibc's default
malloc and under settings that keep freed memory for reuse, each in its own process.

XLA:CPU allocates a program's temporaries as one block per call; above glibc's mmap threshold
(at most 32 MiB) that block is mapped fresh from the OS on every call, so every page the call
writes faults and is cleared (~6-8k faults per GRU/LSTM training step at N = 64 here). PyTorch
allocates tensor by tensor, below the threshold, and reuses the heap. Setting the thresholds
(``GLIBC_TUNABLES``, read when a process starts) gives the XLA programs that reuse too.

A thread's own malloc arena (XLA runs a program on its pool's threads) grows in heaps of at most
64 MiB, and a block larger than that is mapped fresh whatever the thresholds say. The
bidirectional training steps at N = 64, H = 256 have 69 MB of temporaries, so only the setting
with one arena for the whole process (``one-arena``) lets them reuse their memory.

    python benchmarks/cpu_malloc.py [--only train] [--peers jaxgru-cpu,jaxgru-xla,torch]

Runs benchmarks/run.py once per setting, alternating the settings over ``--runs`` runs, and
prints per case the median time of each peer under each setting and each one's ratio to the
default. Writes benchmarks/results/cpu_malloc.json (or ``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile

from _timing import RESULTS

HERE = pathlib.Path(__file__).resolve().parent
# no mmap for blocks up to 1 GiB, and the heap keeps up to 4 GiB of freed memory
REUSE = "glibc.malloc.mmap_threshold=1073741824:glibc.malloc.trim_threshold=4294967296"
SETTINGS = {
    "default": "",
    "reuse": REUSE,
    # the same in the main arena alone, whose heap grows without a 64 MiB limit
    "one-arena": "glibc.malloc.arena_max=1:" + REUSE,
}


def run_once(setting: str, only: str, peers: str, repeats: int) -> dict:
    """One benchmarks/run.py process under `setting`; its rows by case name."""
    env = dict(os.environ)
    if SETTINGS[setting]:
        env["GLIBC_TUNABLES"] = SETTINGS[setting]
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "run.json"
        cmd = [sys.executable, str(HERE / "run.py"), "--full", "--only", only, "--peers", peers,
               "--repeats", str(repeats), "--out", str(out)]
        subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
        rows = json.loads(out.read_text())["rows"]
    return {r["case"]["name"]: r["median_s"] for r in rows}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="train-uni L=100 N=64", help="cases whose name contains this text")
    ap.add_argument("--peers", default="jaxgru-cpu,jaxgru-xla,torch")
    ap.add_argument("--runs", type=int, default=2, help="processes per setting (alternated)")
    ap.add_argument("--repeats", type=int, default=9, help="rounds per case in each process")
    ap.add_argument("--out", default=str(RESULTS / "cpu_malloc.json"))
    args = ap.parse_args(argv)
    runs: dict[str, list[dict]] = {s: [] for s in SETTINGS}
    for _ in range(args.runs):
        for s in SETTINGS:
            runs[s].append(run_once(s, args.only, args.peers, args.repeats))
    table = {}
    for case in runs["default"][0]:
        table[case] = {}
        for peer in args.peers.split(","):
            med = {s: statistics.median(r[case][peer] for r in runs[s] if r[case].get(peer)) for s in SETTINGS}
            row = {f"{s}_ms": v * 1e3 for s, v in med.items()}
            ratios = {f"{s}/default": v / med["default"] for s, v in med.items() if s != "default"}
            table[case][peer] = {**row, **ratios}
            print(f"{case} {peer}: " + ", ".join(f"{s} {v * 1e3:.1f} ms" for s, v in med.items()) + " ("
                  + ", ".join(f"{k} {v:.2f}x" for k, v in ratios.items()) + ")", flush=True)
    RESULTS.mkdir(exist_ok=True)
    out = {"settings": SETTINGS, "runs": args.runs, "cases": table}
    pathlib.Path(args.out).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
