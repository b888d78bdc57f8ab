"""Training step (forward + backward + weight gradients): jaxgru's primitives, whose backward is
a hand-written primitive, against ``jax.grad`` of the same ``lax.scan`` forward differentiated
by JAX, and against a textbook ``lax.scan`` cell as a user would write it.

    python benchmarks/train_step.py [--repeats 15] [--shape CELL,L,N,I,H ...] [--out PATH]

Writes benchmarks/results/train_step.json and prints a table of medians and ratios.
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
from _timing import compile_seconds, interleaved_medians, save
from cases import parse_shape

import jaxgru
from jaxgru._src import api, reference

# (cell, L, N, I, H)
SHAPES = [("gru", 100, 1, 64, 64), ("gru", 100, 16, 128, 128), ("lstm", 50, 64, 256, 256),
          ("lstm", 100, 1, 64, 64), ("lstm", 100, 16, 128, 128), ("gru", 50, 64, 256, 256)]


def textbook(cell):
    """A straightforward lax.scan cell: per step x·Wᵀ + h·Rᵀ, no hoisting (what users write)."""
    def run(params, x):
        w, r, b = params.w[0], params.r[0], params.b[0]
        g = w.shape[0]
        hidden = r.shape[-1]

        def step(carry, xt):
            if cell == "gru":
                h = carry
                gx = xt @ w.T + b[:g]
                gh = h @ r.T + b[g:]
                z = jax.nn.sigmoid(gx[:, :hidden] + gh[:, :hidden])
                rr = jax.nn.sigmoid(gx[:, hidden:2 * hidden] + gh[:, hidden:2 * hidden])
                n = jnp.tanh(gx[:, 2 * hidden:] + rr * gh[:, 2 * hidden:])
                h = (1 - z) * n + z * h
                return h, h
            h, c = carry
            a = xt @ w.T + h @ r.T + b[:g] + b[g:]
            i, o, f, cc = jnp.split(a, 4, -1)
            c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(cc)
            h = jax.nn.sigmoid(o) * jnp.tanh(c)
            return (h, c), h

        n_, h_ = x.shape[1], r.shape[-1]
        init = jnp.zeros((n_, h_)) if cell == "gru" else (jnp.zeros((n_, h_)), jnp.zeros((n_, h_)))
        return jax.lax.scan(step, init, x)[1]
    return run


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--shape", action="append", default=[], metavar="CELL,L,N,I,H",
                    help="a shape of its own instead of SHAPES (repeatable), e.g. lstm,100,16,128,128")
    ap.add_argument("--out", default=None, help="JSON path (default: benchmarks/results/train_step.json)")
    args = ap.parse_args(argv)
    shapes = [parse_shape(s) for s in args.shape] or SHAPES
    rows = []
    for cell, L, N, I, H in shapes:
        init = jaxgru.init_gru if cell == "gru" else jaxgru.init_lstm
        params = init(jax.random.key(0), I, H)
        x = jax.random.normal(jax.random.key(1), (L, N, I))
        opts = dict(linear_before_reset=True) if cell == "gru" else {}
        fn = jaxgru.gru if cell == "gru" else jaxgru.lstm
        cfg = api.make_config(cell, "bench", direction="forward", layout=0, backend="xla", **opts)

        def ref_forward(p, x):
            ops = [x, p.w, p.r, p.b] + ([jnp.zeros((1, 3 * H))] if cell == "lstm" else [])
            ops += [jnp.zeros((1, N, H))] * (1 if cell == "gru" else 2)
            return reference.forward(cfg, *ops, jnp.full((N,), L, jnp.int32))[0]

        losses = {
            "jaxgru": lambda p, x: jnp.mean(fn(p, x, backend="xla", **opts)[0] ** 2),
            "grad(reference)": lambda p, x: jnp.mean(ref_forward(p, x) ** 2),
            "grad(textbook scan)": lambda p, x: jnp.mean(textbook(cell)(p, x) ** 2),
        }
        steps = {k: jax.jit(jax.grad(v)) for k, v in losses.items()}
        compile_s = {k: compile_seconds(f, params, x) for k, f in steps.items()}
        med = interleaved_medians({k: (lambda f=f: f(params, x)) for k, f in steps.items()}, args.repeats)
        row = dict(cell=cell, L=L, N=N, I=I, H=H, median_ms={k: v * 1e3 for k, v in med.items()},
                   compile_s=compile_s,
                   ratio_vs_grad_reference=med["jaxgru"] / med["grad(reference)"],
                   ratio_vs_textbook=med["jaxgru"] / med["grad(textbook scan)"])
        rows.append(row)
        print(f"{cell:4s} L={L:4d} N={N:3d} I={I:4d} H={H:4d} | jaxgru {row['median_ms']['jaxgru']:8.2f} ms | "
              f"grad(reference) {row['median_ms']['grad(reference)']:8.2f} ms | textbook "
              f"{row['median_ms']['grad(textbook scan)']:8.2f} ms | ratio {row['ratio_vs_grad_reference']:.2f} "
              f"/ {row['ratio_vs_textbook']:.2f}", flush=True)
    path = save("train_step", {"repeats": args.repeats, "rows": rows}, args.out)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
