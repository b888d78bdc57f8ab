"""jaxgru.interop.to_onnx: onnxruntime runs every exported model to jaxgru's own outputs.

Oracles: onnxruntime (an independent implementation of the ONNX GRU/LSTM) on the exported
model vs ``jaxgru.gru_stack`` / ``lstm_stack`` on the same inputs; PyTorch modules through
``from_torch`` -> ``to_onnx`` -> onnxruntime; ``from_onnx`` for the round trip. And the
jax2onnx plugins (``register_jax2onnx``), when jax2onnx is installed.
"""

from __future__ import annotations

import dataclasses
import logging
import zlib

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import jaxgru  # noqa: E402
from jaxgru._src.options import make_config  # noqa: E402
from jaxgru.interop import from_onnx, to_onnx  # noqa: E402

L, N, IN, H = 5, 3, 4, 3  # one set of sizes: compiled programs are shared between tests
LENS = np.array([5, 2, 3], np.int32)  # unsorted, one full length
TOL = {"atol": 1e-5, "rtol": 1e-5}


@dataclasses.dataclass(frozen=True)
class Case:
    cell: str
    layers: int = 1
    direction: str = "forward"
    layout: int = 0
    inputs: tuple[str, ...] = ()
    bias: bool = True
    peepholes: bool = False
    options: tuple[tuple[str, object], ...] = ()

    @property
    def id(self) -> str:
        parts = [self.cell, f"{self.layers}L", self.direction[:3], f"layout{self.layout}"]
        parts += [{"sequence_lens": "lens", "initial_h": "h0", "initial_c": "c0"}[i] for i in self.inputs]
        parts += [] if self.bias else ["nobias"]
        parts += ["peep"] if self.peepholes else []
        parts += [k if v is True else f"{k}={v}" for k, v in self.options if k not in ("activation_alpha",
                                                                                   "activation_beta")]
        return "-".join(parts).replace(" ", "")


def case(cell, layers=1, direction="forward", layout=0, inputs=(), bias=True, peepholes=False, **options):
    return Case(cell, layers, direction, layout, tuple(inputs), bias, peepholes, tuple(options.items()))


GRU_ACTS = {"activations": ["HardSigmoid", "LeakyRelu"], "activation_alpha": [0.3, 0.05],
            "activation_beta": [0.45]}
LSTM_ACTS = {"activations": ["HardSigmoid", "Tanh", "Affine"], "activation_alpha": [0.25, 0.8],
             "activation_beta": [0.5, 0.1]}
CASES = [
    # GRU: linear_before_reset 0/1, 1-3 layers, every direction, both layouts, inputs, no bias
    case("gru"),
    case("gru", linear_before_reset=True, inputs=["sequence_lens", "initial_h"]),
    case("gru", 2, "bidirectional", linear_before_reset=True, inputs=["sequence_lens"]),
    case("gru", 2, "bidirectional", 1, ["sequence_lens", "initial_h"], linear_before_reset=True),
    case("gru", 3, "reverse", 1, ["initial_h"], bias=False),
    case("gru", 3, "forward", 0, clip=1.5, **GRU_ACTS),
    case("gru", 1, "bidirectional", 1, ["sequence_lens"],
         activations=["Sigmoid", "Tanh", "HardSigmoid", "Affine"], activation_alpha=[0.2, 0.7],
         activation_beta=[0.55, -0.1]),
    case("gru", 2, "reverse", 0, ["sequence_lens", "initial_h"], linear_before_reset=True, clip=0.9),
    case("gru", 1, "reverse", 1, bias=False, activations=["Sigmoid", "ScaledTanh"],
         activation_alpha=[1.5], activation_beta=[0.7]),
    # LSTM: peepholes, input_forget, the same axes
    case("lstm"),
    case("lstm", peepholes=True, inputs=["sequence_lens", "initial_h", "initial_c"]),
    case("lstm", 2, "bidirectional", peepholes=True, input_forget=True, inputs=["sequence_lens"]),
    case("lstm", 2, "bidirectional", 1, ["initial_h", "initial_c"], peepholes=True),
    case("lstm", 3, "reverse", 0, ["initial_c"], bias=False, input_forget=True),
    case("lstm", 3, "forward", 1, ["sequence_lens", "initial_h", "initial_c"], clip=2.0, **LSTM_ACTS),
    case("lstm", 1, "bidirectional", 1, ["sequence_lens"], bias=False, peepholes=True, input_forget=True,
         clip=1.2),
    case("lstm", 2, "reverse", 1, ["sequence_lens", "initial_h"],
         activations=["Sigmoid", "Softsign", "Elu"], activation_alpha=[0.9]),
    case("lstm", 1, "reverse", 0, ["initial_h", "initial_c"], peepholes=True,
         activations=["HardSigmoid", "Relu", "Softplus"], activation_alpha=[0.15], activation_beta=[0.6]),
]


