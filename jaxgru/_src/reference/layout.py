"""What the cells' reference steps share: operands prepared per direction, time order, the
loop's orientation, layout conversions and activation helpers.

Inside the reference every direction runs in *processing order*: step t of the reverse
direction reads x[len-1-t] of its sequence, so all directions share one loop and one mask
(t < len). Each direction keeps its own 2-D state and matmuls: on XLA:CPU that beats a batched
matmul over directions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp

from jaxgru._src.activations import Activation
from jaxgru._src.cells import spec
from jaxgru._src.options import RNNConfig

Array = jax.Array


def compute_dtype(dtype: Any) -> jnp.dtype:
    """float16/bfloat16 compute in float32; float32/float64 compute in themselves."""
    dtype = jnp.dtype(dtype)
    return jnp.dtype(jnp.float32) if dtype.itemsize < 4 else dtype


def unroll_for(length: int, batch: int, hidden: int) -> int:
    """The ``lax.scan`` unroll factor for a shape (see docs/performance.md)."""
    del length, batch, hidden
    return 1


# --------------------------------------------------------------------------------------
# activations
# --------------------------------------------------------------------------------------
def act(f: Activation, a: Array, clip: float | None) -> Array:
    """f(clip(a)): an activation at its (clipped) input."""
    return f(a if clip is None else jnp.clip(a, -clip, clip))


def act_d(f: Activation, a: Array, clip: float | None) -> tuple[Array, Array]:
    """f(clip(a)) and its derivative with respect to a (0 where the clip is active)."""
    return jax.jvp(lambda v: act(f, v, clip), (a,), (jnp.ones_like(a),))


# --------------------------------------------------------------------------------------
# reductions and splits
# --------------------------------------------------------------------------------------
def wgrad(a: Array, b: Array) -> Array:
    """Σ over steps and batch of aᵀ·b (a [L, N, G], b [L, N, K]) -> [G, K]: a weight gradient.

    Replicated when the batch axis is explicitly sharded (the contraction is an all-reduce).
    """
    mesh = jax.typeof(a).sharding.mesh
    explicit = any(t == jax.sharding.AxisType.Explicit for t in mesh.axis_types)
    out = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec()) if explicit else None
    return jnp.einsum("lng,lnk->gk", a, b, out_sharding=out)


def sum_ln(a: Array) -> Array:
    """Σ over steps and batch: a bias gradient."""
    return a.sum((0, 1))


def split(a: Array, k: int) -> list[Array]:
    """``a`` in ``k`` equal blocks of its last axis (gates)."""
    return jnp.split(a, k, axis=-1)


def before(first: Array, states: Array) -> Array:
    """The state before each step: ``first``, then ``states`` shifted by one (``[L, N, H]``;
    L = 0 stays empty)."""
    return jnp.concatenate([first[None], states], axis=0)[: states.shape[0]]


# --------------------------------------------------------------------------------------
# time order and masks
# --------------------------------------------------------------------------------------
class Time:
    """Conversions between time order and each direction's processing order, and the mask."""

    def __init__(self, cfg: RNNConfig, lens: Array, length: int) -> None:
        self.cfg = cfg
        self.mask: Array | None = None
        self.idx: Array | None = None
        if cfg.ragged:
            lens = jnp.clip(lens.astype(jnp.int32), 0, length)
            t = jnp.arange(length, dtype=jnp.int32)[:, None]
            valid = t < lens[None, :]
            self.mask = valid[..., None]  # [L, N, 1]
            # t -> len-1-t inside the sequence, identity on padding: an involution
            self.idx = jnp.where(valid, lens[None, :] - 1 - t, t)  # [L, N]

    def proc(self, a: Array, d: int) -> Array:
        """Reorder ``a [L, N, ...]`` between time order and direction d's processing order."""
        if not self.cfg.reversed_dirs[d]:
            return a
        if self.idx is None:
            return jnp.flip(a, 0)
        idx = self.idx.reshape(self.idx.shape + (1,) * (a.ndim - 2))
        return jnp.take_along_axis(a, idx, axis=0)

    @staticmethod
    def select(new: Array, old: Array, m: Array | None) -> Array:
        """``new`` on valid steps, ``old`` past a sequence's end."""
        return new if m is None else jnp.where(m, new, old)

    @staticmethod
    def zero(v: Array, m: Array | None) -> Array:
        """``v`` on valid steps, 0 past a sequence's end."""
        return v if m is None else jnp.where(m, v, jnp.zeros_like(v))


# --------------------------------------------------------------------------------------
# layouts
# --------------------------------------------------------------------------------------
def time_major(cfg: RNNConfig, a: Array) -> Array:
    """x (or its tangent) in the user layout -> ``[L, N, I]``; the same swap both ways."""
    return a if cfg.layout == 0 else jnp.swapaxes(a, 0, 1)


def states(cfg: RNNConfig, s: Array) -> Array:
    """A state in the user layout <-> ``[D, N, H]`` (the same swap both ways)."""
    return s if cfg.layout == 0 else jnp.swapaxes(s, 0, 1)


def y_dir(cfg: RNNConfig, y: Array, d: int) -> Array:
    """Direction d of Y (user layout) as ``[L, N, H]`` in time order."""
    return y[:, d] if cfg.layout == 0 else jnp.swapaxes(y[:, :, d], 0, 1)


def assemble_y(cfg: RNNConfig, ys: Sequence[Array]) -> Array:
    """Per-direction time-order ``[L, N, H]`` -> Y in the user layout."""
    return jnp.stack(ys, axis=1) if cfg.layout == 0 else jnp.stack([jnp.swapaxes(y, 0, 1) for y in ys], 2)


