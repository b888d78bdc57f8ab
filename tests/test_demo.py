"""The demo (python -m jaxgru demo) in-process with tiny settings: it learns, it is reproducible,
and it reports the backends' agreement."""

from __future__ import annotations

import dataclasses
import math
import sys

import jax
import numpy as np
import pytest
import wgsl_support

from jaxgru._src import demo

TINY = demo.DemoConfig(steps=40, length=16, batch=8, hidden=32, backend="xla", seed=3, sample_length=30,
                       learning_rate=1e-2, eval_batch=2, timing_calls=2)


def _run(cfg):
    lines = []
    # optax's Adam mixes int32 step counts with floats: JAX's default promotion, as the CLI runs
    with jax.numpy_dtype_promotion("standard"):
        result = demo.run(cfg, out=lines.append, progress=False)
    return result, "\n".join(lines)


@pytest.fixture(scope="module")
def runs():
    """Two runs with the same seed."""
    return _run(TINY), _run(TINY)


def test_vocabulary_round_trip():
    text = "def f(x):\n    return {'a': x ~ 1}  # “quotes” é"
    tokens = demo.encode(text)
    assert tokens.dtype == np.int32 and tokens.max() < len(demo.VOCAB)
    assert demo.decode(tokens) == text.replace("“", "?").replace("”", "?").replace("é", "?")


def test_text_ships_with_python():
    text = demo.load_text()
    assert len(text) > 100_000 and "lambda" in text


def test_loss_goes_down(runs):
    (result, report), _ = runs
    losses = result.losses
    assert len(losses) == TINY.steps and all(np.isfinite(losses))
    # at initialisation the model is close to uniform over the alphabet: loss ~ ln(V)
    assert abs(losses[0] - math.log(len(demo.VOCAB))) < 0.15, losses[0]
    assert np.mean(losses[-5:]) < losses[0] - 0.8, losses
    assert f"loss: {losses[0]:.3f} at step 1" in report


def test_same_seed_same_curve_and_sample(runs):
    (first, report), (second, _) = runs
    assert first.losses == second.losses
    assert first.sample == second.sample
    assert first.sample.startswith(TINY.prompt)
    assert len(first.sample) == len(TINY.prompt) + TINY.sample_length
    assert set(first.sample) <= set(demo.VOCAB)
    assert first.sample in report


def test_other_seed_other_sample(runs):
    (first, _), _ = runs
    other, _ = _run(dataclasses.replace(TINY, seed=TINY.seed + 1))
    assert other.losses != first.losses and other.sample != first.sample


@pytest.mark.wgsl
def test_backend_agreement_is_reported(runs):
    wgsl_support.require_adapter()
    (result, report), _ = runs
    assert result.wgsl_skipped is None
    assert set(result.median_seconds) == {"xla", "wgsl"} and min(result.median_seconds.values()) > 0
    assert result.max_abs_diff["gru"] < 1e-4 and result.max_abs_diff["logits"] < 1e-4
    assert "agreement: max |xla - wgsl| =" in report and "wgsl:" in report


def test_missing_requirements_are_named(monkeypatch):
    monkeypatch.setitem(sys.modules, "optax", None)  # makes `import optax` raise ImportError
    assert demo.missing_requirements() == ["optax"]


def test_without_an_adapter_wgsl_is_skipped_with_the_reason(monkeypatch):
    monkeypatch.setenv("JAXGRU_WGPU_ADAPTER", "no-such-adapter")  # no adapter matches: none usable
    result, report = _run(dataclasses.replace(TINY, steps=2, sample_length=3))
    assert result.max_abs_diff is None and set(result.median_seconds) == {"xla"}
    assert "no-such-adapter" in result.wgsl_skipped
    assert "wgsl: skipped: " in report
