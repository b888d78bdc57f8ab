"""python -m jaxgru: every subcommand has --help and runs."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _run(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "jaxgru", *args], capture_output=True, text=True,
                          timeout=timeout, check=False)


@pytest.mark.parametrize("cmd", [[], ["info"], ["demo"], ["bench"], ["plan"], ["build-native"]])
def test_help(cmd):
    out = _run(*cmd, "--help")
    assert out.returncode == 0 and "usage" in out.stdout


def test_info_json_reports_the_automatic_choice():
    out = _run("info", "--json")
    assert out.returncode == 0, out.stderr
    info = json.loads(out.stdout)
    assert info["auto"] in ("xla", "wgsl", "cpu") and info["reason"]
    assert set(info["cpu_native"]) == {"available", "isa", "module", "reason"}
    assert isinstance(info["adapters"], list)


def test_info_text():
    out = _run("info")
    assert out.returncode == 0, out.stderr
    assert "backend='auto' ->" in out.stdout and "JAX devices" in out.stdout
    assert "native CPU lowering (backend='cpu'): " in out.stdout


def test_plan_prints_the_before_and_after_table():
    out = _run("plan")
    assert out.returncode == 0, out.stderr
    rows = [line.split(" | ") for line in out.stdout.splitlines() if line.startswith(("| GRU", "| LSTM"))]
    assert len(rows) == 2 * 3 * 3  # cells x N x H
    # LSTM N=64 H=512: stepwise 32 workgroups reading R (4 MiB) 16 times; tiled 256 workgroups
    row = next(r for r in rows if r[:3] == ["| LSTM", "64", "512"])
    assert row[3:6] == ["32", "64.0", "tiled"] and row[6] == "256"


def test_unknown_command_fails():
    assert _run("frobnicate").returncode != 0


def test_demo_help_lists_its_flags():
    out = _run("demo", "--help")
    for flag in ("--steps", "--length", "--hidden", "--backend", "--seed", "--sample-length", "--batch"):
        assert flag in out.stdout
    assert "{auto,xla,wgsl}" in out.stdout


@pytest.mark.parametrize("flags", [["--steps", "0"], ["--backend", "cuda"], ["--hidden", "x"]])
def test_demo_rejects_bad_flags(flags):
    out = _run("demo", *flags)
    assert out.returncode == 2 and "error" in out.stderr


def test_demo_runs_with_tiny_flags():
    out = _run("demo", "--steps", "3", "--length", "8", "--batch", "2", "--hidden", "8", "--sample-length", "5",
               "--backend", "xla", "--seed", "7")
    assert out.returncode == 0, out.stderr
    assert "loss: " in out.stdout and "sample (seed 7" in out.stdout
    assert "agreement: max |xla - wgsl|" in out.stdout or "wgsl: skipped" in out.stdout


def test_demo_without_optax_says_what_to_install():
    code = ("import sys; sys.modules['optax'] = None; from jaxgru.__main__ import main; "
            "sys.exit(main(['demo']))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 2
    assert "missing: optax" in out.stderr and "pip install optax tqdm" in out.stderr


def test_demo_on_wgsl_without_an_adapter_says_how_to_get_one():
    out = subprocess.run([sys.executable, "-m", "jaxgru", "demo", "--backend", "wgsl", "--steps", "1"],
                         capture_output=True, text=True, timeout=120, check=False,
                         env={**os.environ, "JAXGRU_WGPU_ADAPTER": "no-such-adapter"})
    assert out.returncode == 1
    assert "no usable WebGPU adapter" in out.stderr and "Traceback" not in out.stderr


def test_bench_runs_a_case_against_a_peer(tmp_path):
    out_file = tmp_path / "bench.json"
    out = _run("bench", "--only", "gru-forward-uni L=100 N=1", "--peers", "jaxgru-xla,onnxruntime",
               "--out", str(out_file))
    assert out.returncode == 0, out.stderr[-2000:]
    data = json.loads(out_file.read_text())
    (row,) = data["rows"]
    assert set(row["median_s"]) == {"jaxgru-xla", "onnxruntime"}
    assert row["agreement"]["onnxruntime"] < 1e-4  # the same layer, checked before timing
    assert data["limits"]["sgemm_gflops"]["peak"] > 0 and row["roofline_s"] > 0


@pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake is not on PATH")
def test_a_compiler_that_cannot_build_the_kernels_leaves_jaxgru_pure_python(tmp_path):
    """CMakeLists.txt compiles the portable kernels first: where that fails (here forced by a
    definition that breaks them, standing in for a compiler without C++17 or the vector
    extensions) the configure still succeeds, without the extension, and says why."""
    configure = lambda build, *extra: subprocess.run(
        ["cmake", "-G", "Unix Makefiles", "-S", str(ROOT), "-B", str(build), f"-DPython_EXECUTABLE={sys.executable}",
         *extra],
        capture_output=True, text=True, timeout=300, check=False)
    broken = configure(tmp_path / "broken", "-DJAXGRU_KERNELS_CHECK_DEFINITIONS=-Dinline=broken")
    assert broken.returncode == 0, broken.stderr
    assert "cannot compile the native CPU kernels" in broken.stderr
    assert "_jaxgru_cpu" not in (tmp_path / "broken" / "Makefile").read_text()
    good = configure(tmp_path / "good")
    assert good.returncode == 0 and "cannot compile" not in good.stderr, good.stderr
    assert "_jaxgru_cpu" in (tmp_path / "good" / "Makefile").read_text()


@pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake is not on PATH")
def test_build_native_does_not_pass_off_an_earlier_build_as_this_one(tmp_path):
    """Where this configure builds no extension (the kernels' check fails), an extension left in
    the build folder by an earlier build is removed, not copied into jaxgru/ as if just built."""
    stale = tmp_path / "_jaxgru_cpu.stale-build.so"
    stale.write_bytes(b"an earlier build")
    out = _run("build-native", "--build-dir", str(tmp_path), "--define",
               "JAXGRU_KERNELS_CHECK_DEFINITIONS=-Dinline=broken")
    assert out.returncode == 1, out.stderr[-2000:]
    assert "no extension was built" in out.stderr and f"built {ROOT / 'jaxgru'}" not in out.stdout
    assert not stale.exists() and not (ROOT / "jaxgru" / stale.name).exists()


@pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake is not on PATH")
def test_build_native_builds_the_source_it_is_given_into_dest(tmp_path):
    """--source builds another checkout (prepare.sh: a git worktree of another revision) and
    --dest receives the extension; the imported checkout's jaxgru/ is left alone. The source is a
    stand-in project whose configure writes an extension-named file saying where it came from."""
    source, dest, build = tmp_path / "source", tmp_path / "dest", tmp_path / "build"
    source.mkdir()
    dest.mkdir()
    (source / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.18)\nproject(standin LANGUAGES NONE)\n"
        'file(WRITE "${CMAKE_BINARY_DIR}/_jaxgru_cpu.standin.so" "from ${CMAKE_CURRENT_SOURCE_DIR}")\n')
    out = _run("build-native", "--source", str(source), "--dest", str(dest), "--build-dir", str(build))
    assert out.returncode == 0, out.stderr[-2000:]
    built = dest / "_jaxgru_cpu.standin.so"
    assert built.read_text() == f"from {source.resolve()}" and f"built {built}" in out.stdout
    assert not (ROOT / "jaxgru" / built.name).exists() and not (source / "jaxgru").exists()


@pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake is not on PATH")
@pytest.mark.parametrize("arg", ["--source", "--dest"])
def test_build_native_names_a_source_or_dest_it_cannot_use(arg, tmp_path):
    missing = tmp_path / "missing"
    out = _run("build-native", arg, str(missing), "--build-dir", str(tmp_path / "build"))
    assert out.returncode == 2
    assert arg in out.stderr and str(missing) in out.stderr, out.stderr
    assert not (tmp_path / "build").exists()  # refused before any configure


@pytest.mark.parametrize("bad", ["NOVALUE", "=1"])
def test_build_native_rejects_a_define_that_is_not_name_equals_value(bad):
    out = _run("build-native", "--define", bad)
    assert out.returncode == 2
    assert "argument --define: must be NAME=VALUE" in out.stderr and repr(bad) in out.stderr
