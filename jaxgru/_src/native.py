"""The native CPU lowering (``backend="cpu"``): one XLA FFI call per layer into csrc/.

The extension module ``jaxgru._jaxgru_cpu`` is built at ``pip install`` (scikit-build-core +
CMake, see CMakeLists.txt); a checkout without it (or an install without a C++ compiler) runs on
the ``lax.scan`` lowering, and :func:`status` says why. Its FFI targets are registered with JAX
the first time a lowering or ``backend_info()`` needs them (importing jaxgru stays cheap).

The kernels take float32, time-major operands: this module casts half-precision storage to
float32 (the compute dtype, as the reference does) and swaps batch-major (layout 1) operands
around the call. The C++ side picks AVX-512 / AVX2+FMA / generic kernels by cpuid per call;
``JAXGRU_CPU_ISA`` (avx512, avx2, generic) caps that choice and ``JAXGRU_CPU_THREADS`` sets the
threads (default: from the size of XLA's intra-op thread pool and the work per step), both read
when a call is lowered.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxgru._src import reference
from jaxgru._src.cells import spec
from jaxgru._src.options import RNNConfig
from jaxgru._src.reference.layout import Prepared, states, time_major

ISA_ENV = "JAXGRU_CPU_ISA"
THREADS_ENV = "JAXGRU_CPU_THREADS"
# the ISA cap's values, in the order of the C++ side's `isa` attribute (0 = best available)
ISAS = ("best", "avx512", "avx2", "generic")
TARGETS = {"gru": "jaxgru_gru_forward", "lstm": "jaxgru_lstm_forward"}
BACKWARD_TARGETS = {"gru": "jaxgru_gru_backward", "lstm": "jaxgru_lstm_backward"}
TANGENT_TARGETS = {"gru": "jaxgru_gru_tangent", "lstm": "jaxgru_lstm_tangent"}
MAX_ACTIVATIONS = 6  # activations per call: 3 per direction, 2 directions (the C++ attributes)
Fn = Callable[..., Any]

_lock = threading.Lock()


@functools.lru_cache(maxsize=1)
def _module() -> tuple[Any, str | None]:
    """(the extension module or None, why it is missing)."""
    try:
        from jaxgru import _jaxgru_cpu  # type: ignore[attr-defined]
    except ImportError as e:
        return None, f"jaxgru._jaxgru_cpu was not built ({e}); reinstall jaxgru with a C++ compiler"
    return _jaxgru_cpu, None


@functools.lru_cache(maxsize=1)
def _registered() -> bool:
    mod, _ = _module()
    if mod is None:
        return False
    with _lock:
        for name, capsule in mod.registrations().items():
            jax.ffi.register_ffi_target(name, capsule, platform="cpu")
    return True


def available() -> bool:
    """Whether the native CPU lowering is built (and its FFI targets registered)."""
    return _registered()


def isa_cap() -> int:
    """The ``isa`` attribute from ``JAXGRU_CPU_ISA`` (0: the best this CPU runs)."""
    v = os.environ.get(ISA_ENV, "").strip().lower() or "best"
    if v not in ISAS:
        raise ValueError(f"jaxgru: {ISA_ENV} must be one of {ISAS}; got {v!r}.")
    return ISAS.index(v)


def threads_cap() -> int:
    """The ``threads`` attribute from ``JAXGRU_CPU_THREADS`` (0: chosen per call by the kernels)."""
    v = os.environ.get(THREADS_ENV, "").strip()
    if not v:
        return 0
    if not v.isdigit() or int(v) < 1:
        raise ValueError(f"jaxgru: {THREADS_ENV} must be a positive integer; got {v!r}.")
    return int(v)


def status() -> dict:
    """``{"available", "isa", "module", "reason"}`` of the native CPU lowering."""
    mod, why = _module()
    if mod is None or not available():
        return {"available": False, "isa": None, "module": None,
                "reason": why or "the native CPU lowering is unavailable"}
    return {"available": True, "isa": mod.isa(isa_cap()), "module": getattr(mod, "__file__", None),
            "reason": f"kernels for {mod.isa(0)} (by cpuid)"}


# The instruction sets whose kernels ``auto`` picks: where they beat the xla lowering on the
# suite's cases (benchmarks/cpu_isa.py, docs/backends.md). The portable kernels (4-float vectors:
# SSE2, NEON) ran 1.8x slower than xla on an AVX-512 machine (1.45x on Zen 4, re-run with the
# suite's samples); arm64 is unmeasured.
AUTO_ISAS = ("avx512", "avx2")


def auto_choice() -> tuple[bool, str]:
    """Whether ``backend="auto"`` runs the native CPU lowering here, and why."""
    st = status()
    if not st["available"]:
        return False, "the native CPU lowering is not built"
    if st["isa"] not in AUTO_ISAS:
        return False, (f"the native CPU lowering is built, but its {st['isa']} kernels are slower than "
                       "the xla lowering (they are fast with AVX2 or AVX-512); backend='cpu' still runs them")
    return True, f"the native CPU lowering is built ({st['isa']} kernels)"


def _attrs(cfg: RNNConfig, residuals: bool) -> dict[str, Any]:
    acts = [a for per_dir in cfg.activations for a in per_dir]
    acts += [acts[-1]] * (MAX_ACTIVATIONS - len(acts))
    i32, f32 = np.int32, np.float32
    out: dict[str, Any] = {
        "lbr": i32(cfg.linear_before_reset), "input_forget": i32(cfg.input_forget),
        "peepholes": i32(cfg.peepholes), "ragged": i32(cfg.ragged),
        "direction": i32(("forward", "reverse", "bidirectional").index(cfg.direction)),
        "residuals": i32(residuals), "threads": i32(threads_cap()), "isa": i32(isa_cap()),
        "clip": f32(cfg.clip or 0.0),
    }
    for k, a in enumerate(acts):
        out[f"act{k}"], out[f"alpha{k}"], out[f"beta{k}"] = i32(a.kind_id), f32(a.alpha), f32(a.beta)
    return out


def make_forward(cfg: RNNConfig, ensemble: int, residuals: bool) -> Fn:
    """The forward of one layer as a function of the operands, through the FFI target.

    Returns what ``reference.forward`` returns: ``(y, y_h[, y_c])`` in the operands' dtype and
    layout and, with ``residuals``, ``res [D, L, N, K·H]`` (float32) in the reference's layout.
    """
    cell = spec(cfg.cell)
    attrs = _attrs(cfg, residuals)

    def one(*operands: Any) -> tuple[Any, ...]:
        ops = cell.unpack(operands)
        dtype = ops.x.dtype
        f32 = lambda a: a.astype(jnp.float32)
        x = time_major(cfg, f32(ops.x))
        length, batch, _ = x.shape
        d, _, hidden = ops.r.shape
        lens = jnp.clip(ops.lens.astype(jnp.int32), 0, length)
        st = jax.ShapeDtypeStruct((d, batch, hidden), jnp.float32)
        k = cell.residuals(cfg) if residuals else 0
        shapes = [jax.ShapeDtypeStruct((length, d, batch, hidden), jnp.float32), st]
        args = [x, f32(ops.w), f32(ops.r), f32(ops.b)]
        if cfg.cell == "lstm":
            shapes.append(st)
            args += [f32(ops.p), f32(states(cfg, ops.h0)), f32(states(cfg, ops.c0))]
        else:
            args.append(f32(states(cfg, ops.h0)))
        shapes.append(jax.ShapeDtypeStruct((d, length, batch, k * hidden) if residuals else (0,), jnp.float32))
        outs = jax.ffi.ffi_call(TARGETS[cfg.cell], shapes, vmap_method="sequential")(*args, lens, **attrs)
        y = outs[0] if cfg.layout == 0 else jnp.transpose(outs[0], (2, 0, 1, 3))
        result = [y.astype(dtype)] + [states(cfg, s).astype(dtype) for s in outs[1:-1]]
        if residuals:
            result.append(outs[-1])
        return tuple(result)

    return jax.vmap(one) if ensemble else one


def _peepholes(cfg: RNNConfig, pr: Prepared) -> Any:
    """The peepholes (i, o, f) of every direction as ``[D, 3·H]`` float32 (zeros without)."""
    if pr.peep is None:
        return jnp.zeros((cfg.num_directions, 3 * pr.hidden), jnp.float32)
    return jnp.stack([jnp.concatenate(v, axis=-1)[0] for v in pr.peep]).astype(jnp.float32)


class _Stacked(NamedTuple):
    """The reference's per-direction recurrence operands as the FFI calls take them."""

    stack: Callable[[int], Any]  # k -> operand k of every direction, [D, ...] float32
    carry: list[Any]  # the initial carries, each [D, N, H] float32
    state: jax.ShapeDtypeStruct  # one carried state, [D, N, H] float32
    lens: Any  # the sequence lengths clipped to [0, L], int32
    r: Any  # R of every direction, [D, G·H, H] float32


