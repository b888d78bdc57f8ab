"""WGSL sources: where they live, how a module is assembled, and each kernel's binding table."""

from __future__ import annotations

import functools
import pathlib

from jaxgru._src.activations import NAMES, Activation

# Binding types of the host-side layouts: the contract with the tables at the top of each
# .wgsl file.
RO, RW, UNIFORM, UNIFORM_DYNAMIC = "read-only-storage", "storage", "uniform", "uniform-dynamic"

# binding number -> type, per kernel family (see the .wgsl headers).
BINDINGS: dict[str, dict[int, str]] = {
    "xproj": {0: RO, 1: RO, 2: RO, 3: RW, 4: UNIFORM},
    "recurrence": {
        0: RO, 1: RO, 2: RO, 3: RO, 4: RW, 5: RW, 6: RW, 7: RW, 8: UNIFORM, 9: UNIFORM_DYNAMIC,
    },
    "prep": {0: RO, 1: RW},
    "backward": {0: RO, 1: RO, 2: RO, 3: RW, 4: RW, 5: RW, 6: UNIFORM, 7: UNIFORM_DYNAMIC},
    "wgrad": {0: RO, 1: RO, 2: RO, 3: RO, 4: RW, 5: UNIFORM},
}

# kernel file -> its binding family
FAMILY = {"xproj": "xproj", "gru": "recurrence", "lstm": "recurrence", "prep_t": "prep", "prep_bias": "prep",
          "gru_backward": "backward", "lstm_backward": "backward", "wgrad": "wgrad"}


def wgsl_dir() -> pathlib.Path:
    """The directory of the .wgsl files: ``jaxgru/wgsl`` in a wheel, ``wgsl/`` in a checkout.

    Raises:
      FileNotFoundError: neither exists (a broken install).
    """
    package = pathlib.Path(__file__).resolve().parents[2]  # .../jaxgru
    for candidate in (package / "wgsl", package.parent / "wgsl"):
        if (candidate / "xproj.wgsl").is_file():
            return candidate
    raise FileNotFoundError(
        f"jaxgru: the WGSL kernels are missing (looked in {package / 'wgsl'} and "
        f"{package.parent / 'wgsl'}); reinstall jaxgru."
    )


@functools.cache
def _read(name: str) -> str:
    return (wgsl_dir() / f"{name}.wgsl").read_text(encoding="utf-8")


def activation_switch(derivative: bool = False) -> str:
    """``fn act(kind, x, A, B)`` (or, with ``derivative``, ``fn act_d``: d act / dx): one case per
    ONNX activation, from activations.py."""
    name_, form = ("act_d", Activation.wgsl_derivative) if derivative else ("act", Activation.wgsl)
    cases = "".join(f"    case {i}u: {{ return {form(Activation(name))}; }}\n" for i, name in enumerate(NAMES))
    default = "1.0" if derivative else "x"
    return (
        "\n// generated from jaxgru/_src/activations.py (case = Activation.kind_id)\n"
        f"fn {name_}(kind: u32, x: f32, A: f32, B: f32) -> f32 {{\n"
        f"  switch kind {{\n{cases}    default: {{ return {default}; }}\n  }}\n}}\n"
    )


@functools.cache
def source(kernel: str, storage: str) -> str:
    """The full WGSL module text of a kernel file for a storage type.

    Args:
      kernel: a key of ``FAMILY`` (a .wgsl file with entry points).
      storage: "f32" or "f16" (the element type ``ST`` of x, weights and outputs).

    Returns:
      The module source.
    """
    header = ("enable f16;\n" if storage == "f16" else "") + f"alias ST = {storage};\n"
    if FAMILY[kernel] in ("xproj", "wgrad"):
        return header + _read(kernel)
    if FAMILY[kernel] == "backward":
        acts = _read("activations") + activation_switch() + activation_switch(derivative=True)
        return header + _read("backward_common") + acts + _read(kernel)
    if FAMILY[kernel] == "prep":
        return header + _read("prep") + _read(kernel)
    return header + _read("recurrence_common") + _read("activations") + activation_switch() + _read(kernel)
