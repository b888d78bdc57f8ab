"""The WGSL kernels (jaxgru._src.webgpu) against the lax.scan ground truth, reference.forward."""

from __future__ import annotations

import threading

import jax
import ml_dtypes
import numpy as np
import pytest
import wgsl_support

from jaxgru._src import reference
from jaxgru._src.activations import NAMES, Activation
from jaxgru._src.options import DEFAULT_ACTIVATIONS, RNNConfig
from jaxgru._src.webgpu import counters, kernels, plan, runtime, shaders

pytestmark = pytest.mark.wgsl

SIG, TANH = Activation("Sigmoid"), Activation("Tanh")
CELLS = {  # name -> (cell, extra options)
    "gru": ("gru", {}),
    "gru_lbr": ("gru", {"linear_before_reset": True}),
    "lstm": ("lstm", {"peepholes": True}),
}
VARIANTS = ("persistent", "stepwise", "tiled")
BOTH = ("persistent", "stepwise")  # a projected LSTM is never tiled
# Tilings (TR rows, TU unit vec4s, NB rows per invocation, KS k splits, KT4 k vec4s per staged
# tile) that reach every path of recurrence_tiled.wgsl at H = 37 (H4 = 10, several k tiles and a
# partial last one; unit and row tiles past the end; spare workgroups; k-split reduction).
# KS = 16 exceeds lavapipe's subgroup size (8): tile_reduce_sg sums runs of 8, then shares.
TILINGS = [(1, 1, 1, 1, 1), (4, 2, 2, 4, 4), (2, 1, 1, 8, 8), (8, 4, 4, 2, 2), (16, 8, 2, 1, 8), (1, 2, 1, 16, 16)]


@pytest.fixture(scope="module", autouse=True)
def adapter():
    return wgsl_support.require_adapter()


# --------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------
# Dispatches that lay out one member's weights on the device (prep.wgsl): wt, rt, xb, pr.
PREP = 4


def make_cfg(cell: str, direction: str = "forward", acts=None, **options) -> RNNConfig:
    d = 2 if direction == "bidirectional" else 1
    if acts is None:
        acts = tuple(tuple(Activation(n) for n in DEFAULT_ACTIVATIONS[cell]) for _ in range(d))
    # flags (linear_before_reset, input_forget) go through replace, which knows the option table
    return RNNConfig(cell=cell, direction=direction, activations=acts).replace(**options)


def make_operands(cfg: RNNConfig, L=5, N=4, I=3, H=6, *, lens=None, scale=0.5, seed=0,
                  dtype=np.float32, P=3) -> list[np.ndarray]:
    """Random operands (all present) in the user layout; lens all L unless given. With
    ``cfg.proj`` (an LSTM projection of P features): R [D, 4H, P], h0 of P, proj before lens."""
    rng = np.random.default_rng(seed)
    d, g = cfg.num_directions, cfg.num_gates
    f = lambda *s: (rng.standard_normal(s) * scale).astype(dtype)
    out = P if cfg.proj else H
    state = (d, N, H) if cfg.layout == 0 else (N, d, H)
    h_state = (d, N, out) if cfg.layout == 0 else (N, d, out)
    x = f(L, N, I) * 2 if cfg.layout == 0 else f(N, L, I) * 2
    ops = [x, f(d, g * H, I), f(d, g * H, out), f(d, 2 * g * H)]
    if cfg.cell == "lstm":
        ops.append(f(d, 3 * H))
    ops.append(f(*h_state))
    if cfg.cell == "lstm":
        ops.append(f(*state))
    if cfg.proj:
        ops.append(f(d, P, H))
    ops.append(np.full(N, L, np.int32) if lens is None else np.asarray(lens, np.int32))
    return ops


_REF = jax.jit(reference.forward, static_argnums=0, static_argnames="residuals")


def ref_forward(cfg: RNNConfig, ops, residuals: bool) -> list[np.ndarray]:
    return [np.asarray(a) for a in _REF(cfg, *ops, residuals=residuals)]


