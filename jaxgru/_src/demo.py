"""The job behind ``python -m jaxgru demo``: a character-level GRU language model.

It trains on the documentation text that ships with every Python (``pydoc_data.topics``)
under ``jax.jit`` with optax's Adam, samples text from the trained model (seeded), then runs
the trained model on both backends and reports their agreement and timing. The same
``DemoConfig`` gives the same loss curve and the same sample on the same machine.

Model: one-hot characters -> ``jaxgru.gru`` (``linear_before_reset=True``, PyTorch's GRU) ->
a linear read-out to next-character logits. Sampling runs ``jaxgru.gru_cell`` in a
``lax.scan``. optax and tqdm are not dependencies of jaxgru: ``missing_requirements`` says
which of them are absent (``make demo`` installs both).
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import statistics
import time
from collections.abc import Callable, Iterable
from typing import SupportsInt

import jax
import jax.numpy as jnp
import numpy as np

import jaxgru
from jaxgru._src import backends

# A fixed alphabet (newline + printable ASCII): the model's shapes never depend on which
# Python's documentation it reads; anything else in the text becomes "?".
VOCAB = "\n" + "".join(chr(c) for c in range(32, 127))
REQUIRES = ("optax", "tqdm")
TEMPERATURE = 0.8
# the GRU formula of PyTorch and Keras (reset gate applied after the recurrent matmul)
GRU_OPTIONS = {"linear_before_reset": True, "layout": 1}


@dataclasses.dataclass(frozen=True)
class DemoConfig:
    """Settings of one demo run (the CLI flags, plus a few fixed choices).

    Attributes:
      steps: training steps.
      length: characters per training sequence.
      batch: sequences per training step.
      hidden: GRU hidden size.
      backend: training and sampling backend, "auto", "xla" or "wgsl".
      seed: seeds the initialisation, the batches and the sample.
      sample_length: characters to sample after the prompt.
      learning_rate: Adam's step size.
      prompt: the text sampling starts from.
      eval_batch: sequences in the backend comparison (small: lavapipe is slow).
      timing_calls: calls per backend whose median is reported.
    """

    steps: int = 1200
    length: int = 64
    batch: int = 32
    hidden: int = 256
    backend: str = "auto"
    seed: int = 0
    sample_length: int = 400
    learning_rate: float = 3e-3
    prompt: str = "The "
    eval_batch: int = 4
    timing_calls: int = 5

    def __post_init__(self) -> None:
        for name in ("steps", "length", "batch", "hidden", "sample_length", "eval_batch", "timing_calls"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"jaxgru demo: {name} must be a positive int; got {value!r}.")
        if self.backend not in ("auto", "xla", "wgsl"):
            raise ValueError(f"jaxgru demo: backend must be 'auto', 'xla' or 'wgsl'; got {self.backend!r}.")


@dataclasses.dataclass
class DemoResult:
    """What a demo run measured.

    Attributes:
      losses: the training loss of every step (mean cross-entropy per character, nats).
      sample: the prompt followed by the sampled characters.
      median_seconds: median seconds per forward call on the evaluation batch, per backend run.
      max_abs_diff: ``{"gru": ..., "logits": ...}``, the largest ``|xla - wgsl|`` of the GRU
        outputs and of the logits, or None when wgsl did not run.
      wgsl_skipped: why wgsl did not run, or None.
    """

    losses: list[float]
    sample: str
    median_seconds: dict[str, float]
    max_abs_diff: dict[str, float] | None
    wgsl_skipped: str | None


def missing_requirements() -> list[str]:
    """The demo's own requirements (optax, tqdm) that cannot be imported."""
    missing = []
    for name in REQUIRES:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    return missing


# --------------------------------------------------------------------------------------
# data
# --------------------------------------------------------------------------------------
def load_text() -> str:
    """Python's own documentation topics, every topic in sorted order."""
    from pydoc_data import topics

    return "\n\n".join(topics.topics[k] for k in sorted(topics.topics))


def encode(text: str) -> np.ndarray:
    """Characters -> int32 indices into VOCAB ("?" for characters outside it)."""
    index = {c: i for i, c in enumerate(VOCAB)}
    unknown = index["?"]
    return np.array([index.get(c, unknown) for c in text], np.int32)


def decode(tokens: Iterable[SupportsInt]) -> str:
    """int indices into VOCAB -> characters."""
    return "".join(VOCAB[int(t)] for t in tokens)


