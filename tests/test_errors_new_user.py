"""The errors a new user meets first: initialisers, from_onnx's inputs, and the CLI's bench.

Each error is asserted by type and by the message's key phrases (the argument's name, what was
expected, what was given); the valid calls are checked against independent oracles.
"""

from __future__ import annotations

import math
import sys
from unittest import mock

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxgru
import jaxgru.__main__ as cli

onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from jaxgru.interop import from_onnx  # noqa: E402

I, H = 4, 6
KEY_PHRASE = "key must be a JAX PRNG key (jax.random.key(seed) or jax.random.PRNGKey(seed))"
DTYPE_PHRASE = "dtype must be a floating dtype (float16, bfloat16, float32 or float64)"


# --------------------------------------------------------------------------------------
# init_gru / init_lstm: key and dtype
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("init", [jaxgru.init_gru, jaxgru.init_lstm])
@pytest.mark.parametrize(("key", "got"), [
    (0, "got int."),
    (1.5, "got float."),
    ([0, 0], "got list."),
    (None, "got NoneType."),
    (np.zeros(2, np.int32), "got an array of dtype int32 and shape (2,)."),
    (np.zeros(2, np.float32), "got an array of dtype float32 and shape (2,)."),
    (np.zeros(3, np.uint32), "got an array of dtype uint32 and shape (3,)."),
    (np.uint32(7), "got an array of dtype uint32 and shape ()."),
], ids=["int", "float", "list", "None", "int32[2]", "float32[2]", "uint32[3]", "uint32[]"])
def test_a_bad_key_is_named(init, key, got):
    with pytest.raises(TypeError) as info:
        init(key, I, H)
    msg = str(info.value)
    assert msg.startswith(f"jaxgru.{init.__name__}: ") and KEY_PHRASE in msg and msg.endswith(got), msg


def test_a_batch_of_typed_keys_is_refused():
    keys = jax.random.split(jax.random.key(0), 3)
    with pytest.raises(TypeError, match=r"key must be a JAX PRNG key .*shape \(3,\)\.$"):
        jaxgru.init_gru(keys, I, H)


def test_a_bad_traced_key_is_refused_from_its_dtype_and_shape():
    with pytest.raises(TypeError, match=r"jaxgru.init_lstm: key must be a JAX PRNG key .*int32 and shape \(2,\)"):
        jax.jit(lambda k: jaxgru.init_lstm(k, I, H))(jnp.zeros(2, jnp.int32))


@pytest.mark.parametrize("init", [jaxgru.init_gru, jaxgru.init_lstm])
@pytest.mark.parametrize(("dtype", "got"), [
    (jnp.int32, "got int32."),
    (np.int8, "got int8."),
    (jnp.bool_, "got bool."),
    (jnp.complex64, "got complex64."),
    ("abc", "got 'abc'."),
    (object, "got object."),
], ids=["int32", "int8", "bool", "complex64", "abc", "object"])
def test_a_bad_dtype_is_named(init, dtype, got):
    with pytest.raises(TypeError) as info:
        init(jax.random.key(0), I, H, dtype=dtype)
    msg = str(info.value)
    assert msg == f"jaxgru.{init.__name__}: {DTYPE_PHRASE}; {got}", msg


def test_a_non_dtype_object_is_named_by_its_repr():
    with pytest.raises(TypeError, match=r"dtype must be a floating dtype .*; got <object object at"):
        jaxgru.init_gru(jax.random.key(0), I, H, dtype=object())


def _oracle(key, gates, bidirectional, dtype):
    """PyTorch's init as documented: U(-1/sqrt(H), 1/sqrt(H)), key split in three for w, r, b."""
    d, bound = (2 if bidirectional else 1), 1.0 / math.sqrt(H)
    kw, kr, kb = jax.random.split(key, 3)
    return (jax.random.uniform(kw, (d, gates * H, I), dtype, -bound, bound),
            jax.random.uniform(kr, (d, gates * H, H), dtype, -bound, bound),
            jax.random.uniform(kb, (d, 2 * gates * H), dtype, -bound, bound))