def _stacked(pr: Prepared, per_dir: list, carry0: tuple, lens: Any) -> _Stacked:
    """Stack the per-direction operands (shared by the tangent's and the backward's calls)."""
    f32 = lambda a: a.astype(jnp.float32)
    return _Stacked(
        stack=lambda k: f32(jnp.stack([pd[k] for pd in per_dir])),
        carry=[f32(jnp.stack([c[k] for c in carry0])) for k in range(len(carry0[0]))],
        state=jax.ShapeDtypeStruct((len(per_dir), pr.batch, pr.hidden), jnp.float32),
        lens=jnp.clip(lens.astype(jnp.int32), 0, pr.length),
        r=f32(jnp.stack(pr.r)),
    )


def make_tangent(cfg: RNNConfig, ensemble: int) -> Fn:
    """The tangent map of one layer: ``reference.tangent`` with its ``lax.scan`` over the steps
    replaced by one FFI call (the serial part: dH·Rᵀ and the elementwise step); what does not
    depend on the carried tangents (d(X·Wᵀ + b) + H_prev·dRᵀ, the peepholes' tangents times C)
    is hoisted out of the steps as before, XLA GEMMs over all steps.

    The function takes (primals, y, res, tangents) and returns the tangents of the outputs.
    """
    cell = spec(cfg.cell)
    n = cell.num_operands
    attrs = _attrs(cfg, True)
    lbr = cfg.cell == "gru" and cfg.linear_before_reset

    def one(*args: Any) -> tuple[Any, ...]:
        primals, y, res, tans = args[:n], args[n], args[n + 1], args[n + 2 :]
        lens = cell.unpack(primals).lens

        def recurrence(pr: Prepared, per_dir: list, aux: list, carry0: tuple) -> tuple[tuple, tuple]:
            f32 = lambda a: a.astype(jnp.float32)
            ops = _stacked(pr, per_dir, carry0, lens)
            stack, carry, st, clipped, r = ops.stack, ops.carry, ops.state, ops.lens, ops.r
            d, h2 = len(per_dir), 2 * pr.hidden
            dy = jax.ShapeDtypeStruct((d, pr.length, pr.batch, pr.hidden), jnp.float32)
            if cfg.cell == "gru":  # per_dir: (d(X·Wᵀ + Wb), ext, a_zr, a_h, lin, h_prev)
                txp, ext = stack(0), stack(1)
                if lbr:  # the h gate's H_prev·dRhᵀ + dRbh is multiplied by r in the step
                    ex = jnp.concatenate([txp[..., :h2] + ext[..., :h2], txp[..., h2:]], axis=-1)
                    exh = ext[..., h2:]
                else:
                    ex, exh = txp + ext, jnp.zeros((0,), jnp.float32)
                shapes = [dy, st]
                args_ = [ex, exh, f32(res), stack(5), r, carry[0]]
            else:  # per_dir: (d(X·Wᵀ + b) + H_prev·dRᵀ, a_i, a_o, a_f, a_c, C, C_prev); aux: (dP, dproj)
                ex, cp = stack(0), stack(6)
                if pr.peep is not None:  # dPi ⊙ C_prev, dPo ⊙ C, dPf ⊙ C_prev: no carried tangent
                    tp = [jnp.stack([a[0][k] for a in aux]).astype(jnp.float32)[:, None] for k in range(3)]
                    ex = ex + jnp.concatenate([tp[0] * cp, tp[1] * stack(5), tp[2] * cp, jnp.zeros_like(cp)], -1)
                shapes = [dy, st, st]
                args_ = [ex, f32(res), cp, r, _peepholes(cfg, pr), carry[0], carry[1]]
            outs = jax.ffi.ffi_call(TANGENT_TARGETS[cfg.cell], shapes, vmap_method="sequential")(
                *args_, clipped, **attrs)
            cd = pr.dtype
            last = tuple(tuple(o[k].astype(cd) for o in outs[1:]) for k in range(d))
            return last, tuple(outs[0][k].astype(cd) for k in range(d))

        return reference.tangent(cfg, primals, y, res, tans, recurrence=recurrence)

    return jax.vmap(one) if ensemble else one


