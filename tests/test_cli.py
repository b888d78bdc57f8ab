"""python -m jaxgru: every subcommand has --help and runs."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def _run(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "jaxgru", *args], capture_output=True, text=True,
                          timeout=timeout, check=False)


@pytest.mark.parametrize("cmd", [[], ["info"], ["demo"]])
def test_help(cmd):
    out = _run(*cmd, "--help")
    assert out.returncode == 0 and "usage" in out.stdout


def test_info_json_reports_the_automatic_choice():
    out = _run("info", "--json")
    assert out.returncode == 0, out.stderr
    info = json.loads(out.stdout)
    assert info["auto"] in ("xla", "wgsl") and info["reason"]
    assert isinstance(info["adapters"], list)


def test_info_text():
    out = _run("info")
    assert out.returncode == 0, out.stderr
    assert "backend='auto' ->" in out.stdout and "JAX devices" in out.stdout


def test_unknown_command_fails():
    assert _run("frobnicate").returncode != 0
