"""The native CPU extension cross-built for macOS, arm64 (the portable NEON kernels) and x86-64
(the AVX-512, AVX2 and portable kernels), with the sources and flags of CMakeLists.txt: every
file compiles against macOS's headers (no futex, Mach's thread clocks in csrc/wait.h), and the
objects link into a Mach-O module whose only unresolved symbols are Python's C API.

No macOS SDK can be installed here: the compiler is Zig's Clang (the `ziglang` wheel, a test
dependency), which ships macOS's libc headers and libSystem stubs. This checks that the code
builds for macOS, not how it runs there. Skips without ziglang, fails under ``CI=true``.
"""

from __future__ import annotations

import importlib.util
import os
import re
import struct
import subprocess
import sys

import pytest
from native_build import CSRC, cmake_build

# Mach-O: 64-bit magic, and the CPU types of arm64 and x86-64 (mach/machine.h)
MH_MAGIC_64 = 0xFEEDFACF
CPU_TYPES = {"aarch64-macos": 0x0100000C, "x86_64-macos": 0x01000007}


def _zig() -> list[str]:
    if importlib.util.find_spec("ziglang") is None:
        msg = "no ziglang (pip install ziglang: the test extra)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true but {msg}", pytrace=False)
        pytest.skip(msg)
    return [sys.executable, "-m", "ziglang", "c++"]


@pytest.mark.parametrize("target", sorted(CPU_TYPES))
def test_the_extension_builds_for_macos(tmp_path, target):
    cxx = [*_zig(), "-target", target]
    objs = []
    for src, flags in cmake_build().units(x86=target.startswith("x86_64")).items():
        obj = tmp_path / f"{src}.o"
        out = subprocess.run([*cxx, *flags, "-c", str(CSRC / src), "-o", str(obj)],
                             capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr[-3000:]
        objs.append(str(obj))
    # linked without leave to resolve at load time, the linker names every unresolved symbol
    strict = subprocess.run([*cxx, "-shared", "-o", str(tmp_path / "strict.so"), *objs],
                            capture_output=True, text=True, timeout=300)
    unresolved = re.findall(r"undefined symbol: (\S+)", strict.stderr)
    assert unresolved, strict.stderr[-3000:]  # Python's C API is left to the interpreter
    assert all(s.startswith(("_Py", "__Py")) for s in unresolved), unresolved
    so = tmp_path / "_jaxgru_cpu.so"
    out = subprocess.run([*cxx, "-shared", "-Wl,-undefined,dynamic_lookup", "-o", str(so), *objs],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    data = so.read_bytes()
    magic, cputype = struct.unpack_from("<Ii", data)
    assert (magic, cputype & 0xFFFFFFFF) == (MH_MAGIC_64, CPU_TYPES[target])
    assert b"_PyInit__jaxgru_cpu\0" in data  # the module's entry point, in the symbol table