# Where the backward's call computes dR itself (native_dr): a batch of at least the extension's
# dr_min_rows() (32: the call's reductions run over a row group's rows step by step, and its row
# groups keep at least as many), and dR of at most this many bytes (its running sum, read and
# written once per chunk of steps, stays in cache). Measured on 2 cores
# (benchmarks/performance_notes.md): training steps at N = 64, H = 128-256 0.65-0.8x of XLA's dR
# GEMM over a copy of H_prev; at N = 16 (8 rows per group) 1.19x and at H = 1024 (16 MiB)
# 1.05-1.2x slower, so those keep XLA's.
NATIVE_DR_MAX_BYTES = 1 << 20


def native_dr(cfg: RNNConfig, batch: int, hidden: int) -> bool:
    """Whether the backward's call computes dR = Σ dGᵀ·H_prev itself: LSTM and GRU lbr=1, whose
    every row of R pairs with H_prev (GRU lbr=0's h rows pair with r ⊙ H_prev: XLA computes
    those), at the sizes where it pays (above)."""
    mod, _ = _module()
    pairs = cfg.cell == "lstm" or bool(cfg.linear_before_reset)
    big_enough = mod is not None and batch >= mod.dr_min_rows()
    return pairs and big_enough and 4 * cfg.num_gates * hidden * hidden <= NATIVE_DR_MAX_BYTES


