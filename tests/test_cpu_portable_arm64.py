"""The portable kernels as aarch64 builds them (NEON, and the tile shapes of that target), run
under qemu's user-mode emulator: tests/native/kernels_check.cc checks the register tiles, the
packing transposes, batch 1's product and the activations against double-precision loops. And
the whole extension (the FFI handlers and the portable kernels) compiled and linked for aarch64
(at -O0: native_build.compile_objects says why).

The kernels are built by GCC's aarch64 cross compiler and by Clang for aarch64 (Clang is macOS's
compiler), at the -O3 of CMakeLists.txt. Needs aarch64-linux-gnu-g++ and qemu-aarch64 (`make arm64` installs
them with apt): skips without them, but fails under ``CI=true``, where they are installed.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest
from ci_gate import skip_or_fail
from native_build import CHECK, CSRC, compile_objects

COMPILERS = {"gcc": ["aarch64-linux-gnu-g++"], "clang": ["clang++", "--target=aarch64-linux-gnu"]}


def _tools(compiler: str) -> list[str]:
    """The compiler's command line, or skip (fail under CI=true) where a tool is missing."""
    missing = [t for t in (COMPILERS[compiler][0], "aarch64-linux-gnu-g++", "qemu-aarch64") if not shutil.which(t)]
    if missing:
        skip_or_fail(f"no {', '.join(missing)} (make arm64 installs them)")
    return COMPILERS[compiler]


@pytest.mark.parametrize("compiler", sorted(COMPILERS))
def test_portable_kernels_on_aarch64_under_qemu(tmp_path, compiler):
    cxx = _tools(compiler)
    exe = tmp_path / "kernels_check"
    build = subprocess.run([*cxx, "-std=c++17", "-O3", "-static", "-Wno-psabi", "-Wno-attributes",
                            f"-I{CSRC}", str(CHECK), "-o", str(exe)],
                           capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr[-3000:]
    run = subprocess.run(["qemu-aarch64", str(exe)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and " 0 failures" in run.stdout, run.stdout[-3000:] + run.stderr[-2000:]
    # the NEON build: 4-float vectors, four to a 16-float block
    assert "generic kernels (4-float vectors, 4 per block)" in run.stdout, run.stdout


def test_the_extension_compiles_and_links_for_aarch64(tmp_path):
    """csrc/ as CMakeLists.txt builds it where the processor is not x86 (its sources and flags,
    tests/native_build.py): a shared object whose only unresolved symbols are Python's C API (the
    interpreter provides them) and the C/C++ runtime's versioned ones. The Python headers are
    this interpreter's (pyconfig.h of x86-64: the same LP64 sizes)."""
    cxx = _tools("gcc")
    objs = compile_objects(cxx, x86=False, out_dir=tmp_path)
    so = tmp_path / "_jaxgru_cpu.so"
    out = subprocess.run([*cxx, "-shared", "-o", str(so), *objs, "-lpthread"], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    nm = subprocess.run(["aarch64-linux-gnu-nm", "-D", "--undefined-only", str(so)], capture_output=True, text=True)
    assert nm.returncode == 0, nm.stderr
    unresolved = [line.split()[-1] for line in nm.stdout.splitlines()
                  if line.split()[0] == "U" and "@" not in line and not line.split()[-1].startswith(("Py", "_Py"))]
    assert not unresolved, unresolved
    assert "PyInit__jaxgru_cpu" in subprocess.run(["aarch64-linux-gnu-nm", "-D", "--defined-only", str(so)],
                                                  capture_output=True, text=True).stdout
