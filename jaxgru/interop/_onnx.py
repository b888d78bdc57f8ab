"""ONNX ``GRU`` / ``LSTM`` nodes -> jaxgru parameters (identical layout; no reordering).

Weights are read from the graph's initializers and from ``Constant`` nodes of the top-level
graph. The node's data inputs (``X``, ``sequence_lens``, ``initial_h``, ``initial_c``) are not
read: pass them to jaxgru at call time.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import numpy as np

from jaxgru._src.params import GRUParams, LSTMParams
from jaxgru.interop import _common as C

if TYPE_CHECKING:  # pragma: no cover
    import onnx

_INPUTS = {
    "GRU": ("X", "W", "R", "B", "sequence_lens", "initial_h"),
    "LSTM": ("X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P"),
}
_ATTRS = {
    "GRU": {"direction", "hidden_size", "layout", "linear_before_reset", "activations",
            "activation_alpha", "activation_beta", "clip"},
    "LSTM": {"direction", "hidden_size", "layout", "input_forget", "activations",
             "activation_alpha", "activation_beta", "clip", "output_sequence"},
}


def _constants(graph: onnx.GraphProto) -> dict[str, np.ndarray]:
    """Values of the initializers and of the Constant nodes' outputs."""
    from onnx import helper, numpy_helper

    values = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    for n in graph.node:
        if n.op_type != "Constant" or n.domain not in ("", "ai.onnx"):
            continue
        for a in n.attribute:
            v = helper.get_attribute_value(a)
            if a.name == "value":
                values[n.output[0]] = numpy_helper.to_array(v)
            elif a.name in ("value_float", "value_floats"):
                values[n.output[0]] = np.asarray(v, np.float32)
    return values


def _attrs(node: onnx.NodeProto) -> dict[str, Any]:
    from onnx import helper

    out = {}
    for a in node.attribute:
        v = helper.get_attribute_value(a)
        if isinstance(v, bytes):
            v = v.decode()
        elif isinstance(v, list) and v and isinstance(v[0], bytes):
            v = [s.decode() for s in v]
        out[a.name] = v
    return out


def _label(index: int, node: onnx.NodeProto) -> str:
    return f"node {index} ({node.op_type}" + (f" {node.name!r})" if node.name else ")")


def _convert_node(fname, index, node, values, graph_inputs, producers):
    """(cell, params, options) of one GRU/LSTM node."""
    op = node.op_type
    cell = op.lower()
    label = _label(index, node)
    names = list(node.input) + [""] * (len(_INPUTS[op]) - len(node.input))
    by_role = dict(zip(_INPUTS[op], names, strict=False))

    def value(role: str, required: bool = False) -> np.ndarray | None:
        name = by_role.get(role, "")
        if not name:
            if required:
                raise ValueError(f"{fname}: {label} has no {role} input; it is required.")
            return None
        if name in values:
            return C.to_numpy(fname, f"{label} input {role} ({name!r})", values[name])
        if name in graph_inputs:
            raise ValueError(
                f"{fname}: {label} input {role} ({name!r}) is a graph input, so its value is only "
                "known at run time; expected an initializer (or a Constant node)."
            )
        if name in producers:
            p = producers[name]
            raise ValueError(
                f"{fname}: {label} input {role} ({name!r}) is computed by a {p.op_type} node "
                f"{p.name!r}; expected an initializer (or a Constant node)."
            )
        raise ValueError(f"{fname}: {label} input {role} ({name!r}) is not defined in the graph.")

    attrs = _attrs(node)
    unknown = set(attrs) - _ATTRS[op]
    if unknown:
        raise NotImplementedError(f"{fname}: {label} has unsupported attributes {sorted(unknown)}; "
                                  f"expected only {sorted(_ATTRS[op])}.")
    w, r, b = value("W", True), value("R", True), value("B")
    p = value("P") if op == "LSTM" else None
    direction = attrs.get("direction", "forward")
    C.check_choice(fname, f"{label} attribute direction", direction, C.DIRECTIONS)
    d = C.num_directions(direction)
    g = 3 if op == "GRU" else 4
    C.check_rank(fname, f"{label} input R", r, 3, "(num_directions, gates*hidden, hidden)")
    hidden = r.shape[-1]
    if "hidden_size" in attrs and attrs["hidden_size"] != hidden:
        raise ValueError(f"{fname}: {label} attribute hidden_size={attrs['hidden_size']} does not "
                         f"match R of shape {tuple(r.shape)} (hidden {hidden}).")
    C.check_rank(fname, f"{label} input W", w, 3, "(num_directions, gates*hidden, input_size)")
    C.check_shape(fname, f"{label} input W", w, (d, g * hidden, w.shape[-1]),
                  "(num_directions, gates*hidden, input_size)")
    C.check_shape(fname, f"{label} input R", r, (d, g * hidden, hidden),
                  "(num_directions, gates*hidden, hidden)")
    if b is not None:
        C.check_shape(fname, f"{label} input B", b, (d, 2 * g * hidden),
                      "(num_directions, 2*gates*hidden)")
    if p is not None:
        C.check_shape(fname, f"{label} input P", p, (d, 3 * hidden), "(num_directions, 3*hidden)")
    C.same_dtype(fname, {"W": w, "R": r, "B": b, "P": p})
    layout = attrs.get("layout", 0)
    if layout not in (0, 1):
        raise ValueError(f"{fname}: {label} attribute layout must be 0 or 1; got {layout!r}.")
    options: dict[str, Any] = {"direction": direction, "layout": int(layout)}
    if op == "GRU":
        options["linear_before_reset"] = bool(attrs.get("linear_before_reset", 0))
        params = GRUParams(C.as_jax(w), C.as_jax(r), C.as_jax(b))
    else:
        options["input_forget"] = bool(attrs.get("input_forget", 0))
        params = LSTMParams(C.as_jax(w), C.as_jax(r), C.as_jax(b), C.as_jax(p))
    for k in ("activations", "activation_alpha", "activation_beta"):
        if k in attrs:
            options[k] = list(attrs[k])
    if "clip" in attrs:
        options["clip"] = float(attrs["clip"])
    return cell, params, options


