"""Command line: ``python -m jaxgru {info,demo,bench,plan,build-native} [--help]``."""

from __future__ import annotations

import argparse
import importlib
import pathlib
import sys
from collections.abc import Sequence

# What benchmarks/run.py always imports besides jaxgru's dependencies; checked before it runs.
BENCH_REQUIRES = ("tqdm",)
# Every module the suite may import that jaxgru does not require (its peers are skipped when
# their package is absent; onnxruntime's peer builds its model with onnx). Each installs under
# its module's name; all but onnx are the `bench` extra.
BENCH_MODULES = ("tqdm", "onnxruntime", "onnx", "torch", "flax", "equinox", "matplotlib")


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
    native = info["cpu_native"]
    if native["available"]:
        print(f"native CPU lowering (backend='cpu'): {native['isa']} kernels, {native['module']}")
    else:
        print(f"native CPU lowering (backend='cpu'): not available: {native['reason']}")
    print(f"backend='auto' -> {info['auto']}: {info['reason']}")
    for k, v in info["env"].items():
        print(f"{k}={v if v is not None else '(unset)'}")
    return 0


def _demo(args: argparse.Namespace) -> int:
    from jaxgru._src import demo
    from jaxgru._src.webgpu.runtime import WGPUUnavailableError

    missing = demo.missing_requirements()
    if missing:
        print(f"python -m jaxgru demo needs {' and '.join(demo.REQUIRES)}, which jaxgru itself does not "
              f"require; missing: {', '.join(missing)}. Install them with `pip install "
              f"{' '.join(demo.REQUIRES)}` (`make demo` does).", file=sys.stderr)
        return 2
    cfg = demo.DemoConfig(steps=args.steps, length=args.length, batch=args.batch, hidden=args.hidden,
                          backend=args.backend, seed=args.seed, sample_length=args.sample_length)
    try:
        demo.run(cfg)
    except WGPUUnavailableError as e:  # --backend wgsl without an adapter: the message says what to do
        print(e, file=sys.stderr)
        return 1
    return 0


def _benchmarks_dir() -> pathlib.Path | None:
    """The source checkout's benchmarks/ (the suite's peers are not jaxgru dependencies)."""
    path = pathlib.Path(__file__).resolve().parents[1] / "benchmarks"
    return path if (path / "run.py").is_file() else None


def _missing(names: Sequence[str]) -> list[str]:
    """The modules of ``names`` that cannot be imported."""
    missing = []
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    return missing


def _bench_hint(missing: Sequence[str]) -> str:
    """The demo's style: what the suite needs, what is missing, what to install."""
    return (f"python -m jaxgru bench needs {' and '.join(BENCH_REQUIRES)}, and its peers need onnxruntime, "
            "onnx, torch, flax or equinox, which jaxgru itself does not require; missing: "
            f"{', '.join(missing)}. Install them with `pip install {' '.join(missing)}`, or the whole "
            "bench extra with `pip install 'jaxgru[bench]'` (`make bench` does).")


def _bench(args: argparse.Namespace) -> int:
    import runpy

    where = _benchmarks_dir()
    if where is None:
        print("python -m jaxgru bench runs the suite in benchmarks/ of a source checkout of jaxgru "
              "(its peers, onnxruntime, torch, flax and equinox, are not jaxgru dependencies); "
              "none was found next to this installation.", file=sys.stderr)
        return 2
    missing = _missing(BENCH_REQUIRES)
    if missing:
        print(_bench_hint(missing), file=sys.stderr)
        return 2
    argv = (["--full"] if args.full else []) + (["--only", args.only] if args.only else [])
    argv += ["--peers", args.peers] if args.peers else []
    argv += ["--out", args.out] if args.out else []
    saved = sys.argv
    sys.argv = [str(where / "run.py"), *argv]
    try:
        runpy.run_path(str(where / "run.py"), run_name="__main__")
    except SystemExit as e:
        return int(e.code or 0)
    except ModuleNotFoundError as e:  # a module a peer imports (tqdm was checked above)
        top = (e.name or "").partition(".")[0]
        if top not in BENCH_MODULES:
            raise
        print(_bench_hint([top]), file=sys.stderr)
        return 2
    finally:
        sys.argv = saved
    return 0


def _build_native(args: argparse.Namespace) -> int:
    """Build the native CPU extension of a source checkout, by default into its own jaxgru/ (development)."""
    import shutil
    import subprocess

    root = pathlib.Path(args.source).resolve() if args.source else pathlib.Path(__file__).resolve().parents[1]
    cmake = shutil.which("cmake")
    if cmake is None:
        print("python -m jaxgru build-native needs cmake on PATH.", file=sys.stderr)
        return 2
    if not (root / "CMakeLists.txt").is_file():
        print("python -m jaxgru build-native: --source (default: the checkout jaxgru is imported from) must be a "
              f"source checkout, a folder with CMakeLists.txt; got {str(root)!r}.", file=sys.stderr)
        return 2
    dest = pathlib.Path(args.dest) if args.dest else root / "jaxgru"
    if not dest.is_dir():
        print(f"python -m jaxgru build-native: --dest must be an existing folder; got {str(dest)!r}.",
              file=sys.stderr)
        return 2
    build = pathlib.Path(args.build_dir) if args.build_dir else root / "build-native"
    extension = "_jaxgru_cpu*"  # what the build makes (CMakeLists.txt's target, with its suffix)
    # an extension left by an earlier build would be copied as this one's where this configure
    # builds none (a compiler that cannot build the kernels: CMakeLists.txt then skips the target)
    for old in build.glob(extension):
        old.unlink()
    configure = [cmake, "-S", str(root), "-B", str(build), f"-DPython_EXECUTABLE={sys.executable}",
                 "-DCMAKE_BUILD_TYPE=Release", *(f"-D{d}" for d in args.define)]
    for cmd in (configure, [cmake, "--build", str(build), "-j", str(args.jobs)]):
        if subprocess.run(cmd, check=False).returncode != 0:
            print(f"python -m jaxgru build-native: {' '.join(cmd)} failed.", file=sys.stderr)
            return 1
    built = sorted(build.glob(extension))
    if not built:
        print("python -m jaxgru build-native: no extension was built (no C++ compiler?).", file=sys.stderr)
        return 1
    for so in built:
        # a new file moved into place: overwriting a loaded extension in place crashes the
        # processes that have it mapped (a test run in another shell)
        tmp = dest / f".{so.name}.tmp"
        shutil.copy2(so, tmp)
        tmp.replace(dest / so.name)
        print(f"built {dest / so.name}")
    return 0


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer; got {text!r}")
    return value