def assert_close(cfg, ops, got, want, *, residuals, atol=1e-5, rtol=1e-4):
    assert len(got) == len(want)
    n_out = len(want) - residuals
    for i in range(n_out):
        assert got[i].shape == want[i].shape and got[i].dtype == want[i].dtype, i
        np.testing.assert_allclose(got[i].astype(np.float32), want[i].astype(np.float32),
                                   atol=atol, rtol=rtol, err_msg=f"output {i}")
    if residuals:  # only valid steps (t < len) are specified
        res, ref = got[-1], want[-1]
        assert res.shape == ref.shape and res.dtype == np.float32
        length = res.shape[1]
        valid = np.arange(length)[:, None] < ops[-1][None, :]  # [L, N]
        np.testing.assert_allclose(res[:, valid], ref[:, valid], atol=atol, rtol=rtol, err_msg="res")


def check(cfg, ops, *, residuals=True, variant="auto", **tol) -> tuple[np.ndarray, ...]:
    got = kernels.forward(cfg, ops, residuals=residuals, variant=variant)
    assert_close(cfg, ops, got, ref_forward(cfg, ops, residuals), residuals=residuals, **tol)
    return got


def last() -> dict:
    return counters.counters()["last"]


# --------------------------------------------------------------------------------------
# the feature matrix
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("layout", [0, 1])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("kind", list(CELLS))
def test_matches_reference(kind, direction, layout):
    cell, opts = CELLS[kind]
    cfg = make_cfg(cell, direction, layout=layout, ragged=True, **opts)
    ops = make_operands(cfg, lens=[5, 0, 3, 1], seed=layout)
    for variant in VARIANTS:
        check(cfg, ops, variant=variant)
        assert last()["variant"] == variant


@pytest.mark.parametrize("name", NAMES)
def test_activation(name):
    """Every activation as f, g and h, with alpha/beta, and different per direction."""
    act = Activation(name, 0.7, 0.2)
    acts = ((act, TANH, act), (SIG, act, Activation("HardSigmoid", 0.3, 0.6)))
    cfg = make_cfg("lstm", "bidirectional", acts=acts)
    check(cfg, make_operands(cfg))


def test_gru_activations_per_direction():
    acts = ((Activation("HardSigmoid", 0.3, 0.4), Activation("Softsign")),
            (SIG, Activation("ScaledTanh", 1.5, 0.7)))
    cfg = make_cfg("gru", "bidirectional", acts=acts, linear_before_reset=True, layout=1)
    check(cfg, make_operands(cfg))


@pytest.mark.parametrize("kind", list(CELLS))
def test_clip(kind):
    cell, opts = CELLS[kind]
    cfg = make_cfg(cell, "bidirectional", clip=0.25, **opts)
    ops = make_operands(cfg, scale=2.0)
    check(cfg, ops)
    unclipped = kernels.forward(cfg.replace(clip=None), ops, residuals=False)
    assert not np.allclose(unclipped[0], kernels.forward(cfg, ops, residuals=False)[0])


@pytest.mark.parametrize("peepholes", [False, True])
@pytest.mark.parametrize("input_forget", [False, True])
def test_lstm_options(peepholes, input_forget):
    cfg = make_cfg("lstm", "reverse", peepholes=peepholes, input_forget=input_forget, ragged=True)
    check(cfg, make_operands(cfg, lens=[2, 5, 0, 4]))


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize(("kind", "shape"), [
    ("gru", (1, 1, 1, 1)),
    ("lstm", (1, 1, 1, 1)),
    ("gru_lbr", (7, 3, 5, 13)),
    ("lstm", (3, 11, 2, 17)),
])
def test_odd_shapes(kind, shape, variant):
    cell, opts = CELLS[kind]
    cfg = make_cfg(cell, "bidirectional", layout=shape[0] % 2, ragged=True, **opts)
    L, N = shape[:2]
    lens = np.arange(N) % (L + 1)
    check(cfg, make_operands(cfg, *shape, lens=lens), variant=variant)


