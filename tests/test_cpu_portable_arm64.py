"""The portable kernels as aarch64 builds them (NEON, and the tile shapes of that target), run
under qemu's user-mode emulator: tests/native/kernels_check.cc checks the register tiles, the
packing transposes, batch 1's product and the activations against double-precision loops.

Built by GCC's aarch64 cross compiler and by Clang for aarch64 (Clang is macOS's compiler), at
the -O3 of CMakeLists.txt. Needs aarch64-linux-gnu-g++ and qemu-aarch64 (`make arm64` installs
them with apt): skips without them, but fails under ``CI=true``, where they are installed.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
CHECK = ROOT / "tests" / "native" / "kernels_check.cc"
COMPILERS = {"gcc": ["aarch64-linux-gnu-g++"], "clang": ["clang++", "--target=aarch64-linux-gnu"]}


def _tools(compiler: str) -> list[str]:
    """The compiler's command line, or skip (fail under CI=true) where a tool is missing."""
    missing = [t for t in (COMPILERS[compiler][0], "aarch64-linux-gnu-g++", "qemu-aarch64") if not shutil.which(t)]
    if missing:
        msg = f"no {', '.join(missing)} (make arm64 installs them)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true but {msg}", pytrace=False)
        pytest.skip(msg)
    return COMPILERS[compiler]


@pytest.mark.parametrize("compiler", sorted(COMPILERS))
def test_portable_kernels_on_aarch64_under_qemu(tmp_path, compiler):
    cxx = _tools(compiler)
    exe = tmp_path / "kernels_check"
    build = subprocess.run([*cxx, "-std=c++17", "-O3", "-static", "-Wno-psabi", "-Wno-attributes",
                            f"-I{ROOT / 'csrc'}", str(CHECK), "-o", str(exe)],
                           capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr[-3000:]
    run = subprocess.run(["qemu-aarch64", str(exe)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and " 0 failures" in run.stdout, run.stdout[-3000:] + run.stderr[-2000:]
    # the NEON build: 4-float vectors, four to a 16-float block
    assert "generic kernels (4-float vectors, 4 per block)" in run.stdout, run.stdout
