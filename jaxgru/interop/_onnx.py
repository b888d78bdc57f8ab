"""ONNX ``GRU`` / ``LSTM`` nodes -> jaxgru parameters (identical layout; no reordering).

Weights are read from the graph's initializers and from ``Constant`` nodes of the top-level
graph. The node's data inputs (``X``, ``sequence_lens``, ``initial_h``, ``initial_c``) are not
read: pass them to jaxgru at call time.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from jaxgru._src import cells
from jaxgru._src.options import OPTIONS, OnnxType, Option, options_for
from jaxgru._src.params import GRUParams, LSTMParams
from jaxgru.interop import _common as C

if TYPE_CHECKING:  # pragma: no cover
    import onnx

_INPUTS = {
    "GRU": ("X", "W", "R", "B", "sequence_lens", "initial_h"),
    "LSTM": ("X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P"),
}
# The attributes that are options, per node kind: (attribute, its type, the option), from OPTIONS.
_OPTION_ATTRS: dict[str, tuple[tuple[str, OnnxType, Option], ...]] = {
    op: tuple((o.onnx, o.onnx_type, o) for o in options_for(cell) if o.onnx is not None and o.onnx_type is not None)
    for op, cell in (("GRU", "gru"), ("LSTM", "lstm"))
}
# The known attributes: the options', hidden_size (checked against R), and LSTM's
# output_sequence, ignored: an LSTM-1 attribute (removed in opset 7) that only made Y optional;
# jaxgru always returns Y, and which outputs the model reads is the node's outputs' business.
_ATTRS = {
    "GRU": {a for a, _, _ in _OPTION_ATTRS["GRU"]} | {"hidden_size"},
    "LSTM": {a for a, _, _ in _OPTION_ATTRS["LSTM"]} | {"hidden_size", "output_sequence"},
}
# Attributes ONNX added to GRU/LSTM after their first version: the default-domain opset they
# need. onnxruntime refuses a model that sets one at an older opset (layout at opset 13:
# "INVALID_GRAPH : ... Error Unrecognized attribute: layout for operator GRU"), so we do too.
_SINCE_OPSET = {"layout": 14}
# A model's metadata entry (``metadata_props``) saying that its graph is batch-major around
# layout-0 nodes: to_onnx writes it for layout=1 (onnxruntime refuses layout=1 nodes at run
# time); from_onnx then returns layout=1.
LAYOUT_METADATA = "jaxgru.layout"
_DEFAULTS = {o.name: o.default for o in OPTIONS}
# An attribute's value (strings already decoded by _attrs) -> the option's value.
_FROM_ONNX: dict[OnnxType, Callable[[Any], Any]] = {
    "string": lambda v: v,  # a str (a non-string direction is refused by check_choice)
    "int": int,
    "float": float,
    "strings": list,
    "floats": list,
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

    out: dict[str, Any] = {}
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


def _default_opset(model: onnx.ModelProto) -> int | None:
    """The version of the default domain ("" or "ai.onnx") the model imports, if it does."""
    versions = [int(imp.version) for imp in model.opset_import if imp.domain in ("", "ai.onnx")]
    return max(versions) if versions else None


def _options(op: str, attrs: Mapping[str, Any]) -> dict[str, Any]:
    """The options of a node's attributes (OPTIONS' ``onnx`` names), converted per ``onnx_type``
    (int flags become bools): those with a default always, the others only when set."""
    options: dict[str, Any] = {}
    for attr, kind, o in _OPTION_ATTRS[op]:
        if attr in attrs:
            options[o.name] = bool(attrs[attr]) if o.flag else _FROM_ONNX[kind](attrs[attr])
        elif o.default is not None:
            options[o.name] = o.default
    return options


def _convert_node(
    fname: str,
    index: int,
    node: onnx.NodeProto,
    values: Mapping[str, np.ndarray],
    graph_inputs: set[str],
    producers: Mapping[str, onnx.NodeProto],
    opset: int | None,
) -> tuple[str, GRUParams | LSTMParams, dict[str, Any]]:
    """(cell, params, options) of one GRU/LSTM node of a model importing ``opset``."""
    op = node.op_type
    cell = op.lower()
    spec = cells.spec(cell)
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

    def required(role: str) -> np.ndarray:
        v = value(role, True)
        assert v is not None  # value raises for a missing required input
        return v

    attrs = _attrs(node)
    unknown = set(attrs) - _ATTRS[op]
    if unknown:
        raise NotImplementedError(f"{fname}: {label} has unsupported attributes {sorted(unknown)}; "
                                  f"expected only {sorted(_ATTRS[op])}.")
    for attr, since in _SINCE_OPSET.items():
        if attr in attrs and opset is not None and opset < since:
            raise ValueError(
                f"{fname}: {label} has the attribute {attr!r}, which ONNX added to {op} in opset "
                f"{since}; the model imports opset {opset} of the default domain, so the attribute is "
                f"invalid there (onnxruntime refuses the model). Raise the model's opset to {since} or "
                "more, or drop the attribute."
            )
    w, r, b = required("W"), required("R"), value("B")
    p = value("P") if spec.peepholes else None
    direction = attrs.get("direction", _DEFAULTS["direction"])
    C.check_choice(fname, f"{label} attribute direction", direction, C.DIRECTIONS)
    d = C.num_directions(direction)
    meaning = {f: m for f, (_, m) in spec.param_shapes(d, 0, 0).items()}
    C.check_rank(fname, f"{label} input R", r, 3, meaning["r"])
    hidden = r.shape[-1]
    if "hidden_size" in attrs and attrs["hidden_size"] != hidden:
        raise ValueError(f"{fname}: {label} attribute hidden_size={attrs['hidden_size']} does not "
                         f"match R of shape {tuple(r.shape)} (hidden {hidden}).")
    C.check_rank(fname, f"{label} input W", w, 3, meaning["w"])
    expected = spec.param_shapes(d, hidden, w.shape[-1])
    for role, a in (("W", w), ("R", r), ("B", b), ("P", p)):
        if a is not None:
            shape, what = expected[role.lower()]
            C.check_shape(fname, f"{label} input {role}", a, shape, what)
    C.same_dtype(fname, {"W": w, "R": r, "B": b, "P": p})
    layout = attrs.get("layout", _DEFAULTS["layout"])
    if layout not in (0, 1):
        raise ValueError(f"{fname}: {label} attribute layout must be 0 or 1; got {layout!r}.")
    options = _options(op, attrs)
    if op == "GRU":
        params: GRUParams | LSTMParams = GRUParams(C.as_jax(w), C.as_jax(r), C.as_jax(b))
    else:
        params = LSTMParams(C.as_jax(w), C.as_jax(r), C.as_jax(b), C.as_jax(p))
    return cell, params, options


def from_onnx(
    model: onnx.ModelProto | bytes | bytearray | memoryview | str | os.PathLike[str],
    node: int | str | None = None,
) -> tuple[list[GRUParams] | list[LSTMParams], dict[str, Any]]:
    """Read the weights and attributes of the ONNX ``GRU``/``LSTM`` node(s) of a model.

    jaxgru's parameters are the ONNX inputs ``W``, ``R``, ``B`` (and ``P``) unchanged; absent
    ``B``/``P`` give ``None``. The attributes become options (``direction``, ``layout``,
    ``linear_before_reset`` / ``input_forget``, ``activations``, ``activation_alpha``,
    ``activation_beta``, ``clip``); a model written by :func:`to_onnx` with ``layout=1`` (layout-0
    nodes between Transposes, marked ``jaxgru.layout = "1"`` in its metadata) gives ``layout=1``.
    Note: for a missing Affine / ScaledTanh / ThresholdedRelu
    parameter jaxgru uses the ONNX default, where onnxruntime uses 0.

    Args:
      model: an ``onnx.ModelProto``, its serialized bytes (``model.SerializeToString()``) or
        the path of a ``.onnx`` file.
      node: which node to read: None for every GRU/LSTM node of the top-level graph (in graph
        order), an int indexing those nodes, or a node name.

    Returns:
      ``(layers, options)``: one ``GRUParams``/``LSTMParams`` per selected node (jax arrays in
      the initializers' dtype) and the options for ``gru``/``lstm`` (one node) or
      ``gru_stack``/``lstm_stack`` (several).

    Raises:
      TypeError: ``model`` or ``node`` of the wrong type.
      ValueError: bytes that are not a serialized model, an attribute newer than the model's
        opset (``layout`` needs opset 14, as in onnxruntime), no GRU/LSTM node, no node matching
        ``node``, a weight that is a graph input or computed by another node, inconsistent
        shapes or ``hidden_size``, or several nodes whose kinds/options differ or whose sizes
        do not chain (then pass ``node=``).
      NotImplementedError: an attribute jaxgru does not know.
    """
    import onnx
    from google.protobuf.message import DecodeError

    fname = "jaxgru.interop.from_onnx"
    if isinstance(model, (bytes, bytearray, memoryview)):
        data = bytes(model)
        try:
            model = onnx.load_model_from_string(data)
        except DecodeError as e:
            raise ValueError(f"{fname}: model must be a serialized onnx.ModelProto; got {type(model).__name__} "
                             f"of {len(data)} byte(s) that do not parse as one ({e}).") from None
    elif isinstance(model, (str, os.PathLike)):
        model = onnx.load(os.fspath(model))
    elif not isinstance(model, onnx.ModelProto):
        raise TypeError(f"{fname}: model must be an onnx.ModelProto or a path (or the model's serialized "
                        f"bytes); got {type(model).__name__}.")
    opset = _default_opset(model)
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
    converted = [_convert_node(fname, i, n, values, graph_inputs, producers, opset) for i, n in chosen]
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
    if options.get("layout") == 0 and any(p.key == LAYOUT_METADATA and p.value == "1"
                                           for p in model.metadata_props):
        options = {**options, "layout": 1}  # written by to_onnx: Transposes around layout-0 nodes
    # one kind for every node (checked above): all GRUParams or all LSTMParams
    layers = cast("list[GRUParams] | list[LSTMParams]", [p for _, p, _ in converted])
    return layers, options
