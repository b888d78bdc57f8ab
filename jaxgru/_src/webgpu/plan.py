"""Shapes, the choice of recurrence variant, and the split of a call into device-sized chunks.

No device objects here: everything is a function of the call's shape and the device limits.

Variant rule (``variant="auto"``): *persistent* when it fits (the H4 = ceil(H/4) invocations of
one batch-row block fit in a workgroup and two copies of its h fit in workgroup memory) and the
per-step work is small (``H <= PERSISTENT_MAX_HIDDEN`` and ``N·D·H <= PERSISTENT_MAX_STATE``);
otherwise *tiled* when the stepwise dispatch has fewer workgroups than the device's target
(``target-workgroups``: about two per compute unit, see :func:`target_workgroups`) and the tiled
plan has more; *stepwise* otherwise. The persistent thresholds were set on lavapipe (software
Vulkan, 2 cores) and must be re-tuned on a GPU, as must the tiled rule.

Tiled plan (:func:`tiling`): a step's h·Rᵀ is a GEMM [N, H] x [H, G·H]; a workgroup owns ``TR``
batch rows x ``TU`` vec4s of hidden units (all G gates of them, so the gate math stays local) of
one direction, stages its rows of h through workgroup memory ``KT4`` vec4s of k at a time, and
reads only its units' columns of R. ``KS`` invocations split each output's k sum (reduced with
subgroup shuffles where the device has them, else in workgroup memory). Among the tilings the
limits allow, the planner takes the one that reaches the target (or the most workgroups short
of it) with the least L2 traffic per step (R read ceil(N/TR) times + h read ceil(H4/TU) times).
"""

from __future__ import annotations

import dataclasses
import functools

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
# Input projection: the workgroup-memory tiled GEMM (xproj_tiled: XM rows x XN4 vec4 columns,
# XK deep, 4 x 4 per invocation) where the call fills at least one tile (L·N >= XM rows and
# G·H4 >= XN4 vec4 columns) on a device with more than XPROJ_TILED_MIN_TARGET target workgroups;
# below that, or on a CPU driver, the register-blocked xproj (see docs/wgsl.md for lavapipe).
XPROJ_TILE = {"XM": 64, "XN4": 16, "XK": 16}
XPROJ_TILED_MIN_TARGET = 1
# Invocations per workgroup of the weight-layout (prep) kernels.
PREP_WORKGROUP = 64

# Tiled: invocations per workgroup are chosen near this (two warps / one wavefront) ...
TILED_TARGET_INVOCATIONS = 64
# ... and at most this (the WebGPU default limit of invocations per workgroup).
TILED_MAX_INVOCATIONS = 256
# Largest batch rows per tiled workgroup, k-split factor, and vec4s of k per staged h tile.
TILED_MAX_ROWS = 64
TILED_MAX_SPLIT = 64
TILED_KT4 = 8
# Workgroups a dispatch should have to fill the device, by adapter type: ~2 per compute unit of
# a large discrete GPU (an H200 has 132 SMs), fewer for integrated and virtual GPUs. A CPU
# driver (lavapipe: one workgroup per thread, barriers costly) gets 1, so that auto never picks
# tiled there: on lavapipe (2 cores) tiled lost 1.1-2.3x to stepwise at small shapes and was
# level at N=64 H=512 (docs/wgsl.md). Unknown types: TARGET_WORKGROUPS_OTHER.
TARGET_WORKGROUPS = {"DiscreteGPU": 256, "IntegratedGPU": 64, "VirtualGPU": 64, "CPU": 1}
TARGET_WORKGROUPS_OTHER = 64

VARIANTS = ("auto", "persistent", "stepwise", "tiled")
# Storage buffers bound by the recurrence kernels (the WebGPU default limit is 8).
STORAGE_BUFFERS = 8

