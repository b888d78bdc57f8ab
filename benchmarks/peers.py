"""The implementations measured side by side. Each peer builds, for a case, a zero-argument
callable that runs one forward pass or one training step and blocks until it is done.

Every peer computes the same layer: GRU with the reset gate applied after the recurrent
matmul (PyTorch's and Flax's GRU; ONNX ``linear_before_reset=1``), LSTM without peepholes. The
``lbr0`` cases (ONNX's default GRU, the reset gate before the matmul) run on jaxgru and
onnxruntime alone.
jaxgru, onnxruntime and PyTorch share the same weights and are checked against each other
before timing; Flax and Equinox use their own initialisers (same shapes, same work).
"""

from __future__ import annotations

import importlib.util
import os

import jax
import jax.numpy as jnp
import numpy as np
from cases import Case

import jaxgru
import jaxgru._src.native

THREADS = os.cpu_count() or 1


class Unsupported(Exception):
    """The peer cannot run this case (reason in the message)."""


class Peer:
    name = "?"
    is_jax = False
    requires: str | None = None  # the module the peer needs installed

    def software_wgsl(self) -> bool:
        """Whether this is jaxgru-wgsl on a software adapter (lavapipe: 20-40x XLA's time)."""
        return False

    def available(self) -> str | None:
        """None if usable here, else why not."""
        if self.requires and importlib.util.find_spec(self.requires) is None:
            return f"{self.requires} not installed"
        return None

    def build(self, case: Case, data: dict):
        """A zero-argument callable for the case; raises Unsupported."""
        raise NotImplementedError


