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
    "tangent_proj": {0: RO, 1: RO, 2: RO, 3: RO, 4: RW, 5: RO, 6: RO, 7: RO, 8: UNIFORM},
    "backward": {0: RO, 1: RO, 2: RO, 3: RW, 4: RW, 5: RW, 6: UNIFORM, 7: UNIFORM_DYNAMIC},
    "wgrad": {0: RO, 1: RO, 2: RO, 3: RO, 4: RW, 5: UNIFORM},
}

# kernel file -> its binding family
FAMILY = {
    "xproj": "xproj", "gru": "recurrence", "lstm": "recurrence", "gru_tiled": "recurrence",
    "lstm_tiled": "recurrence", "gru_tiled_sg": "recurrence", "lstm_tiled_sg": "recurrence",
    "prep_t": "prep", "prep_bias": "prep",
    "tangent_proj": "tangent_proj", "gru_tangent": "recurrence", "lstm_tangent": "recurrence",
    "gru_backward": "backward", "lstm_backward": "backward", "wgrad": "wgrad",
}
# Tiled kernel -> the files its module is assembled from after the recurrence prelude: the
# cell's per-row math, the tiles, the k-split reduction (workgroup memory, or subgroups for the
# _sg kernels, which need the device feature `subgroup`), the entry points.
TILED = {
    f"{cell}_tiled{sg}": (cell, "recurrence_tiled", f"tile_reduce_{'sg' if sg else 'wg'}", f"{cell}_tiled")
    for cell in ("gru", "lstm") for sg in ("", "_sg")
}
# recurrence kernels that also need the activations' derivatives (act_d, tangent_common.wgsl)
TANGENT_KERNELS = ("gru_tangent", "lstm_tangent")


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


# Module storage keys: the element type ST of x, weights and outputs, and RT of R's device copy
# (rt, written by prep_t): "f32+r16" is f32 storage with R in f16 (``plan.r_storage``).
STORAGES = {"f32": ("f32", "f32"), "f16": ("f16", "f16"), "f32+r16": ("f32", "f16")}


@functools.cache
def source(kernel: str, storage: str, tint: bool = False) -> str:
    """The full WGSL module text of a kernel file for a storage type.

    Args:
      kernel: a key of ``FAMILY`` (a .wgsl file with entry points: forward, tiled, tangent, backward, prep).
      storage: a key of ``STORAGES``: "f32" or "f16" (the element type ``ST`` of x, weights
        and outputs, and ``RT`` of R's device copy), or "f32+r16" (ST f32, RT f16).
      tint: the text for Tint (Dawn): the subgroup kernels start with ``enable subgroups;``,
        which the WGSL spec and Tint require and naga (wgpu-native 29) rejects.

    Returns:
      The module source.
    """
    st, rt = STORAGES[storage]
    header = ("enable f16;\n" if "f16" in (st, rt) else "") + f"alias ST = {st};\nalias RT = {rt};\n"
    if tint and kernel.endswith("_sg"):
        header = "enable subgroups;\n" + header
    if FAMILY[kernel] in ("xproj", "tangent_proj", "wgrad"):
        return header + _read(kernel)
    if FAMILY[kernel] == "prep":
        return header + _read("prep") + _read(kernel)
    acts = _read("activations") + activation_switch()
    derivatives = activation_switch(derivative=True)
    if FAMILY[kernel] == "backward":
        return header + _read("backward_common") + acts + derivatives + _read(kernel)
    common = header + _read("recurrence_common") + acts
    if kernel in TANGENT_KERNELS:
        return common + derivatives + _read("tangent_common") + _read(kernel)
    return common + "".join(_read(p) for p in TILED.get(kernel, (kernel,)))