def _rand(rng, *shape, scale=0.6):
    return rng.uniform(-scale, scale, shape).astype(np.float32)


def _layers(rng, c: Case):
    d, g = (2 if c.direction == "bidirectional" else 1), (3 if c.cell == "gru" else 4)
    out = []
    for k in range(c.layers):
        size = IN if k == 0 else d * H
        b = _rand(rng, d, 2 * g * H) if c.bias else None
        if c.cell == "gru":
            out.append(jaxgru.GRUParams(_rand(rng, d, g * H, size), _rand(rng, d, g * H, H), b))
        else:
            p = _rand(rng, d, 3 * H) if c.peepholes else None
            out.append(jaxgru.LSTMParams(_rand(rng, d, g * H, size), _rand(rng, d, g * H, H), b, p))
    return out


def _feeds(rng, c: Case):
    d = 2 if c.direction == "bidirectional" else 1
    x = rng.standard_normal((L, N, IN) if c.layout == 0 else (N, L, IN)).astype(np.float32)
    state = (c.layers * d, N, H) if c.layout == 0 else (N, c.layers * d, H)
    feeds = {"X": x}
    for name in c.inputs:
        feeds[name] = LENS if name == "sequence_lens" else _rand(rng, *state, scale=1.0)
    return feeds


def _ort(model, feeds):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _jaxgru(c: Case, layers, feeds):
    stack = jaxgru.gru_stack if c.cell == "gru" else jaxgru.lstm_stack
    kw = {k: v for k, v in feeds.items() if k != "X"}
    return stack(layers, feeds["X"], backend="xla", **kw, **dict(c.options), direction=c.direction,
                 layout=c.layout)


def _config(cell, options):
    """The options as jaxgru resolves them (defaults filled in), alpha/beta/clip as float32:
    ONNX attributes hold float32."""
    cfg = make_config(cell, "test", **{k: v for k, v in options.items() if k != "backend"})
    f32 = lambda v: None if v is None else float(np.float32(v))
    acts = tuple(tuple((a.name, f32(a.alpha), f32(a.beta)) for a in d) for d in cfg.activations)
    return dataclasses.replace(cfg, activations=acts, clip=f32(cfg.clip))


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_onnxruntime_runs_the_export_to_jaxgru_outputs(c):
    rng = np.random.default_rng(zlib.crc32(c.id.encode()))
    layers = _layers(rng, c)
    options = {"direction": c.direction, "layout": c.layout, **dict(c.options)}
    model = to_onnx(layers, options, inputs=c.inputs)
    onnx.checker.check_model(model, full_check=True)
    assert [n.op_type for n in model.graph.node].count(c.cell.upper()) == c.layers
    assert [i.name for i in model.graph.input] == ["X", *c.inputs]
    assert [o.name for o in model.graph.output] == ["Y", "Y_h", "Y_c"][: 2 if c.cell == "gru" else 3]
    for n in model.graph.node:  # onnxruntime refuses layout=1 nodes: the exporter transposes instead
        assert "layout" not in {a.name for a in n.attribute}

    feeds = _feeds(rng, c)
    got = _ort(model, feeds)
    want = _jaxgru(c, layers, feeds)
    assert [g.shape for g in got] == [w.shape for w in want]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, np.asarray(w), **TOL)

    # from_onnx reads the stack back: the weights exactly, the options up to defaults
    back, back_options = from_onnx(model)
    assert len(back) == c.layers
    for a, b in zip(back, layers):
        for fa, fb in zip(a, b):
            assert (fa is None) == (fb is None)
            if fa is not None:
                assert fa.dtype == fb.dtype and np.array_equal(np.asarray(fa), fb)
    assert _config(c.cell, back_options) == _config(c.cell, options)


