"""WebNN and Apple BNNS Graph converters against numpy transcriptions of the published formulas.

The references below are written from the W3C WebNN specification (gru/gruCell, lstm/lstmCell
and their emulation notes) and from Apple's BNNSGraph.Builder gru/lstm documentation, gate by
gate in each system's own layout, without any of jaxgru's code.
"""

from __future__ import annotations

import chex
import numpy as np
import pytest

import jaxgru
from jaxgru.interop import from_bnns_gru, from_bnns_lstm, from_webnn_gru, from_webnn_lstm

L, N, IN, H = 4, 2, 3, 5
TOL = {"atol": 1e-5, "rtol": 1e-5}
ACT = {
    "sigmoid": lambda v: 1 / (1 + np.exp(-v)),
    "tanh": np.tanh,
    "relu": lambda v: np.maximum(v, 0),
}


def _rand(rng, *shape):
    return rng.uniform(-0.6, 0.6, shape).astype(np.float32)


def _gate(a, layout, gate):
    """The block of gate `gate` (a letter) of blocks stacked along axis 0 in `layout` order."""
    k, h = layout.index(gate), a.shape[0] // len(layout)
    return a[k * h : (k + 1) * h]


# ------------------------------------------------------------------------------------------
# WebNN references
# ------------------------------------------------------------------------------------------
def _webnn_steps(direction, steps, dir_index):
    backward = dir_index == 1 or direction == "backward"
    return [steps - 1 - t for t in range(steps)] if backward else list(range(steps))


def webnn_gru(x, weight, recurrent_weight, bias, recurrent_bias, h0, *, layout, reset_after,
              direction, activations=("sigmoid", "tanh")):
    """WebNN gru: returns (output hidden [D, N, H], sequence [steps, D, N, H])."""
    f, g = (ACT[a] for a in activations)
    steps, d = x.shape[0], weight.shape[0]
    zero = np.zeros(3 * H, np.float64)
    seq = np.zeros((steps, d, x.shape[1], H))
    last = []
    for k in range(d):
        w, rw = weight[k].astype(np.float64), recurrent_weight[k].astype(np.float64)
        b = zero if bias is None else bias[k]
        rb = zero if recurrent_bias is None else recurrent_bias[k]
        h = h0[k].astype(np.float64)
        for t in _webnn_steps(direction, steps, k):
            xt = x[t]
            lin = lambda gate, xt=xt, w=w, b=b: xt @ _gate(w, layout, gate).T + _gate(b, layout, gate)
            z = f(lin("z") + h @ _gate(rw, layout, "z").T + _gate(rb, layout, "z"))
            r = f(lin("r") + h @ _gate(rw, layout, "r").T + _gate(rb, layout, "r"))
            if reset_after:
                n = g(lin("n") + r * (h @ _gate(rw, layout, "n").T + _gate(rb, layout, "n")))
            else:
                n = g(lin("n") + _gate(rb, layout, "n") + (r * h) @ _gate(rw, layout, "n").T)
            h = z * h + (1 - z) * n
            seq[t, k] = h  # the backward sequence is prepended: input order
        last.append(h)
    return np.stack(last), seq