# --------------------------------------------------------------------------------------
# model
# --------------------------------------------------------------------------------------
def init_model(key: jax.Array, hidden: int) -> dict:
    """GRU weights (PyTorch's initialisation) and a read-out ``hidden -> len(VOCAB)``."""
    k_gru, k_out = jax.random.split(key)
    bound = 1.0 / math.sqrt(hidden)
    return {
        "gru": jaxgru.init_gru(k_gru, len(VOCAB), hidden),
        "out_w": jax.random.uniform(k_out, (hidden, len(VOCAB)), jnp.float32, -bound, bound),
        "out_b": jnp.zeros((len(VOCAB),), jnp.float32),
    }


def readout(params: dict, h: jax.Array) -> jax.Array:
    """Next-character logits ``[..., V]`` from GRU outputs ``[..., H]``."""
    bias = params["out_b"].reshape((1,) * (h.ndim - 1) + (-1,))
    return h @ params["out_w"] + bias


def forward(params: dict, tokens: jax.Array, backend: str) -> tuple[jax.Array, jax.Array]:
    """``(y, logits)`` for int tokens ``[N, L]``: GRU outputs ``[N, L, H]``, logits ``[N, L, V]``."""
    x = jax.nn.one_hot(tokens, len(VOCAB), dtype=jnp.float32)
    y, _ = jaxgru.gru(params["gru"], x, backend=backend, **GRU_OPTIONS)  # y: [N, L, D=1, H]
    y = y[:, :, 0]
    return y, readout(params, y)


def loss_fn(params: dict, window: jax.Array, backend: str) -> jax.Array:
    """Mean next-character cross-entropy of windows ``[N, L+1]``."""
    import optax

    _, logits = forward(params, window[:, :-1], backend)
    return optax.softmax_cross_entropy_with_integer_labels(logits, window[:, 1:]).mean()


# --------------------------------------------------------------------------------------
# the three stages
# --------------------------------------------------------------------------------------
def train(cfg: DemoConfig, data: jax.Array, backend: str, progress: bool) -> tuple[dict, list[float]]:
    """Train from ``cfg.seed``; returns the parameters and every step's loss."""
    import optax
    from tqdm.auto import tqdm

    key_init, key_data = jax.random.split(jax.random.key(cfg.seed))
    params = init_model(key_init, cfg.hidden)
    # clipping keeps early steps of a recurrent net from blowing up at this learning rate
    opt = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(cfg.learning_rate))
    opt_state = opt.init(params)
    offsets = jnp.arange(cfg.length + 1)[None, :]

    @jax.jit
    def step(params, opt_state, i, data):
        # the batch is drawn inside the compiled step: key (seed, step) -> random windows
        starts = jax.random.randint(jax.random.fold_in(key_data, i), (cfg.batch, 1), 0,
                                    data.shape[0] - cfg.length - 1)
        window = data[starts + offsets]
        loss, grads = jax.value_and_grad(loss_fn)(params, window, backend)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    losses = []
    with tqdm(total=cfg.steps, desc="training", unit="step", disable=not progress) as bar:
        for i in range(cfg.steps):
            params, opt_state, loss = step(params, opt_state, i, data)
            losses.append(float(loss))
            bar.set_postfix(loss=f"{losses[-1]:.3f}", refresh=False)
            bar.update()
    return params, losses


def sample(params: dict, cfg: DemoConfig, backend: str) -> str:
    """``cfg.prompt`` followed by ``cfg.sample_length`` characters drawn at TEMPERATURE."""
    prompt = jnp.asarray(encode(cfg.prompt))[None]  # [1, P]

    @jax.jit
    def run(params, key):
        # read the prompt with the whole-sequence op, then continue one step at a time
        x = jax.nn.one_hot(prompt, len(VOCAB), dtype=jnp.float32)
        y, h = jaxgru.gru(params["gru"], x, backend=backend, **GRU_OPTIONS)

        def next_char(carry, key):
            h, logits = carry
            token = jax.random.categorical(key, logits / TEMPERATURE)
            x_t = jax.nn.one_hot(token, len(VOCAB), dtype=jnp.float32)
            h = jaxgru.gru_cell(params["gru"], x_t, h, linear_before_reset=True, backend=backend)
            return (h, readout(params, h)), token[0]

        logits = readout(params, y[:, -1, 0])
        keys = jax.random.split(key, cfg.sample_length)
        return jax.lax.scan(next_char, (h[:, 0], logits), keys)[1]

    key = jax.random.fold_in(jax.random.key(cfg.seed), 1)
    return cfg.prompt + decode(run(params, key))


