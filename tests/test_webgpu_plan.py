"""jaxgru.webgpu.plan_for: the kernels' plan as figures, checked by hand-computed occupancy and
R traffic, and against what a real call on the adapter records."""

from __future__ import annotations

import math

import numpy as np
import pytest
import wgsl_support

import jaxgru.webgpu
from jaxgru._src.options import make_config
from jaxgru._src.webgpu import counters, kernels, plan


@pytest.mark.parametrize(("cell", "gates", "phases"), [("gru", 3, 2), ("lstm", 4, 1)])
@pytest.mark.parametrize("batch", [1, 16, 64])
@pytest.mark.parametrize("hidden", [256, 512, 1024])
def test_stepwise_figures_on_a_discrete_gpu_profile(cell, gates, phases, batch, hidden):
    p = jaxgru.webgpu.plan_for(cell, seq_length=128, batch=batch, input_size=hidden, hidden_size=hidden,
                               variant="stepwise")
    assert p["variant"] == "stepwise"
    rows = min(4, batch)  # each invocation owns up to 4 batch rows x 4 hidden units
    invocations = math.ceil(batch / rows) * math.ceil(hidden / 4)
    assert p["workgroups_per_step_dispatch"] == math.ceil(invocations / 64)
    r_bytes = gates * hidden * hidden * 4  # hidden is a multiple of 4: no padding
    assert p["r_bytes"] == r_bytes
    assert p["r_bytes_read_per_step"] == math.ceil(batch / rows) * r_bytes
    assert p["recurrence_dispatches_per_step"] == phases
    assert p["dispatches"] == 4 + 1 + 128 * phases


