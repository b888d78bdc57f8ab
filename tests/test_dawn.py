"""Portability on a second WebGPU implementation: Dawn/Tint (Chrome's WebGPU, npm ``webgpu``).

1. A matrix of ``kernels.forward``, ``tangent.tangent`` and ``backward.backward`` calls (the
   kernel tests' and more; every tangent and backward kernel) runs on wgpu while every
   specialisation jaxgru asks for is recorded (``Runtime.pipeline``: kernel file, entry point,
   storage, override constants), with the exact module sources (``shaders.source``) and the
   binding tables (``shaders.BINDINGS``).
2. A few float32 calls are recorded as wgpu sees them, each on a fresh device: every buffer,
   upload, bind group, pipeline, dynamic offset, grid and copy of the call, and the bytes wgpu
   read back (lavapipe).
3. ``tests/dawn/check.mjs`` compiles every module and creates every pipeline on Dawn's ``null``
   backend (any compilation message or validation error fails), then replays the recorded calls
   on Dawn's OpenGL ES backend (llvmpipe) and compares the read-back bytes with wgpu's.

Needs Node.js and ``make dawn`` (``npm ci`` in tests/dawn); without them the test skips, but
fails under ``CI=true``. Alone: ``python tests/test_dawn.py /tmp/dawn.json`` writes the
recording; ``node tests/dawn/check.mjs /tmp/dawn.json`` checks it.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import importlib
import inspect
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
import wgsl_support
from ci_gate import skip_or_fail
from test_webgpu_kernels import BOTH, CELLS, SIG, TANH, TILINGS, VARIANTS, make_cfg, make_operands

from jaxgru._src import shapes
from jaxgru._src.activations import NAMES, Activation
from jaxgru._src.cells import spec
from jaxgru._src.options import RNNConfig
from jaxgru._src.webgpu import backward, kernels, plan, runtime, shaders, tangent

pytestmark = pytest.mark.wgsl

DAWN_DIR = pathlib.Path(__file__).resolve().parent / "dawn"
CHECK = DAWN_DIR / "check.mjs"
WEBGPU_PACKAGE = DAWN_DIR / "node_modules" / "webgpu" / "package.json"
NODE_TIMEOUT_S = 300
SUMMARY = "DAWN-SUMMARY "
NO_GLES = 3  # check.mjs's exit status when every pipeline compiled but no OpenGL ES adapter exists
DIRECTIONS = ("forward", "reverse", "bidirectional")
RAGGED = [5, 0, 3, 1]


# --------------------------------------------------------------------------------------
# the matrix
# --------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Case:
    """One ``kernels.forward`` (or, with ``backward``, ``backward.backward``) call of the matrix."""

    name: str
    cfg: RNNConfig
    shape: dict  # make_operands keyword arguments
    variant: str = "auto"
    residuals: bool = True
    f16: bool = False
    replay: bool = False  # recorded on a fresh device and replayed on Dawn (float32 only)
    segment_steps: int | None = None  # plan.PERSISTENT_SEGMENT_STEPS for this call
    tiling: tuple[int, ...] | None = None  # a forced plan.Tiling (variant "tiled")
    xproj_tiled: bool = False  # the tiled input projection (lavapipe's plan keeps xproj)
    r_storage: str = "auto"  # kernels.forward's r_storage ("f16": R's device copy in f16)
    subgroups: bool = True  # False: as on a device without subgroups (limit_override(subgroups=0))
    tangent: bool = False  # the forward with residuals, then tangent.tangent on its outputs
    backward: bool = False  # the backward of the call (its y, residuals and cotangents random)
    tiled: bool | None = None  # backward.GEMM_TILED for this call (None: by the adapter)
    chunk_rows: int | None = None  # backward: lower the binding size so that its chunks hold this many rows


def matrix(f16: bool) -> list[Case]:
    """The calls whose specialisations must compile on Tint: the kernel tests' feature matrix and more."""
    cases: list[Case] = []
    add = lambda *a, **k: cases.append(Case(*a, **k))
    for kind, (cell, opts) in CELLS.items():  # test_matches_reference: directions x layouts x variants
        for direction in DIRECTIONS:
            for layout in (0, 1):
                cfg = make_cfg(cell, direction, layout=layout, ragged=True, **opts)
                for variant in VARIANTS:
                    add(f"{kind}-{direction}-layout{layout}-{variant}", cfg,
                        {"lens": RAGGED, "seed": layout}, variant)
        for variant in VARIANTS:  # residuals off
            add(f"{kind}-nores-{variant}", make_cfg(cell, "bidirectional", **opts), {}, variant, False)
        for residuals in (False, True):
            add(f"{kind}-clip-res{int(residuals)}", make_cfg(cell, "bidirectional", clip=0.25, **opts),
                {"scale": 2.0}, "auto", residuals)
    for cell in ("gru", "lstm"):  # the defaults (most other kernel tests), H = 6 and 16
        for direction in ("forward", "bidirectional"):
            for residuals in (False, True):
                add(f"{cell}-{direction}-res{int(residuals)}", make_cfg(cell, direction), {}, "auto", residuals)
        for variant in VARIANTS:
            add(f"{cell}-H16-layout1-{variant}", make_cfg(cell, layout=1), {"L": 6, "N": 9, "H": 16}, variant)
    for peepholes in (False, True):  # test_lstm_options, both variants
        for input_forget in (False, True):
            cfg = make_cfg("lstm", "reverse", peepholes=peepholes, input_forget=input_forget, ragged=True)
            for variant in VARIANTS:
                add(f"lstm-peep{int(peepholes)}-if{int(input_forget)}-{variant}", cfg,
                    {"lens": [2, 5, 0, 4]}, variant)
    for direction in ("forward", "bidirectional"):  # the projected LSTM (lstm_proj; persistent's barrier)
        for layout in (0, 1):
            cfg = make_cfg("lstm", direction, layout=layout, ragged=True, peepholes=True, proj=True)
            for variant in BOTH:
                add(f"lstm-proj-{direction}-layout{layout}-{variant}", cfg, {"lens": RAGGED, "P": 2}, variant)
    add("lstm-proj-wide-nores", make_cfg("lstm", "reverse", proj=True), {"H": 5, "P": 7}, "stepwise", False)
    for name in NAMES:  # test_activation: each activation (alpha/beta) as f, g and h
        act = Activation(name, 0.7, 0.2)
        acts = ((act, TANH, act), (SIG, act, Activation("HardSigmoid", 0.3, 0.6)))
        add(f"act-{name}", make_cfg("lstm", "bidirectional", acts=acts), {})
    gru_acts = ((Activation("HardSigmoid", 0.3, 0.4), Activation("Softsign")),
                     (SIG, Activation("ScaledTanh", 1.5, 0.7)))
    add("gru-acts", make_cfg("gru", "bidirectional", acts=gru_acts, linear_before_reset=True, layout=1), {})
    for kind, shape in (("gru", (1, 1, 1, 1)), ("lstm", (1, 1, 1, 1)), ("gru_lbr", (7, 3, 5, 13)),
                        ("lstm", (3, 11, 2, 17))):  # test_odd_shapes
        cell, opts = CELLS[kind]
        cfg = make_cfg(cell, "bidirectional", layout=shape[0] % 2, ragged=True, **opts)
        L, N, I, H = shape
        for variant in VARIANTS:
            add(f"{kind}-odd{L}x{N}x{I}x{H}-{variant}", cfg,
                {"L": L, "N": N, "I": I, "H": H, "lens": list(np.arange(N) % (L + 1))}, variant)
    for i, tile in enumerate(TILINGS):  # test_tilings
        kind = list(CELLS)[i % len(CELLS)]
        cell, opts = CELLS[kind]
        for sg in (True, False):
            add(f"{kind}-tiling{'x'.join(map(str, tile))}-sg{int(sg)}", make_cfg(cell, "bidirectional", layout=i % 2,
                ragged=True, **opts), {"L": 4, "N": 7, "H": 37, "lens": [4, 0, 3, 1, 2, 4, 4]}, "tiled", tiling=tile,
                subgroups=sg)
    for kind, (cell, opts) in CELLS.items():  # every tiled kernel with subgroups, the default tiling
        add(f"{kind}-tiled-split-sg", make_cfg(cell, "bidirectional", **opts), {"L": 3, "N": 2, "H": 40}, "tiled",
            tiling=TILINGS[2])
    for kind, layout in (("gru", 0), ("lstm", 1)):  # test_tiled_projection
        cell, opts = CELLS[kind]
        add(f"{kind}-xproj_tiled-layout{layout}", make_cfg(cell, "bidirectional", layout=layout, **opts),
            {"L": 5, "N": 13, "I": 19, "H": 21}, "stepwise", xproj_tiled=True)
    if f16:  # float16 storage (test_float16), every variant
        for kind, (cell, opts) in CELLS.items():
            cfg = make_cfg(cell, "bidirectional", ragged=True, layout=1, **opts)
            for variant in VARIANTS:
                add(f"f16-{kind}-{variant}", cfg, {"lens": [5, 2, 0, 4]}, variant, f16=True)
        for kind, (cell, opts) in CELLS.items():  # test_r_in_float16: f32 storage, R in f16
            for variant in VARIANTS:
                add(f"r16-{kind}-{variant}", make_cfg(cell, "bidirectional", ragged=True, **opts),
                    {"lens": RAGGED, "H": 9}, variant, r_storage="f16")
            add(f"r16-{kind}-tiled-nosg", make_cfg(cell, "bidirectional", ragged=True, **opts),
                {"lens": RAGGED, "H": 9}, "tiled", r_storage="f16", subgroups=False)
        add("f16-gru_lbr-xproj_tiled", make_cfg("gru", "bidirectional", layout=1, linear_before_reset=True),
            {"L": 5, "N": 13, "I": 19, "H": 21}, "stepwise", f16=True, xproj_tiled=True)
        for variant in BOTH:
            add(f"f16-lstm-proj-{variant}", make_cfg("lstm", "bidirectional", ragged=True, layout=1, proj=True),
                {"lens": [5, 2, 0, 4], "P": 2}, variant, f16=True)
    # the tangent kernels (tangent_proj, gru_tangent, lstm_tangent): every cell variant
    for kind, (cell, opts) in {**CELLS, "lstm_if": ("lstm", {"peepholes": True, "input_forget": True})}.items():
        for direction, layout, clip in (("bidirectional", 1, 0.5), ("reverse", 0, None)):
            cfg = make_cfg(cell, direction, layout=layout, ragged=True, clip=clip, **opts)
            add(f"tangent-{kind}-{direction}-layout{layout}", cfg, {"lens": RAGGED}, "stepwise", tangent=True)
            if f16:
                add(f"tangent-f16-{kind}-{direction}", cfg, {"lens": RAGGED}, "stepwise", f16=True, tangent=True)
    # the projected LSTM's tangent (lstm_tangent_proj; tangent_proj over P features), P < H and P4 > H4
    for direction, layout, proj_size, clip in (("bidirectional", 1, 2, 0.5), ("reverse", 0, 9, None)):
        cfg = make_cfg("lstm", direction, layout=layout, ragged=True, clip=clip, peepholes=True, proj=True)
        add(f"tangent-lstm-proj{proj_size}-{direction}-layout{layout}", cfg, {"lens": RAGGED, "P": proj_size},
            "stepwise", tangent=True)
        if f16:
            add(f"tangent-f16-lstm-proj{proj_size}-{direction}", cfg, {"lens": RAGGED, "P": proj_size}, "stepwise",
                f16=True, tangent=True)
    # replayed on Dawn's OpenGL ES backend, read-back bytes compared with wgpu's
    rep = lambda *a, **k: add(*a, replay=True, **k)
    rep("replay-tangent-lstm-proj-bidirectional", make_cfg("lstm", "bidirectional", ragged=True, input_forget=True,
        proj=True), {"lens": RAGGED, "P": 3}, "stepwise", tangent=True)
    rep("replay-tangent-gru-bidirectional-layout1-clip", make_cfg("gru", "bidirectional", layout=1, ragged=True,
        clip=0.5, acts=gru_acts), {"lens": RAGGED}, "stepwise", tangent=True)
    rep("replay-tangent-lstm-peepholes-reverse", make_cfg("lstm", "reverse", ragged=True, peepholes=True),
        {"lens": RAGGED}, "stepwise", tangent=True)
    rep("replay-tangent-gru_lbr-forward", make_cfg("gru", ragged=True, linear_before_reset=True),
        {"lens": RAGGED}, "stepwise", tangent=True)
    bwd = lambda name, cfg, shape=None, **k: add(f"backward-{name}", cfg, shape or {}, backward=True, **k)
    for kind, (cell, opts) in {**CELLS, "lstm_if": ("lstm", {"input_forget": True})}.items():
        for direction in DIRECTIONS:  # the backward kernels: every cell variant, direction, layout
            for layout in (0, 1):
                bwd(f"{kind}-{direction}-layout{layout}",
                    make_cfg(cell, direction, layout=layout, ragged=True, **opts), {"lens": RAGGED})
        bwd(f"{kind}-clip", make_cfg(cell, "bidirectional", clip=0.25, **opts))
        for tiled in (False, True):  # both forms of the GEMMs, whatever the adapter
            bwd(f"{kind}-tiled{int(tiled)}", make_cfg(cell, "bidirectional", layout=1, **opts), tiled=tiled)
        if f16:
            bwd(f"f16-{kind}", make_cfg(cell, "bidirectional", ragged=True, layout=1, **opts), {"lens": RAGGED},
                f16=True)
    # the projected LSTM's backward (PROJ): P < H and P > H, both layouts, peepholes, clip, f16
    for direction, layout, proj_size, clip in (("bidirectional", 1, 2, 0.5), ("reverse", 0, 9, None)):
        cfg = make_cfg("lstm", direction, layout=layout, ragged=True, clip=clip, peepholes=True, proj=True)
        bwd(f"lstm-proj{proj_size}-{direction}-layout{layout}", cfg, {"lens": RAGGED, "P": proj_size})
        if f16:
            bwd(f"f16-lstm-proj{proj_size}-{direction}", cfg, {"lens": RAGGED, "P": proj_size}, f16=True)
    for name in NAMES:  # each activation's derivative (alpha/beta) as f, g and h
        act = Activation(name, 0.7, 0.2)
        bwd(f"act-{name}", make_cfg("lstm", "bidirectional", acts=((act, TANH, act), (SIG, act, TANH))))
    # replayed on Dawn's OpenGL ES backend, read-back bytes compared with wgpu's
    rep = lambda *a, **k: add(*a, replay=True, **k)
    rep("replay-backward-gru-bidirectional-ragged", make_cfg("gru", "bidirectional", ragged=True),
        {"lens": RAGGED}, backward=True)
    rep("replay-backward-gru-tiled-gemms", make_cfg("gru", "bidirectional", layout=1, ragged=True),
        {"lens": RAGGED, "I": 70}, backward=True, tiled=True)
    rep("replay-backward-lstm-peepholes-layout1-clip",
        make_cfg("lstm", "bidirectional", layout=1, ragged=True, peepholes=True, clip=0.5),
        {"lens": RAGGED}, backward=True)
    rep("replay-backward-lstm-proj-bidirectional-ragged",
        make_cfg("lstm", "bidirectional", ragged=True, input_forget=True, proj=True), {"lens": RAGGED, "P": 3},
        backward=True)
    rep("replay-backward-lstm-peepholes-chunks", make_cfg("lstm", "bidirectional", ragged=True, peepholes=True),
        {"lens": RAGGED}, backward=True, chunk_rows=3)  # 3 + 1 rows: the weight gradients summed over chunks
    rep("replay-backward-gru_lbr-reverse-activations",
        make_cfg("gru", "reverse", linear_before_reset=True, acts=((Activation("Elu", 0.7), Activation("Softsign")),)),
        {"L": 6, "N": 3, "I": 5, "H": 7}, backward=True)
    rep("replay-gru-stepwise-bidirectional-ragged",
        make_cfg("gru", "bidirectional", ragged=True), {"lens": RAGGED}, "stepwise")
    rep("replay-gru_lbr-persistent-reverse-layout1-segments",
        make_cfg("gru", "reverse", layout=1, ragged=True, linear_before_reset=True),
        {"lens": [5, 3, 0, 4]}, "persistent", segment_steps=2)
    rep("replay-lstm-peepholes-stepwise-bidirectional-layout1",
        make_cfg("lstm", "bidirectional", layout=1, ragged=True, peepholes=True), {"lens": RAGGED}, "stepwise")
    rep("replay-lstm-input_forget-persistent-clip",
        make_cfg("lstm", "forward", peepholes=True, input_forget=True, clip=0.25),
        {"scale": 2.0}, "persistent", False)
    rep("replay-lstm-proj-stepwise-bidirectional-ragged",
        make_cfg("lstm", "bidirectional", ragged=True, peepholes=True, proj=True), {"lens": RAGGED, "P": 2},
        "stepwise")
    rep("replay-lstm-proj-persistent-reverse-segments", make_cfg("lstm", "reverse", ragged=True, proj=True),
        {"lens": [5, 3, 0, 4], "P": 3}, "persistent", segment_steps=2)
    rep("replay-gru-persistent-layout1-clip-activations",
        make_cfg("gru", "bidirectional", acts=gru_acts, layout=1, clip=0.5, ragged=True),
        {"lens": RAGGED}, "persistent")
    a = lambda name: Activation(name, 0.7, 0.2)
    for i, acts in enumerate((  # every activation kind once, with alpha/beta
        ((a("Affine"), a("LeakyRelu"), a("ThresholdedRelu")), (a("ScaledTanh"), a("Elu"), a("Softplus"))),
        ((a("HardSigmoid"), a("Softsign"), a("Relu")), (a("Sigmoid"), a("Tanh"), a("Elu"))),
    )):
        rep(f"replay-lstm-activations{i}-{VARIANTS[i]}", make_cfg("lstm", "bidirectional", acts=acts, ragged=True),
            {"lens": RAGGED, "seed": i}, VARIANTS[i], bool(i))
    # OpenGL ES has no subgroups: the replays sum k splits through workgroup memory
    rep("replay-lstm-tiled-split-bidirectional-ragged",
        make_cfg("lstm", "bidirectional", ragged=True, peepholes=True), {"L": 4, "N": 7, "H": 37,
        "lens": [4, 0, 3, 1, 2, 4, 4]}, "tiled", tiling=TILINGS[1], subgroups=False)
    rep("replay-gru-tiled-layout1", make_cfg("gru", "bidirectional", layout=1, ragged=True), {"lens": RAGGED},
        "tiled", tiling=TILINGS[2], subgroups=False)
    rep("replay-lstm-xproj_tiled-tiled-layout1", make_cfg("lstm", "bidirectional", layout=1, peepholes=True),
        {"L": 5, "N": 13, "I": 19, "H": 21}, "tiled", xproj_tiled=True, subgroups=False)
    rep("replay-gru_lbr-odd-stepwise-layout1",
        make_cfg("gru", "bidirectional", layout=1, ragged=True, linear_before_reset=True),
        {"L": 7, "N": 3, "I": 5, "H": 13, "lens": [7, 0, 4]}, "stepwise")
    return cases


