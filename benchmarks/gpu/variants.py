"""Persistent vs stepwise vs tiled recurrence on the adapter at hand: which variant wins per shape,
and the ``plan.PERSISTENT_MAX_HIDDEN`` / ``PERSISTENT_MAX_STATE`` thresholds those timings would set.

    python benchmarks/gpu/variants.py [--quick] [--repeats 5] [--out benchmarks/results/gpu_variants.json]

The thresholds in plan.py were set on lavapipe (software Vulkan); this is the measurement that
re-tunes them on a GPU. Times are medians of interleaved calls of ``kernels.forward``.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import sys
import time

os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # benchmarks/

from wgsl_overhead import operands

from jaxgru._src.webgpu import kernels, plan, runtime


def plan_for(cell: str, hidden: int, batch: int, length: int = 64) -> str:
    """The variant ``auto`` picks on this adapter (compare with the winner: re-tunes the rule)."""
    return str(plan.plan_for(cell, seq_length=length, batch=batch, input_size=hidden, hidden_size=hidden,
                             limits="device")["variant"])

HIDDEN = (32, 64, 128, 256)
BATCH = (1, 4, 16, 64)


def time_variants(cell: str, L: int, N: int, H: int, repeats: int) -> dict[str, float]:
    """Median seconds per call of each variant that can run the shape (interleaved)."""
    cfg, ops = operands(cell, 1, L, N, H, H)
    runnable = []
    for variant in ("persistent", "stepwise", "tiled"):
        try:
            kernels.forward(cfg, ops, residuals=False, variant=variant)  # pipelines
            runnable.append(variant)
        except ValueError:  # persistent cannot hold this H on this adapter
            pass
    times: dict[str, list[float]] = {v: [] for v in runnable}
    for _ in range(repeats):
        for v in runnable:
            t = time.perf_counter()
            kernels.forward(cfg, ops, residuals=False, variant=v)
            times[v].append(time.perf_counter() - t)
    return {v: statistics.median(t) for v, t in times.items()}


def thresholds(rows: list[dict]) -> dict[str, int]:
    """The largest H (and N·H) at which persistent won every measured batch size up to it."""
    max_h, max_state = 0, 0
    for h in sorted({r["H"] for r in rows}):  # the measured sizes, smallest first
        at_h = [r for r in rows if r["H"] == h]
        wins = [r for r in at_h if r.get("winner") == "persistent"]
        if len(wins) < len(at_h):
            break  # the first size where stepwise won somewhere ends the persistent range
        max_h = h
    for r in rows:
        if r["H"] <= max_h and r.get("winner") == "persistent":
            max_state = max(max_state, r["N"] * r["H"])
    return {"PERSISTENT_MAX_HIDDEN": max_h, "PERSISTENT_MAX_STATE": max_state}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="two sizes each (a smoke test)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--length", type=int, default=64)
    ap.add_argument("--out", default="benchmarks/results/gpu_variants.json")
    args = ap.parse_args()
    hidden, batch = (HIDDEN[:2], BATCH[:2]) if args.quick else (HIDDEN, BATCH)
    rows = []
    for cell in ("gru", "lstm"):
        for h in hidden:
            for n in batch:
                med = time_variants(cell, args.length, n, h, args.repeats)
                winner = min(med, key=med.get) if med else None
                rows.append({"cell": cell, "L": args.length, "N": n, "H": h, "median_ms": {k: v * 1e3 for k, v in
                             med.items()}, "winner": winner})
                print(cell, f"N={n} H={h}", {k: f"{v * 1e3:.2f} ms" for k, v in med.items()}, "->", winner,
                      f"(auto: {plan_for(cell, h, n)})")
    chosen = thresholds(rows)
    current = {"PERSISTENT_MAX_HIDDEN": plan.PERSISTENT_MAX_HIDDEN, "PERSISTENT_MAX_STATE": plan.PERSISTENT_MAX_STATE}
    info = runtime.runtime().adapter_info
    print(f"adapter {info['name']} ({info['adapter_type']}, {info['backend_type']})")
    print(f"thresholds these timings choose: {chosen} (plan.py today: {current})")
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tiled_wins = [f"{r['cell']} N={r['N']} H={r['H']}" for r in rows if r.get("winner") == "tiled"]
    print(f"tiled won at: {', '.join(tiled_wins) or 'no shape'} (plan.TARGET_WORKGROUPS: {plan.TARGET_WORKGROUPS})")
    out.write_text(json.dumps({"adapter": {k: info[k] for k in ("name", "adapter_type", "backend_type")},
                               "rows": rows, "thresholds": chosen, "current": current, "tiled_wins": tiled_wins},
                              indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
