"""Which loop layout the xla forward should use, per shape: the evidence behind
``reference.plan_for``.

Times ``reference.forward`` (inference, no residuals) under each of the four plans
(feature_major x hoist), interleaved, medians; marks the fastest and what ``plan_for`` picks.

    python benchmarks/loop_layouts.py [--repeats 9] [--shape CELL,L,N,I,H ...] [--out PATH]
"""

from __future__ import annotations

import argparse
import itertools

import jax
import jax.numpy as jnp
from _timing import interleaved_medians, save
from cases import parse_shape

from jaxgru._src import api, reference

SHAPES = [(100, 1, 64, 64), (100, 1, 256, 256), (1000, 1, 64, 64), (100, 4, 128, 128), (100, 16, 128, 128),
          (1000, 16, 64, 64), (50, 16, 512, 512), (100, 64, 128, 128), (50, 64, 256, 256), (50, 64, 512, 512),
          (20, 64, 512, 1024), (50, 256, 128, 128), (20, 256, 256, 256)]
PLANS = list(itertools.product([False, True], [False, True]))  # (feature_major, hoist)


def name(plan):
    return f"{'fm' if plan[0] else 'bm'}/{'hoist' if plan[1] else 'loop'}"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--shape", action="append", default=[], metavar="CELL,L,N,I,H",
                    help="a shape of its own instead of both cells at SHAPES (repeatable)")
    ap.add_argument("--out", default=None, help="JSON path (default: benchmarks/results/loop_layouts.json)")
    args = ap.parse_args(argv)
    shapes = [parse_shape(s) for s in args.shape] or [(c, *s) for c, s in itertools.product(["gru", "lstm"], SHAPES)]
    rows = []
    for cell, L, N, I, H in shapes:
        opts = {"linear_before_reset": True} if cell == "gru" else {}  # PyTorch's GRU
        cfg = api.make_config(cell, "bench", direction="forward", layout=0, backend="xla", **opts)
        g = cfg.num_gates * H
        k = jax.random.split(jax.random.key(0), 3)
        ops = [jax.random.normal(k[0], (L, N, I)), jax.random.normal(k[1], (1, g, I)) * 0.05,
               jax.random.normal(k[2], (1, g, H)) * 0.05, jnp.zeros((1, 2 * g))]
        ops += ([jnp.zeros((1, 3 * H))] if cell == "lstm" else []) + [jnp.zeros((1, N, H))] * (1 + (cell == "lstm"))
        ops.append(jnp.full((N,), L, jnp.int32))
        fns = {name(p): jax.jit(lambda *o, p=p: reference.forward(cfg, *o, plan=p)[0]) for p in PLANS}
        for f in fns.values():
            f(*ops).block_until_ready()
        med = interleaved_medians({k: (lambda f=f: f(*ops)) for k, f in fns.items()}, args.repeats)
        chosen = name(reference.plan_for(cell, N, H, residuals=False))
        best = min(med, key=med.get)
        rows.append({"cell": cell, "L": L, "N": N, "I": I, "H": H, "median_ms": {k: v * 1e3 for k, v in med.items()},
                     "best": best, "chosen": chosen, "chosen_vs_best": med[chosen] / med[best]})
        print(f"{cell:4s} L={L:4d} N={N:3d} I={I:4d} H={H:4d} | "
              + "  ".join(f"{k}={v * 1e3:7.2f}{'*' if k == best else ' '}" for k, v in med.items())
              + f" | chosen {chosen} ({med[chosen] / med[best]:.2f}x best)", flush=True)
    print(f"wrote {save('loop_layouts', {'repeats': args.repeats, 'rows': rows}, args.out)}")


if __name__ == "__main__":
    main()