def webnn_lstm(x, weight, recurrent_weight, bias, recurrent_bias, peephole, h0, c0, *, layout,
               direction, activations=("sigmoid", "tanh", "tanh")):
    """WebNN lstm: returns (hidden [D, N, H], cell [D, N, H], sequence [steps, D, N, H])."""
    f, g, hh = (ACT[a] for a in activations)
    steps, d = x.shape[0], weight.shape[0]
    zero = np.zeros(4 * H, np.float64)
    seq = np.zeros((steps, d, x.shape[1], H))
    hs, cs = [], []
    for k in range(d):
        w, rw = weight[k].astype(np.float64), recurrent_weight[k].astype(np.float64)
        b = zero if bias is None else bias[k]
        rb = zero if recurrent_bias is None else recurrent_bias[k]
        p = np.zeros(3 * H) if peephole is None else peephole[k]
        p_i, p_o, p_f = p[:H], p[H : 2 * H], p[2 * H :]
        h, c = h0[k].astype(np.float64), c0[k].astype(np.float64)
        for t in _webnn_steps(direction, steps, k):
            pre = lambda gate, xt=x[t], h=h, w=w, rw=rw, b=b, rb=rb: (
                xt @ _gate(w, layout, gate).T + h @ _gate(rw, layout, gate).T
                + _gate(b, layout, gate) + _gate(rb, layout, gate))
            i = f(c * p_i + pre("i"))
            fg = f(c * p_f + pre("f"))
            cand = g(pre("g"))
            o = f(c * p_o + pre("o"))  # WebNN: the *previous* cell state
            c = fg * c + i * cand
            h = o * hh(c)
            seq[t, k] = h
        hs.append(h)
        cs.append(c)
    return np.stack(hs), np.stack(cs), seq


@pytest.mark.parametrize(
    ("layout", "reset_after", "direction", "biases"),
    [
        ("zrn", True, "forward", (True, True)),
        ("rzn", True, "forward", (True, False)),
        ("rzn", False, "forward", (False, True)),
        ("zrn", True, "both", (True, True)),
        ("rzn", False, "backward", (True, True)),
    ],
)
def test_webnn_gru(layout, reset_after, direction, biases):
    rng = np.random.default_rng(0)
    d = 2 if direction == "both" else 1
    x = _rand(rng, L, N, IN) * 2
    weight, recurrent_weight = _rand(rng, d, 3 * H, IN), _rand(rng, d, 3 * H, H)
    bias = _rand(rng, d, 3 * H) if biases[0] else None
    recurrent_bias = _rand(rng, d, 3 * H) if biases[1] else None
    h0 = _rand(rng, d, N, H)
    want_h, want_seq = webnn_gru(x, weight, recurrent_weight, bias, recurrent_bias, h0,
                                 layout=layout, reset_after=reset_after, direction=direction)
    layers, options = from_webnn_gru(weight, recurrent_weight, bias, recurrent_bias, layout=layout,
                                     reset_after=reset_after, direction=direction)
    y, y_h = jaxgru.gru(layers[0], x, initial_h=h0, **options)
    chex.assert_trees_all_close((y, y_h), (want_seq, want_h), **TOL)


def test_webnn_gru_activations():
    rng = np.random.default_rng(1)
    x = _rand(rng, L, N, IN) * 2
    weight, recurrent_weight, bias = _rand(rng, 1, 3 * H, IN), _rand(rng, 1, 3 * H, H), _rand(rng, 1, 3 * H)
    h0 = _rand(rng, 1, N, H)
    acts = ("sigmoid", "relu")
    want_h, want_seq = webnn_gru(x, weight, recurrent_weight, bias, None, h0, layout="zrn",
                                 reset_after=True, direction="forward", activations=acts)
    layers, options = from_webnn_gru(weight, recurrent_weight, bias, activations=acts)
    assert options["activations"] == ["Sigmoid", "Relu"]
    y, y_h = jaxgru.gru(layers[0], x, initial_h=h0, **options)
    chex.assert_trees_all_close((y, y_h), (want_seq, want_h), **TOL)


@pytest.mark.parametrize(
    ("layout", "direction", "peephole"),
    [("iofg", "forward", True), ("ifgo", "forward", True), ("ifgo", "both", False),
     ("iofg", "backward", False)],
)
def test_webnn_lstm(layout, direction, peephole):
    rng = np.random.default_rng(2)
    d = 2 if direction == "both" else 1
    x = _rand(rng, L, N, IN) * 2
    weight, recurrent_weight = _rand(rng, d, 4 * H, IN), _rand(rng, d, 4 * H, H)
    bias, recurrent_bias = _rand(rng, d, 4 * H), _rand(rng, d, 4 * H)
    p = None
    if peephole:  # input and forget peepholes only: the output one has no ONNX equivalent
        p = _rand(rng, d, 3 * H)
        p[:, H : 2 * H] = 0
    h0, c0 = _rand(rng, d, N, H), _rand(rng, d, N, H)
    want = webnn_lstm(x, weight, recurrent_weight, bias, recurrent_bias, p, h0, c0, layout=layout,
                      direction=direction)
    layers, options = from_webnn_lstm(weight, recurrent_weight, bias, recurrent_bias, p,
                                      layout=layout, direction=direction)
    y, y_h, y_c = jaxgru.lstm(layers[0], x, initial_h=h0, initial_c=c0, **options)
    chex.assert_trees_all_close((y_h, y_c, y), want, **TOL)


