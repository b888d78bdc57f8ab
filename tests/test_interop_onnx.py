"""jaxgru.interop.from_onnx against onnxruntime running the same hand-built models."""

from __future__ import annotations

import chex
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import jaxgru  # noqa: E402
from jaxgru.interop import from_onnx  # noqa: E402

L, N, IN, H = 4, 2, 3, 5
TOL = {"atol": 1e-5, "rtol": 1e-5}
F32 = TensorProto.FLOAT


def _rand(rng, *shape):
    return rng.uniform(-0.6, 0.6, shape).astype(np.float32)


def _model(nodes, initializers, inputs, outputs):
    graph = helper.make_graph(
        nodes, "rnn",
        [helper.make_tensor_value_info(n, t, None) for n, t in inputs],
        [helper.make_tensor_value_info(n, F32, None) for n in outputs],
        initializer=[numpy_helper.from_array(v, k) for k, v in initializers.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])
    model.ir_version = 10
    return model


def _ort(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def test_gru_default_attributes_with_initial_h():
    rng = np.random.default_rng(0)
    w, r, b = _rand(rng, 1, 3 * H, IN), _rand(rng, 1, 3 * H, H), _rand(rng, 1, 6 * H)
    x, h0 = _rand(rng, L, N, IN) * 2, _rand(rng, 1, N, H)
    node = helper.make_node("GRU", ["X", "W", "R", "B", "", "h0"], ["Y", "Y_h"], hidden_size=H)
    model = _model([node], {"W": w, "R": r, "B": b}, [("X", F32), ("h0", F32)], ["Y", "Y_h"])
    want = _ort(model, {"X": x, "h0": h0})
    layers, options = from_onnx(model)
    assert options == {"direction": "forward", "layout": 0, "linear_before_reset": False}
    chex.assert_trees_all_equal(layers[0], jaxgru.GRUParams(w, r, b))
    got = jaxgru.gru(layers[0], x, initial_h=h0, **options)
    chex.assert_trees_all_close(got, tuple(want), **TOL)


def test_gru_attributes():
    rng = np.random.default_rng(1)
    d = 2
    w, r, b = _rand(rng, d, 3 * H, IN), _rand(rng, d, 3 * H, H), _rand(rng, d, 6 * H)
    x = _rand(rng, L, N, IN) * 2
    attrs = {
        "hidden_size": H, "direction": "bidirectional", "linear_before_reset": 1, "clip": 1.5,
        "activations": ["HardSigmoid", "Tanh", "Sigmoid", "LeakyRelu"],
        "activation_alpha": [0.3, 0.05], "activation_beta": [0.45],
    }
    node = helper.make_node("GRU", ["X", "W", "R", "B"], ["Y", "Y_h"], **attrs)
    model = _model([node], {"W": w, "R": r, "B": b}, [("X", F32)], ["Y", "Y_h"])
    want = _ort(model, {"X": x})
    layers, options = from_onnx(model)
    assert options["activations"] == attrs["activations"] and options["clip"] == 1.5
    got = jaxgru.gru(layers[0], x, **options)
    chex.assert_trees_all_close(got, tuple(want), **TOL)


def test_lstm_peepholes_without_bias_and_constant_weights():
    rng = np.random.default_rng(2)
    w, r, p = _rand(rng, 1, 4 * H, IN), _rand(rng, 1, 4 * H, H), _rand(rng, 1, 3 * H)
    x, c0 = _rand(rng, L, N, IN) * 2, _rand(rng, 1, N, H)
    const = [helper.make_node("Constant", [], [name], value=numpy_helper.from_array(v))
             for name, v in (("W", w), ("R", r))]
    node = helper.make_node("LSTM", ["X", "W", "R", "", "lens", "", "c0", "P"], ["Y", "Y_h", "Y_c"],
                            hidden_size=H, direction="reverse", input_forget=1)
    model = _model([*const, node], {"P": p}, [("X", F32), ("lens", TensorProto.INT32), ("c0", F32)],
                   ["Y", "Y_h", "Y_c"])
    lens = np.array([L, L - 1], np.int32)
    want = _ort(model, {"X": x, "lens": lens, "c0": c0})
    layers, options = from_onnx(model)
    assert layers[0].b is None
    assert options == {"direction": "reverse", "layout": 0, "input_forget": True}
    got = jaxgru.lstm(layers[0], x, initial_c=c0, sequence_lens=lens, **options)
    chex.assert_trees_all_close(got, tuple(want), **TOL)


def _two_layer_model(rng, second_attrs=None, input2=2 * H):
    """GRU -> (Transpose, Reshape: directions side by side) -> GRU, both bidirectional."""
    ws = {"W1": _rand(rng, 2, 3 * H, IN), "R1": _rand(rng, 2, 3 * H, H), "B1": _rand(rng, 2, 6 * H),
          "W2": _rand(rng, 2, 3 * H, input2), "R2": _rand(rng, 2, 3 * H, H),
          "B2": _rand(rng, 2, 6 * H), "shape": np.array([0, 0, -1], np.int64)}
    attrs = {"direction": "bidirectional", "linear_before_reset": 1, "hidden_size": H}
    nodes = [
        helper.make_node("GRU", ["X", "W1", "R1", "B1"], ["Y1", "Yh1"], name="gru1", **attrs),
        helper.make_node("Transpose", ["Y1"], ["T1"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["T1", "shape"], ["X2"]),
        helper.make_node("GRU", ["X2", "W2", "R2", "B2"], ["Y", "Yh2"], name="gru2",
                         **(second_attrs or attrs)),
    ]
    return _model(nodes, ws, [("X", F32)], ["Y", "Yh1", "Yh2"]), ws


def test_two_nodes_as_a_stack():
    rng = np.random.default_rng(3)
    model, _ = _two_layer_model(rng)
    x = _rand(rng, L, N, IN) * 2
    y, yh1, yh2 = _ort(model, {"X": x})
    layers, options = from_onnx(model)
    assert len(layers) == 2
    got_y, got_h = jaxgru.gru_stack(layers, x, **options)
    chex.assert_trees_all_close((got_y, got_h), (y, np.concatenate([yh1, yh2])), **TOL)


def test_node_selection_and_disagreeing_nodes(tmp_path):
    rng = np.random.default_rng(4)
    model, ws = _two_layer_model(rng, second_attrs={"direction": "bidirectional", "hidden_size": H})
    with pytest.raises(ValueError, match="pass node="):
        from_onnx(model)
    path = tmp_path / "two.onnx"
    onnx.save(model, path)
    for which in (1, "gru2", -1):
        layers, options = from_onnx(str(path) if which == 1 else path, node=which)
        chex.assert_trees_all_equal(layers[0].w, ws["W2"])
        assert options["linear_before_reset"] is False
    assert from_onnx(model, node="gru1")[1]["linear_before_reset"] is True
    with pytest.raises(ValueError, match="no GRU/LSTM node named 'gru3'"):
        from_onnx(model, node="gru3")
    with pytest.raises(ValueError, match="out of range"):
        from_onnx(model, node=2)
    chained, _ = _two_layer_model(rng, input2=H)
    with pytest.raises(ValueError, match="do not form a stack"):
        from_onnx(chained)


def test_layout_attribute_and_errors():
    rng = np.random.default_rng(5)
    w, r = _rand(rng, 1, 4 * H, IN), _rand(rng, 1, 4 * H, H)
    node = helper.make_node("LSTM", ["X", "W", "R"], ["Y"], hidden_size=H, layout=1)
    _, options = from_onnx(_model([node], {"W": w, "R": r}, [("X", F32)], ["Y"]))
    assert options["layout"] == 1
    as_input = _model([node], {"R": r}, [("X", F32), ("W", F32)], ["Y"])
    with pytest.raises(ValueError, match=r"input W .* is a graph input"):
        from_onnx(as_input)
    computed = _model([helper.make_node("Identity", ["W0"], ["W"], name="id"), node], {"W0": w, "R": r},
                      [("X", F32)], ["Y"])
    with pytest.raises(ValueError, match="computed by a Identity node 'id'"):
        from_onnx(computed)
    wrong = helper.make_node("LSTM", ["X", "W", "R"], ["Y"], hidden_size=H + 1)
    with pytest.raises(ValueError, match="hidden_size=6 does not match"):
        from_onnx(_model([wrong], {"W": w, "R": r}, [("X", F32)], ["Y"]))
    with pytest.raises(ValueError, match="no GRU or LSTM node"):
        from_onnx(_model([helper.make_node("Relu", ["X"], ["Y"])], {}, [("X", F32)], ["Y"]))
    with pytest.raises(TypeError, match="ModelProto or a path"):
        from_onnx(42)