def make_backward(cfg: RNNConfig, ensemble: int) -> Fn:
    """The backward of one layer: ``reference.backward`` with its reverse ``lax.scan`` replaced by
    one FFI call (the serial part and, see :func:`native_dr`, dR); the other weight gradients are
    the same GEMMs over all steps.

    The function takes (primals, y, res, cotangents) and returns the primals' cotangents.
    """
    cell = spec(cfg.cell)
    n = cell.num_operands
    attrs = _attrs(cfg, True)
    lbr = cfg.cell == "gru" and cfg.linear_before_reset

    def one(*args: Any) -> tuple[Any, ...]:
        primals, y, res, cts = args[:n], args[n], args[n + 1], args[n + 2 :]
        lens = cell.unpack(primals).lens

        def recurrence(pr: Prepared, per_dir: list, carry0: tuple) -> tuple[tuple, tuple, tuple, tuple | None]:
            f32 = lambda a: a.astype(jnp.float32)
            ops = _stacked(pr, per_dir, carry0, lens)
            carry, st, clipped, r = ops.carry, ops.state, ops.lens, ops.r
            d = len(per_dir)
            # Y and its cotangent as the forward wrote Y, [L, D, N, H] in time order: the call
            # reads direction d's row at the time of each step, so no per-direction copy in
            # processing order (per_dir's gy) is made for it
            time_major_y = lambda a: f32(a) if cfg.layout == 0 else jnp.transpose(f32(a), (1, 2, 0, 3))
            gy_tm = time_major_y(cts[0])
            # dG per direction transposed, [D, G·H, L, N]: the weight gradients' GEMMs over steps
            # and batch take it as it is (XLA folds the transpose below into them); in the order
            # the steps emit it, [L, N, G·H], each would first copy it to that layout
            dgx = jax.ShapeDtypeStruct((d, cfg.num_gates * pr.hidden, pr.length, pr.batch), jnp.float32)
            # the states before each step are read from Y and h0 (GRU) or the residuals and c0
            # (LSTM) by the call, not from per_dir's copies (those feed dR's GEMM alone)
            init = lambda k: f32(jnp.stack(pr.states[k]))
            # the sums over steps and batch of dG's gates and (GRU lbr=1) dgh: the bias gradients
            bias_sums = jax.ShapeDtypeStruct((d, (cfg.num_gates + lbr) * pr.hidden), jnp.float32)
            # dR, computed by the call where it can be (native_dr) from H_prev in place (GRU: Y;
            # LSTM: recomputed from the residuals), so the program holds no copy of H_prev for it
            gh, with_dr = cfg.num_gates * pr.hidden, native_dr(cfg, pr.batch, pr.hidden)
            dr = jax.ShapeDtypeStruct((d, gh, pr.hidden) if with_dr else (0,), jnp.float32)
            if cfg.cell == "gru":  # per_dir: (gy, a_zr, a_h, lin, h_prev); lbr=1: dgh of the h gate
                dgh = jax.ShapeDtypeStruct((d, pr.hidden, pr.length, pr.batch) if lbr else (0,), jnp.float32)
                shapes = [dgx, dgh, st, bias_sums, dr]
                args_ = [gy_tm, f32(res), time_major_y(y), init(0), r, carry[0]]
            else:  # per_dir: (gy, a_i, a_o, a_f, a_c, C, C_prev); H_prev from the residuals, not Y
                shapes = [dgx, st, st, bias_sums, dr]
                args_ = [gy_tm, f32(res), init(0), init(1), r, _peepholes(cfg, pr), carry[0], carry[1]]
            outs = jax.ffi.ffi_call(BACKWARD_TARGETS[cfg.cell], shapes, vmap_method="sequential")(
                *args_, clipped, **attrs)
            cd = pr.dtype
            steps = lambda a: jnp.transpose(a, (1, 2, 0)).astype(cd)  # [G·H, L, N] -> [L, N, G·H]
            if cfg.cell == "gru":
                first = tuple((outs[2][k].astype(cd),) for k in range(d))
                emits = tuple((steps(outs[0][k]), steps(outs[1][k]) if lbr else None) for k in range(d))
            else:
                first = tuple((outs[1][k].astype(cd), outs[2][k].astype(cd)) for k in range(d))
                emits = tuple((steps(outs[0][k]), None) for k in range(d))
            sums = tuple((outs[-2][k, :gh].astype(cd), outs[-2][k, gh:].astype(cd) if lbr else None) for k in range(d))
            rgrads = tuple(outs[-1][k].astype(cd) for k in range(d)) if with_dr else None
            return first, emits, sums, rgrads

        return reference.backward(cfg, primals, y, res, cts, recurrence=recurrence)

    return jax.vmap(one) if ensemble else one
