"""The native module stays within Python's limited API (3.10). The device runs carry a stable-ABI
build of it (benchmarks/gpu/prepare.sh: the device image runs another CPython minor version than
this environment), which a call outside that API would break. Its source compiles with
Py_LIMITED_API and CMakeLists.txt's flags; a control that uses a macro outside the limited API
does not, so the check can fail. Skips without a C++ compiler, fails under ``CI=true``.
"""

from __future__ import annotations

import pathlib
import platform
import re
import shutil
import subprocess

from ci_gate import skip_or_fail
from native_build import CSRC, cmake_build

# the flag prepare.sh builds the device runs' extension with, read from it (declared there once)
_PREPARE = CSRC.parent / "benchmarks" / "gpu" / "prepare.sh"
_FLAG = re.search(r"-DPy_LIMITED_API=0x[0-9A-Fa-f]{8}\b", _PREPARE.read_text())
assert _FLAG is not None, f"{_PREPARE} no longer builds with -DPy_LIMITED_API=0x........"
LIMITED_API = _FLAG.group(0)


def _syntax_check(source: pathlib.Path) -> subprocess.CompletedProcess[str]:
    """Compile `source` with the module's flags and the limited API, syntax only."""
    cxx = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if cxx is None:
        skip_or_fail("no C++ compiler")
    flags = cmake_build().units(x86=platform.machine().lower() in ("x86_64", "amd64"))["jaxgru_cpu.cc"]
    return subprocess.run([cxx, *flags, LIMITED_API, "-fsyntax-only", str(source)], capture_output=True,
                          text=True, timeout=300)


def test_the_module_compiles_against_the_limited_api():
    out = _syntax_check(CSRC / "jaxgru_cpu.cc")
    assert out.returncode == 0, out.stderr[-3000:]


def test_a_call_outside_the_limited_api_fails_that_check(tmp_path):
    control = tmp_path / "control.cc"
    control.write_text("#include <Python.h>\nvoid f(PyObject* list) { PyList_SET_ITEM(list, 0, nullptr); }\n")
    out = _syntax_check(control)
    assert out.returncode != 0 and "PyList_SET_ITEM" in out.stderr, out.stderr[-3000:]