@pytest.mark.parametrize("make_key", [jax.random.key, jax.random.PRNGKey], ids=["typed", "legacy"])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16, jnp.float16, "float32"])
@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize(("init", "gates"), [(jaxgru.init_gru, 3), (jaxgru.init_lstm, 4)], ids=["gru", "lstm"])
def test_valid_keys_and_dtypes_give_the_documented_values(make_key, dtype, bidirectional, init, gates):
    key = make_key(42)
    params = init(key, I, H, bidirectional=bidirectional, dtype=dtype)
    want = _oracle(key, gates, bidirectional, dtype)
    for got, expected in zip(params[:3], want, strict=True):
        assert got.shape == expected.shape and got.dtype == jnp.dtype(dtype)
        np.testing.assert_array_equal(np.asarray(got, np.float32), np.asarray(expected, np.float32))
        bound = np.float32(1 / math.sqrt(H))
        assert np.all(np.abs(np.asarray(got, np.float32)) <= bound)
    if init is jaxgru.init_lstm:
        assert params.p is None


def test_float64_with_x64(jax_x64):
    key = jax.random.key(3)
    params = jaxgru.init_gru(key, I, H, dtype=jnp.float64)
    assert params.w.dtype == jnp.float64
    np.testing.assert_array_equal(params.w, _oracle(key, 3, False, jnp.float64)[0])


@pytest.mark.parametrize("make_key", [jax.random.key, jax.random.PRNGKey], ids=["typed", "legacy"])
def test_valid_keys_work_under_jit(make_key):
    key = make_key(5)
    got = jax.jit(lambda k: jaxgru.init_lstm(k, I, H).r)(key)
    np.testing.assert_array_equal(got, _oracle(key, 4, False, jnp.float32)[1])


# --------------------------------------------------------------------------------------
# from_onnx: serialized bytes, the layout attribute's opset
# --------------------------------------------------------------------------------------
def _model(op="GRU", opset=22, **attrs):
    gates = 3 if op == "GRU" else 4
    rng = np.random.default_rng(0)
    inits = {"W": rng.uniform(-1, 1, (1, gates * H, I)), "R": rng.uniform(-1, 1, (1, gates * H, H)),
             "B": rng.uniform(-1, 1, (1, 2 * gates * H))}
    node = helper.make_node(op, ["X", "W", "R", "B"], ["Y"], name="rnn", hidden_size=H, **attrs)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [5, 3, I])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8  # what onnxruntime reads for opsets 13-15 (and accepts later ones with)
    return model


def _same(a, b):
    (la, oa), (lb, ob) = a, b
    assert oa == ob and [type(p) for p in la] == [type(p) for p in lb]
    for pa, pb in zip(la, lb, strict=True):
        for x, y in zip(pa, pb, strict=True):
            assert (x is None and y is None) or (x.dtype == y.dtype and np.array_equal(x, y))


@pytest.mark.parametrize("op", ["GRU", "LSTM"])
@pytest.mark.parametrize("wrap", [bytes, bytearray, memoryview])
def test_from_onnx_reads_serialized_bytes(op, wrap):
    model = _model(op, direction="forward", clip=3.0, activation_alpha=[0.5], activations=(
        ["HardSigmoid", "Tanh"] if op == "GRU" else ["HardSigmoid", "Tanh", "Tanh"]))
    _same(from_onnx(wrap(model.SerializeToString())), from_onnx(model))


