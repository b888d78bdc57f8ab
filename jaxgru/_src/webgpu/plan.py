"""Shapes, the choice of recurrence variant, and the split of a call into device-sized chunks.

No device objects here: everything is a function of the call's shape and the device limits.

Variant rule (``variant="auto"``): *persistent* when it fits (the H4 = ceil(H/4) invocations of
one batch-row block fit in a workgroup and two copies of its h fit in workgroup memory) and the
per-step work is small (``H <= PERSISTENT_MAX_HIDDEN`` and ``N·D·H <= PERSISTENT_MAX_STATE``);
*stepwise* otherwise. The thresholds were set on lavapipe (software Vulkan, 2 cores) and must
be re-tuned on a GPU.
"""

from __future__ import annotations

import dataclasses

from jaxgru._src.cells import spec
from jaxgru._src.options import RNNConfig

# "auto" picks the persistent kernel up to this hidden size ...
PERSISTENT_MAX_HIDDEN = 128
# ... and this many state elements updated per step (N·D·H). Measured on lavapipe (2 cores,
# see docs/wgsl.md): persistent won 1.2-1.5x where H <= 64 and N·D·H <= 1024, was within
# 10% at H = 128 with N <= 8, and lost 10-30% above (N = 64; H >= 256 at any N). On a GPU
# barriers are cheap and dispatches are not: expect persistent to win far more widely there;
# re-tune both.
PERSISTENT_MAX_STATE = 1024
# Batch rows per invocation (register blocking: each load of R serves this many rows).
ROWS_PER_INVOCATION = 4
# Persistent: batch rows per workgroup are chosen to reach about this many invocations ...
PERSISTENT_TARGET_THREADS = 64
# ... while keeping at least this many workgroups (rows · directions permitting).
PERSISTENT_MIN_WORKGROUPS = 4
# Steps per persistent dispatch: bounds the length of one dispatch (GPU watchdogs).
PERSISTENT_SEGMENT_STEPS = 256
# Invocations per workgroup of the stepwise and input-projection kernels.
STEPWISE_WORKGROUP = 64
XPROJ_WORKGROUP = 64
# Invocations per workgroup of the weight-layout (prep) kernels.
PREP_WORKGROUP = 64

VARIANTS = ("auto", "persistent", "stepwise")
# Storage buffers bound by the recurrence kernels (the WebGPU default limit is 8).
STORAGE_BUFFERS = 8

_L_BIND = "max-storage-buffer-binding-size"
_L_BUFFER = "max-buffer-size"
_L_WGMEM = "max-compute-workgroup-storage-size"
_L_INVOC = "max-compute-invocations-per-workgroup"
_L_SIZE_X = "max-compute-workgroup-size-x"
_L_GRID = "max-compute-workgroups-per-dimension"
_L_STORAGE = "max-storage-buffers-per-shader-stage"