@pytest.mark.parametrize(("cell", "gates", "phases"), [("gru", 3, 2), ("lstm", 4, 1)])
@pytest.mark.parametrize("batch", [1, 16, 64])
@pytest.mark.parametrize("hidden", [256, 512, 1024])
def test_tiled_figures_on_a_discrete_gpu_profile(cell, gates, phases, batch, hidden):
    p = jaxgru.webgpu.plan_for(cell, seq_length=128, batch=batch, input_size=hidden, hidden_size=hidden)
    step = jaxgru.webgpu.plan_for(cell, seq_length=128, batch=batch, input_size=hidden, hidden_size=hidden,
                                  variant="stepwise")
    target = plan.LIMIT_PROFILES["discrete-gpu"]["target-workgroups"]
    assert p["variant"] == "tiled" and p["target_workgroups"] == target == 256  # H > 128, stepwise underfills
    rows, units, nb, split = (p[k] for k in ("rows_per_workgroup", "units_per_workgroup", "rows_per_invocation",
                                             "k_split"))
    assert p["workgroups_per_step_dispatch"] == math.ceil(batch / rows) * math.ceil(hidden / units)
    # the target where the shape has that many (rows x 4-unit) tiles, else every tile its own
    assert p["workgroups_per_step_dispatch"] >= min(target, batch * hidden // 4)
    assert p["workgroups_per_step_dispatch"] > step["workgroups_per_step_dispatch"]
    assert p["invocations_per_workgroup"] == split * rows // nb * units // 4
    assert 32 <= p["invocations_per_workgroup"] <= 256
    r_bytes = gates * hidden * hidden * 4
    assert p["r_bytes_read_per_step"] == math.ceil(batch / rows) * r_bytes <= step["r_bytes_read_per_step"]
    assert p["recurrence_dispatches_per_step"] == phases and p["dispatches"] == 4 + 1 + 128 * phases


def test_tiled_reads_r_a_few_times_not_once_per_four_rows():
    """N=64 H=512: the stepwise dispatch has 32 workgroups and reads R 16 times a step."""
    for cell in ("gru", "lstm"):
        kw = {"seq_length": 128, "batch": 64, "input_size": 512, "hidden_size": 512}
        tiled, step = jaxgru.webgpu.plan_for(cell, **kw), jaxgru.webgpu.plan_for(cell, **kw, variant="stepwise")
        assert step["workgroups_per_step_dispatch"] == 32 and step["r_bytes_read_per_step"] == 16 * step["r_bytes"]
        assert tiled["workgroups_per_step_dispatch"] >= 256
        assert tiled["r_bytes_read_per_step"] <= 4 * tiled["r_bytes"]
        # a smaller target: fewer, larger tiles, R read at most twice (LSTM) / 4 times (GRU: h is read twice)
        half = {**plan.LIMIT_PROFILES["discrete-gpu"], "target-workgroups": 128}
        p = jaxgru.webgpu.plan_for(cell, **kw, limits=half)
        assert p["workgroups_per_step_dispatch"] >= 128
        assert p["r_bytes_read_per_step"] <= (2 if cell == "lstm" else 4) * p["r_bytes"]


@pytest.mark.parametrize(("limits", "large"), [
    ("discrete-gpu", "tiled"),   # target 256: a 32-workgroup stepwise dispatch underfills it
    ("webgpu-default", "tiled"),  # target 64
    ({**plan.LIMIT_PROFILES["discrete-gpu"], "target-workgroups": 1}, "stepwise"),  # a CPU driver (lavapipe)
    ({**plan.LIMIT_PROFILES["discrete-gpu"], "target-workgroups": 32}, "stepwise"),  # stepwise already fills it
])
def test_auto_choice_per_profile(limits, large):
    kw = {"seq_length": 16, "input_size": 8, "limits": limits}
    assert jaxgru.webgpu.plan_for("gru", batch=4, hidden_size=32, **kw)["variant"] == "persistent"
    for cell in ("gru", "lstm"):
        assert jaxgru.webgpu.plan_for(cell, batch=64, hidden_size=512, **kw)["variant"] == large
    assert plan.target_workgroups("CPU") == 1 and plan.target_workgroups("DiscreteGPU") == 256


def test_tiled_plan_respects_the_limits():
    small = {**plan.LIMIT_PROFILES["webgpu-default"], "max-compute-workgroup-storage-size": 2048,
             "max-compute-invocations-per-workgroup": 64}
    for n, h in ((64, 1024), (1, 256), (7, 37)):
        cfg = make_config("lstm", "t")
        geo = plan.geometry(cfg, (8, n, 8), h, False, 4)
        t = plan.tiling(geo, small)
        assert t is not None and t.invocations <= 64 and 16 * t.shared_vec4s(4) <= 2048
        assert t.rows % t.nb == 0 and t.kt4 % t.split == 0
    with pytest.raises(ValueError, match="tiled kernel cannot run"):
        jaxgru.webgpu.plan_for("gru", seq_length=4, batch=2, input_size=3, hidden_size=64, variant="tiled",
                               limits={**small, "max-compute-workgroup-storage-size": 16})


def test_projection_entry_per_shape_and_profile():
    kw = {"seq_length": 128, "input_size": 512, "hidden_size": 512}
    big = jaxgru.webgpu.plan_for("gru", batch=64, **kw)
    assert big["xproj"] == "xproj_tiled"  # 64 x 64 tiles: 128 row tiles x 24 column tiles
    assert big["xproj_workgroups"] == math.ceil(128 * 64 / 64) * math.ceil(3 * 128 / 16)
    # under one tile (L·N < 64 rows): the register-blocked kernel, 4 x 4 per invocation
    tiny = jaxgru.webgpu.plan_for("gru", seq_length=4, batch=8, input_size=16, hidden_size=64)
    assert tiny["xproj"] == "xproj" and tiny["xproj_workgroups"] == math.ceil(8 * 3 * 16 / 64)
    cpu = {**plan.LIMIT_PROFILES["discrete-gpu"], "target-workgroups": plan.target_workgroups("CPU")}
    assert jaxgru.webgpu.plan_for("gru", batch=64, **kw, limits=cpu)["xproj"] == "xproj"


def test_r_in_float16_halves_r_traffic():
    kw = {"seq_length": 128, "batch": 64, "input_size": 512, "hidden_size": 512}
    f32, r16 = jaxgru.webgpu.plan_for("lstm", **kw), jaxgru.webgpu.plan_for("lstm", **kw, r_storage="f16")
    assert (f32["r_storage"], r16["r_storage"]) == ("f32", "f16")
    assert r16["r_bytes"] == 4 * 512 * 512 * 2 == f32["r_bytes"] // 2
    assert r16["r_bytes_read_per_step"] <= f32["r_bytes_read_per_step"] // 2
    assert jaxgru.webgpu.plan_for("lstm", **kw, storage="f16")["r_storage"] == "f16"
    with pytest.raises(ValueError, match="r_storage must be one of"):
        jaxgru.webgpu.plan_for("lstm", **kw, r_storage="f8")


def test_profiles_and_bad_arguments():
    small = jaxgru.webgpu.plan_for("gru", seq_length=16, batch=4, input_size=16, hidden_size=32)
    assert small["variant"] == "persistent" and small["recurrence_dispatches_per_step"] == 0
    assert set(plan.LIMIT_PROFILES) >= {"discrete-gpu", "webgpu-default"}
    with pytest.raises(ValueError, match="limits must be one of"):
        jaxgru.webgpu.plan_for("gru", seq_length=4, batch=2, input_size=3, hidden_size=5, limits="tpu")
    with pytest.raises(ValueError, match="num_directions must be 1 or 2; got 3"):
        jaxgru.webgpu.plan_for("gru", seq_length=4, batch=2, input_size=3, hidden_size=5, num_directions=3)
    with pytest.raises(ValueError, match="storage must be 'f32' or 'f16'"):
        jaxgru.webgpu.plan_for("lstm", seq_length=4, batch=2, input_size=3, hidden_size=5, storage="f64")


@pytest.mark.wgsl
@pytest.mark.parametrize("variant", ["stepwise", "persistent", "tiled"])
@pytest.mark.parametrize(("cell", "lbr"), [("gru", False), ("gru", True), ("lstm", False)])
def test_plan_matches_what_a_call_records(cell, lbr, variant):
    wgsl_support.require_adapter()  # skips locally without one, fails under CI=true
    L, N, I, H = 5, 3, 4, 8
    p = jaxgru.webgpu.plan_for(cell, seq_length=L, batch=N, input_size=I, hidden_size=H, num_directions=2,
                               linear_before_reset=lbr, variant=variant, limits="device")
    g = 3 if cell == "gru" else 4
    rng = np.random.default_rng(0)
    f = lambda *s: rng.standard_normal(s).astype(np.float32) * 0.3
    ops = [f(L, N, I), f(2, g * H, I), f(2, g * H, H), f(2, 2 * g * H)]
    ops += [f(2, 3 * H), f(2, N, H), f(2, N, H)] if cell == "lstm" else [f(2, N, H)]
    ops.append(np.full(N, L, np.int32))
    options = {"linear_before_reset": lbr} if cell == "gru" else {}
    cfg = make_config(cell, "t", direction="bidirectional", backend="wgsl", **options)
    kernels.forward(cfg, ops, residuals=False, variant=variant)
    last = counters.counters()["last"]
    assert last["variant"] == p["variant"] == variant
    assert last["dispatches"] == p["dispatches"]
    assert plan.recurrence_entries(cfg, variant)[-1].startswith(cell)