def test_from_onnx_reads_every_option_attribute():
    """The attributes become options of the right Python types (an independent literal)."""
    model = _model("GRU", direction="reverse", layout=0, linear_before_reset=1, clip=2.5,
                   activations=["HardSigmoid", "Tanh"], activation_alpha=[0.25], activation_beta=[0.5])
    _, options = from_onnx(model.SerializeToString())
    assert options == {"direction": "reverse", "layout": 0, "linear_before_reset": True, "clip": 2.5,
                       "activations": ["HardSigmoid", "Tanh"], "activation_alpha": [0.25],
                       "activation_beta": [0.5]}
    assert type(options["linear_before_reset"]) is bool and type(options["layout"]) is int
    _, options = from_onnx(_model("LSTM", input_forget=1, output_sequence=1))  # output_sequence: ignored
    assert options == {"direction": "forward", "layout": 0, "input_forget": True}


@pytest.mark.parametrize("data", [b"not a model", bytearray(b"\xff\xff\xff"), memoryview(b"\x0a\xff")])
def test_bytes_that_do_not_parse_are_named(data):
    with pytest.raises(ValueError) as info:
        from_onnx(data)
    msg = str(info.value)
    assert msg.startswith("jaxgru.interop.from_onnx: model must be a serialized onnx.ModelProto; got "
                          f"{type(data).__name__} of {len(bytes(data))} byte(s) that do not parse"), msg


def test_a_wrong_model_type_lists_bytes():
    with pytest.raises(TypeError, match=r"model must be an onnx.ModelProto or a path \(or the model's "
                                        r"serialized bytes\); got int\."):
        from_onnx(42)


@pytest.mark.parametrize("op", ["GRU", "LSTM"])
@pytest.mark.parametrize("layout", [0, 1])
@pytest.mark.parametrize("opset", [7, 13])
def test_layout_before_opset_14_is_refused(op, layout, opset):
    model = _model(op, opset=opset, layout=layout)
    for m in (model, model.SerializeToString()):
        with pytest.raises(ValueError) as info:
            from_onnx(m)
        msg = str(info.value)
        assert msg.startswith(f"jaxgru.interop.from_onnx: node 0 ({op} 'rnn') has the attribute 'layout'"), msg
        assert f"added to {op} in opset 14" in msg and f"imports opset {opset}" in msg, msg


@pytest.mark.parametrize("op", ["GRU", "LSTM"])
def test_layout_from_opset_14_and_no_layout_before_are_read(op):
    assert from_onnx(_model(op, opset=14, layout=1))[1]["layout"] == 1
    assert from_onnx(_model(op, opset=13))[1]["layout"] == 0
    ai_onnx = _model(op, opset=13, layout=0)
    ai_onnx.opset_import[0].domain = "ai.onnx"  # the default domain's other spelling
    with pytest.raises(ValueError, match="imports opset 13"):
        from_onnx(ai_onnx)


@pytest.mark.parametrize("op", ["GRU", "LSTM"])
def test_onnxruntime_refuses_layout_before_opset_14_too(op):
    """The oracle for the rule: onnxruntime rejects the model at load, accepts it at opset 14."""
    ort = pytest.importorskip("onnxruntime")

    def loads(model):
        try:
            ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        except Exception as e:  # onnxruntime's InvalidGraph
            assert "Unrecognized attribute: layout" in str(e), e
            return False
        return True

    assert not loads(_model(op, opset=13, layout=0))
    assert loads(_model(op, opset=14, layout=0)) and loads(_model(op, opset=13))


# --------------------------------------------------------------------------------------
# python -m jaxgru bench without its requirements
# --------------------------------------------------------------------------------------
def test_bench_without_tqdm_says_what_to_install(capsys):
    with mock.patch.dict(sys.modules, {"tqdm": None}), mock.patch("runpy.run_path") as run:
        code = cli.main(["bench"])
    err = capsys.readouterr().err
    assert code == 2 and not run.called
    assert "python -m jaxgru bench needs tqdm" in err and "missing: tqdm" in err, err
    assert "pip install tqdm" in err and "pip install 'jaxgru[bench]'" in err and "Traceback" not in err, err


def test_bench_with_a_peer_module_missing_says_what_to_install(capsys):
    missing = ModuleNotFoundError("No module named 'torch'", name="torch")
    with mock.patch("runpy.run_path", side_effect=missing):
        code = cli.main(["bench"])
    err = capsys.readouterr().err
    assert code == 2 and "missing: torch" in err and "pip install torch" in err, err


