"""Independent oracles: onnxruntime one-node models and random ONNX-layout inputs."""

from __future__ import annotations

import dataclasses
import zlib

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


def seed_of(name: str) -> int:
    """A seed fixed by a test's name. Python's ``hash`` of a string changes with every process
    (PYTHONHASHSEED), which made such tests draw new data on every run."""
    return zlib.crc32(name.encode())


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


# ---- a float64 numpy oracle, written from the ONNX operator definitions -----------------
# Used where onnxruntime is known to be wrong (its Softplus, log(1 + e^x), overflows above
# x ≈ 88.7, and the inf spreads through the state). Nothing here comes from jaxgru.
_NP_ACTS = {  # name: (fn(x, alpha, beta), takes alpha, takes beta, default alpha, default beta)
    "relu": (lambda x, a, b: np.maximum(x, 0), False, False, 0, 0),
    "tanh": (lambda x, a, b: np.tanh(x), False, False, 0, 0),
    "sigmoid": (lambda x, a, b: 0.5 * (1 + np.tanh(x / 2)), False, False, 0, 0),
    "affine": (lambda x, a, b: a * x + b, True, True, 1.0, 0.0),
    "leakyrelu": (lambda x, a, b: np.where(x >= 0, x, a * x), True, False, 0.01, 0),
    "thresholdedrelu": (lambda x, a, b: np.where(x > a, x, 0), True, False, 1.0, 0),
    "scaledtanh": (lambda x, a, b: a * np.tanh(b * x), True, True, 1.0, 1.0),
    "hardsigmoid": (lambda x, a, b: np.clip(a * x + b, 0, 1), True, True, 0.2, 0.5),
    "elu": (lambda x, a, b: np.where(x >= 0, x, a * np.expm1(np.minimum(x, 0))), True, False, 1.0, 0),
    "softsign": (lambda x, a, b: x / (1 + np.abs(x)), False, False, 0, 0),
    "softplus": (lambda x, a, b: np.logaddexp(0, x), False, False, 0, 0),
}


def _np_activations(case: Case, per: int, d: int) -> list[list]:
    """Per direction, the activation functions (alpha/beta bound) in the attribute order."""
    names = case.attrs.get("activations") or (["Sigmoid", "Tanh"] if per == 2 else ["Sigmoid", "Tanh", "Tanh"]) * d
    alphas = list(case.attrs.get("activation_alpha", []))
    betas = list(case.attrs.get("activation_beta", []))
    fns = []
    for name in names:
        fn, ta, tb, da, db = _NP_ACTS[name.lower()]
        a = alphas.pop(0) if ta and alphas else da
        b = betas.pop(0) if tb and betas else db
        fns.append(lambda x, fn=fn, a=a, b=b: fn(x, a, b))
    return [fns[k * per:(k + 1) * per] for k in range(d)]


def numpy_run(case: Case) -> list[np.ndarray]:
    """The ONNX GRU/LSTM in float64 numpy (layout 0). Rows of length 0 keep their initial state
    (jaxgru's decision). Returns Y, Y_h[, Y_c] in float64 (inf/NaN where float64 overflows)."""
    with np.errstate(all="ignore"):
        return _numpy_run(case)


def _numpy_run(case: Case) -> list[np.ndarray]:
    lstm = case.cell == "lstm"
    x = case.x.astype(np.float64)
    length, batch = x.shape[:2]
    d, hidden = case.w.shape[0], case.r.shape[-1]
    g = 4 if lstm else 3
    zeros = np.zeros((d, batch, hidden))
    b = np.zeros((d, 2 * g * hidden)) if case.b is None else case.b.astype(np.float64)
    p = np.zeros((d, 3 * hidden)) if case.p is None else case.p.astype(np.float64)
    h0 = zeros if case.h0 is None else case.h0.astype(np.float64)
    c0 = zeros if case.c0 is None else case.c0.astype(np.float64)
    lens = np.full(batch, length) if case.lens is None else case.lens
    clip = case.attrs.get("clip")
    cl = (lambda v: v) if clip is None else (lambda v: np.clip(v, -clip, clip))
    acts = _np_activations(case, 3 if lstm else 2, d)
    direction = case.attrs.get("direction", "forward")
    y = np.zeros((length, d, batch, hidden))
    y_h, y_c = h0.copy(), c0.copy()
    for k in range(d):
        reverse = direction == "reverse" or k == 1
        W = np.split(case.w[k].astype(np.float64), g)
        R = np.split(case.r[k].astype(np.float64), g)
        Wb, Rb = np.split(b[k], 2 * g)[:g], np.split(b[k], 2 * g)[g:]
        for n in range(batch):
            h, c = h0[k, n], c0[k, n]
            steps = range(lens[n])
            for t in (reversed(steps) if reverse else steps):
                xt = x[t, n]
                if lstm:
                    f, gg, hh = acts[k]
                    pi, po, pf = np.split(p[k], 3)
                    i = f(cl(xt @ W[0].T + h @ R[0].T + pi * c + Wb[0] + Rb[0]))
                    if case.attrs.get("input_forget"):
                        fg = 1 - i
                    else:
                        fg = f(cl(xt @ W[2].T + h @ R[2].T + pf * c + Wb[2] + Rb[2]))
                    c = fg * c + i * gg(cl(xt @ W[3].T + h @ R[3].T + Wb[3] + Rb[3]))
                    o = f(cl(xt @ W[1].T + h @ R[1].T + po * c + Wb[1] + Rb[1]))
                    h = o * hh(c)
                else:
                    f, gg = acts[k]
                    z = f(cl(xt @ W[0].T + h @ R[0].T + Wb[0] + Rb[0]))
                    r = f(cl(xt @ W[1].T + h @ R[1].T + Wb[1] + Rb[1]))
                    if case.attrs.get("linear_before_reset"):
                        ht = gg(cl(xt @ W[2].T + r * (h @ R[2].T + Rb[2]) + Wb[2]))
                    else:
                        ht = gg(cl(xt @ W[2].T + (r * h) @ R[2].T + Rb[2] + Wb[2]))
                    h = (1 - z) * ht + z * h
                y[t, k, n] = h
            y_h[k, n], y_c[k, n] = h, c
    return [y, y_h] + ([y_c] if lstm else [])