def test_stack_wiring_is_pytorchs_and_each_node_reads_back():
    rng = np.random.default_rng(0)
    layers = _layers(rng, case("gru", 3, "bidirectional"))
    model = to_onnx(layers, {"direction": "bidirectional", "linear_before_reset": True})
    ops = [n.op_type for n in model.graph.node]
    assert ops == ["GRU", "Transpose", "Reshape", "GRU", "Transpose", "Reshape", "GRU", "Concat"]
    nodes = {n.op_type: n for n in model.graph.node}
    assert list(nodes["Transpose"].attribute[0].ints) == [0, 2, 1, 3]
    shape = next(t for t in model.graph.initializer if t.name == nodes["Reshape"].input[1])
    assert onnx.numpy_helper.to_array(shape).tolist() == [0, 0, -1]
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in nodes["GRU"].attribute}
    assert attrs == {"hidden_size": H, "direction": b"bidirectional", "linear_before_reset": 1}
    for k in range(3):
        (one,), options = from_onnx(model, node=f"GRU_{k}")
        assert np.array_equal(np.asarray(one.w), layers[k].w)
        assert options == {"direction": "bidirectional", "layout": 0, "linear_before_reset": True}


def test_defaults_are_omitted_backend_ignored_and_opsets():
    rng = np.random.default_rng(1)
    layers = _layers(rng, case("lstm", 2, "bidirectional"))
    options = {"direction": "bidirectional", "layout": 1}
    model = to_onnx(layers, {**options, "backend": "wgsl", "input_forget": False, "clip": None})
    lstm = next(n for n in model.graph.node if n.op_type == "LSTM")
    assert {a.name for a in lstm.attribute} == {"hidden_size", "direction"}
    assert {p.key: p.value for p in model.metadata_props} == {"jaxgru.layout": "1"}
    assert model.opset_import[0].version == 22 and model.producer_name == "jaxgru"
    feeds = {"X": rng.standard_normal((N, L, IN)).astype(np.float32), "sequence_lens": LENS,
             "initial_h": _rand(rng, N, 4, H), "initial_c": _rand(rng, N, 4, H)}
    want = jaxgru.lstm_stack(layers, feeds["X"], sequence_lens=LENS, initial_h=feeds["initial_h"],
                             initial_c=feeds["initial_c"], backend="xla", **options)
    for opset in (10, 13, 14, 17):
        model = to_onnx(layers, options, opset=opset, inputs=["initial_c", "sequence_lens", "initial_h"])
        onnx.checker.check_model(model, full_check=True)
        assert model.opset_import[0].version == opset
        assert [i.name for i in model.graph.input] == ["X", "sequence_lens", "initial_h", "initial_c"]
        for g, w in zip(_ort(model, feeds), want):
            np.testing.assert_allclose(g, np.asarray(w), **TOL)


def test_zero_lengths_without_initial_states():
    # onnxruntime returns Y_h = 0 for a length-0 sequence, jaxgru (and the ONNX spec's
    # reading it follows) the initial state: the two agree when that state is zero
    rng = np.random.default_rng(6)
    c = case("gru", 2, "bidirectional", 1, ["sequence_lens"], linear_before_reset=True)
    layers = _layers(rng, c)
    feeds = {**_feeds(rng, c), "sequence_lens": np.array([5, 0, 2], np.int32)}
    model = to_onnx(layers, {"direction": c.direction, "layout": 1, "linear_before_reset": True}, inputs=c.inputs)
    for g, w in zip(_ort(model, feeds), _jaxgru(c, layers, feeds)):
        np.testing.assert_allclose(g, np.asarray(w), **TOL)