_L_BIND = "max-storage-buffer-binding-size"
_L_BUFFER = "max-buffer-size"
_L_WGMEM = "max-compute-workgroup-storage-size"
_L_INVOC = "max-compute-invocations-per-workgroup"
_L_SIZE_X = "max-compute-workgroup-size-x"
_L_GRID = "max-compute-workgroups-per-dimension"
_L_STORAGE = "max-storage-buffers-per-shader-stage"
# Not a WebGPU limit: the planner's target number of workgroups per step dispatch, carried with
# the limits (a field of LIMIT_PROFILES; for a device, target_workgroups(adapter type)).
TARGET = "target-workgroups"
# Nor this: 1 where the device has the feature `subgroup` (the tiled kernels' k-split sums then
# use subgroup shuffles, see wgsl/tile_reduce_sg.wgsl), else 0.
SUBGROUPS = "subgroups"


def target_of(limits: dict[str, int]) -> int:
    """The target workgroups carried with ``limits`` (a discrete GPU's when absent)."""
    return limits.get(TARGET, TARGET_WORKGROUPS["DiscreteGPU"])


def target_workgroups(adapter_type: str) -> int:
    """The workgroups per dispatch that fill an adapter of ``adapter_type`` (TARGET_WORKGROUPS)."""
    return TARGET_WORKGROUPS.get(adapter_type, TARGET_WORKGROUPS_OTHER)


