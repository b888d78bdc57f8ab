"""jaxgru.gru / jaxgru.lstm against onnxruntime one-node models, over every attribute."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from oracles import ort_run, random_case, seed_of

from jaxgru._src.activations import NAMES, lookup

TAKES_ALPHA = [n for n in NAMES if lookup(n).takes_alpha]
TAKES_BETA = [n for n in NAMES if lookup(n).takes_beta]
DIRECTIONS = ("forward", "reverse", "bidirectional")


def _activation_attrs(rng, cell, d, offset):
    """Different activations per direction, cycling through all 11, alpha/beta explicit."""
    per_dir = 2 if cell == "gru" else 3
    names = [NAMES[(offset + k) % len(NAMES)] for k in range(per_dir * d)]
    attrs = {"activations": names}
    n_alpha = sum(n in TAKES_ALPHA for n in names)
    n_beta = sum(n in TAKES_BETA for n in names)
    if n_alpha:
        attrs["activation_alpha"] = [float(v) for v in rng.uniform(0.2, 0.9, n_alpha)]
    if n_beta:
        attrs["activation_beta"] = [float(v) for v in rng.uniform(0.2, 0.9, n_beta)]
    return attrs


def _variants(cell):
    """(id, options) pairs covering every attribute ONNX defines."""
    out = []
    flags = [{"linear_before_reset": 0}, {"linear_before_reset": 1}] if cell == "gru" else [
        {}, {"peep": True}, {"input_forget": 1}, {"peep": True, "input_forget": 1}]
    for k, (direction, flag) in enumerate(itertools.product(DIRECTIONS, flags)):
        base = dict(direction=direction, **flag)
        fid = "-".join(f"{a}{int(b)}" for a, b in flag.items())
        out += [
            (f"{direction}-{fid}-plain", dict(base)),
            (f"{direction}-{fid}-states-ragged", dict(base, h0=True, c0=cell == "lstm", lens=[5, 2, 0])),
            (f"{direction}-{fid}-clip", dict(base, clip=0.6, scale=1.5, lens=[5, 5, 3], h0=True)),
            (f"{direction}-{fid}-activations", dict(base, acts=3 * k, scale=0.35)),
            (f"{direction}-{fid}-activations-ragged",
             dict(base, acts=3 * k + 5, lens=[1, 4, 5], bias=False, scale=0.35)),
        ]
    return out


def _case(cell, opts, seed):
    rng = np.random.default_rng(seed)
    opts = dict(opts)
    acts = opts.pop("acts", None)
    d = 2 if opts.get("direction") == "bidirectional" else 1
    if acts is not None:
        opts.update(_activation_attrs(rng, cell, d, acts))
    return random_case(rng, cell, L=5, N=3, I=4, H=6, **opts)


def _assert_matches_ort(case, outs, layout):
    ref = ort_run(case)
    outs = [np.asarray(o) for o in outs]
    if layout == 1:  # [N, L, D, H] -> [L, D, N, H]; [N, D, H] -> [D, N, H]
        outs = [np.transpose(outs[0], (1, 2, 0, 3))] + [np.swapaxes(o, 0, 1) for o in outs[1:]]
    empty = np.flatnonzero(case.lens == 0) if case.lens is not None else []
    for i, (got, want) in enumerate(zip(outs, ref)):
        if i > 0 and len(empty):
            # Documented difference: for length 0 jaxgru keeps the initial state, ORT gives 0.
            init = case.h0 if i == 1 else case.c0
            expect = np.zeros_like(got[:, empty]) if init is None else init[:, empty]
            np.testing.assert_allclose(got[:, empty], expect, rtol=0, atol=0)
            keep = np.setdiff1d(np.arange(got.shape[1]), empty)
            got, want = got[:, keep], want[:, keep]
        # unbounded activations (Relu, Affine, ...) can grow the state: tolerance scales with it
        scale = max(1.0, float(np.abs(want).max(initial=0.0)))
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * scale, err_msg=f"output {i}")


@pytest.mark.parametrize("layout", [0, 1])
@pytest.mark.parametrize(("vid", "opts"), _variants("gru"), ids=[v[0] for v in _variants("gru")])
def test_gru_matches_onnxruntime(vid, opts, layout):
    case = _case("gru", opts, seed=seed_of(vid))
    _assert_matches_ort(case, case.run(layout), layout)


@pytest.mark.parametrize("layout", [0, 1])
@pytest.mark.parametrize(("vid", "opts"), _variants("lstm"), ids=[v[0] for v in _variants("lstm")])
def test_lstm_matches_onnxruntime(vid, opts, layout):
    case = _case("lstm", opts, seed=seed_of(vid))
    _assert_matches_ort(case, case.run(layout), layout)


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_every_activation_appears_in_the_matrix(cell):
    """Guard against the matrix above silently losing coverage."""
    seen = set()
    for _, opts in _variants(cell):
        if "acts" in opts:
            d = 2 if opts["direction"] == "bidirectional" else 1
            rng = np.random.default_rng(0)
            seen.update(_activation_attrs(rng, cell, d, opts["acts"])["activations"])
    assert seen == set(NAMES)


@pytest.mark.parametrize(
    ("name", "alpha", "beta"),
    [("LeakyRelu", None, None), ("HardSigmoid", None, None), ("Elu", None, None),
     # ORT defaults these to 0; jaxgru follows the ONNX operators (alpha=1, beta=0 / 1).
     ("Affine", [1.0], [0.0]), ("ThresholdedRelu", [1.0], None), ("ScaledTanh", [1.0], [1.0])],
)
def test_activation_defaults(name, alpha, beta):
    """Missing alpha/beta take the ONNX defaults: compare with ORT given those values."""
    rng = np.random.default_rng(7)
    case = random_case(rng, "gru", activations=[name, "Tanh"])
    ours = case.run()
    if alpha is not None:
        case.attrs["activation_alpha"] = alpha
    if beta is not None:
        case.attrs["activation_beta"] = beta
    ref = ort_run(case)
    for got, want in zip(ours, ref):
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-5)


def test_names_are_case_insensitive():
    rng = np.random.default_rng(3)
    case = random_case(rng, "lstm", activations=["sigmoid", "TANH", "Softsign"])
    ours = case.run()
    case.attrs["activations"] = ["Sigmoid", "Tanh", "Softsign"]
    for got, want in zip(ours, ort_run(case)):
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-5)