def test_float64_and_bfloat16_weights():
    # onnxruntime's CPU GRU/LSTM are float32 only ("GRU operator does not support double yet"):
    # float64 models run on onnx's reference evaluator, another implementation of the spec
    # (which ignores sequence_lens, clip and input_forget: none here)
    from onnx.reference import ReferenceEvaluator

    rng = np.random.default_rng(2)
    c = case("lstm", 2, "bidirectional", 1, ["initial_h", "initial_c"], peepholes=True)
    layers = [jaxgru.LSTMParams(*(None if a is None else a.astype(np.float64) for a in p)) for p in _layers(rng, c)]
    model = to_onnx(layers, {"direction": c.direction, "layout": 1}, inputs=c.inputs)
    onnx.checker.check_model(model, full_check=True)
    assert model.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.DOUBLE
    feeds = {k: v.astype(np.float64) for k, v in _feeds(rng, c).items()}
    got = ReferenceEvaluator(model).run(None, feeds)
    with jax.enable_x64(True):
        want = _jaxgru(c, layers, feeds)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, np.asarray(w), atol=1e-12)
    bf16 = jaxgru.GRUParams(*(jnp.asarray(a, jnp.bfloat16) for a in _layers(rng, case("gru"))[0]))
    model = to_onnx([bf16], {})
    onnx.checker.check_model(model, full_check=True)
    (back,), _ = from_onnx(model)
    assert back.w.dtype == jnp.bfloat16 and np.array_equal(np.asarray(back.w), np.asarray(bf16.w))


def test_torch_modules_through_to_onnx():
    torch = pytest.importorskip("torch")
    from jaxgru.interop import from_torch

    torch.manual_seed(0)
    for module in (torch.nn.GRU(IN, H, num_layers=2, bidirectional=True, batch_first=True),
                   torch.nn.LSTM(IN, H, num_layers=3, dropout=0.3).eval()):  # dropout: identity in eval
        layers, options = from_torch(module)
        assert options.get("dropout", 0.0) == module.dropout  # accepted, ignored
        model = to_onnx(layers, options)
        x = torch.randn((N, L, IN) if module.batch_first else (L, N, IN))
        with torch.no_grad():
            out, state = module(x)
        h_n = state[0] if isinstance(state, tuple) else state
        y, y_h = _ort(model, {"X": x.numpy()})[:2]  # y [N, L, D, H] (batch_first) or [L, D, N, H]
        y = y.reshape(out.shape) if module.batch_first else np.transpose(y, (0, 2, 1, 3)).reshape(out.shape)
        np.testing.assert_allclose(y, out.numpy(), **TOL)
        np.testing.assert_allclose(np.swapaxes(y_h, 0, 1) if module.batch_first else y_h, h_n.numpy(), **TOL)


def test_refusals_name_the_argument():
    p = jaxgru.GRUParams(np.zeros((1, 9, IN), np.float32), np.zeros((1, 9, H), np.float32))
    with pytest.raises(TypeError, match="unexpected option 'sequence_lens'"):
        to_onnx([p], {"sequence_lens": LENS})
    with pytest.raises(TypeError, match="unexpected option 'input_forget'"):
        to_onnx([p], {"input_forget": True})
    with pytest.raises(ValueError, match="direction must be one of"):
        to_onnx([p], {"direction": "backward"})
    with pytest.raises(ValueError, match=r"layers\[1\].w must have shape"):
        to_onnx([p, p], {})  # layer 1 must read H features
    with pytest.raises(ValueError, match="not a data input of the ONNX GRU"):
        to_onnx([p], {}, inputs=["initial_c"])
    with pytest.raises(TypeError, match="must be a concrete array"):
        jax.jit(lambda w: to_onnx([p._replace(w=w)], {}))(p.w)