def test_webnn_errors():
    rng = np.random.default_rng(3)
    w, r = _rand(rng, 1, 4 * H, IN), _rand(rng, 1, 4 * H, H)
    p = _rand(rng, 1, 3 * H)
    with pytest.raises(NotImplementedError, match="C_\\(t-1\\)"):
        from_webnn_lstm(w, r, peephole_weight=p)
    with pytest.raises(ValueError, match="layout must be one of 'iofg', 'ifgo'; got 'ifog'"):
        from_webnn_lstm(w, r, layout="ifog")
    with pytest.raises(ValueError, match="direction must be one of"):
        from_webnn_gru(_rand(rng, 1, 3 * H, IN), _rand(rng, 1, 3 * H, H), direction="reverse")
    with pytest.raises(ValueError, match=r"weight must have shape .*=\(2, 15, 3\); got \(1, 15, 3\)"):
        from_webnn_gru(_rand(rng, 1, 3 * H, IN), _rand(rng, 1, 3 * H, H), direction="both")
    with pytest.raises(ValueError, match="activations must list 3"):
        from_webnn_lstm(w, r, activations=["sigmoid", "tanh"])


# ------------------------------------------------------------------------------------------
# Apple BNNS Graph references
# ------------------------------------------------------------------------------------------
def bnns_gru(x, ih, hh, bias, input_bias, h0, *, after, direction="forward",
             activation="tanh", recurrent_activation="sigmoid"):
    """Apple's BNNSGraph gru: weights r, n, z; returns (output [L, N, H], last hidden [N, H])."""
    a, ra = ACT[activation], ACT[recurrent_activation]
    blocks = lambda m: dict(zip("rnz", np.split(np.asarray(m, np.float64), 3, axis=0), strict=True))
    w_i, w_h, b_h = blocks(ih), blocks(hh), blocks(bias)
    # With the flag false the inputBias is unused and `bias` holds the summed biases.
    b_i = blocks(input_bias) if after else {k: np.zeros(H) for k in "rnz"}
    h = h0.astype(np.float64)
    out = np.zeros((x.shape[0], x.shape[1], H))
    order = range(x.shape[0]) if direction == "forward" else reversed(range(x.shape[0]))
    for t in order:
        xt = x[t]
        r = ra(xt @ w_i["r"].T + b_i["r"] + h @ w_h["r"].T + b_h["r"])
        z = ra(xt @ w_i["z"].T + b_i["z"] + h @ w_h["z"].T + b_h["z"])
        if after:
            n = a(xt @ w_i["n"].T + b_i["n"] + (h @ w_h["n"].T + b_h["n"]) * r)
        else:
            n = a(xt @ w_i["n"].T + b_i["n"] + (h @ w_h["n"].T) * r + b_h["n"])
        h = (1 - z) * n + z * h
        out[t] = h
    return out, h


