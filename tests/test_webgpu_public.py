"""``jaxgru.webgpu``: the public face of the WebGPU runtime is light and is the ``_src`` objects."""

from __future__ import annotations

import os
import subprocess
import sys

import jaxgru.webgpu
from jaxgru._src.webgpu import counters, plan, runtime

# where each public name is defined
SOURCES = {
    "counters": counters,
    "reset_counters": counters,
    "WGPUUnavailableError": runtime,
    "adapter_status": runtime,
    "adapters_info": runtime,
    "is_available": runtime,
    "limit_override": runtime,
    "reset": runtime,
    "set_timestamps": runtime,
    "stats": runtime,
    "timestamps_enabled": runtime,
    "plan_for": plan,
}

# Run in a fresh interpreter: wgpu's adapter entry points are replaced by ones that fail, so
# importing jaxgru.webgpu (and calling what must not touch a device) proves it requests no
# adapter and creates no device.
_NO_DEVICE = """
import sys
import wgpu

def refuse(*args, **kwargs):
    raise AssertionError("an adapter was requested")

for name in ("enumerate_adapters_sync", "enumerate_adapters_async",
             "request_adapter_sync", "request_adapter_async"):
    setattr(wgpu.gpu, name, refuse)

import jaxgru.webgpu as w
from jaxgru._src.webgpu import runtime

assert runtime._RUNTIME is None
w.counters()
w.reset_counters()
w.timestamps_enabled()
w.set_timestamps(False)
with w.limit_override(max_storage_buffer_binding_size=1 << 16):
    pass
w.reset()
w.plan_for("gru", seq_length=8, batch=4, input_size=3, hidden_size=5)  # a profile: no device
assert runtime._RUNTIME is None
print("ok")
"""


def _run(code: str, **env: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={**os.environ, **env}, check=False)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_import_creates_no_adapter_and_no_device():
    assert _run(_NO_DEVICE) == "ok"


def test_import_works_with_an_unusable_wgpu_backend():
    code = ("import jaxgru.webgpu as w; from jaxgru._src.webgpu import runtime; "
            "assert runtime._RUNTIME is None; print(w.counters()['total']['calls'])")
    assert _run(code, WGPU_BACKEND_TYPE="NoSuchBackend", JAXGRU_WGPU_ADAPTER="no-such-adapter") == "0"


def test_import_jaxgru_does_not_import_webgpu():
    code = "import sys, jaxgru; print([m for m in ('jaxgru.webgpu', 'wgpu') if m in sys.modules])"
    assert _run(code) == "[]"


def test_public_names_are_the_src_objects():
    assert jaxgru.webgpu.__all__ == sorted(jaxgru.webgpu.__all__)
    assert set(jaxgru.webgpu.__all__) == set(SOURCES)
    for name, module in SOURCES.items():
        assert getattr(jaxgru.webgpu, name) is getattr(module, name), name


def test_unavailable_error_is_a_runtime_error_naming_the_public_module():
    assert issubclass(jaxgru.webgpu.WGPUUnavailableError, RuntimeError)
    err = jaxgru.webgpu.WGPUUnavailableError("wgpu found no adapter")
    assert err.reason == "wgpu found no adapter"
    assert "jaxgru.webgpu.adapters_info() lists them" in str(err)
    assert "_src" not in str(err)


def test_status_functions_agree_and_never_raise():
    status = jaxgru.webgpu.adapter_status()
    assert sorted(status) == ["adapter", "available", "error", "reason"]
    assert jaxgru.webgpu.is_available() is status["available"]
    adapters = jaxgru.webgpu.adapters_info()
    assert isinstance(adapters, list)
    if status["available"]:
        assert [a["index"] for a in adapters if a["selected"]] == [status["adapter"]["index"]]
    else:
        assert isinstance(status["reason"], str) and status["error"].startswith("jaxgru: no usable")