@dataclasses.dataclass(frozen=True)
class Geometry:
    """Sizes of one ensemble member's call (before chunking) and of its device buffers.

    Attributes:
      cell, layout: from the call.
      L, N, I, H, D: steps, batch, input size, hidden size, directions.
      itemsize: bytes per element of ``ST`` (x, weights, outputs): 2 for f16 storage, else 4.
      K: residual blocks of H per step (GRU lbr=0: 3, lbr=1: 4, LSTM: 5); 0 without residuals.
      P: an LSTM's projection size (features of h and Y; R is ``[D, G·H, P]``), 0 for none.
    """

    cell: str
    layout: int
    L: int
    N: int
    I: int  # noqa: E741
    H: int
    D: int
    itemsize: int
    K: int
    P: int = 0

    @property
    def out(self) -> int:
        """Features of h, Y and Y_h: P with a projection, else H."""
        return self.P or self.H

    @property
    def PP(self) -> int:
        """``out`` padded to vec4s: the rows of rt."""
        return 4 * -(-self.out // 4)

    @property
    def S4(self) -> int:
        """vec4s per row of a state slot (h has ``out`` features, c and m have H)."""
        return max(self.H4, self.PP // 4)

    @property
    def hs_rows(self) -> int:
        """Copies of a row's HP units in the persistent kernel's workgroup memory: h, h' (and m)."""
        return 3 if self.P else 2

    @property
    def final_widths(self) -> tuple[int, ...]:
        """Features of each final state: Y_h (``out``), then Y_c (H) for LSTM."""
        return (self.out, self.H)[: self.finals]

    @property
    def G(self) -> int:
        return spec(self.cell).num_gates

    @property
    def H4(self) -> int:
        return -(-self.H // 4)

    @property
    def HP(self) -> int:
        return 4 * self.H4

    @property
    def finals(self) -> int:
        """Final states returned: Y_h, and Y_c for LSTM."""
        return spec(self.cell).num_states

    @property
    def slots(self) -> int:
        """State slots (see recurrence_common.wgsl): 2 for h, then c or z and r⊙h (or c and m)."""
        return 3 if self.cell == "lstm" and not self.P else 4

    def row_bytes(self) -> dict[str, int]:
        """Bytes per batch row of every per-call device buffer."""
        L, I, H, D, s = self.L, self.I, self.H, self.D, self.itemsize  # noqa: E741
        out = {
            "x": L * I * s,
            "xp": D * L * self.G * self.HP * 4,
            "y": L * D * self.out * s,
            "yfinal": sum(self.final_widths) * D * s,
            "state": self.slots * D * 4 * self.S4 * 4,
        }
        if self.K:
            out["res"] = D * L * self.K * H * 4
        return out

    def weight_bytes(self) -> dict[str, int]:
        """Bytes of the device copies of the weights (an LSTM's projt shares rt's buffer)."""
        D, I, G, HP, s = self.D, self.I, self.G, self.HP, self.itemsize  # noqa: E741
        projt = D * HP * self.PP * s if self.P else 0
        return {
            "wt": D * I * G * HP * s, "rt": D * self.PP * G * HP * s + projt, "xb": D * G * HP * 4,
            "pr": D * 3 * HP * 4,
        }

    @property
    def projt_offset(self) -> int:
        """vec4 offset of projt in the rt buffer (after rt [D, PP, G, H4])."""
        return self.D * self.PP * self.G * self.H4


def geometry(cfg: RNNConfig, x_shape: tuple[int, ...], hidden: int, residuals: bool, itemsize: int,
             proj_size: int = 0) -> Geometry:
    """The :class:`Geometry` of a call from x's shape (one member), the hidden and projection sizes."""
    L, N = (x_shape[0], x_shape[1]) if cfg.layout == 0 else (x_shape[1], x_shape[0])
    k = spec(cfg.cell).residuals(cfg) if residuals else 0
    return Geometry(cfg.cell, cfg.layout, L, N, x_shape[2], hidden, cfg.num_directions, itemsize, k, proj_size)


@dataclasses.dataclass(frozen=True)
class Plan:
    """How a call runs.

    Attributes:
      variant: "persistent" or "stepwise".
      nb: batch rows per invocation.
      bpw: batch rows per workgroup (persistent only, else 0).
      chunks: batch ranges [n0, n1) run as separate jobs (all in one command buffer).
      segments: steps ranges [t0, t1) of the persistent dispatches, or one per step.
    """

    variant: str
    nb: int
    bpw: int
    chunks: tuple[tuple[int, int], ...]
    segments: tuple[tuple[int, int], ...]


def rows_per_invocation(geo: Geometry, limits: dict[str, int] | None = None) -> int:
    """NB: batch rows per invocation (each load of R serves NB rows)."""
    nb = max(1, min(ROWS_PER_INVOCATION, geo.N))
    if limits is not None:  # persistent: NB rows of h (and m) must fit in workgroup memory
        nb = max(1, min(nb, limits[_L_WGMEM] // (geo.hs_rows * geo.HP * 4)))
    return nb


def persistent_rows(geo: Geometry, limits: dict[str, int], nb: int) -> int:
    """Batch rows per persistent workgroup (a multiple of ``nb``), or 0 when it cannot run.

    One invocation per (NB rows, 4 hidden units); workgroup memory holds two copies of the
    workgroup's h (double buffer, or h and r⊙h for GRU lbr=0), and m = o⊙h(c) with an LSTM
    projection (whose P features must not outnumber H's invocations: ``PP <= HP``).
    """
    threads = min(limits[_L_INVOC], limits[_L_SIZE_X])
    block_mem = geo.hs_rows * nb * geo.HP * 4
    if threads < geo.H4 or block_mem > limits[_L_WGMEM] or geo.PP > geo.HP:
        return 0
    blocks_needed = -(-geo.N // nb)
    blocks = max(1, PERSISTENT_TARGET_THREADS // geo.H4)
    blocks = min(blocks, threads // geo.H4, limits[_L_WGMEM] // block_mem, blocks_needed)
    spread = max(1, -(-blocks_needed * geo.D // PERSISTENT_MIN_WORKGROUPS))
    return max(1, min(blocks, spread)) * nb


def choose_variant(geo: Geometry, limits: dict[str, int], variant: str) -> tuple[str, int, int]:
    """(variant, rows per invocation, rows per workgroup or 0) for a call.

    Raises:
      ValueError: ``variant="persistent"`` where it cannot run, or an unknown variant.
    """
    if variant not in VARIANTS:
        raise ValueError(f"jaxgru wgsl: variant must be one of {VARIANTS}; got {variant!r}.")
    nb = rows_per_invocation(geo, limits)
    if geo.PP > geo.HP:  # the persistent kernel projects with the gates' invocations (P4 <= H4)
        if variant == "persistent":
            raise ValueError(f"jaxgru wgsl: the persistent kernel projects to at most 4*ceil(hidden_size/4)="
                             f"{geo.HP} features; got proj_size={geo.P}. Use variant='stepwise' or 'auto'.")
        return "stepwise", rows_per_invocation(geo), 0
    bpw = persistent_rows(geo, limits, nb)
    if variant == "persistent" and not bpw:
        raise ValueError(
            f"jaxgru wgsl: the persistent kernel cannot run hidden_size={geo.H}: it needs "
            f"{geo.H4} invocations per workgroup (device: {min(limits[_L_INVOC], limits[_L_SIZE_X])}) "
            f"and {geo.hs_rows * geo.HP * 4} bytes of workgroup memory ({_L_WGMEM}={limits[_L_WGMEM]})."
        )
    small = geo.H <= PERSISTENT_MAX_HIDDEN and geo.N * geo.D * geo.H <= PERSISTENT_MAX_STATE
    if variant == "persistent" or (variant == "auto" and bpw and small):
        return "persistent", nb, bpw
    return "stepwise", rows_per_invocation(geo), 0


def grid2d(workgroups: int, max_dim: int) -> tuple[int, int]:
    """A (x, y) grid of at least ``workgroups`` workgroups with x <= ``max_dim``.

    The kernels linearise (x, y) and skip invocations past the end; the planner keeps y within
    ``max_dim`` too.
    """
    gx = max(1, min(workgroups, max_dim))
    return gx, max(1, -(-workgroups // gx))


def _max_rows(geo: Geometry, limits: dict[str, int], variant: str, bpw: int) -> int:
    """Largest batch chunk every device limit allows; raises naming the limit when < 1."""
    limit = min(limits[_L_BIND], limits[_L_BUFFER])
    limit_name = _L_BIND if limits[_L_BIND] <= limits[_L_BUFFER] else _L_BUFFER
    cap = limit - 4  # room to round byte sizes up to a multiple of 4
    for name, nbytes in geo.weight_bytes().items():
        if nbytes > cap:
            raise ValueError(
                f"jaxgru wgsl: the device copy of the weights ({name}, {nbytes} bytes) exceeds the "
                f"device limit {limit_name}={limit}; use backend='xla' for this size."
            )
    rows = geo.N
    for name, per_row in geo.row_bytes().items():
        if per_row > cap:
            raise ValueError(
                f"jaxgru wgsl: one batch row of the {name} buffer needs {per_row} bytes, more than "
                f"the device limit {limit_name}={limit}; shorten the sequence or use backend='xla'."
            )
        if per_row:  # 0 when input_size is 0: x takes no room
            rows = min(rows, cap // per_row)
    max_dim = limits[_L_GRID]
    grid_threads = max_dim * max_dim * STEPWISE_WORKGROUP
    per_row_threads = max(geo.D * geo.H4, geo.D * -(-geo.L // 4) * geo.G * geo.H4)
    if per_row_threads > grid_threads:
        raise ValueError(
            f"jaxgru wgsl: one batch row needs more workgroups than {_L_GRID}={max_dim} allows."
        )
    rows = min(rows, grid_threads // per_row_threads)
    if variant == "persistent":
        rows = min(rows, max_dim * bpw)
    return max(1, rows)


def make_plan(geo: Geometry, limits: dict[str, int], variant: str) -> Plan:
    """Variant, rows per workgroup, batch chunks and step segments of a call.

    Args:
      geo: its geometry (one member).
      limits: device limits (hyphenated names), already lowered by any override.
      variant: "auto", "persistent" or "stepwise".

    Raises:
      ValueError: a single batch row or the weights exceed a device limit, the device binds too
        few storage buffers, or an impossible forced variant.
    """
    if limits[_L_STORAGE] < STORAGE_BUFFERS:
        raise ValueError(
            f"jaxgru wgsl: the recurrence kernels bind {STORAGE_BUFFERS} storage buffers; the device "
            f"allows {_L_STORAGE}={limits[_L_STORAGE]}. Use backend='xla'."
        )
    variant, nb, bpw = choose_variant(geo, limits, variant)
    rows = _max_rows(geo, limits, variant, bpw)
    count = -(-geo.N // rows)
    size = -(-geo.N // count)  # balanced chunks
    chunks = tuple((n0, min(geo.N, n0 + size)) for n0 in range(0, geo.N, size))
    step = PERSISTENT_SEGMENT_STEPS if variant == "persistent" else 1
    segments = tuple((t0, min(geo.L, t0 + step)) for t0 in range(0, geo.L, step))
    return Plan(variant, nb, bpw, chunks, segments)


# --------------------------------------------------------------------------------------
# the plan as figures, for a shape and a limit profile (no device needed)
# --------------------------------------------------------------------------------------
# Limits of a discrete GPU as WebGPU implementations report them (Chrome/Dawn and wgpu-native on
# NVIDIA/AMD Vulkan; WebGPU caps workgroup memory at 32 KiB), for planning without the GPU.
LIMIT_PROFILES: dict[str, dict[str, int]] = {
    "discrete-gpu": {
        _L_BIND: 2_147_483_644, _L_BUFFER: 2_147_483_648, _L_WGMEM: 32_768, _L_INVOC: 1024, _L_SIZE_X: 1024,
        _L_GRID: 65_535, _L_STORAGE: 10,
    },
    "webgpu-default": {  # the WebGPU spec's defaults: what a device gets without asking for more
        _L_BIND: 134_217_728, _L_BUFFER: 268_435_456, _L_WGMEM: 16_384, _L_INVOC: 256, _L_SIZE_X: 256,
        _L_GRID: 65_535, _L_STORAGE: 8,
    },
}


def recurrence_entries(cfg: RNNConfig, variant: str) -> list[str]:
    """The recurrence's entry points of one step (stepwise) or segment (persistent), in order."""
    if variant == "persistent":
        return [f"{cfg.cell}_persistent"]
    if cfg.cell == "gru" and not cfg.linear_before_reset:
        return ["gru_gates_zr", "gru_step"]  # r ⊙ h needs all of r before the h-gate
    if cfg.cell == "lstm" and cfg.proj:
        return ["lstm_step", "lstm_proj"]  # proj·(o ⊙ h(c)) needs all of o ⊙ h(c)
    return [f"{cfg.cell}_step"]


def describe(cfg: RNNConfig, geo: Geometry, limits: dict[str, int], variant: str = "auto") -> dict[str, object]:
    """What the planner chooses for one member of a call, in figures.

    Returns:
      ``variant``, ``rows_per_invocation``, ``rows_per_workgroup`` (persistent), ``chunks``,
      ``dispatches`` (per call: 4 prep + per chunk the projection and the recurrence),
      ``recurrence_dispatches_per_step`` (0 for persistent: one dispatch runs many steps),
      ``workgroups_per_step_dispatch`` and ``invocations_per_workgroup`` of the recurrence,
      ``r_bytes`` (the device copy of R) and ``r_bytes_read_per_step`` (every block of rows reads
      all of R's columns of its direction each step).
    """
    p = make_plan(geo, limits, variant)
    n = max(hi - lo for lo, hi in p.chunks) if p.chunks else 0
    phases = len(recurrence_entries(cfg, p.variant))
    if p.variant == "persistent":
        workgroups = -(-n // p.bpw) * geo.D
        invocations = p.bpw // p.nb * geo.H4
        recur = len(p.segments)
        per_step = 0
    else:
        workgroups = -(-(geo.D * -(-n // p.nb) * geo.H4) // STEPWISE_WORKGROUP)
        invocations = STEPWISE_WORKGROUP
        recur = geo.L * phases
        per_step = phases
    r_bytes = geo.weight_bytes()["rt"]
    return {
        "variant": p.variant,
        "rows_per_invocation": p.nb,
        "rows_per_workgroup": p.bpw,
        "chunks": len(p.chunks),
        "dispatches": 4 + len(p.chunks) * (1 + recur),
        "recurrence_dispatches_per_step": per_step,
        "workgroups_per_step_dispatch": workgroups,
        "invocations_per_workgroup": invocations,
        "r_bytes": r_bytes,
        "r_bytes_read_per_step": sum(-(-(hi - lo) // p.nb) for lo, hi in p.chunks) * r_bytes,
    }


def plan_for(cell: str, *, seq_length: int, batch: int, input_size: int, hidden_size: int,
             num_directions: int = 1, linear_before_reset: bool = False, storage: str = "f32",
             variant: str = "auto", limits: str | dict[str, int] = "discrete-gpu") -> dict[str, object]:
    """The WGSL kernels' plan for a layer call, without running it (and without a GPU).

    Args:
      cell: "gru" or "lstm".
      seq_length: L, the number of steps.
      batch: N, the batch size.
      input_size: I, the input features.
      hidden_size: H, the hidden units.
      num_directions: 1, or 2 for a bidirectional layer.
      linear_before_reset: GRU only (lbr=0 takes two dispatches per step).
      storage: "f32" or "f16", the device element type of x, weights and outputs.
      variant: "auto", "persistent" or "stepwise".
      limits: a profile of ``LIMIT_PROFILES`` ("discrete-gpu", "webgpu-default"), "device" for
        the current adapter's (creates the device), or a dict of limits (hyphenated names).

    Returns:
      The figures of :func:`describe`.

    Raises:
      ValueError: an unknown cell, storage, profile or variant, or a shape beyond the limits.

    Example:
      >>> import jaxgru.webgpu
      >>> p = jaxgru.webgpu.plan_for("gru", seq_length=128, batch=64, input_size=512, hidden_size=512)
      >>> p["variant"], p["workgroups_per_step_dispatch"]
      ('stepwise', 32)
    """
    from jaxgru._src.options import make_config

    if storage not in ("f32", "f16"):
        raise ValueError(f"jaxgru.webgpu.plan_for: storage must be 'f32' or 'f16'; got {storage!r}.")
    if isinstance(limits, str):
        if limits == "device":
            from jaxgru._src.webgpu import runtime

            rt = runtime.runtime()
            limits = {name: rt.limit(name) for name in rt.limits}
        elif limits in LIMIT_PROFILES:
            limits = LIMIT_PROFILES[limits]
        else:
            raise ValueError(f"jaxgru.webgpu.plan_for: limits must be one of {(*LIMIT_PROFILES, 'device')} or a "
                             f"dict; got {limits!r}.")
    if num_directions not in (1, 2):
        raise ValueError(f"jaxgru.webgpu.plan_for: num_directions must be 1 or 2; got {num_directions!r}.")
    direction = "forward" if num_directions == 1 else "bidirectional"
    options = {"linear_before_reset": linear_before_reset} if cell == "gru" else {}
    cfg = make_config(cell, "jaxgru.webgpu.plan_for", direction=direction, **options)
    geo = geometry(cfg, (seq_length, batch, input_size), hidden_size, False, 2 if storage == "f16" else 4)
    return describe(cfg, geo, dict(limits), variant)
