"""Command line: ``python -m jaxgru {info,demo} [--help]``."""

from __future__ import annotations

import argparse
import sys
import time


def _info(args: argparse.Namespace) -> int:
    import json

    import jax
    import wgpu

    import jaxgru

    info = jaxgru.backend_info()
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    print(f"jaxgru {jaxgru.__version__}, jax {jax.__version__}, wgpu {wgpu.__version__}")
    print(f"JAX devices: {', '.join(info['jax_devices'])} (default backend: {info['jax_default_backend']})")
    print(f"WebGPU adapters: {len(info['adapters']) or 'none'}")
    for a in info["adapters"]:
        mark = "*" if a["selected"] else " "
        print(f" {mark} [{a['index']}] {a['name']} ({a['adapter_type']}, {a['backend_type']})")
        print(f"       features: {', '.join(a['features'])}")
        print("       limits: " + ", ".join(f"{k}={v}" for k, v in a["limits"].items()))
    print(f"backend='auto' -> {info['auto']}: {info['reason']}")
    for k, v in info["env"].items():
        print(f"{k}={v if v is not None else '(unset)'}")
    return 0


def _demo(args: argparse.Namespace) -> int:
    import jax
    import jax.numpy as jnp

    import jaxgru

    key = jax.random.key(args.seed)
    kp, kx = jax.random.split(key)
    params = jaxgru.init_gru(kp, args.input_size, args.hidden, bidirectional=True)
    x = jax.random.normal(kx, (args.length, args.batch, args.input_size))
    lens = jnp.arange(args.batch) % args.length + 1

    @jax.jit
    def loss(p, x):
        y, _ = jaxgru.gru(p, x, direction="bidirectional", sequence_lens=lens, linear_before_reset=True)
        return jnp.mean(y**2)

    t = time.perf_counter()
    value, grads = jax.value_and_grad(loss)(params, x)
    jax.block_until_ready(grads)
    print(f"bidirectional GRU, x {tuple(x.shape)}, ragged lengths: loss {float(value):.6f}, "
          f"|grad w| {float(jnp.linalg.norm(grads.w)):.6f} (first call with compile {time.perf_counter() - t:.2f}s)")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m jaxgru``."""
    parser = argparse.ArgumentParser(prog="python -m jaxgru", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("info", help="versions, JAX devices, WebGPU adapters, the automatic backend")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(fn=_info)
    p = sub.add_parser("demo", help="a short example run")
    p.add_argument("--length", type=int, default=50)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--input-size", type=int, default=16)
    p.add_argument("--hidden", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(fn=_demo)
    args = parser.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