def make_data(case: Case, seed: int = 0) -> dict:
    """Shared inputs: ONNX-layout weights, x [L, N, I], lengths."""
    init = jaxgru.init_gru if case.cell == "gru" else jaxgru.init_lstm
    params = init(jax.random.key(seed), case.I, case.H, bidirectional=case.bidirectional)
    x = jax.random.normal(jax.random.key(seed + 1), (case.L, case.N, case.I))
    lens = np.full(case.N, case.L, np.int32)
    if case.ragged:  # lengths spread over [L/4, L], longest first
        lens = np.linspace(case.L, max(1, case.L // 4), case.N).astype(np.int32)
    return {"params": params, "x": x, "x_np": np.asarray(x), "lens": lens}


def _block(out):
    return jax.block_until_ready(out)


def _reset_after_matmul(case: Case) -> None:
    """Raise Unsupported for ONNX's default GRU (``linear_before_reset=0``): PyTorch's, Flax's and
    Equinox's GRUs apply the reset gate after the recurrent matmul only."""
    if case.lbr0:
        raise Unsupported("GRU with linear_before_reset=0: not in this library")


# --------------------------------------------------------------------------------------
# jaxgru
# --------------------------------------------------------------------------------------
class JaxgruPeer(Peer):
    is_jax = True

    def __init__(self, backend: str):
        self.backend = backend
        self.name = f"jaxgru-{backend}"

    def available(self):
        if self.backend == "wgsl":
            status = jaxgru._src.backends.adapter_status()
            if not status["available"]:
                return "no WebGPU adapter"
        if self.backend == "cpu" and not jaxgru._src.native.available():
            return "the native CPU extension is not built"
        return None

    def software_wgsl(self) -> bool:
        if self.backend != "wgsl":
            return False
        status = jaxgru._src.backends.adapter_status()
        return status["available"] and status["adapter"]["adapter_type"] not in ("DiscreteGPU", "IntegratedGPU")

    def function(self, case: Case, data: dict):
        fn = jaxgru.gru if case.cell == "gru" else jaxgru.lstm
        opts = {"direction": "bidirectional" if case.bidirectional else "forward", "backend": self.backend}
        if case.cell == "gru":
            opts["linear_before_reset"] = not case.lbr0
        lens = jnp.asarray(data["lens"]) if case.ragged else None

        def forward(p, x):
            return fn(p, x, sequence_lens=lens, **opts)[0]

        if case.mode == "forward":
            return jax.jit(forward)
        return jax.jit(jax.grad(lambda p, x: jnp.mean(forward(p, x) ** 2)))

    def build(self, case, data):
        if self.software_wgsl() and case.flops() > 0.6e9:
            raise Unsupported("software adapter: only small cases")
        f = self.function(case, data)
        p, x = data["params"], data["x"]
        self.compiled = f.lower(p, x).compile()
        return lambda: _block(f(p, x))


def jaxgru_cpu_with(case: Case, data: dict, var: str, value: str | None):
    """jaxgru-cpu built (and called once) with the environment variable ``var`` set to ``value``
    (None: unset) while it lowers: the native lowering reads JAXGRU_CPU_ISA and
    JAXGRU_CPU_THREADS then. The variable is unset afterwards."""
    if value is None:
        os.environ.pop(var, None)
    else:
        os.environ[var] = value
    try:
        fn = JaxgruPeer("cpu").build(case, data)
    finally:
        os.environ.pop(var, None)
    fn()
    return fn


# --------------------------------------------------------------------------------------
# onnxruntime (inference only)
# --------------------------------------------------------------------------------------
class OnnxRuntimePeer(Peer):
    requires = "onnxruntime"

    def __init__(self, threads: int | None = None):
        """threads: its intra-op threads (None: THREADS, as every peer; named by it otherwise)."""
        self.threads = threads
        self.name = "onnxruntime" if threads is None else f"onnxruntime-{threads}-thread"

    def build(self, case, data):
        if case.mode != "forward":
            raise Unsupported("inference only")
        import onnxruntime as ort
        from onnx import TensorProto, helper

        p = data["params"]
        inits = [helper.make_tensor(n, TensorProto.FLOAT, v.shape, np.asarray(v).ravel())
                 for n, v in (("W", p.w), ("R", p.r), ("B", p.b))]
        attrs = {"hidden_size": case.H, "direction": "bidirectional" if case.bidirectional else "forward"}
        if case.cell == "gru":
            attrs["linear_before_reset"] = 0 if case.lbr0 else 1
        inputs = ["X", "W", "R", "B"] + (["sequence_lens"] if case.ragged else [])
        node = helper.make_node("GRU" if case.cell == "gru" else "LSTM", inputs, ["Y"], **attrs)
        graph_inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, data["x_np"].shape)]
        if case.ragged:
            graph_inputs.append(helper.make_tensor_value_info("sequence_lens", TensorProto.INT32, (case.N,)))
        graph = helper.make_graph([node], "rnn", graph_inputs,
                                  [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)], initializer=inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])
        model.ir_version = 10
        options = ort.SessionOptions()
        options.intra_op_num_threads = self.threads or THREADS
        # its pool spins during a run and, by default, after it too (one core busy for 50 ms and
        # more, measured here), which would slow whatever is timed next
        options.add_session_config_entry("session.force_spinning_stop", "1")
        sess = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        feed = {"X": data["x_np"]}
        if case.ragged:
            feed["sequence_lens"] = data["lens"]
        self.check = lambda: sess.run(None, feed)[0]
        return lambda: sess.run(None, feed)


# --------------------------------------------------------------------------------------
# PyTorch (CPU; CUDA where present)
# --------------------------------------------------------------------------------------
class TorchPeer(Peer):
    def __init__(self, device: str = "cpu"):
        self.device = device
        self.name = "torch" if device == "cpu" else f"torch-{device}"

    requires = "torch"

    def available(self):
        why = super().available()
        if why is None and self.device == "cuda":
            import torch

            why = None if torch.cuda.is_available() else "no CUDA device"
        return why

    def build(self, case, data):
        _reset_after_matmul(case)
        import torch

        from jaxgru.interop import to_torch

        torch.set_num_threads(THREADS)
        torch.set_flush_denormal(True)  # as XLA and onnxruntime do: denormals would slow torch 100x
        opts = {"direction": "bidirectional" if case.bidirectional else "forward", "layout": 0}
        if case.cell == "gru":
            opts["linear_before_reset"] = True
        mod = to_torch([data["params"]], opts).to(self.device)
        x = torch.from_numpy(data["x_np"].copy()).to(self.device)
        lens = torch.from_numpy(data["lens"].astype(np.int64))
        sync = torch.cuda.synchronize if self.device == "cuda" else (lambda: None)

        def run():
            if case.ragged:
                packed = torch.nn.utils.rnn.pack_padded_sequence(x, lens, enforce_sorted=False)
                y = torch.nn.utils.rnn.pad_packed_sequence(mod(packed)[0], total_length=case.L)[0]
            else:
                y = mod(x)[0]
            return y

        if case.mode == "forward":
            def forward():
                torch.set_flush_denormal(True)  # per call: a long run once lost it (100x slower steps)
                with torch.inference_mode():
                    run()
                sync()
            self.check = lambda: _torch_y(run)
            return forward

        def train():
            torch.set_flush_denormal(True)
            mod.zero_grad(set_to_none=True)
            y = run()
            (y**2).mean().backward()
            sync()
        return train


