"""The first call's cost of ``backend="auto"`` against ``backend="xla"``, each in a fresh process.

``auto`` decides between xla and wgsl on its first call; where it has to ask wgpu for the
adapters, that probe (loading the Vulkan/Metal/DX12 drivers) is paid once per process. Every
round starts one fresh ``python`` per peer, in turn (interleaved), and each child times its first
``jaxgru.gru`` call (trace + backend choice + compile + run) after importing jax and jaxgru and
building its inputs. The peers:

* ``xla``: ``backend="xla"``, no choice to make;
* ``auto``: ``backend="auto"`` (what users get by default);
* ``probe``: ``backend="xla"`` after ``jaxgru.webgpu.adapter_status()``, the adapter probe
  ``auto`` would pay without its shortcut (the probe's own seconds are reported as ``probe_s``);
* with ``--before TREE`` also ``auto_before``: ``backend="auto"`` with another copy of jaxgru
  first on ``PYTHONPATH`` (e.g. ``git archive HEAD jaxgru wgsl | tar -x -C /tmp/old``), to
  compare with a previous version in the same run.

Run: ``python benchmarks/auto_first_call.py [--rounds 7] [--before /tmp/old]``; writes
``benchmarks/results/auto_first_call.json`` (medians and every sample).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from _timing import save

CHILD = r"""
import json, sys, time
peer = sys.argv[1].removesuffix("_before")
t0 = time.perf_counter()
import jax, jax.numpy as jnp
import jaxgru
params = jaxgru.init_gru(jax.random.key(0), 3, 4)
x = jnp.ones((5, 2, 3))
jax.block_until_ready((params, x))
probe = 0.0
if peer == "probe":
    import jaxgru.webgpu
    t = time.perf_counter()
    jaxgru.webgpu.adapter_status()
    probe = time.perf_counter() - t
t = time.perf_counter()
jax.block_until_ready(jaxgru.gru(params, x, backend="auto" if peer == "auto" else "xla"))
first = time.perf_counter() - t
from jaxgru._src import backends
print(json.dumps({"first_call_s": first + probe, "probe_s": probe, "import_s": t - t0,
                  "auto": backends.automatic()[0] if peer == "auto" else None, "jaxgru": jaxgru.__file__}))
"""
PEERS = ("xla", "auto", "probe")


def _child(peer: str, before: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "JAXGRU_BACKEND"}
    env.setdefault("XDG_RUNTIME_DIR", "/tmp")
    if peer.endswith("_before"):
        assert before is not None
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [before, env.get("PYTHONPATH")]))
    # cwd: not the checkout, whose jaxgru/ would shadow PYTHONPATH's (``-c`` puts cwd first)
    out = subprocess.run([sys.executable, "-c", CHILD, peer], env=env, capture_output=True, text=True,
                         timeout=300, check=True, cwd=tempfile.gettempdir())
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=7, help="fresh processes per peer (interleaved)")
    p.add_argument("--out", default=None, help="result path (default benchmarks/results/auto_first_call.json)")
    p.add_argument("--before", default=None, help="a directory holding an earlier jaxgru/ (and wgsl/)")
    args = p.parse_args(argv)
    peers = PEERS + (("auto_before",) if args.before else ())
    samples: dict[str, list[dict]] = {peer: [] for peer in peers}
    for _ in range(args.rounds):
        for peer in peers:
            samples[peer].append(_child(peer, args.before))
    med = {peer: statistics.median(s["first_call_s"] for s in runs) for peer, runs in samples.items()}
    payload = {
        "rounds": args.rounds,
        "median_first_call_s": med,
        "auto_minus_xla_s": med["auto"] - med["xla"],
        "probe_minus_xla_s": med["probe"] - med["xla"],
        **({"auto_before_minus_xla_s": med["auto_before"] - med["xla"]} if args.before else {}),
        "median_probe_s": statistics.median(s["probe_s"] for s in samples["probe"]),
        "auto_chose": sorted({s["auto"] for s in samples["auto"]}),
        "samples": samples,
    }
    path = save("auto_first_call", payload, args.out)
    for peer in peers:
        print(f"{peer:6s} first call: median {med[peer] * 1e3:7.1f} ms")
    if args.before:
        print(f"auto_before - xla: {payload['auto_before_minus_xla_s'] * 1e3:+.1f} ms")
    print(f"auto - xla: {payload['auto_minus_xla_s'] * 1e3:+.1f} ms; adapter probe alone: "
          f"{payload['median_probe_s'] * 1e3:.1f} ms; auto chose {payload['auto_chose']} -> {path}")
    return payload


if __name__ == "__main__":
    main()