@dataclasses.dataclass(frozen=True)
class Geometry:
    """Sizes of one ensemble member's call (before chunking) and of its device buffers.

    Attributes:
      cell, layout: from the call.
      L, N, I, H, D: steps, batch, input size, hidden size, directions.
      itemsize: bytes per element of ``ST`` (x, weights, outputs): 2 for f16 storage, else 4.
      K: residual blocks of H per step (GRU lbr=0: 3, lbr=1: 4, LSTM: 5); 0 without residuals.
      r_itemsize: bytes per element of R's device copy ``rt`` (0: ``itemsize``; 2 with R in f16).
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
    r_itemsize: int = 0
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

    def fixed_bytes(self) -> dict[str, int]:
        """Bytes of a per-row buffer of :meth:`row_bytes` that do not grow with the batch (the
        backward keeps its weights beside rows in one buffer); none in the forward's."""
        return {}

    def row_grids(self, max_dim: int) -> dict[str, tuple[int, int]]:
        """Per kind of dispatch whose grid grows with the batch: (invocations per batch row, the
        invocations a grid within ``max_dim`` workgroups per dimension allows)."""
        per_row = max(self.D * self.H4, self.D * -(-self.L // 4) * self.G * self.H4)  # recurrence, xproj
        return {"recurrence": (per_row, max_dim * max_dim * STEPWISE_WORKGROUP)}

    def weight_bytes(self) -> dict[str, int]:
        """Bytes of the device copies of the weights (an LSTM's projt shares rt's buffer)."""
        D, I, G, HP, s = self.D, self.I, self.G, self.HP, self.itemsize  # noqa: E741
        rs = self.r_itemsize or s
        projt = D * HP * self.PP * rs if self.P else 0
        return {
            "wt": D * I * G * HP * s, "rt": D * self.PP * G * HP * rs + projt, "xb": D * G * HP * 4,
            "pr": D * 3 * HP * 4,
        }

    @property
    def projt_offset(self) -> int:
        """vec4 offset of projt in the rt buffer (after rt [D, PP, G, H4])."""
        return self.D * self.PP * self.G * self.H4


def geometry(cfg: RNNConfig, x_shape: tuple[int, ...], hidden: int, residuals: bool, itemsize: int,
             r_itemsize: int = 0, proj_size: int = 0) -> Geometry:
    """The :class:`Geometry` of a call from x's shape (one member), the hidden and projection sizes."""
    L, N = (x_shape[0], x_shape[1]) if cfg.layout == 0 else (x_shape[1], x_shape[0])
    k = spec(cfg.cell).residuals(cfg) if residuals else 0
    return Geometry(cfg.cell, cfg.layout, L, N, x_shape[2], hidden, cfg.num_directions, itemsize, k, r_itemsize,
                    proj_size)


R_STORAGES = ("auto", "f32", "f16")


def module_storage(storage: str, requested: str, has_f16: bool) -> str:
    """The module storage key (``shaders.STORAGES``) of a call: R in f16 where asked for and the
    device has ``shader-f16`` (accumulation stays f32), else R in the storage type.

    Args:
      storage: "f32" or "f16", the storage of x, weights and outputs.
      requested: "auto" (R as the storage), "f32" or "f16" (R in f16: halves R's memory and the
        L2 traffic of the recurrence; rounds R to f16, ~1e-3 relative error).
      has_f16: whether the device has ``shader-f16``.

    Raises:
      ValueError: an unknown ``requested``.
    """
    if requested not in R_STORAGES:
        raise ValueError(f"jaxgru wgsl: r_storage must be one of {R_STORAGES}; got {requested!r}.")
    if storage == "f32" and requested == "f16" and has_f16:
        return "f32+r16"
    return storage


@dataclasses.dataclass(frozen=True)
class Plan:
    """How a call runs.

    Attributes:
      variant: "persistent", "stepwise" or "tiled".
      nb: batch rows per invocation.
      bpw: batch rows per workgroup (persistent only, else 0).
      chunks: batch ranges [n0, n1) run as separate jobs (all in one command buffer).
      segments: steps ranges [t0, t1) of the persistent dispatches, or one per step.
      tile: the tiled variant's :class:`Tiling` (else None).
      xproj: the input projection's entry point, "xproj" or "xproj_tiled".
      subgroups: the tiled kernels sum k splits with subgroup operations (tile_reduce_sg.wgsl).
    """

    variant: str
    nb: int
    bpw: int
    chunks: tuple[tuple[int, int], ...]
    segments: tuple[tuple[int, int], ...]
    tile: Tiling | None = None
    xproj: str = "xproj"
    subgroups: bool = False


def xproj_entry(geo: Geometry, limits: dict[str, int], n: int) -> str:
    """The input projection's entry point for chunks of ``n`` rows (see ``XPROJ_TILE``)."""
    t = XPROJ_TILE
    invocations = t["XM"] // 4 * t["XN4"]
    shared = 4 * t["XM"] * t["XK"] + 16 * t["XK"] * t["XN4"]
    fits = invocations <= min(limits[_L_INVOC], limits[_L_SIZE_X]) and shared <= limits[_L_WGMEM]
    rows, cols4 = geo.L * n, geo.G * geo.H4
    full = rows >= t["XM"] and cols4 >= t["XN4"] and geo.I > 0
    return "xproj_tiled" if fits and full and target_of(limits) > XPROJ_TILED_MIN_TARGET else "xproj"


def xproj_workgroups(geo: Geometry, n: int, entry: str) -> int:
    """Workgroups of the input projection of ``n`` batch rows."""
    m, c4 = geo.L * n, geo.G * geo.H4
    if entry == "xproj_tiled":
        return geo.D * -(-m // XPROJ_TILE["XM"]) * -(-c4 // XPROJ_TILE["XN4"])
    return -(-(geo.D * -(-m // 4) * c4) // XPROJ_WORKGROUP)


@dataclasses.dataclass(frozen=True)
class Tiling:
    """How the tiled step kernels split one step's work (see the module docstring).

    Attributes:
      rows: TR, batch rows per workgroup (a multiple of ``nb``).
      units4: TU, vec4s of hidden units per workgroup.
      nb: batch rows per invocation.
      split: KS, invocations sharing one output's k sum.
      kt4: vec4s of k per staged tile of h (a multiple of ``split``).
      n: the batch rows it was planned for (the largest chunk).
    """

    rows: int
    units4: int
    nb: int
    split: int
    kt4: int
    n: int

    @property
    def invocations(self) -> int:
        return self.split * self.rows // self.nb * self.units4

    def shared_vec4s(self, gates: int) -> int:
        """Workgroup memory in vec4s: the staged h tile, or the split partials."""
        return max(self.rows * self.kt4, self.split * self.rows * self.units4 * gates)

    def workgroups(self, geo: Geometry, n: int | None = None) -> int:
        """Workgroups of one step dispatch for ``n`` batch rows (default: those planned for)."""
        n = self.n if n is None else n
        return geo.D * -(-n // self.rows) * -(-geo.H4 // self.units4)

    def traffic(self, geo: Geometry, phases: int) -> int:
        """Bytes read from L2 per step by every workgroup: its slice of R and its rows of h."""
        r_bytes = geo.weight_bytes()["rt"]
        h_bytes = geo.D * self.n * geo.HP * 4
        return -(-self.n // self.rows) * r_bytes + phases * -(-geo.H4 // self.units4) * h_bytes


def _pow2(limit: int) -> list[int]:
    """1, 2, 4, ... up to ``limit``."""
    return [1 << i for i in range(max(1, limit).bit_length()) if 1 << i <= max(1, limit)]


def tiling(geo: Geometry, limits: dict[str, int], n: int | None = None) -> Tiling | None:
    """The tiled plan for ``n`` batch rows (default N), or None when no tiling fits the limits.

    Reaches ``limits["target-workgroups"]`` workgroups per step dispatch where the shape allows
    it (else the most it allows) with the least L2 traffic per step; ties go to invocations
    nearest ``TILED_TARGET_INVOCATIONS``, fewer k splits, more rows per invocation.
    """
    # the search costs milliseconds of Python: one per shape and limits (every call plans)
    return _tiling(geo, tuple(sorted(limits.items())), geo.N if n is None else n)


@functools.lru_cache(maxsize=256)
def _tiling(geo: Geometry, limit_items: tuple[tuple[str, int], ...], n: int) -> Tiling | None:
    limits = dict(limit_items)
    target = target_of(limits)
    max_inv = min(limits[_L_INVOC], limits[_L_SIZE_X], TILED_MAX_INVOCATIONS)
    wg_vec4s = limits[_L_WGMEM] // 16
    phases = 2 if geo.cell == "gru" else 1  # an upper bound of the h reads (GRU lbr=0)
    best, best_key = None, None
    for nb in _pow2(min(ROWS_PER_INVOCATION, n)):
        for rows in [nb * r for r in _pow2(max(1, TILED_MAX_ROWS // nb))]:
            if rows > max(nb, 2 * n - 1):  # beyond the batch (rounded up to a power of two)
                continue
            for units4 in _pow2(2 * geo.H4 - 1):
                for split in _pow2(min(TILED_MAX_SPLIT, geo.H4)):
                    t = Tiling(rows, units4, nb, split, max(TILED_KT4, split), n)
                    if t.invocations > max_inv or t.shared_vec4s(geo.G) > wg_vec4s:
                        continue
                    inv = t.invocations
                    key = (-min(t.workgroups(geo), target), t.traffic(geo, phases),
                           abs(inv.bit_length() - TILED_TARGET_INVOCATIONS.bit_length()), split, -nb)
                    if best_key is None or key < best_key:
                        best, best_key = t, key
    return best


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


def stepwise_workgroups(geo: Geometry, n: int, nb: int) -> int:
    """Workgroups of one stepwise dispatch for ``n`` batch rows."""
    return -(-(geo.D * -(-n // nb) * geo.H4) // STEPWISE_WORKGROUP)


def choose_variant(geo: Geometry, limits: dict[str, int], variant: str) -> tuple[str, int, int]:
    """(variant, rows per invocation, rows per workgroup or 0) for a call.

    Raises:
      ValueError: ``variant="persistent"`` or ``"tiled"`` where it cannot run, or an unknown
        variant.
    """
    if variant not in VARIANTS:
        raise ValueError(f"jaxgru wgsl: variant must be one of {VARIANTS}; got {variant!r}.")
    if variant == "tiled" and geo.P:
        raise ValueError(f"jaxgru wgsl: the tiled kernels have no projection; got proj_size={geo.P}. "
                         "Use variant='stepwise' or 'auto'.")
    if variant in ("auto", "tiled"):
        tile = tiling(geo, limits) if not geo.P else None  # a projected LSTM is not tiled (no proj step)
        if variant == "tiled" and tile is None:
            raise ValueError(
                f"jaxgru wgsl: the tiled kernel cannot run hidden_size={geo.H}: no tiling fits "
                f"{_L_WGMEM}={limits[_L_WGMEM]} and {_L_INVOC}={limits[_L_INVOC]}."
            )
        if variant == "tiled":
            assert tile is not None
            return "tiled", tile.nb, 0
    else:
        tile = None
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
    nb = rows_per_invocation(geo)
    if variant == "auto" and tile is not None:
        stepwise = stepwise_workgroups(geo, geo.N, nb)
        # the stepwise dispatch leaves the device underfilled and tiling fills more of it
        if stepwise < target_of(limits) and tile.workgroups(geo) > stepwise:
            return "tiled", tile.nb, 0
    return "stepwise", nb, 0


def grid2d(workgroups: int, max_dim: int) -> tuple[int, int]:
    """A (x, y) grid of at least ``workgroups`` workgroups with x <= ``max_dim``.

    The kernels linearise (x, y) and skip invocations past the end; the planner keeps y within
    ``max_dim`` too.
    """
    gx = max(1, min(workgroups, max_dim))
    return gx, max(1, -(-workgroups // gx))


def _max_rows(geo: Geometry, limits: dict[str, int], variant: str, bpw: int) -> int:
    """Largest batch chunk every device limit allows; raises naming the limit when < 1.

    Reads the buffers and grids from ``geo`` (:meth:`Geometry.row_bytes`, ``fixed_bytes``,
    ``weight_bytes``, ``row_grids``): the forward's, or a subclass's (tangent, backward).
    """
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
    fixed = geo.fixed_bytes()
    for name, per_row in geo.row_bytes().items():
        room = cap - fixed.get(name, 0)
        if per_row > room:
            beside = f" (plus {fixed[name]} bytes per call)" if name in fixed else ""
            raise ValueError(
                f"jaxgru wgsl: one batch row of the {name} buffer needs {per_row} bytes{beside}, more than "
                f"the device limit {limit_name}={limit}; shorten the sequence or use backend='xla'."
            )
        if per_row:  # 0 when input_size is 0: x takes no room
            rows = min(rows, room // per_row)
    max_dim = limits[_L_GRID]
    for per_row_threads, grid_threads in geo.row_grids(max_dim).values():
        if per_row_threads > grid_threads:
            raise ValueError(
                f"jaxgru wgsl: one batch row needs more workgroups than {_L_GRID}={max_dim} allows."
            )
        rows = min(rows, grid_threads // per_row_threads)
    if variant == "persistent":
        rows = min(rows, max_dim * bpw)
    return max(1, rows)


def batch_chunks(geo: Geometry, limits: dict[str, int], variant: str = "stepwise", bpw: int = 0
                 ) -> tuple[tuple[int, int], ...]:
    """Balanced batch ranges [n0, n1) covering ``geo.N``, each within every device limit.

    Args:
      geo: the call's geometry (its buffers and grids: the forward's or a subclass's).
      limits: device limits (hyphenated names), already lowered by any override.
      variant, bpw: the recurrence variant and its rows per workgroup (persistent: the grid
        holds ``max_dim·bpw`` rows).

    Raises:
      ValueError: a single batch row (or the weights) beyond a device limit.
    """
    rows = _max_rows(geo, limits, variant, bpw)
    count = -(-geo.N // rows)
    size = -(-geo.N // count)  # balanced chunks
    return tuple((n0, min(geo.N, n0 + size)) for n0 in range(0, geo.N, size))


def make_plan(geo: Geometry, limits: dict[str, int], variant: str) -> Plan:
    """Variant, rows per workgroup, batch chunks and step segments of a call.

    Args:
      geo: its geometry (one member).
      limits: device limits (hyphenated names), already lowered by any override.
      variant: "auto", "persistent", "stepwise" or "tiled".

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
    chunks = batch_chunks(geo, limits, variant, bpw)
    size = chunks[0][1] - chunks[0][0]  # the largest
    step = PERSISTENT_SEGMENT_STEPS if variant == "persistent" else 1
    segments = tuple((t0, min(geo.L, t0 + step)) for t0 in range(0, geo.L, step))
    tile = None
    if variant == "tiled":  # planned for the largest chunk
        tile = tiling(geo, limits, size)
        assert tile is not None
        nb = tile.nb
    subgroups = tile is not None and tile.split > 1 and bool(limits.get(SUBGROUPS, 0))
    return Plan(variant, nb, bpw, chunks, segments, tile, xproj_entry(geo, limits, size), subgroups)


# --------------------------------------------------------------------------------------
# the plan as figures, for a shape and a limit profile (no device needed)
# --------------------------------------------------------------------------------------
# Limits of a discrete GPU as WebGPU implementations report them (Chrome/Dawn and wgpu-native on
# NVIDIA/AMD Vulkan; WebGPU caps workgroup memory at 32 KiB), for planning without the GPU.
LIMIT_PROFILES: dict[str, dict[str, int]] = {
    "discrete-gpu": {
        _L_BIND: 2_147_483_644, _L_BUFFER: 2_147_483_648, _L_WGMEM: 32_768, _L_INVOC: 1024, _L_SIZE_X: 1024,
        _L_GRID: 65_535, _L_STORAGE: 10, TARGET: TARGET_WORKGROUPS["DiscreteGPU"], SUBGROUPS: 1,
    },
    "webgpu-default": {  # the WebGPU spec's defaults: what a device gets without asking for more
        _L_BIND: 134_217_728, _L_BUFFER: 268_435_456, _L_WGMEM: 16_384, _L_INVOC: 256, _L_SIZE_X: 256,
        _L_GRID: 65_535, _L_STORAGE: 8, TARGET: TARGET_WORKGROUPS["IntegratedGPU"], SUBGROUPS: 0,
    },
}


def recurrence_entries(cfg: RNNConfig, variant: str) -> list[str]:
    """The recurrence's entry points of one step (stepwise, tiled) or segment (persistent), in order."""
    if variant == "persistent":
        return [f"{cfg.cell}_persistent"]
    tiled = "_tiled" if variant == "tiled" else ""
    if cfg.cell == "gru" and not cfg.linear_before_reset:
        return [f"gru{tiled}_gates_zr", f"gru{tiled}_step"]  # r ⊙ h needs all of r before the h-gate
    if cfg.cell == "lstm" and cfg.proj:
        return ["lstm_step", "lstm_proj"]  # proj·(o ⊙ h(c)) needs all of o ⊙ h(c)
    return [f"{cfg.cell}{tiled}_step"]


def recurrence_kernel(cfg: RNNConfig, p: Plan) -> str:
    """The kernel (``shaders.FAMILY``) of a plan's recurrence."""
    if p.variant == "tiled":
        return f"{cfg.cell}_tiled_sg" if p.subgroups else f"{cfg.cell}_tiled"
    return cfg.cell


def describe(cfg: RNNConfig, geo: Geometry, limits: dict[str, int], variant: str = "auto") -> dict[str, object]:
    """What the planner chooses for one member of a call, in figures.

    Returns:
      ``variant``, ``rows_per_invocation``, ``rows_per_workgroup`` (persistent, tiled),
      ``units_per_workgroup`` and ``k_split`` (tiled, else 0), ``subgroups`` (tiled k splits
      summed with subgroup operations), ``chunks``,
      ``dispatches`` (per call: 4 prep + per chunk the projection and the recurrence),
      ``recurrence_dispatches_per_step`` (0 for persistent: one dispatch runs many steps),
      ``workgroups_per_step_dispatch`` and ``invocations_per_workgroup`` of the recurrence,
      ``target_workgroups``, ``xproj`` (the projection's entry point) and ``xproj_workgroups``,
      ``r_storage`` ("f32" or "f16"), ``r_bytes`` (the device copy of R) and ``r_bytes_read_per_step``
      (every workgroup reads its slice of R: all of it per block of rows for stepwise and
      persistent, per block of TR rows for tiled).
    """
    p = make_plan(geo, limits, variant)
    n = max(hi - lo for lo, hi in p.chunks) if p.chunks else 0
    phases = len(recurrence_entries(cfg, p.variant))
    r_bytes = geo.weight_bytes()["rt"]
    rows, units, split = p.bpw, 0, 0
    if p.variant == "persistent":
        workgroups = -(-n // p.bpw) * geo.D
        invocations = p.bpw // p.nb * geo.H4
        recur = len(p.segments)
        per_step = 0
        blocks = sum(-(-(hi - lo) // p.nb) for lo, hi in p.chunks)
    elif p.variant == "tiled":
        assert p.tile is not None
        workgroups = p.tile.workgroups(geo)
        invocations = p.tile.invocations
        rows, units, split = p.tile.rows, 4 * p.tile.units4, p.tile.split
        recur = geo.L * phases
        per_step = phases
        blocks = sum(-(-(hi - lo) // p.tile.rows) for lo, hi in p.chunks)
    else:
        workgroups = stepwise_workgroups(geo, n, p.nb)
        invocations = STEPWISE_WORKGROUP
        recur = geo.L * phases
        per_step = phases
        blocks = sum(-(-(hi - lo) // p.nb) for lo, hi in p.chunks)
    return {
        "variant": p.variant,
        "rows_per_invocation": p.nb,
        "rows_per_workgroup": rows,
        "units_per_workgroup": units,
        "k_split": split,
        "chunks": len(p.chunks),
        "dispatches": 4 + len(p.chunks) * (1 + recur),
        "recurrence_dispatches_per_step": per_step,
        "workgroups_per_step_dispatch": workgroups,
        "invocations_per_workgroup": invocations,
        "target_workgroups": target_of(limits),
        "subgroups": p.subgroups,
        "xproj": p.xproj,
        "xproj_workgroups": xproj_workgroups(geo, n, p.xproj),
        "r_storage": "f16" if (geo.r_itemsize or geo.itemsize) == 2 else "f32",
        "r_bytes": r_bytes,
        "r_bytes_read_per_step": blocks * r_bytes,
    }


def plan_for(cell: str, *, seq_length: int, batch: int, input_size: int, hidden_size: int,
             num_directions: int = 1, linear_before_reset: bool = False, storage: str = "f32",
             r_storage: str = "auto", variant: str = "auto", limits: str | dict[str, int] = "discrete-gpu"
             ) -> dict[str, object]:
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
      r_storage: "auto" (R as ``storage``), "f32", or "f16" (R's device copy in f16, as on a
        device with ``shader-f16``).
      variant: "auto", "persistent", "stepwise" or "tiled".
      limits: a profile of ``LIMIT_PROFILES`` ("discrete-gpu", "webgpu-default"), "device" for
        the current adapter's (creates the device), or a dict of limits (hyphenated names; the
        planner's ``"target-workgroups"`` among them, default that of a discrete GPU).

    Returns:
      The figures of :func:`describe`.

    Raises:
      ValueError: an unknown cell, storage, profile or variant, or a shape beyond the limits.

    Example:
      >>> import jaxgru.webgpu
      >>> p = jaxgru.webgpu.plan_for("gru", seq_length=128, batch=64, input_size=512, hidden_size=512)
      >>> p["variant"], p["workgroups_per_step_dispatch"]
      ('tiled', 256)
    """
    from jaxgru._src.options import make_config

    if storage not in ("f32", "f16"):
        raise ValueError(f"jaxgru.webgpu.plan_for: storage must be 'f32' or 'f16'; got {storage!r}.")
    if isinstance(limits, str):
        if limits == "device":
            from jaxgru._src.webgpu import runtime

            rt = runtime.runtime()
            limits = rt.plan_limits()
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
    r_size = 2 if module_storage(storage, r_storage, True) != "f32" else 4
    geo = geometry(cfg, (seq_length, batch, input_size), hidden_size, False, 2 if storage == "f16" else 4, r_size)
    return describe(cfg, geo, dict(limits), variant)
