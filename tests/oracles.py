"""Independent oracles: onnxruntime one-node models and random ONNX-layout inputs."""

from __future__ import annotations

import dataclasses

import numpy as np

import jaxgru

ORT_DEFAULT_ZERO = ("Affine", "ScaledTanh", "ThresholdedRelu")  # ORT uses 0 for missing params


@dataclasses.dataclass
class Case:
    """One ONNX GRU/LSTM call: numpy inputs in ONNX layout 0, plus attributes."""

    cell: str
    x: np.ndarray
    w: np.ndarray
    r: np.ndarray
    b: np.ndarray | None = None
    p: np.ndarray | None = None
    h0: np.ndarray | None = None
    c0: np.ndarray | None = None
    lens: np.ndarray | None = None
    attrs: dict = dataclasses.field(default_factory=dict)

    @property
    def params(self):
        if self.cell == "gru":
            return jaxgru.GRUParams(self.w, self.r, self.b)
        return jaxgru.LSTMParams(self.w, self.r, self.b, self.p)

    def kwargs(self, layout: int = 0) -> dict:
        """Keyword arguments for jaxgru.gru / jaxgru.lstm (states transposed for layout 1)."""
        kw = {}
        a = self.attrs
        if "direction" in a:
            kw["direction"] = a["direction"]
        if "linear_before_reset" in a:
            kw["linear_before_reset"] = bool(a["linear_before_reset"])
        if "input_forget" in a:
            kw["input_forget"] = bool(a["input_forget"])
        for k in ("activations", "activation_alpha", "activation_beta", "clip"):
            if k in a:
                kw[k] = a[k]
        st = (lambda s: s) if layout == 0 else (lambda s: np.swapaxes(s, 0, 1))
        if self.h0 is not None:
            kw["initial_h"] = st(self.h0)
        if self.c0 is not None:
            kw["initial_c"] = st(self.c0)
        if self.lens is not None:
            kw["sequence_lens"] = self.lens
        kw["layout"] = layout
        return kw

    def run(self, layout: int = 0, **extra):
        fn = jaxgru.gru if self.cell == "gru" else jaxgru.lstm
        x = self.x if layout == 0 else np.swapaxes(self.x, 0, 1)
        return fn(self.params, x, **self.kwargs(layout), **extra)


def random_case(
    rng: np.random.Generator, cell: str, *, L=5, N=3, I=4, H=6, direction="forward",
    bias=True, peep=False, h0=False, c0=False, lens=None, scale=0.5, dtype=np.float32, **attrs,
) -> Case:
    d = 2 if direction == "bidirectional" else 1
    g = 3 if cell == "gru" else 4
    f = lambda *s: (rng.standard_normal(s) * scale).astype(dtype)
    attrs = dict(attrs)
    if direction != "forward":
        attrs["direction"] = direction
    case = Case(cell, f(L, N, I) * 2, f(d, g * H, I), f(d, g * H, H), attrs=attrs)
    if bias:
        case.b = f(d, 2 * g * H)
    if peep:
        case.p = f(d, 3 * H)
    if h0:
        case.h0 = f(d, N, H)
    if c0:
        case.c0 = f(d, N, H)
    if lens is not None:
        case.lens = np.asarray(lens, np.int32)
    return case


def ort_run(case: Case):
    """Run the case as a one-node ONNX model in onnxruntime (CPU). Returns Y, Y_h[, Y_c]."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    op = "GRU" if case.cell == "gru" else "LSTM"
    hidden = case.r.shape[-1]
    names = ["X", "W", "R", "B", "sequence_lens", "initial_h"]
    values = [case.x, case.w, case.r, case.b, case.lens, case.h0]
    if op == "LSTM":
        names += ["initial_c", "P"]
        values += [case.c0, case.p]
    # trailing absent inputs are dropped, inner ones are empty names
    while values and values[-1] is None:
        names.pop()
        values.pop()
    attrs = dict(case.attrs, hidden_size=hidden)
    if "clip" in attrs and attrs["clip"] is None:
        del attrs["clip"]
    outs = ["Y", "Y_h"] + (["Y_c"] if op == "LSTM" else [])
    node = helper.make_node(op, [n if v is not None else "" for n, v in zip(names, values)], outs, **attrs)
    elem = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float64): TensorProto.DOUBLE,
            np.dtype(np.float16): TensorProto.FLOAT16}[case.x.dtype]
    inputs = [
        helper.make_tensor_value_info(n, TensorProto.INT32 if n == "sequence_lens" else elem, v.shape)
        for n, v in zip(names, values) if v is not None
    ]
    length, batch = case.x.shape[:2]
    d = case.w.shape[0]
    out_shapes = [(length, d, batch, hidden)] + [(d, batch, hidden)] * (len(outs) - 1)
    graph = helper.make_graph(
        [node], "rnn", inputs,
        [helper.make_tensor_value_info(o, elem, s) for o, s in zip(outs, out_shapes)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])
    model.ir_version = 10
    onnx.checker.check_model(model)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {n: v for n, v in zip(names, values) if v is not None})
