"""The native CPU extension cross-built for macOS, arm64 (the portable NEON kernels) and x86-64 (the
AVX-512, AVX2 and portable kernels), with the sources and flags of CMakeLists.txt (at -O0:
native_build.compile_objects says why): every file compiles against macOS's headers (no futex,
Mach's thread clocks in csrc/wait.h), and the objects link into a Mach-O module whose only
unresolved symbols are Python's C API and the C++ runtime (macOS's libc++ dylib).

No macOS SDK can be installed here: the compiler is Zig's Clang (the `ziglang` wheel, a test
dependency), which ships macOS's libc headers and libSystem stubs. This checks that the code
builds for macOS, not how it runs there. Skips without ziglang, fails under ``CI=true``.
"""

from __future__ import annotations

import importlib.util
import re
import struct
import subprocess
import sys

import pytest
from ci_gate import skip_or_fail
from native_build import compile_objects

# Mach-O: 64-bit magic, and the CPU types of arm64 and x86-64 (mach/machine.h)
MH_MAGIC_64 = 0xFEEDFACF
CPU_TYPES = {"aarch64-macos": 0x0100000C, "x86_64-macos": 0x01000007}
# the C++ runtime's symbols (Itanium mangling): namespace std's functions and its type info, VTT
# and vtables, the ABI's type-info vtables (__cxxabiv1), operator new and delete, __cxa_* and the
# personality routine
CXX_RUNTIME = re.compile(r"_ZN?K?St|_ZT[ISTV]N?St|_ZTVN10__cxxabiv1|_Z(nw|na|dl|da)|__cxa_|__gxx_personality")


def _zig() -> list[str]:
    if importlib.util.find_spec("ziglang") is None:
        skip_or_fail("no ziglang (pip install ziglang: the test extra)")
    return [sys.executable, "-m", "ziglang", "c++"]


@pytest.mark.parametrize("target", sorted(CPU_TYPES))
def test_the_extension_builds_for_macos(tmp_path, target):
    cxx = [*_zig(), "-target", target]
    objs = compile_objects(cxx, x86=target.startswith("x86_64"), out_dir=tmp_path)
    # Linked without leave to resolve at load time, the linker names every unresolved symbol.
    # Zig would build its own libc++ to link (a minute); macOS has it as a dylib, so the C++
    # runtime is left out and its symbols are expected, with Python's C API.
    link = [*cxx, "-shared", "-nostdlib++"]
    strict = subprocess.run([*link, "-o", str(tmp_path / "strict.so"), *objs], capture_output=True, text=True,
                            timeout=300)
    unresolved = re.findall(r"undefined symbol: _(\S+)", strict.stderr)  # Mach-O prefixes an underscore
    assert any(s.startswith("Py") for s in unresolved), strict.stderr[-3000:]
    assert all(s.startswith(("Py", "_Py")) or CXX_RUNTIME.match(s) for s in unresolved), unresolved
    so = tmp_path / "_jaxgru_cpu.so"
    out = subprocess.run([*link, "-Wl,-undefined,dynamic_lookup", "-o", str(so), *objs],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    data = so.read_bytes()
    magic, cputype = struct.unpack_from("<Ii", data)
    assert (magic, cputype & 0xFFFFFFFF) == (MH_MAGIC_64, CPU_TYPES[target])
    assert b"_PyInit__jaxgru_cpu\0" in data  # the module's entry point, in the symbol table
