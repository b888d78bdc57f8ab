"""A stress loop for the cpu lowering's led calls (a helper projecting ahead of the caller's steps,
csrc work_pipelined; a probe that switches to that mid-call, csrc probe): calls of the LSTM at
L = 5000, N = 4, I = 2, H = 32 (the longest case of test_steps_led_by_a_projecting_helper_match_xla)
against xla's outputs, in one process per forced verdict, beside processes that only spin, so that
the calls' threads lose their cores at any point.

    python benchmarks/cpu_led_stress.py [--seconds 300] [--spinners 2] [--verdicts shared,alone]

Verdicts (force_probe): "shared", every call probes afresh and its helper leads after the steps it
shares; "alone", one call in three probes and the others are planned to lead. Prints, per loop, the
calls made, those whose outputs differed from xla's and how it ended: "no hang", "hung" (no call
ended for 30 s: the loop is then killed) or "exited with" an error's status. Exit status 1 where
any call was wrong or any loop did not end well. Linux or macOS; two cores or more (a second
thread in XLA's pool).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time

VERDICTS = {"shared": 1, "alone": 2}

_LOOP = r"""
import json, sys, time
sys.path.insert(0, sys.argv[3])
import numpy as np, jax, jaxgru
from oracles import random_case
from jaxgru._src import native
module, _ = native._module()
seconds, verdict = float(sys.argv[1]), int(sys.argv[2])
case = random_case(np.random.default_rng(5004), "lstm", L=5000, N=4, I=2, H=32, scale=0.1)
kw = case.kwargs(0)
run = {b: jax.jit(lambda p, x, b=b: jaxgru.lstm(p, x, **kw, backend=b)[0]) for b in ("cpu", "xla")}
want = np.asarray(run["xla"](case.params, case.x))
calls = wrong = 0
start = time.monotonic()
while time.monotonic() - start < seconds:
    if verdict == 1 or calls % 3 == 0:
        module.force_probe(verdict)  # clears the kept verdicts: the next call probes
    got = np.asarray(run["cpu"](case.params, case.x))
    wrong += bool((np.abs(got - want) > 2e-5 + 1e-5 * np.abs(want)).any())
    calls += 1
    print(json.dumps({"calls": calls, "wrong": wrong}), flush=True)
module.force_probe(0)
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=300.0, help="how long each loop calls")
    ap.add_argument("--spinners", type=int, default=2, help="processes that only spin beside the loops")
    ap.add_argument("--verdicts", default="shared,alone", help="one loop per verdict: shared, alone")
    args = ap.parse_args()
    verdicts = args.verdicts.split(",")
    for v in verdicts:
        if v not in VERDICTS:
            ap.error(f"--verdicts: expected names from {sorted(VERDICTS)}; got {v!r}")
    tests = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests")
    spin = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.spinners)]
    loops = {v: subprocess.Popen([sys.executable, "-c", _LOOP, str(args.seconds), str(VERDICTS[v]), tests],
                                 stdout=subprocess.PIPE, text=True) for v in verdicts}
    last = {v: {"calls": 0, "wrong": 0} for v in verdicts}
    seen = {v: time.monotonic() for v in verdicts}

    def read(v: str) -> None:  # each loop's last line, and when it came
        for line in loops[v].stdout:
            last[v], seen[v] = json.loads(line), time.monotonic()

    readers = [threading.Thread(target=read, args=(v,), daemon=True) for v in verdicts]
    for t in readers:
        t.start()
    hung = dict.fromkeys(verdicts, False)
    try:
        while any(p.poll() is None for p in loops.values()):
            time.sleep(0.5)
            for v, proc in loops.items():  # (the first call compiles: a minute more for it)
                if proc.poll() is None and time.monotonic() - seen[v] > 30 + 60 * (last[v]["calls"] == 0):
                    hung[v] = True
                    proc.kill()
    finally:
        for p in spin:
            p.kill()
    for t in readers:
        t.join()
    bad = False
    for v, proc in loops.items():
        ended = "hung" if hung[v] else "no hang" if proc.returncode == 0 else f"exited with {proc.returncode}"
        print(f"{v}: {last[v]['calls']} calls, {last[v]['wrong']} wrong, {ended}")
        bad |= last[v]["wrong"] > 0 or ended != "no hang"
    return int(bad)


if __name__ == "__main__":
    sys.exit(main())