# --------------------------------------------------------------------------------------
# recording what jaxgru asks of wgpu
# --------------------------------------------------------------------------------------
def _b64(data: Any) -> str:
    return base64.b64encode(bytes(memoryview(data).cast("B"))).decode("ascii")


class Recorder:
    """Wraps ``Runtime.pipeline`` / ``Runtime.bind_group`` and wgpu-py's methods (class level).

    Every pipeline request is recorded as a specialisation. Outside :meth:`replay` the call
    gets a stand-in pipeline of the same layout (an empty kernel): the specialisations are the
    same, since nothing jaxgru plans depends on a pipeline, and lavapipe does not compile ~150
    kernels (the kernel tests run them for real). Inside :meth:`replay` the pipelines are real,
    and the call's buffers, uploads, bind groups and commands are recorded, in order, with the
    bytes wgpu read back; ``replay`` resets the runtime first, so that every buffer the call
    uses is created (zero-filled, as WebGPU guarantees) inside the recording.
    """

    def __init__(self) -> None:
        self.specs: dict[tuple, dict] = {}
        self.case = ""  # the matrix case running (named in the specialisations)
        self._pipes: dict[int, int] = {}  # id(pipeline) -> specialisation index
        self._keep: list[Any] = []  # the objects whose id() is a key, kept alive
        self._events: list[dict] | None = None
        self._ids: dict[int, int] = {}  # id(buffer or bind group) -> its index in the recording
        self._stubs: weakref.WeakKeyDictionary[runtime.Runtime, dict] = weakref.WeakKeyDictionary()

    @contextlib.contextmanager
    def installed(self) -> Iterator[Recorder]:
        native = importlib.import_module("wgpu.backends.wgpu_native")
        hooks: list[tuple[type, str, Callable]] = [
            (runtime.Runtime, "bind_group", self._bind_group),
            (native.GPUDevice, "create_buffer", self._buffer),
            (native.GPUDevice, "create_command_encoder", lambda *_, **__: self._emit("encoder")),
            (native.GPUQueue, "write_buffer", self._write),
            (native.GPUQueue, "submit", self._submit),
            (native.GPUCommandEncoder, "begin_compute_pass", self._pass),
            (native.GPUCommandEncoder, "copy_buffer_to_buffer", self._copy),
            (native.GPUComputePassEncoder, "set_pipeline", self._set_pipeline),
            (native.GPUComputePassEncoder, "set_bind_group", self._set_bind_group),
            (native.GPUComputePassEncoder, "dispatch_workgroups", self._dispatch),
            (native.GPUComputePassEncoder, "end", lambda *_, **__: self._emit("end")),
            (native.GPUBuffer, "read_mapped", self._read),
        ]
        saved = [(cls, name, cls.__dict__.get(name)) for cls, name, _ in hooks]
        saved.append((runtime.Runtime, "pipeline", runtime.Runtime.__dict__["pipeline"]))
        try:
            for cls, name, hook in hooks:
                setattr(cls, name, _wrap(getattr(cls, name), hook))
            runtime.Runtime.pipeline = self._pipeline(runtime.Runtime.pipeline)
            yield self
        finally:
            for cls, name, original in saved:
                if original is None:  # inherited (a mixin's method)
                    delattr(cls, name)
                else:
                    setattr(cls, name, original)

    def _pipeline(self, original: Callable) -> Callable:
        def pipeline(rt: runtime.Runtime, kernel: str, entry: str, storage: str, constants: dict):
            consts = {k: (v.item() if isinstance(v, np.generic) else v) for k, v in sorted(constants.items())}
            spec = self.specs.setdefault((kernel, entry, storage, tuple(consts.items())), {
                "index": len(self.specs), "kernel": kernel, "entry": entry, "storage": storage,
                "constants": consts, "cases": [],
            })
            if len(spec["cases"]) < 3:
                spec["cases"].append(self.case)
            if self._events is None:
                return self._stub(rt, shaders.FAMILY[kernel])
            pipe = original(rt, kernel, entry, storage, constants)
            self._pipes[id(pipe)] = spec["index"]
            self._keep.append(pipe)
            return pipe

        return pipeline

    def _stub(self, rt: runtime.Runtime, family: str):
        """An empty kernel with ``family``'s pipeline layout, one per device and family."""
        stubs = self._stubs.setdefault(rt, {})
        if family not in stubs:
            module = rt.device.create_shader_module(code="@compute @workgroup_size(1) fn main() {}")
            stubs[family] = rt.device.create_compute_pipeline(
                layout=rt.layout(family)[1], compute={"module": module, "entry_point": "main"})
        return stubs[family]

    @contextlib.contextmanager
    def replay(self, events: list[dict]) -> Iterator[None]:
        runtime.reset()
        self._events, self._ids = events, {}
        try:
            yield
        finally:
            self._events = None

    # ---- hooks: (object, result, the method's arguments by name) ---------------------------
    def _emit(self, op: str, **fields) -> None:
        if self._events is not None:
            self._events.append({"op": op, **fields})

    def _index(self, obj: Any, new: bool = False) -> int:
        if new:
            self._ids[id(obj)] = len(self._ids)
            self._keep.append(obj)
        elif id(obj) not in self._ids:
            raise AssertionError(f"{self.case}: a {type(obj).__name__} created outside the recording")
        return self._ids[id(obj)]

    def _bind_group(self, _rt, group, family: str, resources: dict) -> None:
        # a bind group the runtime's cache returns again (same buffers, same ranges) is in the
        # recording already: recorded once, so that every object keeps one index
        if self._events is not None and id(group) not in self._ids:
            entries = [[b, self._index(buf), 0, size] for b, (buf, size) in sorted(resources.items())]
            self._emit("bind_group", id=self._index(group, new=True), family=family, entries=entries)

    def _buffer(self, _dev, buf, label, size: int, usage: int, mapped_at_creation: bool) -> None:
        if self._events is not None:
            assert not mapped_at_creation, "not recorded: mapped_at_creation"
            self._emit("buffer", id=self._index(buf, new=True), size=int(size), usage=int(usage))

    def _write(self, _q, _r, buffer, buffer_offset: int, data, data_offset: int, size) -> None:
        if self._events is not None:
            assert data_offset == 0 and size is None, "not recorded: a partial write_buffer"
            self._emit("write", buffer=self._index(buffer), offset=int(buffer_offset), data=_b64(data))

    def _submit(self, _q, _r, command_buffers) -> None:
        self._emit("submit", count=len(command_buffers))

    def _pass(self, _enc, _r, label, timestamp_writes) -> None:
        assert timestamp_writes is None or self._events is None, "not recorded: timestamp queries"
        self._emit("pass")

    def _copy(self, _enc, _r, source, source_offset, destination, destination_offset, size) -> None:
        if self._events is not None:
            self._emit("copy", src=self._index(source), src_offset=int(source_offset),
                       dst=self._index(destination), dst_offset=int(destination_offset), size=int(size))

    def _set_pipeline(self, _cp, _r, pipeline) -> None:
        if self._events is not None:
            self._emit("set_pipeline", pipeline=self._pipes[id(pipeline)])

    def _set_bind_group(self, _cp, _r, index, bind_group, dynamic_offsets_data,
                        dynamic_offsets_data_start, dynamic_offsets_data_length) -> None:
        if self._events is not None:
            assert dynamic_offsets_data_start is None and dynamic_offsets_data_length is None
            self._emit("set_bind_group", index=int(index), group=self._index(bind_group),
                       offsets=[int(o) for o in dynamic_offsets_data])

    def _dispatch(self, _cp, _r, workgroup_count_x, workgroup_count_y, workgroup_count_z) -> None:
        self._emit("dispatch", grid=[int(workgroup_count_x), int(workgroup_count_y), int(workgroup_count_z)])

    def _read(self, buf, data, buffer_offset, size, copy) -> None:
        if self._events is not None:
            assert buffer_offset is not None and size is not None
            self._emit("read", buffer=self._index(buf), offset=int(buffer_offset), size=int(size), data=_b64(data))


