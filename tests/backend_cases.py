"""The backends a feature's tests run on, declared once: every backend agrees on every feature.

xla runs everywhere; wgsl needs a WebGPU adapter and cpu the native extension. Without them the
tests skip here and fail under ``CI=true``, where both are there. Use with conftest's ``backend``
fixture, which checks them::

    @pytest.mark.parametrize("backend", BACKENDS, indirect=True)
    def test_something(backend): ...
"""

from __future__ import annotations

import pytest

BACKENDS = ("xla", pytest.param("wgsl", marks=pytest.mark.wgsl), pytest.param("cpu", marks=pytest.mark.native))
# the backends whose results are compared with xla's, where xla's are the oracle
AGAINST_XLA = BACKENDS[1:]
