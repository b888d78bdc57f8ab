"""The lax.scan reference on its own: every loop layout it can pick computes the ONNX operator."""

from __future__ import annotations

import itertools

import jax
import numpy as np
import pytest
from oracles import ort_run, random_case

from jaxgru._src import api, reference

PLANS = list(itertools.product([False, True], [False, True]))  # (feature_major, hoist)
CONFIGS = [
    ("gru", dict(linear_before_reset=0, direction="bidirectional", lens=[5, 0, 2], h0=True, clip=0.8)),
    ("gru", dict(linear_before_reset=1, direction="reverse", activations=["HardSigmoid", "Softsign"])),
    ("gru", dict(linear_before_reset=1, direction="bidirectional",
                 activations=["Sigmoid", "Tanh", "LeakyRelu", "Elu"], activation_alpha=[0.2, 0.9])),
    ("lstm", dict(peep=True, direction="bidirectional", lens=[1, 5, 3], h0=True, c0=True)),
    ("lstm", dict(input_forget=1, peep=True, clip=0.5, activations=["Sigmoid", "Softplus", "ScaledTanh"],
                  activation_alpha=[0.9], activation_beta=[1.1])),
]


def _operands(case):
    d, hidden = case.w.shape[0], case.r.shape[-1]
    n = case.x.shape[1]
    zeros = lambda *s: np.zeros(s, np.float32)
    ops = [case.x, case.w, case.r, case.b if case.b is not None else zeros(d, 2 * case.w.shape[1])]
    if case.cell == "lstm":
        ops.append(case.p if case.p is not None else zeros(d, 3 * hidden))
    ops.append(case.h0 if case.h0 is not None else zeros(d, n, hidden))
    if case.cell == "lstm":
        ops.append(case.c0 if case.c0 is not None else zeros(d, n, hidden))
    ops.append(case.lens if case.lens is not None else np.full(n, case.x.shape[0], np.int32))
    return ops


@pytest.mark.parametrize("plan", PLANS, ids=[f"fm{int(a)}-hoist{int(b)}" for a, b in PLANS])
@pytest.mark.parametrize(("cell", "opts"), CONFIGS, ids=[f"{c}{i}" for i, (c, _) in enumerate(CONFIGS)])
def test_every_loop_layout_matches_onnxruntime(cell, opts, plan):
    rng = np.random.default_rng(42)
    case = random_case(rng, cell, N=3, **opts)
    kw = {k: v for k, v in case.kwargs().items() if k not in ("initial_h", "initial_c", "sequence_lens")}
    kw.setdefault("direction", "forward")
    cfg = api.make_config(cell, "t", ragged=case.lens is not None,
                          peepholes=cell == "lstm" and case.p is not None, backend="xla", **kw)
    outs = jax.jit(lambda *ops: reference.forward(cfg, *ops, plan=plan))(*_operands(case))
    ref = ort_run(case)
    empty = [] if case.lens is None else list(np.flatnonzero(case.lens == 0))
    for i, (got, want) in enumerate(zip(outs, ref)):
        got = np.asarray(got)
        if i and empty:  # documented: length 0 keeps the initial state (ORT: zeros)
            got = got.copy()
            got[:, empty] = 0
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=f"output {i}")


@pytest.mark.parametrize(("cell", "batch", "hidden", "want"), [
    ("gru", 1, 64, (True, True)), ("lstm", 1, 512, (True, True)), ("gru", 4, 128, (False, True)),
    ("gru", 16, 128, (False, True)), ("lstm", 64, 256, (False, True)), ("gru", 64, 1024, (True, False)),
    ("lstm", 16, 512, (True, True)), ("gru", 256, 128, (False, False)), ("lstm", 256, 256, (True, False))])
def test_plan_rules(cell, batch, hidden, want):
    """The measured choices (benchmarks/loop_layouts.py): residual runs are always batch-major."""
    assert reference.plan_for(cell, batch, hidden, residuals=False) == want
    assert reference.plan_for(cell, batch, hidden, residuals=True)[0] is False