def _wrap(original: Callable, hook: Callable) -> Callable:
    """``original`` calling ``hook(obj, result, **arguments)`` after it (defaults filled in)."""
    sig = inspect.signature(original)

    def wrapper(obj, *args, **kwargs):
        result = original(obj, *args, **kwargs)
        bound = sig.bind(obj, *args, **kwargs)
        bound.apply_defaults()
        arguments = dict(bound.arguments)
        del arguments[next(iter(sig.parameters))]  # self
        hook(obj, result, **arguments)
        return result

    return wrapper


# --------------------------------------------------------------------------------------
# collection
# --------------------------------------------------------------------------------------
def entry_points() -> set[str]:
    """Every ``@compute`` entry point of the .wgsl files."""
    text = "".join(p.read_text() for p in shaders.wgsl_dir().glob("*.wgsl"))
    return set(re.findall(r"@compute[^\n]*\n\s*fn (\w+)", text))


def collect(path: pathlib.Path) -> dict:
    """Run the matrix on wgpu, recording; write the JSON that check.mjs reads; return it."""
    has_f16 = runtime.runtime().has_f16
    rec = Recorder()
    replays = []
    with rec.installed():
        for case in matrix(has_f16):
            rec.case = case.name
            ops = make_operands(case.cfg, **case.shape, dtype=np.float16 if case.f16 else np.float32)
            with contextlib.ExitStack() as stack:
                if case.segment_steps:
                    stack.enter_context(_setattr(plan, "PERSISTENT_SEGMENT_STEPS", case.segment_steps))
                if not case.subgroups:
                    stack.enter_context(runtime.limit_override(subgroups=0))
                if case.xproj_tiled:
                    stack.enter_context(_setattr(plan, "XPROJ_TILED_MIN_TARGET", 0))
                if case.tiling:
                    forced = lambda geo, limits, n=None, t=case.tiling: plan.Tiling(*t, geo.N if n is None else n)
                    stack.enter_context(_setattr(plan, "tiling", forced))
                if case.tiled is not None:
                    stack.enter_context(_setattr(backward, "GEMM_TILED", case.tiled))
                if case.chunk_rows:
                    geo = backward.geometry(case.cfg, backward.sizes(case.cfg, ops[0], ops[2]), 4)
                    fixed = geo.fixed_bytes()
                    limit = 4 + max(fixed.get(k, 0) + case.chunk_rows * b for k, b in geo.row_bytes().items())
                    assert len(plan.batch_chunks(geo, {**runtime.runtime().plan_limits(),
                                                       "max-storage-buffer-binding-size": limit})) == 2
                    stack.enter_context(runtime.limit_override(max_storage_buffer_binding_size=limit))
                events: list[dict] = []
                if case.replay:
                    stack.enter_context(rec.replay(events))
                if case.backward:
                    backward.backward(case.cfg, [*ops, *backward_tail(case.cfg, ops, case.shape.get("seed", 0))])
                else:
                    outs = kernels.forward(case.cfg, ops, residuals=case.residuals or case.tangent,
                                           variant=case.variant, r_storage=case.r_storage)
                if case.tangent:
                    dtype = np.float16 if case.f16 else np.float32
                    tans = make_operands(case.cfg, **{**case.shape, "seed": 7}, dtype=dtype)[:-1]
                    tangent.tangent(case.cfg, ops, outs[0], outs[-1], tans)
            if case.replay:
                assert sum(e["op"] == "read" for e in events) >= 1, case.name
                replays.append({"name": case.name, "events": events})
    specs = sorted(rec.specs.values(), key=lambda s: s["index"])
    modules = sorted({(s["kernel"], s["storage"]) for s in specs})
    module_index = {m: i for i, m in enumerate(modules)}
    data = {
        "requested_limits": list(runtime.REQUESTED_LIMITS),
        "bindings": shaders.BINDINGS,
        "modules": [{"kernel": k, "storage": st, "family": shaders.FAMILY[k],
                     "source": shaders.source(k, st, tint=True)} for k, st in modules],
        "pipelines": [{**s, "module": module_index[(s["kernel"], s["storage"])]} for s in specs],
        "replays": replays,
    }
    path.write_text(json.dumps(data))
    return data