# --------------------------------------------------------------------------------------
# jax2onnx: whole JAX models that call jaxgru
# --------------------------------------------------------------------------------------
@pytest.fixture
def jax2onnx():
    module = pytest.importorskip("jax2onnx")
    from jaxgru.interop import register_jax2onnx

    logging.getLogger("jax2onnx").setLevel(logging.ERROR)
    register_jax2onnx()
    register_jax2onnx()  # idempotent
    return module


def _run_exported(jax2onnx, fn, args, specs=None):
    want = [np.asarray(a) for a in jax.tree.leaves(fn(*args))]  # before: jax2onnx patches while tracing
    model = jax2onnx.to_onnx(fn, list(specs or args))
    onnx.checker.check_model(model, full_check=True)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = session.run(None, {i.name: a for i, a in zip(session.get_inputs(), args)})
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, **TOL)
    return model


def test_jax2onnx_plugins(jax2onnx):
    """One test: importing jax2onnx and its plugins takes ~8 s per process."""
    # a model calling the stacks and a layer
    rng = np.random.default_rng(3)
    gru_layers = _layers(rng, case("gru", 2, "bidirectional"))
    lstm_layers = _layers(rng, case("lstm", 1, "reverse", peepholes=True))
    lstm_layers = [lstm_layers[0]._replace(w=_rand(rng, 1, 4 * H, 2 * H))]
    options = {"direction": "bidirectional", "layout": 1, "linear_before_reset": True, "clip": 3.0}

    def model(x, lens, h0):  # GRU stack -> LSTM -> readout, batch-major
        y, h_n = jaxgru.gru_stack(gru_layers, x, sequence_lens=lens, initial_h=h0, **options)
        y2, _, c_n = jaxgru.lstm(lstm_layers[0], y.reshape(N, L, 2 * H), sequence_lens=lens, layout=1,
                                 direction="reverse", activations=["HardSigmoid", "Tanh", "Tanh"])
        return jnp.tanh(y2).sum(-1), h_n, c_n

    args = [rng.standard_normal((N, L, IN)).astype(np.float32), LENS, _rand(rng, N, 4, H)]
    exported = _run_exported(jax2onnx, model, args)
    ops = [n.op_type for n in exported.graph.node]
    assert ops.count("GRU") == 2 and ops.count("LSTM") == 1
    lstm = next(n for n in exported.graph.node if n.op_type == "LSTM")
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in lstm.attribute}
    assert attrs["direction"] == b"reverse" and len(lstm.input) == 8  # P given

    # a symbolic batch, and the cells
    gru = _layers(rng, case("gru"))[0]
    lstm = _layers(rng, case("lstm", peepholes=True))[0]
    x = rng.standard_normal((N, L, IN)).astype(np.float32)
    _run_exported(jax2onnx, lambda x: jaxgru.gru(gru, x, layout=1)[1], [x], [("B", L, IN)])
    h, c = _rand(rng, N, H), _rand(rng, N, H)
    _run_exported(jax2onnx, lambda x, h, c: jaxgru.lstm_cell(lstm, x, h, c, input_forget=True), [x[:, 0], h, c])

    # refused: weights with an ensemble axis (vmap), the forward under grad
    x = np.swapaxes(x, 0, 1)
    ensemble = jax.tree.map(lambda a: np.stack([a, a]), gru)
    with pytest.raises(NotImplementedError, match="ensemble axis of 2"):
        jax2onnx.to_onnx(lambda x: jax.vmap(lambda p: jaxgru.gru(p, x)[1])(ensemble), [x])
    with pytest.raises(NotImplementedError, match="saving residuals"):
        jax2onnx.to_onnx(jax.grad(lambda x: jaxgru.gru(gru, x)[1].sum()), [x])