def _cmake_define(text: str) -> str:
    name, equals, _ = text.partition("=")
    if not (name and equals):
        raise argparse.ArgumentTypeError(f"must be NAME=VALUE (a CMake cache entry); got {text!r}")
    return text


# One function per subcommand: it adds its parser and sets ``fn``, the function that runs it.
def _add_info(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("info", help="versions, JAX devices, WebGPU adapters, the native CPU lowering, "
                       "the automatic backend")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(fn=_info)


def _add_demo(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from jaxgru._src.demo import DemoConfig

    d = DemoConfig()
    p = sub.add_parser(
        "demo", help="train a character-level GRU language model, sample from it, compare backends",
        description="Train a small character-level GRU language model on Python's documentation "
        "(pydoc_data.topics) under jax.jit, print text sampled from it, then run the trained model "
        "on the xla and wgsl backends and print their agreement and timing. Needs optax and tqdm.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--steps", type=_positive, default=d.steps, help="training steps")
    p.add_argument("--length", type=_positive, default=d.length, help="characters per training sequence")
    p.add_argument("--batch", type=_positive, default=d.batch, help="sequences per training step")
    p.add_argument("--hidden", type=_positive, default=d.hidden, help="GRU hidden size")
    p.add_argument("--backend", choices=("auto", "xla", "wgsl"), default=d.backend,
                   help="backend for training and sampling")
    p.add_argument("--seed", type=int, default=d.seed, help="seeds initialisation, batches and the sample")
    p.add_argument("--sample-length", type=_positive, default=d.sample_length,
                   help="characters to sample after the prompt")
    p.set_defaults(fn=_demo)


def _add_bench(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "bench", help="the benchmark suite: jaxgru against onnxruntime, PyTorch, Flax and Equinox",
        description="Run the benchmark suite of the source checkout (benchmarks/run.py): the quick "
        "mode (under 2 minutes) by default, every case with --full. Prints a table and writes JSON "
        "under benchmarks/results/.",
    )
    p.add_argument("--full", action="store_true", help="every case (make bench) instead of the quick mode")
    p.add_argument("--only", default=None, help="only the cases whose name contains this text")
    p.add_argument("--peers", default=None, help="comma-separated peers to run (default: all available)")
    p.add_argument("--out", default=None, help="JSON path (default: benchmarks/results/bench_{quick,full}.json)")
    p.set_defaults(fn=_bench)


def _plan(args: argparse.Namespace) -> int:
    from jaxgru._src.webgpu import plan_report

    print(plan_report.table(args.limits, seq_length=args.length))
    return 0


def _add_plan(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from jaxgru._src.webgpu.plan import LIMIT_PROFILES

    p = sub.add_parser(
        "plan", help="the WGSL kernels' plan (variant, workgroups, R traffic) per shape, without a GPU",
        description="Print, for GRU and LSTM at N in {1, 16, 64} and H in {256, 512, 1024} (I = H), the "
        "stepwise plan and the automatic plan under a limit profile: workgroups per step dispatch, "
        "invocations per workgroup, the tiling, and the bytes of R read per step (jaxgru.webgpu.plan_for).",
    )
    p.add_argument("--limits", choices=(*LIMIT_PROFILES, "device"), default="discrete-gpu",
                   help="limit profile ('device': the current adapter's)")
    p.add_argument("--length", type=_positive, default=128, help="sequence length L")
    p.set_defaults(fn=_plan)


def _add_build_native(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "build-native", help="build the native CPU lowering of a source checkout in place (development)",
        description="Configure and build CMakeLists.txt into build-native/ and copy the extension "
        "(_jaxgru_cpu*.so) into jaxgru/, where an uninstalled checkout loads it from; --source and "
        "--dest build another checkout (a git worktree of another revision) or copy elsewhere. "
        "`pip install` builds it by itself.",
    )
    p.add_argument("--jobs", type=_positive, default=2, help="parallel compile jobs")
    p.add_argument("--source", default="", help="the checkout to build (default: the one jaxgru is imported from)")
    p.add_argument("--dest", default="", help="the folder to copy the extension into (default: jaxgru/ of the source)")
    p.add_argument("--build-dir", default="", help="CMake's build folder (default: build-native/ of the source)")
    p.add_argument("--define", action="append", default=[], metavar="NAME=VALUE", type=_cmake_define,
                   help="a CMake cache entry for the configure (repeatable)")
    p.set_defaults(fn=_build_native)


SUBCOMMANDS = (_add_info, _add_demo, _add_bench, _add_plan, _add_build_native)


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m jaxgru``."""
    parser = argparse.ArgumentParser(prog="python -m jaxgru", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for add in SUBCOMMANDS:
        add(sub)
    args = parser.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