def bnns_lstm(x, ih, hh, bias, h0, c0, *, bias_order, activation="tanh",
              recurrent_activation="sigmoid", cell_activation="tanh"):
    """Apple's BNNSGraph lstm: weights i, f, o, g; bias (summed) in `bias_order`."""
    a, ra, ca = ACT[activation], ACT[recurrent_activation], ACT[cell_activation]
    w_i = dict(zip("ifog", np.split(np.asarray(ih, np.float64), 4), strict=True))
    w_h = dict(zip("ifog", np.split(np.asarray(hh, np.float64), 4), strict=True))
    b = dict(zip(bias_order, np.split(np.asarray(bias, np.float64), 4), strict=True))
    h, c = h0.astype(np.float64), c0.astype(np.float64)
    out = np.zeros((x.shape[0], x.shape[1], H))
    for t in range(x.shape[0]):
        pre = lambda k, xt=x[t], h=h: xt @ w_i[k].T + h @ w_h[k].T + b[k]
        i, f, g, o = ra(pre("i")), ra(pre("f")), ca(pre("g")), ra(pre("o"))
        c = f * c + i * g
        h = o * a(c)
        out[t] = h
    return out, h, c


@pytest.mark.parametrize(
    ("after", "direction", "acts"),
    [(False, "forward", ("tanh", "sigmoid")), (True, "forward", ("tanh", "sigmoid")),
     (True, "reverse", ("tanh", "sigmoid")), (False, "forward", ("relu", "sigmoid"))],
)
def test_bnns_gru(after, direction, acts):
    rng = np.random.default_rng(4)
    x = _rand(rng, L, N, IN) * 2
    ih, hh = _rand(rng, 3 * H, IN), _rand(rng, 3 * H, H)
    bias, input_bias = _rand(rng, 3 * H), _rand(rng, 3 * H)
    h0 = _rand(rng, N, H)
    want_y, want_h = bnns_gru(x, ih, hh, bias, input_bias, h0, after=after, direction=direction,
                              activation=acts[0], recurrent_activation=acts[1])
    layers, options = from_bnns_gru(ih, hh, bias, input_bias if after else None,
                                    apply_reset_gate_after_matmul=after, direction=direction,
                                    activation=acts[0], recurrent_activation=acts[1])
    assert options["linear_before_reset"] is True
    y, y_h = jaxgru.gru(layers[0], x, initial_h=h0[None], **options)
    chex.assert_trees_all_close((y[:, 0], y_h[0]), (want_y, want_h), **TOL)


@pytest.mark.parametrize("bias_order", ["ifog", "ifgo"])
def test_bnns_lstm(bias_order):
    rng = np.random.default_rng(5)
    x = _rand(rng, L, N, IN) * 2
    ih, hh, bias = _rand(rng, 4 * H, IN), _rand(rng, 4 * H, H), _rand(rng, 4 * H)
    h0, c0 = _rand(rng, N, H), _rand(rng, N, H)
    want = bnns_lstm(x, ih, hh, bias, h0, c0, bias_order=bias_order)
    layers, options = from_bnns_lstm(ih, hh, bias, bias_order=bias_order)
    y, y_h, y_c = jaxgru.lstm(layers[0], x, initial_h=h0[None], initial_c=c0[None], **options)
    chex.assert_trees_all_close((y[:, 0], y_h[0], y_c[0]), want, **TOL)


def test_bnns_errors():
    rng = np.random.default_rng(6)
    ih, hh, bias = _rand(rng, 3 * H, IN), _rand(rng, 3 * H, H), _rand(rng, 3 * H)
    with pytest.raises(ValueError, match="input_bias is only used"):
        from_bnns_gru(ih, hh, bias, bias, apply_reset_gate_after_matmul=False)
    with pytest.raises(ValueError, match=r"input_hidden_weight must have shape \(3\*hidden, input_size\)"):
        from_bnns_gru(ih[:-1], hh, bias)
    with pytest.raises(ValueError, match="bias_order must be one of"):
        from_bnns_lstm(_rand(rng, 4 * H, IN), _rand(rng, 4 * H, H), None, bias_order="iofg")
    with pytest.raises(ValueError, match="activation must be one of"):
        from_bnns_gru(ih, hh, bias, activation="gelu")
    with pytest.raises(TypeError, match="all weights must share one dtype"):
        from_bnns_gru(ih, hh, bias.astype(np.float16))