def test_bench_does_not_hide_other_missing_modules():
    missing = ModuleNotFoundError("No module named 'no_such_module'", name="no_such_module")
    with mock.patch("runpy.run_path", side_effect=missing), pytest.raises(ModuleNotFoundError):
        cli.main(["bench"])


# --------------------------------------------------------------------------------------
# the layers and modules: errors that blame the argument that is wrong
# --------------------------------------------------------------------------------------
def test_x_features_not_the_weights_are_blamed():
    params = jaxgru.init_gru(jax.random.key(0), I, H)
    with pytest.raises(ValueError) as info:
        jaxgru.gru(params, jnp.zeros((5, 3, I + 1)))
    msg = str(info.value)
    assert msg.startswith("jaxgru.gru: x has 5 features on its last axis"), msg
    assert "input_size=4" in msg and "(1, 18, 4)" in msg


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_bidirectional_params_without_direction_say_what_to_pass(cell):
    init, layer = (jaxgru.init_gru, jaxgru.gru) if cell == "gru" else (jaxgru.init_lstm, jaxgru.lstm)
    params = init(jax.random.key(0), I, H, bidirectional=True)
    with pytest.raises(ValueError) as info:
        layer(params, jnp.zeros((5, 3, I)))
    msg = str(info.value)
    assert f"jaxgru.{cell}: the params hold 2 direction(s)" in msg
    assert "direction='forward' runs 1" in msg and "pass direction='bidirectional'" in msg


def _modules():
    from flax import nnx

    import jaxgru.equinox
    import jaxgru.flax

    return {
        "jaxgru.flax.GRU": jaxgru.flax.GRU(I, H, rngs=nnx.Rngs(0)),
        "jaxgru.flax.LSTM": jaxgru.flax.LSTM(I, H, num_layers=2, rngs=nnx.Rngs(0)),
        "jaxgru.equinox.GRU": jaxgru.equinox.GRU(I, H, key=jax.random.key(0)),
        "jaxgru.equinox.LSTM": jaxgru.equinox.LSTM(I, H, bidirectional=True, key=jax.random.key(0)),
    }


@pytest.mark.parametrize("name", ["jaxgru.flax.GRU", "jaxgru.flax.LSTM", "jaxgru.equinox.GRU",
                                  "jaxgru.equinox.LSTM"])
def test_a_module_names_itself_and_its_input_size(name):
    model = _modules()[name]
    with pytest.raises(ValueError) as info:
        model(jnp.zeros((5, 3, I + 1)))
    msg = str(info.value)
    assert msg.startswith(f"{name}: x has 5 features on its last axis, but the module's input_size is 4"), msg
    assert "layers[0]" not in msg


def test_numpy_float64_input_is_silent_like_jnp(recwarn):
    """numpy's default dtype computes in float32 without x64, as jnp.tanh(x) does: no warnings."""
    x = np.random.default_rng(0).standard_normal((5, 3, I))  # float64
    assert x.dtype == np.float64
    gp, lp = jaxgru.init_gru(jax.random.key(0), I, H), jaxgru.init_lstm(jax.random.key(1), I, H)
    with jax.numpy_dtype_promotion("standard"):
        y, _ = jaxgru.gru(gp, x, initial_h=np.zeros((1, 3, H)))
        outs = jaxgru.lstm(lp, x, initial_c=np.zeros((1, 3, H)))
        jaxgru.gru_stack([gp], x)
        jaxgru.lstm_cell(lp, x[0], np.zeros((3, H)), np.zeros((3, H)))
        for model in _modules().values():
            model(x)
        want = jnp.tanh(x)
    assert not [w for w in recwarn.list if "float64" in str(w.message)], [str(w.message) for w in recwarn.list]
    assert y.dtype == outs[0].dtype == want.dtype == jnp.float32
