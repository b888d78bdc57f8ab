"""What CMakeLists.txt compiles for the native CPU extension, read from it: the cross builds of
tests/test_cpu_portable_arm64.py and tests/test_cpu_macos_build.py compile the same sources with
the same flags as `pip install` does, without a copy of either to drift."""

from __future__ import annotations

import dataclasses
import pathlib
import re
import subprocess
import sysconfig

import jax.ffi

ROOT = pathlib.Path(__file__).resolve().parent.parent
CSRC = ROOT / "csrc"
# the kernels' building blocks against double-precision loops, for one kernels translation unit
CHECK = ROOT / "tests" / "native" / "kernels_check.cc"


@dataclasses.dataclass(frozen=True)
class Build:
    """The extension's build: sources on every processor, the x86-64 ones with their own options,
    the options (with the C++ standard) and the x86-64 definition of the whole target; -fPIC as
    CMake adds it to a module."""

    sources: tuple[str, ...]
    x86_sources: dict[str, tuple[str, ...]]
    options: tuple[str, ...]
    x86_definition: str

    def units(self, x86: bool) -> dict[str, tuple[str, ...]]:
        """Source file (in csrc/) -> its compiler flags, for an x86-64 target or another one."""
        include = (CSRC, jax.ffi.include_dir(), sysconfig.get_paths()["include"])
        common = (*self.options, "-fPIC", *(f"-I{path}" for path in include))
        if x86:
            common = (*common, f"-D{self.x86_definition}")
        out = {src: common for src in self.sources}
        if x86:
            out.update({src: (*common, *opts) for src, opts in self.x86_sources.items()})
        return out


def _one(pattern: str, text: str) -> re.Match[str]:
    found = re.search(pattern, text)
    assert found, f"CMakeLists.txt no longer matches {pattern!r}: update tests/native_build.py"
    return found


def cmake_build() -> Build:
    """The build CMakeLists.txt describes."""
    text = (ROOT / "CMakeLists.txt").read_text()
    name = lambda path: path.removeprefix("csrc/")
    sources = _one(r"set\(sources ([^)]*)\)", text).group(1).split()
    x86 = _one(r"list\(APPEND sources ([^)]*)\)", text).group(1).split()
    x86_opts = {name(src): tuple(opts.split(";")) for src, opts in
                re.findall(r'set_source_files_properties\((\S+) PROPERTIES COMPILE_OPTIONS "([^"]*)"\)', text)}
    assert set(x86_opts) == {name(s) for s in x86}, x86_opts
    standard = _one(r"set\(CMAKE_CXX_STANDARD (\d+)\)", text).group(1)
    options = [f"-std=c++{standard}",
               *_one(r"target_compile_options\(_jaxgru_cpu PRIVATE ([^)]*)\)", text).group(1).split()]
    definition = _one(r"target_compile_definitions\(_jaxgru_cpu PRIVATE (\w+)\)", text).group(1)
    return Build(tuple(name(s) for s in sources), x86_opts, tuple(options), definition)


def compile_objects(cxx: list[str], x86: bool, out_dir: pathlib.Path) -> list[str]:
    """Compile every source of the build with the compiler command `cxx` (for an x86-64 target or
    another one) into `out_dir`, at -O0 instead of the build's level; asserts each compiles.

    The cross builds that use it check that each file compiles for its target and which symbols
    the linked module leaves unresolved, neither of which the optimisation level changes; -O3
    took 3x as long (GCC 12: jaxgru_cpu.cc 28 s against 9.7, the AVX2 kernels 7.7 s against 1.7).
    The kernels that run under qemu (tests/test_cpu_portable_arm64.py) are built at -O3.

    Returns:
      The objects' paths.
    """
    objs = []
    for src, build_flags in cmake_build().units(x86=x86).items():
        flags = [f if not f.startswith("-O") else "-O0" for f in build_flags]
        obj = out_dir / f"{src}.o"
        out = subprocess.run([*cxx, *flags, "-c", str(CSRC / src), "-o", str(obj)],
                             capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr[-3000:]
        objs.append(str(obj))
    return objs
