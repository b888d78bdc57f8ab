"""Metamorphic properties (hypothesis): relations the ONNX semantics imply between calls."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from oracles import random_case

import jaxgru

shapes = st.fixed_dictionaries({
    "L": st.integers(1, 6), "N": st.integers(1, 4), "I": st.integers(1, 5), "H": st.integers(1, 5),
})
cells = st.sampled_from(["gru", "lstm"])
seeds = st.integers(0, 2**31 - 1)


def _kw(cell, rng):
    if cell == "gru":
        return {"linear_before_reset": int(rng.integers(2))}
    return {"input_forget": int(rng.integers(2)), "peep": bool(rng.integers(2))}


def _lens(rng, length, batch):
    return rng.integers(0, length + 1, batch).astype(np.int32)


@given(shape=shapes, cell=cells, seed=seeds)
def test_layout_1_is_transposed_layout_0(shape, cell, seed):
    rng = np.random.default_rng(seed)
    case = random_case(rng, cell, direction="bidirectional", h0=True, c0=cell == "lstm",
                       lens=_lens(rng, shape["L"], shape["N"]), **shape, **_kw(cell, rng))
    a, b = case.run(0), case.run(1)
    np.testing.assert_allclose(np.asarray(b[0]), np.transpose(np.asarray(a[0]), (2, 0, 1, 3)), atol=1e-6)
    for s0, s1 in zip(a[1:], b[1:]):
        np.testing.assert_allclose(np.asarray(s1), np.swapaxes(np.asarray(s0), 0, 1), atol=1e-6)


@given(shape=shapes, cell=cells, seed=seeds)
def test_ragged_sequence_equals_its_truncated_run(shape, cell, seed):
    """Sequence n with length len_n gives what a run on x[:len_n] alone gives."""
    rng = np.random.default_rng(seed)
    case = random_case(rng, cell, direction="bidirectional", h0=True, c0=cell == "lstm",
                       lens=_lens(rng, shape["L"], shape["N"]), **shape, **_kw(cell, rng))
    outs = [np.asarray(o) for o in case.run()]
    for n, length in enumerate(case.lens):
        fn = jaxgru.gru if cell == "gru" else jaxgru.lstm
        kw = {"direction": "bidirectional", "initial_h": case.h0[:, n : n + 1]}
        if cell == "lstm":
            kw.update(initial_c=case.c0[:, n : n + 1], input_forget=case.attrs.get("input_forget", 0))
        else:
            kw["linear_before_reset"] = case.attrs.get("linear_before_reset", 0)
        if length == 0:
            np.testing.assert_array_equal(outs[1][:, n], case.h0[:, n])
            continue
        ref = fn(case.params, case.x[:length, n : n + 1], **kw)
        np.testing.assert_allclose(outs[0][:length, :, n], np.asarray(ref[0])[:, :, 0], atol=2e-6)
        np.testing.assert_array_equal(outs[0][length:, :, n], 0)
        for s, r in zip(outs[1:], ref[1:]):
            np.testing.assert_allclose(s[:, n], np.asarray(r)[:, 0], atol=2e-6)


@given(shape=shapes, cell=cells, seed=seeds)
def test_bidirectional_is_forward_and_reverse(shape, cell, seed):
    rng = np.random.default_rng(seed)
    case = random_case(rng, cell, direction="bidirectional", h0=True, **shape, **_kw(cell, rng))
    both = case.run()
    fn = jaxgru.gru if cell == "gru" else jaxgru.lstm
    opts = {k: v for k, v in case.kwargs().items() if k not in ("direction", "initial_h")}
    for d, direction in enumerate(["forward", "reverse"]):
        p = type(case.params)(*[None if a is None else a[d : d + 1] for a in case.params])
        one = fn(p, case.x, direction=direction, initial_h=case.h0[d : d + 1], **opts)
        np.testing.assert_allclose(np.asarray(both[0])[:, d : d + 1], np.asarray(one[0]), atol=1e-6)
        np.testing.assert_allclose(np.asarray(both[1])[d : d + 1], np.asarray(one[1]), atol=1e-6)


@given(shape=shapes, cell=cells, seed=seeds)
def test_reverse_is_forward_on_reversed_input(shape, cell, seed):
    rng = np.random.default_rng(seed)
    case = random_case(rng, cell, direction="reverse", **shape, **_kw(cell, rng))
    rev = case.run()
    case.attrs["direction"] = "forward"
    x = case.x
    case.x = x[::-1].copy()
    fwd = case.run()
    np.testing.assert_allclose(np.asarray(rev[0]), np.asarray(fwd[0])[::-1], atol=1e-6)
    np.testing.assert_allclose(np.asarray(rev[1]), np.asarray(fwd[1]), atol=1e-6)


@given(clip=st.floats(0.05, 3.0), seed=seeds)
def test_huge_clip_is_no_clip_and_clip_bounds_gates(clip, seed):
    rng = np.random.default_rng(seed)
    case = random_case(rng, "gru", scale=2.0)
    free = case.run()
    np.testing.assert_allclose(np.asarray(jaxgru.gru(case.params, case.x, clip=1e30)[0]),
                               np.asarray(free[0]), atol=1e-6)
    # with Affine(1, 0) as g the candidate is the clipped pre-activation: |h| stays <= clip
    y, _ = jaxgru.gru(case.params, case.x, clip=clip, activations=["Sigmoid", "Affine"],
                      activation_alpha=[1.0], activation_beta=[0.0])
    assert float(jnp.abs(y).max()) <= clip * (1 + 1e-6)
