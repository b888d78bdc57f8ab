"""The gate of tests that need a tool CI installs (a WebGPU adapter, cross compilers, qemu, Node):
without it they skip here, but under ``CI=true``, where it is installed, they fail."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def skip_or_fail(reason: str) -> NoReturn:
    """Skip the calling test for `reason`, or fail it when ``CI=true``."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true but {reason}", pytrace=False)
    pytest.skip(reason)