def from_onnx(
    model: onnx.ModelProto | str | os.PathLike,
    node: int | str | None = None,
) -> tuple[list[GRUParams] | list[LSTMParams], dict[str, Any]]:
    """Read the weights and attributes of the ONNX ``GRU``/``LSTM`` node(s) of a model.

    jaxgru's parameters are the ONNX inputs ``W``, ``R``, ``B`` (and ``P``) unchanged; absent
    ``B``/``P`` give ``None``. The attributes become options (``direction``, ``layout``,
    ``linear_before_reset`` / ``input_forget``, ``activations``, ``activation_alpha``,
    ``activation_beta``, ``clip``). Note: for a missing Affine / ScaledTanh / ThresholdedRelu
    parameter jaxgru uses the ONNX default, where onnxruntime uses 0.

    Args:
      model: an ``onnx.ModelProto`` or the path of a ``.onnx`` file.
      node: which node to read: None for every GRU/LSTM node of the top-level graph (in graph
        order), an int indexing those nodes, or a node name.

    Returns:
      ``(layers, options)``: one ``GRUParams``/``LSTMParams`` per selected node (jax arrays in
      the initializers' dtype) and the options for ``gru``/``lstm`` (one node) or
      ``gru_stack``/``lstm_stack`` (several).

    Raises:
      TypeError: ``model`` or ``node`` of the wrong type.
      ValueError: no GRU/LSTM node, no node matching ``node``, a weight that is a graph input
        or computed by another node, inconsistent shapes or ``hidden_size``, or several nodes
        whose kinds/options differ or whose sizes do not chain (then pass ``node=``).
      NotImplementedError: an attribute jaxgru does not know.
    """
    import onnx

    fname = "jaxgru.interop.from_onnx"
    if isinstance(model, (str, os.PathLike)):
        model = onnx.load(os.fspath(model))
    elif not isinstance(model, onnx.ModelProto):
        raise TypeError(f"{fname}: model must be an onnx.ModelProto or a path; got "
                        f"{type(model).__name__}.")
    graph = model.graph
    values = _constants(graph)
    graph_inputs = {i.name for i in graph.input} - set(values)
    producers = {out: n for n in graph.node for out in n.output}
    rnns = [(i, n) for i, n in enumerate(graph.node)
            if n.op_type in ("GRU", "LSTM") and n.domain in ("", "ai.onnx")]
    if not rnns:
        raise ValueError(f"{fname}: the model's graph has no GRU or LSTM node.")
    if node is None:
        chosen = rnns
    elif isinstance(node, bool) or not isinstance(node, (int, str)):
        raise TypeError(f"{fname}: node must be None, an int or a node name; got {node!r}.")
    elif isinstance(node, int):
        if not -len(rnns) <= node < len(rnns):
            raise ValueError(f"{fname}: node={node} is out of range; the model has {len(rnns)} "
                             "GRU/LSTM node(s).")
        chosen = [rnns[node]]
    else:
        chosen = [(i, n) for i, n in rnns if n.name == node]
        if not chosen:
            raise ValueError(f"{fname}: no GRU/LSTM node named {node!r}; the nodes are "
                             f"{[n.name for _, n in rnns]}.")
    converted = [_convert_node(fname, i, n, values, graph_inputs, producers) for i, n in chosen]
    cell, _, options = converted[0]
    hint = ("pass node= (an index or a node name) to read one node; the nodes are "
            f"{[_label(i, n) for i, n in chosen]}.")
    prev_out = None
    for (c, params, opts), (i, n) in zip(converted, chosen, strict=True):
        if c != cell or opts != options:
            raise ValueError(f"{fname}: the GRU/LSTM nodes do not share one kind and one set of "
                             f"options ({_label(i, n)} has {opts}, the first has {options}); {hint}")
        d, in_size, hidden = params.w.shape[0], params.w.shape[-1], params.r.shape[-1]
        if prev_out is not None and in_size != prev_out:
            raise ValueError(f"{fname}: {_label(i, n)} has input size {in_size}, but the previous "
                             f"node outputs num_directions*hidden={prev_out}, so they do not form "
                             f"a stack; {hint}")
        prev_out = d * hidden
    return [p for _, p, _ in converted], options