def backward_tail(cfg: RNNConfig, ops: list[np.ndarray], seed: int) -> list[np.ndarray]:
    """Random y, residuals and output cotangents of the right shapes for a backward call."""
    rng = np.random.default_rng(seed + 100)
    length, batch, _, hidden, d = shapes.sizes(cfg, ops[0], ops[2])
    out = shapes.out_size(cfg, ops[2])  # features of Y and h: P with a projection
    y = shapes.y_shape(cfg.layout, length, d, batch, out)
    cell = spec(cfg.cell)
    states = [shapes.state_shape(cfg, batch, cell.state_size(o.field, hidden, out)) for o in cell.state_operands]
    res = shapes.residual_shape(cfg, length, batch, hidden)
    f = lambda s, dt=ops[0].dtype: (rng.standard_normal(s) * 0.5).astype(dt)
    return [f(y), f(res, np.float32), f(y), *(f(s) for s in states)]


@contextlib.contextmanager
def _setattr(obj: Any, name: str, value: Any) -> Iterator[None]:
    saved = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, saved)


# --------------------------------------------------------------------------------------
# the test
# --------------------------------------------------------------------------------------
def _node() -> str:
    node = shutil.which("node")
    if node is None:
        skip_or_fail("Node.js is not installed (needed for the Dawn check; `make dawn` installs it with apt)")
    elif not WEBGPU_PACKAGE.is_file():
        skip_or_fail(f"the npm package webgpu is not installed in {DAWN_DIR} (run `make dawn`)")
    return str(node)