def compare_backends(params: dict, cfg: DemoConfig, data: jax.Array) -> tuple[dict, dict | None, str | None]:
    """Forward the trained model on a small batch on xla and wgsl: timings and agreement."""
    n = cfg.eval_batch
    stride = (data.shape[0] - cfg.length) // n
    tokens = jnp.stack([data[k * stride: k * stride + cfg.length] for k in range(n)])
    skipped = _wgsl_unavailable()
    outputs, medians = {}, {}
    for name in ["xla"] + ([] if skipped else ["wgsl"]):
        fn = jax.jit(lambda p, t, name=name: forward(p, t, name))
        outputs[name] = jax.block_until_ready(fn(params, tokens))  # compiles, and warms the pipelines
        times = []
        for _ in range(cfg.timing_calls):
            t = time.perf_counter()
            jax.block_until_ready(fn(params, tokens))
            times.append(time.perf_counter() - t)
        medians[name] = statistics.median(times)
    if skipped:
        return medians, None, skipped
    diff = {k: float(jnp.max(jnp.abs(a - b)))
            for k, a, b in zip(("gru", "logits"), outputs["xla"], outputs["wgsl"])}
    return medians, diff, None


def _wgsl_unavailable() -> str | None:
    """Why the wgsl backend cannot run here, or None."""
    from jaxgru._src.webgpu import runtime

    status = backends.adapter_status()  # honours JAXGRU_WGPU_ADAPTER
    if not status["available"]:
        return status["error"]
    try:
        runtime.runtime()  # opens the device: usable, not just listed
    except runtime.WGPUUnavailableError as e:
        return str(e)
    return None


def run(cfg: DemoConfig, *, out: Callable[[str], None] = print, progress: bool = True) -> DemoResult:
    """Train, sample, compare backends, and report each stage through ``out``.

    Args:
      cfg: the run's settings.
      out: receives each line of the report.
      progress: show a tqdm progress bar (loss, steps/s) while training.

    Returns:
      The losses, the sample and the backend comparison.

    Raises:
      WGPUUnavailableError: ``cfg.backend="wgsl"`` without a usable WebGPU adapter.
    """
    backend = backends.resolve(cfg.backend, "jaxgru demo")
    text = load_text()
    data = jnp.asarray(encode(text))
    shapes = jax.eval_shape(lambda key: init_model(key, cfg.hidden), jax.random.key(0))
    n_params = sum(math.prod(a.shape) for a in jax.tree.leaves(shapes))
    out(f"text: Python's documentation (pydoc_data.topics), {len(text):,} characters, "
        f"{len(VOCAB)} symbols")
    out(f"model: one-hot({len(VOCAB)}) -> GRU({cfg.hidden}, linear_before_reset) -> "
        f"linear({len(VOCAB)}), {n_params:,} parameters")
    out(f"training: {cfg.steps} steps of {cfg.batch} x {cfg.length} characters, Adam "
        f"{cfg.learning_rate:g}, backend {backend}, seed {cfg.seed}")

    t = time.perf_counter()
    params, losses = train(cfg, data, backend, progress)
    # one batch's loss is noisy: summarise the curve by its mean over each fifth of the steps
    fifths = [np.mean(part) for part in np.array_split(np.asarray(losses), min(5, len(losses)))]
    out(f"loss: {losses[0]:.3f} at step 1; mean over each fifth of training: "
        + ", ".join(f"{v:.3f}" for v in fifths) + f" ({time.perf_counter() - t:.1f} s with compilation)")

    text_out = sample(params, cfg, backend)
    out(f"\nsample (seed {cfg.seed}, temperature {TEMPERATURE}):\n{text_out}\n")

    medians, diff, skipped = compare_backends(params, cfg, data)
    out(f"the trained model on each backend ({cfg.eval_batch} x {cfg.length} characters, "
        f"median of {cfg.timing_calls} calls):")
    for name, seconds in medians.items():
        out(f"  {name:4s}: {seconds * 1e3:8.2f} ms")
    if diff is None:
        out(f"  wgsl: skipped: {skipped}")
    else:
        adapter = backends.adapter_status()["adapter"]
        out(f"  (wgsl on {adapter['name']}, {adapter['adapter_type']}, {adapter['backend_type']})")
        out(f"  agreement: max |xla - wgsl| = {diff['gru']:.2e} (GRU outputs), "
            f"{diff['logits']:.2e} (logits)")
    return DemoResult(losses, text_out, medians, diff, skipped)