@pytest.mark.parametrize("tile", TILINGS)
def test_tilings(tile, monkeypatch):
    """Each forced tiling against the reference (one cell kind each); k splits summed with
    subgroup operations where the adapter has them (test_subgroup_path_runs_on_lavapipe runs
    the workgroup-memory sums too)."""
    monkeypatch.setattr(plan, "tiling", lambda geo, limits, n=None: plan.Tiling(*tile, geo.N if n is None else n))
    kind = list(CELLS)[TILINGS.index(tile) % len(CELLS)]
    cell, opts = CELLS[kind]
    cfg = make_cfg(cell, "bidirectional", layout=TILINGS.index(tile) % 2, ragged=True, **opts)
    geo = plan.geometry(cfg, (4, 7, 3), 37, False, 4)
    check(cfg, make_operands(cfg, L=4, N=7, H=37, lens=[4, 0, 3, 1, 2, 4, 4]), variant="tiled")
    used = plan.make_plan(geo, runtime.runtime().plan_limits(), "tiled").subgroups
    assert used == ("subgroup" in runtime.runtime().features and tile[3] > 1)
    assert last()["variant"] == "tiled"
    assert last()["dispatches"] == PREP + 1 + 4 * len(plan.recurrence_entries(cfg, "tiled"))
    assert plan.Tiling(*tile, 7).workgroups(geo) == 2 * -(-7 // tile[0]) * -(-10 // tile[1])


@pytest.mark.parametrize(("kind", "layout", "storage"), [("gru", 0, "f32"), ("lstm", 1, "f32"), ("gru_lbr", 1, "f16")])
def test_tiled_projection(kind, layout, storage, monkeypatch):
    """xproj_tiled (forced: lavapipe's target keeps the register-blocked xproj) with partial row,
    column and k tiles (M = 65 rows, 18 or 24 vec4 columns, I = 19)."""
    if storage == "f16" and not runtime.runtime().has_f16:
        pytest.skip("the adapter has no shader-f16")
    monkeypatch.setattr(plan, "XPROJ_TILED_MIN_TARGET", 0)
    cell, opts = CELLS[kind]
    cfg = make_cfg(cell, "bidirectional", layout=layout, **opts)
    ops = make_operands(cfg, L=5, N=13, I=19, H=21, dtype=np.float16 if storage == "f16" else np.float32)
    tol = {"atol": 2e-3, "rtol": 2e-3} if storage == "f16" else {}
    check(cfg, ops, variant="stepwise", **tol)
    geo = plan.geometry(cfg, ops[0].shape, 21, True, 4)
    assert plan.make_plan(geo, runtime.runtime().plan_limits(), "stepwise").xproj == "xproj_tiled"


@pytest.mark.parametrize("tile", [TILINGS[2], TILINGS[5]])
def test_subgroup_path_runs_on_lavapipe(tile, monkeypatch):
    """The k-split sums take the subgroup shuffles (a butterfly, whose rounding differs from the
    sequential sum of the workgroup-memory path): KS = 8 all within one of lavapipe's subgroups of
    8; KS = 16 in two runs of 8, whose sums meet in workgroup memory."""
    info = runtime.runtime().adapter_info
    if "subgroup" not in runtime.runtime().features or "llvmpipe" not in info["name"]:
        pytest.skip("lavapipe's subgroup size (8) is assumed")
    monkeypatch.setattr(plan, "tiling", lambda geo, limits, n=None: plan.Tiling(*tile, geo.N if n is None else n))
    cfg = make_cfg("lstm", "bidirectional", ragged=True, peepholes=True)
    ops = make_operands(cfg, L=4, N=7, H=37, lens=[4, 0, 3, 1, 2, 4, 4])
    with_sg = check(cfg, ops, variant="tiled")
    with runtime.limit_override(subgroups=0):
        without = check(cfg, ops, variant="tiled")
    assert not all(np.array_equal(a, b) for a, b in zip(with_sg, without, strict=True))


def test_empty_sequence():
    cfg = make_cfg("lstm", "bidirectional")
    ops = make_operands(cfg, L=0)
    y, y_h, y_c, res = kernels.forward(cfg, ops, residuals=True)
    assert y.shape == (0, 2, 4, 6) and res.shape == (2, 0, 4, 30)
    np.testing.assert_array_equal(y_h, ops[5])
    np.testing.assert_array_equal(y_c, ops[6])


def test_weights_are_never_stale():
    cfg = make_cfg("gru", "forward")
    ops = make_operands(cfg)
    check(cfg, ops)
    ops[2] += 0.25  # same shape, same buffer, new values
    ops[3][0, :3] = 1.0
    check(cfg, ops)


# --------------------------------------------------------------------------------------
# dtypes
# --------------------------------------------------------------------------------------
def _cast(ops, dtype):
    return [a.astype(dtype) if a.dtype == np.float32 else a for a in ops]


@pytest.mark.parametrize("kind", ["gru", "lstm"])
def test_float16(kind):
    if not runtime.runtime().has_f16:
        pytest.skip("the adapter has no shader-f16")
    cell, opts = CELLS[kind]
    cfg = make_cfg(cell, "bidirectional", ragged=True, layout=1, **opts)
    ops = _cast(make_operands(cfg, lens=[5, 2, 0, 4]), np.float16)
    for variant in ("auto", "tiled"):
        check(cfg, ops, atol=2e-3, rtol=2e-3, variant=variant)


@pytest.mark.parametrize(("kind", "variant"), [("gru", "tiled"), ("gru_lbr", "persistent"), ("lstm", "stepwise")])
def test_r_in_float16(kind, variant):
    """r_storage="f16": f32 operands, R's device copy in f16, f32 accumulation. Oracle: the f32
    reference with R rounded to f16 (tight), and the unrounded reference (f16 tolerance)."""
    if not runtime.runtime().has_f16:
        pytest.skip("the adapter has no shader-f16")
    cell, opts = CELLS[kind]
    cfg = make_cfg(cell, "bidirectional", ragged=True, **opts)
    ops = make_operands(cfg, lens=[5, 0, 3, 1], H=9)
    got = kernels.forward(cfg, ops, residuals=True, variant=variant, r_storage="f16")
    rounded = [*ops[:2], ops[2].astype(np.float16).astype(np.float32), *ops[3:]]
    assert_close(cfg, ops, got, ref_forward(cfg, rounded, True), residuals=True)
    exact = ref_forward(cfg, ops, True)
    assert_close(cfg, ops, got, exact, residuals=True, atol=2e-3, rtol=2e-3)
    assert np.abs(got[1] - exact[1]).max() > 1e-5  # R really was rounded
    with pytest.raises(ValueError, match="r_storage must be one of"):
        kernels.forward(cfg, ops, residuals=False, r_storage="bf16")


def test_float16_without_shader_f16(monkeypatch):
    monkeypatch.setattr(runtime.runtime(), "has_f16", False)
    cfg = make_cfg("lstm", "forward")
    check(cfg, _cast(make_operands(cfg), np.float16), atol=2e-3, rtol=2e-3)


def test_bfloat16():
    cfg = make_cfg("gru", "bidirectional", linear_before_reset=True)
    got = check(cfg, _cast(make_operands(cfg), ml_dtypes.bfloat16), atol=2e-2, rtol=2e-2)
    assert got[0].dtype == ml_dtypes.bfloat16 and got[-1].dtype == np.float32


def test_float64_is_refused():
    cfg = make_cfg("gru")
    with pytest.raises(NotImplementedError, match="WGSL has no float64"):
        kernels.forward(cfg, _cast(make_operands(cfg), np.float64), residuals=False)


# --------------------------------------------------------------------------------------
# ensembles, chunks, limits, variants
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("variant", VARIANTS)
def test_ensemble(variant):
    cfg = make_cfg("lstm", "bidirectional", ragged=True, peepholes=True)
    members = [make_operands(cfg, lens=[5, 1, 0, 3], seed=s) for s in range(3)]
    stacked = [np.stack(parts) for parts in zip(*members, strict=True)]
    got = kernels.forward(cfg, stacked, residuals=True, ensemble=3, variant=variant)
    assert last()["submits"] == 1
    for e, ops in enumerate(members):
        assert_close(cfg, ops, [g[e] for g in got], ref_forward(cfg, ops, True), residuals=True)


@pytest.mark.parametrize("variant", VARIANTS)
def test_chunks_over_the_batch(variant):
    cfg = make_cfg("gru", "bidirectional", layout=0, ragged=True)
    ops = make_operands(cfg, N=7, lens=[5, 4, 0, 2, 5, 1, 3])
    geo = plan.geometry(cfg, ops[0].shape, 6, True, 4)
    limit = 2 * max(geo.row_bytes().values()) + 16  # two batch rows fit, three do not
    with runtime.limit_override(max_storage_buffer_binding_size=limit):
        check(cfg, ops, variant=variant)
        assert last()["submits"] == 1
        chunks = plan.make_plan(geo, runtime.runtime().plan_limits(), variant).chunks
    assert len(chunks) == 4 and chunks[0] == (0, 2) and chunks[-1][1] == 7


def test_workgroups_per_dimension_limit():
    cfg = make_cfg("lstm", "forward", layout=1)
    ops = make_operands(cfg, L=6, N=9, H=16)
    with runtime.limit_override(max_compute_workgroups_per_dimension=2):  # 2-D grids, chunks
        for variant in VARIANTS:
            check(cfg, ops, variant=variant)


def test_a_row_beyond_the_limit_is_refused():
    cfg = make_cfg("gru")
    with (runtime.limit_override(max_storage_buffer_binding_size=64),
          pytest.raises(ValueError, match="max-storage-buffer-binding-size")):
        kernels.forward(cfg, make_operands(cfg), residuals=False)


def test_persistent_needs_workgroup_memory():
    cfg = make_cfg("gru", "forward")
    ops = make_operands(cfg)
    with runtime.limit_override(max_compute_workgroup_storage_size=16):
        check(cfg, ops)  # auto falls back to stepwise
        assert last()["variant"] == "stepwise"
        with pytest.raises(ValueError, match="workgroup memory"):
            kernels.forward(cfg, ops, residuals=False, variant="persistent")


def test_persistent_segments(monkeypatch):
    monkeypatch.setattr(plan, "PERSISTENT_SEGMENT_STEPS", 2)
    cfg = make_cfg("gru", "reverse", ragged=True, linear_before_reset=True)
    check(cfg, make_operands(cfg, lens=[5, 3, 0, 4]), variant="persistent")
    assert last()["dispatches"] == PREP + 1 + 3  # weight layouts, projection, ceil(5 / 2) segments


def test_variant_rule():
    cfg = make_cfg("gru")
    limits = runtime.runtime().plan_limits()
    small = plan.geometry(cfg, (10, 2, 3), 32, False, 4)
    large = plan.geometry(cfg, (10, 2, 3), plan.PERSISTENT_MAX_HIDDEN + 4, False, 4)
    assert plan.choose_variant(small, limits, "auto")[0] == "persistent"
    # the target of the adapter's type: a CPU driver (lavapipe) gets 1, so auto keeps stepwise
    target = plan.target_workgroups(runtime.runtime().adapter_info["adapter_type"])
    assert limits[plan.TARGET] == target
    assert plan.choose_variant(large, limits, "auto")[0] == ("stepwise" if target == 1 else "tiled")
    assert plan.choose_variant(large, {**limits, plan.TARGET: 64}, "auto")[0] == "tiled"
    with pytest.raises(ValueError, match="variant"):
        plan.choose_variant(small, limits, "fast")


def test_tiled_needs_workgroup_memory():
    cfg = make_cfg("lstm", "forward")
    ops = make_operands(cfg)
    with runtime.limit_override(max_compute_workgroup_storage_size=16):  # not even one vec4 per gate
        with pytest.raises(ValueError, match="tiled kernel cannot run"):
            kernels.forward(cfg, ops, residuals=False, variant="tiled")
        check(cfg, ops)  # auto falls back to stepwise
        assert last()["variant"] == "stepwise"


# --------------------------------------------------------------------------------------
# runtime: threads, bounds, counters, device loss, adapters
# --------------------------------------------------------------------------------------
def test_concurrent_calls():
    cfg = make_cfg("lstm", "bidirectional", ragged=True)
    cases = [make_operands(cfg, lens=[5, 2, 4, 0], seed=s) for s in range(8)]
    want = [ref_forward(cfg, ops, False) for ops in cases]
    got, errors = [None] * len(cases), []

    def work(i):
        try:
            got[i] = kernels.forward(cfg, cases[i], residuals=False)
        except Exception as e:  # surfaced below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(cases))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for ops, g, w in zip(cases, got, want, strict=True):
        assert_close(cfg, ops, g, w, residuals=False)


def test_caches_stay_bounded(monkeypatch):
    rt = runtime.runtime()
    monkeypatch.setattr(rt.tables, "max_entries", 6)
    cfg = make_cfg("gru", "forward")
    ops = make_operands(cfg)
    kernels.forward(cfg, ops, residuals=True)
    before = runtime.stats()
    for i in range(20):
        ops[1] = ops[1] + np.float32(0.01 * i)  # new weights every call
        kernels.forward(cfg, ops, residuals=True)
    after = runtime.stats()
    assert after["pool"]["created"] == before["pool"]["created"]  # scratch buffers reused
    assert after["pool"]["idle_bytes"] <= after["pool"]["max_idle_bytes"]
    assert after["tables"]["entries"] <= 6
    assert after["pipelines"] == before["pipelines"]


def test_repeated_calls_reuse_their_bind_groups_and_see_new_values():
    """A repeated call binds the same pooled buffers, so its bind groups come from the cache
    (none is created), and every call still computes from the values it was given."""
    cfg = make_cfg("lstm", "bidirectional", peepholes=True)
    ops = make_operands(cfg)
    groups = runtime.runtime().groups
    check(cfg, ops)  # the first call creates them
    misses = groups.misses
    for i in range(3):
        ops = [a + np.float32(0.1 * (i + 1)) if a.dtype == np.float32 else a for a in ops]  # new x, weights, states
        check(cfg, ops)
    assert groups.misses == misses and groups.hits > 0


def test_a_destroyed_buffer_takes_its_bind_groups_with_it(monkeypatch):
    rt = runtime.runtime()
    cfg = make_cfg("gru", "forward")
    ops = make_operands(cfg, L=3, N=2, H=5)
    check(cfg, ops)
    monkeypatch.setattr(rt.pool, "max_idle_per_class", 0)  # every released buffer is destroyed
    entries = rt.groups.stats()["entries"]
    check(cfg, ops)
    # the call's scratch buffers were destroyed: none of their bind groups may stay cached
    # (binding a destroyed buffer is a validation error), and the next call builds new ones
    assert rt.groups.stats()["entries"] < entries
    monkeypatch.undo()
    misses = rt.groups.misses
    check(cfg, ops)
    assert rt.groups.misses > misses


def test_counters():
    cfg = make_cfg("gru", "bidirectional")  # lbr=0: two stepwise dispatches per step
    ops = make_operands(cfg, L=5, N=4, H=6)
    counters.reset_counters()
    for variant, dispatches in (("stepwise", PREP + 1 + 2 * 5), ("persistent", PREP + 1 + 1),
                                ("tiled", PREP + 1 + 2 * 5)):
        kernels.forward(cfg, ops, residuals=False, variant=variant)
        c = last()
        assert (c["submits"], c["passes"], c["dispatches"]) == (1, 1, dispatches)
        assert c["bytes_read_back"] >= (5 * 2 * 4 * 6 + 2 * 4 * 6) * 4
        assert c["bytes_uploaded"] >= ops[0].nbytes
    total = counters.counters()["total"]
    assert (total["calls"], total["submits"], total["dispatches"]) == (3, 3, 3 * PREP + 24)


def test_timestamps():
    rt = runtime.runtime()
    if not rt.has_timestamps:
        pytest.skip("the adapter has no timestamp-query")
    try:
        assert runtime.set_timestamps(True)
        cfg = make_cfg("gru")
        kernels.forward(cfg, make_operands(cfg), residuals=False)
        assert last()["gpu_ns"] > 0
    finally:
        runtime.set_timestamps(False)


def test_device_loss_recovery():
    cfg = make_cfg("lstm", "forward")
    ops = make_operands(cfg)
    check(cfg, ops)
    old = runtime.runtime()
    old.device.destroy()
    check(cfg, ops)
    assert runtime.runtime() is not old


def test_adapters(monkeypatch):
    infos = runtime.adapters_info()
    assert infos and sum(i["selected"] for i in infos) == 1
    assert {"name", "adapter_type", "backend_type", "vendor", "device", "features", "limits"} <= set(infos[0])
    assert runtime.is_available()
    monkeypatch.setenv(runtime.ADAPTER_ENV, str(infos[0]["index"]))
    assert runtime.adapter_status()["adapter"]["index"] == infos[0]["index"]
    monkeypatch.setenv(runtime.ADAPTER_ENV, "no-such-adapter-xyz")
    status = runtime.adapter_status()
    assert not status["available"]
    assert "apt-get install mesa-vulkan-drivers libvulkan1" in status["error"]
    assert "no-such-adapter-xyz" in status["error"]


def test_wgsl_files_carry_their_binding_table():
    for path in shaders.wgsl_dir().glob("*.wgsl"):
        head = path.read_text().split("\n\n")[0]
        assert head.startswith("//") and "Bindings" in head and "Overrides" in head, path.name


# --------------------------------------------------------------------------------------
# the projected LSTM (PyTorch's proj_size): stepwise lstm_step + lstm_proj per step; persistent
# with a barrier between the two phases of a step (when P4 <= H4)
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize(("direction", "layout", "H", "P"), [
    ("forward", 0, 6, 3), ("bidirectional", 1, 5, 2), ("reverse", 0, 7, 8), ("bidirectional", 0, 17, 6)])
def test_projection_matches_reference(direction, layout, H, P):
    cfg = make_cfg("lstm", direction, layout=layout, ragged=True, peepholes=True, proj=True)
    ops = make_operands(cfg, H=H, P=P, lens=[5, 0, 3, 1], seed=H)
    check(cfg, ops, variant="stepwise")
    # two recurrence dispatches per step, and one more prep (projt after rt)
    assert last()["dispatches"] == PREP + 1 + 1 + 2 * 5
    check(cfg, ops, variant="persistent")
    assert last()["dispatches"] == PREP + 1 + 1 + 1


def test_projection_options_and_float16():
    cfg = make_cfg("lstm", "bidirectional", input_forget=True, clip=0.3, proj=True)
    for variant in BOTH:
        check(cfg, make_operands(cfg, scale=2.0, P=2), variant=variant)
        check(cfg, _cast(make_operands(cfg, P=2), np.float16), variant=variant, atol=2e-3, rtol=2e-3)


def test_projection_wider_than_hidden_runs_stepwise():
    cfg = make_cfg("lstm", "bidirectional", proj=True, ragged=True)
    ops = make_operands(cfg, H=3, P=5, lens=[2, 5, 0, 4])
    check(cfg, ops)  # auto
    assert last()["variant"] == "stepwise"
    with pytest.raises(ValueError, match=r"persistent kernel projects to at most 4\*ceil\(hidden_size/4\)=4 "
                                         r"features; got proj_size=5"):
        kernels.forward(cfg, ops, residuals=False, variant="persistent")


def test_projection_persistent_segments_and_row_blocks(monkeypatch):
    monkeypatch.setattr(plan, "PERSISTENT_SEGMENT_STEPS", 2)  # h and c carried across dispatches
    cfg = make_cfg("lstm", "bidirectional", layout=1, ragged=True, proj=True)
    check(cfg, make_operands(cfg, N=9, H=8, P=3, lens=[5, 3, 0, 4, 1, 2, 5, 5, 1]), variant="persistent")
    assert last()["dispatches"] == PREP + 1 + 1 + 3