def test_every_specialisation_compiles_on_dawn_and_replays_byte_identical(tmp_path):
    node = _node()
    wgsl_support.require_adapter()
    spec_path = tmp_path / "dawn.json"
    data = collect(spec_path)

    # the matrix reaches every kernel, entry point and activation kind
    pipes = data["pipelines"]
    storages = {"f32", "f16"} if runtime.runtime().has_f16 else {"f32"}
    full = {(p["entry"], p["storage"]) for p in pipes if p["storage"] in storages}
    assert full == {(e, s) for e in entry_points() for s in storages}
    if runtime.runtime().has_f16:  # R in f16 with f32 storage: every module that reads or writes R
        r16 = {p["kernel"] for p in pipes if p["storage"] == "f32+r16"}
        assert r16 == {"prep_t", "gru", "lstm", "gru_tiled", "lstm_tiled", "gru_tiled_sg", "lstm_tiled_sg"}
    assert {p["kernel"] for p in pipes} == set(shaders.FAMILY)  # the subgroup kernels included
    kinds = {v for p in pipes for k, v in p["constants"].items() if k.startswith("ACT_")}
    assert kinds == set(range(len(NAMES)))

    env = {**os.environ, "EGL_PLATFORM": "surfaceless"}
    proc = subprocess.run([node, str(CHECK), str(spec_path)], capture_output=True, text=True, env=env,
                          timeout=NODE_TIMEOUT_S, check=False)
    output = proc.stdout + proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.startswith(SUMMARY)]
    assert lines, f"check.mjs printed no summary (exit {proc.returncode}):\n{output}"
    summary = json.loads(lines[-1][len(SUMMARY):])
    assert (summary["modules"], summary["pipelines"]) == (len(data["modules"]), len(pipes)), output
    if proc.returncode == NO_GLES:
        skip_or_fail(f"Dawn found no OpenGL ES adapter to replay the calls on (every pipeline compiled):\n{output}")
    assert proc.returncode == 0, output
    assert summary["configurations"] == summary["identical"] == len(data["replays"]), output


if __name__ == "__main__":  # python tests/test_dawn.py OUT.json: the recording alone
    if len(sys.argv) != 2:
        sys.exit("usage: python tests/test_dawn.py OUT.json  (then: node tests/dawn/check.mjs OUT.json)")
    d = collect(pathlib.Path(sys.argv[1]))
    print(f"{len(d['modules'])} modules, {len(d['pipelines'])} pipelines, {len(d['replays'])} replays "
          f"-> {sys.argv[1]}")
