"""Test configuration: 4 CPU devices (sharding tests), strict numerics, bounded compile caches."""

from __future__ import annotations

import os
import shutil
import tempfile

os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")  # silences Mesa (lavapipe) warnings
os.environ.setdefault("KERAS_BACKEND", "jax")
# Tests compile hundreds of small programs, and compiling is most of their time: LLVM's
# optimisation passes would double it, and XLA:CPU's MLIR fusion emitters took 1.7x as long as its
# older IR emitters (a second-order check_grads test: 18.1 s against 10.9, 35 compilations). Both
# change how the code is generated, not what it computes. Benchmarks and users keep XLA's defaults
# (jax < 0.11 is pinned: an XLA that no longer knew a flag would abort).
os.environ.setdefault(
    "XLA_FLAGS",
    "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true --xla_cpu_use_fusion_emitters=false",
)

import jax
import pytest
from ci_gate import skip_or_fail

jax.config.update("jax_num_cpu_devices", 4)
# Catch sloppy promotion inside the library: users may run with these settings.
jax.config.update("jax_numpy_rank_promotion", "raise")
jax.config.update("jax_numpy_dtype_promotion", "strict")

from hypothesis import settings  # noqa: E402

settings.register_profile("ci", max_examples=25, deadline=None, derandomize=True)
settings.register_profile("dev", max_examples=10, deadline=None)
# `make fuzz`: 2000 examples per test (about 45 minutes on two cores); FUZZ_EXAMPLES scales it
settings.register_profile("fuzz", max_examples=int(os.environ.get("FUZZ_EXAMPLES", "2000")), deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


# One XLA compilation cache per test run, shared by its xdist workers and removed at its end:
# tests that lower the same program (the same layer under another lambda, the reference after
# each primitive) then compile it once. Programs with host callbacks (wgsl) are never cached by
# jax. A cache the user set (JAX_COMPILATION_CACHE_DIR) is left alone.
_XLA_CACHE_ENV = "JAXGRU_TESTS_XLA_CACHE"


def pytest_configure(config):
    """The controller makes the run's cache folder (before it starts the workers, which inherit
    its environment); every process then compiles into it."""
    if jax.config.jax_compilation_cache_dir and _XLA_CACHE_ENV not in os.environ:
        return
    if not hasattr(config, "workerinput"):
        os.environ[_XLA_CACHE_ENV] = tempfile.mkdtemp(prefix="jaxgru-tests-xla-cache-")
    jax.config.update("jax_compilation_cache_dir", os.environ[_XLA_CACHE_ENV])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)


def pytest_unconfigure(config):
    if not hasattr(config, "workerinput") and _XLA_CACHE_ENV in os.environ:
        shutil.rmtree(os.environ.pop(_XLA_CACHE_ENV), ignore_errors=True)


@pytest.fixture(autouse=True, scope="module")
def _bounded_compile_cache():
    """XLA:CPU maps code pages per executable; thousands in one process exhaust vm.max_map_count."""
    yield
    jax.clear_caches()


@pytest.fixture
def jax_x64():
    """Enable float64 for one test."""
    jax.config.update("jax_enable_x64", True)
    yield
    jax.config.update("jax_enable_x64", False)


def pytest_runtest_setup(item):
    """A test marked native needs the native CPU extension: it skips without it, fails under CI=true."""
    if item.get_closest_marker("native"):
        from jaxgru._src import native

        st = native.status()
        if not st["available"]:
            skip_or_fail(f"the native CPU extension is not built: {st['reason']}")


@pytest.fixture
def backend(request):
    """The backend of ``parametrize("backend", backend_cases.BACKENDS, indirect=True)``, once what it
    needs is there: wgsl's adapter (skips without one, fails under CI=true); cpu's extension is
    checked for its native mark (pytest_runtest_setup)."""
    if request.param == "wgsl":
        import wgsl_support

        wgsl_support.require_adapter()
    return request.param