def biases(cfg: RNNConfig, b: Array, hidden: int) -> list[tuple[Array, Array | None]]:
    """Per direction: (bias of X·Wᵀ [1, G], bias of H·Rᵀ [1, G] or None).

    The recurrent bias is folded into the input bias except for GRU with linear_before_reset,
    whose h-gate needs r ⊙ (H·Rhᵀ + Rbh).
    """
    g = cfg.num_gates * hidden
    out: list[tuple[Array, Array | None]] = []
    for bd in b:
        wb, rb = bd[None, :g], bd[None, g:]
        out.append((wb, rb) if cfg.cell == "gru" and cfg.linear_before_reset else (wb + rb, None))
    return out


class Prepared:
    """Operands cast to the compute dtype, split per direction, time-major, processing order.

    Attributes:
      x: per direction, ``[L, N, I]`` in processing order.
      w, r: per direction, ``[G·H, I]`` / ``[G·H, H]``; wt, rt their transposes (prepared once).
      bias: per direction, see :func:`biases`.
      states: per state (h[, c]), per direction, the initial state ``[N, H]``.
      peep: per direction, the peepholes (i, o, f) each ``[1, H]``, or None.
      proj: per direction, the output projection ``[P, H]`` (LSTM with ``cfg.proj``), or None.
      hidden: the cell's H (R's rows per gate); the states h and Y have ``r``'s last axis.
    """

    def __init__(self, cfg: RNNConfig, operands: Sequence[Array]) -> None:
        ops = spec(cfg.cell).unpack(operands)
        self.dtype = cdt = compute_dtype(ops.x.dtype)
        cast = lambda a: a.astype(cdt)
        xt = time_major(cfg, cast(ops.x))
        w, r, b = cast(ops.w), cast(ops.r), cast(ops.b)
        p = None if ops.p is None else cast(ops.p)
        self.length, self.batch = xt.shape[0], xt.shape[1]
        self.hidden = r.shape[1] // cfg.num_gates
        self.dirs = range(cfg.num_directions)
        self.tm = Time(cfg, ops.lens, self.length)
        self.x = [self.tm.proc(xt, d) for d in self.dirs]
        self.w, self.r = list(w), list(r)
        self.wt = [a.T for a in w]  # the layouts the loop body consumes, prepared once
        self.rt = [a.T for a in r]
        self.bias = biases(cfg, b, self.hidden)
        self.states = [list(states(cfg, cast(s))) for s in (ops.h0, ops.c0) if s is not None]
        self.peep = [split(pd[None], 3) for pd in p] if (p is not None and cfg.peepholes) else None
        self.proj = list(cast(ops.proj)) if cfg.proj else None
        self.unroll = unroll_for(self.length, self.batch, self.hidden)

    def h_prev(self, cfg: RNNConfig, y: Array, d: int) -> Array:
        """Direction d's hidden state before each step, processing order ``[L, N, H]`` (P)."""
        return before(self.states[0][d], self.tm.proc(y_dir(cfg, y.astype(self.dtype), d), d))


# --------------------------------------------------------------------------------------
# the forward loop's orientation
# --------------------------------------------------------------------------------------
def plan_for(cell: str, batch: int, hidden: int, residuals: bool) -> tuple[bool, bool]:
    """(feature_major, hoist) for the forward loop of a shape; measured on XLA:CPU.

    * hoist: X·Wᵀ for all steps as one GEMM per gate before the loop (each gate its own
      array: a scan input sliced at lane offsets inside a fusion compiles to slow code).
      Wins up to batch 64 (H <= 256), where re-reading W every step dominates; loses at 256.
    * feature_major: the state is ``[H, N]`` and the matmul is ``R·hᵀ``, so XLA packs the small
      state instead of the weights on every step. Wins at batch 1-2, for H >= 512, and at
      large batch with H >= 256.
    The thresholds come from benchmarks/loop_layouts.py (results/loop_layouts.json).
    The autodiff residuals are batch-major (the tangent/backward loops are).
    """
    if not isinstance(batch, int):  # a symbolic batch (jax.export): plan for a large one
        batch = 64
    del cell  # the same rules measured best for GRU and LSTM
    hoist = batch <= 16 or (hidden <= 256 and batch <= 64)
    feature_major = not residuals and (batch <= 2 or hidden >= 512 or (batch >= 128 and hidden >= 256))
    return feature_major, hoist


class Orient:
    """Batch-major (``[N, H]``) or feature-major (``[H, N]``) per-step arrays."""

    def __init__(self, feature_major: bool) -> None:
        self.fm = feature_major
        self.axis = 0 if feature_major else -1

    def gates(self, a: Array, k: int) -> list[Array]:
        return jnp.split(a, k, axis=self.axis)

    def weight(self, m: Array) -> Array:
        """A weight block m [K, H] in the layout ``mm`` consumes: prepared once, outside the loop
        (a transpose inside the loop body is redone on every step)."""
        return m if self.fm else m.T

    def mm(self, h: Array, m: Array) -> Array:
        """h·mᵀ for a prepared weight block: ``m @ h`` feature-major, ``h @ m`` batch-major."""
        return m @ h if self.fm else h @ m

    def vec(self, v: Array) -> Array:
        """A per-feature vector [K] shaped to broadcast over the batch."""
        return v[:, None] if self.fm else v[None, :]

    def state(self, s: Array) -> Array:
        """[N, H] <-> this orientation (the same transpose both ways)."""
        return s.T if self.fm else s

    def seq(self, a: Array) -> Array:
        """[L, N, K] <-> [L, K, N] when feature-major."""
        return jnp.swapaxes(a, 1, 2) if self.fm else a