def _torch_y(run):
    import torch

    with torch.inference_mode():
        return run().cpu().numpy()


# --------------------------------------------------------------------------------------
# Flax (linen nn.RNN with GRUCell / OptimizedLSTMCell) and Equinox (cells under lax.scan)
# --------------------------------------------------------------------------------------
def _jax_step(case, apply, params, x):
    f = jax.jit(apply) if case.mode == "forward" else jax.jit(jax.grad(lambda p, x: jnp.mean(apply(p, x) ** 2)))
    compiled = f.lower(params, x).compile()
    return compiled, (lambda: _block(f(params, x)))


class FlaxPeer(Peer):
    name = "flax"
    is_jax = True
    requires = "flax"

    def build(self, case, data):
        _reset_after_matmul(case)
        import flax.linen as nn

        cell = (lambda: nn.GRUCell(features=case.H)) if case.cell == "gru" else (
            lambda: nn.OptimizedLSTMCell(features=case.H))
        rnn = nn.RNN(cell())
        if case.bidirectional:
            rnn = nn.Bidirectional(nn.RNN(cell()), nn.RNN(cell()))
        x = jnp.swapaxes(data["x"], 0, 1)  # Flax is batch-major
        lens = jnp.asarray(data["lens"]) if case.ragged else None
        params = rnn.init(jax.random.key(0), x)
        self.compiled, fn = _jax_step(case, lambda p, x: rnn.apply(p, x, seq_lengths=lens), params, x)
        return fn


class EquinoxPeer(Peer):
    name = "equinox"
    is_jax = True
    requires = "equinox"

    def build(self, case, data):
        _reset_after_matmul(case)
        import equinox as eqx

        make = eqx.nn.GRUCell if case.cell == "gru" else eqx.nn.LSTMCell
        cells = [make(case.I, case.H, key=jax.random.key(d)) for d in range(case.D)]
        lens = jnp.asarray(data["lens"])

        def run_dir(cell, x, reverse):
            n = x.shape[1]
            zero = jnp.zeros((n, case.H))
            carry0 = zero if case.cell == "gru" else (zero, zero)
            step_cell = jax.vmap(cell)
            t0 = jnp.arange(case.L)

            def step(carry, inp):
                xt, t = inp
                new = step_cell(xt, carry)
                if case.ragged:  # keep the state past each sequence's end
                    m = (t < lens)[:, None]
                    new = jax.tree.map(lambda a, b: jnp.where(m, a, b), new, carry)
                h = new if case.cell == "gru" else new[0]
                return new, h

            return jax.lax.scan(step, carry0, (x, t0), reverse=reverse)[1]

        def apply(cs, x):
            ys = [run_dir(c, x, reverse=d == 1) for d, c in enumerate(cs)]
            return jnp.stack(ys, 1)

        params, static = eqx.partition(cells, eqx.is_array)
        self.compiled, fn = _jax_step(case, lambda p, x: apply(eqx.combine(p, static), x), params, data["x"])
        return fn


def all_peers() -> list[Peer]:
    return [JaxgruPeer("xla"), JaxgruPeer("cpu"), JaxgruPeer("wgsl"), OnnxRuntimePeer(), TorchPeer("cpu"),
            TorchPeer("cuda"),
            FlaxPeer(), EquinoxPeer()]
