"""jaxgru parameters and options -> an ONNX model (``to_onnx``), and the jax2onnx plugins.

``to_onnx`` is the inverse of ``from_onnx``: the weights become initializers, each layer one
ONNX ``GRU``/``LSTM`` node, wired as PyTorch's exporter wires a stack (layer k's
``Y [L, D, N, H]`` -> ``Transpose`` to ``[L, N, D, H]`` -> ``Reshape`` to ``[L, N, D*H]``, the
layers' ``Y_h``/``Y_c`` concatenated). The nodes are always layout 0: onnxruntime refuses
``layout=1`` at run time, so a batch-major model transposes its inputs and outputs around them
and records ``jaxgru.layout = "1"`` in the model's metadata, which ``from_onnx`` reads back.

The node attributes come from the option table (``options.OPTIONS``: each option's ``onnx``
attribute and ``onnx_type``), via the call's resolved config: activations carry every alpha /
beta explicitly (onnxruntime uses 0 for a missing one where ONNX and jaxgru have defaults).
"""

from __future__ import annotations

import importlib
import numbers
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from jaxgru._src import cells
from jaxgru._src.activations import lookup
from jaxgru._src.dropout import check_rate
from jaxgru._src.options import (
    DEFAULT_ACTIVATIONS,
    OnnxType,
    Option,
    RNNConfig,
    check_names,
    make_config,
    option_names,
    options_for,
    rounds_recurrent,
)
from jaxgru._src.params import GRUParams, LSTMParams
from jaxgru.interop import _common as C
from jaxgru.interop._onnx import LAYOUT_METADATA

if TYPE_CHECKING:  # pragma: no cover
    import onnx

DEFAULT_OPSET = 22  # the ONNX version jaxgru follows
# GRU/LSTM have their current semantics since opset 7 (14 added layout, unused here); the
# per-layer state slices need Slice with its bounds as inputs, opset 10.
MIN_OPSET = 10
_BFLOAT16_OPSET = 22  # GRU-22 / LSTM-22 added bfloat16
_FNAME = "jaxgru.interop.to_onnx"
# An ONNX node's inputs, in order, as jaxgru's operand fields ("" roles are the data inputs).
_NODE_INPUTS = {
    "gru": ("x", "w", "r", "b", "lens", "h0"),
    "lstm": ("x", "w", "r", "b", "lens", "h0", "c0", "p"),
}
_ROLE = {"x": "X", "w": "W", "r": "R", "b": "B", "p": "P", "lens": "sequence_lens", "h0": "initial_h",
         "c0": "initial_c"}
_OUTPUT_NAMES = {"h0": "Y_h", "c0": "Y_c"}
# How an option's value is written as an attribute of its onnx_type.
_TO_ONNX: dict[OnnxType, Callable[[Any], Any]] = {
    "string": str,
    "int": int,  # flags become 0/1
    "float": float,
    "strings": lambda v: [str(s) for s in v],
    "floats": lambda v: [float(s) for s in v],
}
_ACTIVATION_OPTIONS = ("activations", "activation_alpha", "activation_beta")


# --------------------------------------------------------------------------------------
# attributes (shared by to_onnx and the jax2onnx plugins)
# --------------------------------------------------------------------------------------
def _activation_value(cfg: RNNConfig, name: str) -> list[Any]:
    acts = [a for per_direction in cfg.activations for a in per_direction]
    if name == "activations":
        return [a.name for a in acts]
    takes = "takes_alpha" if name == "activation_alpha" else "takes_beta"
    field = "alpha" if name == "activation_alpha" else "beta"
    return [getattr(a, field) for a in acts if getattr(lookup(a.name), takes)]


def node_attributes(cfg: RNNConfig, hidden: int) -> dict[str, Any]:
    """The attributes of a layout-0 ONNX node computing the layer ``cfg``, defaults omitted.

    Every option with an ``onnx`` attribute in ``options.OPTIONS`` is written but ``layout``
    (the node is time-major; the caller transposes around it); activations with their
    resolved alpha / beta, all of them explicit.
    """
    attrs: dict[str, Any] = {"hidden_size": int(hidden)}
    default_acts = all(tuple(a.name for a in d) == DEFAULT_ACTIVATIONS[cfg.cell] for d in cfg.activations)
    option: Option
    for option in options_for(cfg.cell):
        if option.onnx is None or option.onnx_type is None or option.name == "layout":
            continue
        if option.name in _ACTIVATION_OPTIONS:
            if default_acts:
                continue
            value: Any = _activation_value(cfg, option.name)
            if not value:
                continue  # e.g. no activation takes a beta
        else:
            value = getattr(cfg, option.name)
            if value is None or value == option.default:
                continue
        attrs[option.onnx] = _TO_ONNX[option.onnx_type](value)
    return attrs


# --------------------------------------------------------------------------------------
# arguments
# --------------------------------------------------------------------------------------
def _cell_of(layers: Any) -> str:
    if isinstance(layers, (GRUParams, LSTMParams)) or not isinstance(layers, Sequence) or not layers:
        raise TypeError(f"{_FNAME}: layers must be a non-empty list of jaxgru.GRUParams or jaxgru.LSTMParams; "
                        f"got {type(layers).__name__}.")
    for cls, cell in ((GRUParams, "gru"), (LSTMParams, "lstm")):
        if all(isinstance(p, cls) for p in layers):
            return cell
    raise TypeError(f"{_FNAME}: layers must all be jaxgru.GRUParams or all jaxgru.LSTMParams; got "
                    f"{[type(p).__name__ for p in layers]}.")


def _opset(opset: Any) -> int:
    import onnx

    if opset is None:
        return DEFAULT_OPSET
    if isinstance(opset, bool) or not isinstance(opset, numbers.Integral):
        raise TypeError(f"{_FNAME}: opset must be an int or None; got {opset!r}.")
    opset, newest = int(opset), onnx.defs.onnx_opset_version()
    if not MIN_OPSET <= opset <= newest:
        raise ValueError(f"{_FNAME}: opset must lie in [{MIN_OPSET}, {newest}] (the installed onnx's newest); "
                         f"got {opset}.")
    return opset


def _data_inputs(cell: str, inputs: Any) -> tuple[str, ...]:
    """The requested graph inputs besides X, in the node's input order."""
    allowed = tuple(_ROLE[f] for f in _NODE_INPUTS[cell] if f in ("lens", "h0", "c0"))
    if isinstance(inputs, str) or not isinstance(inputs, Sequence):
        raise TypeError(f"{_FNAME}: inputs must be a list of names (some of {allowed}); got {inputs!r}.")
    for name in inputs:
        if name not in allowed:
            raise ValueError(f"{_FNAME}: inputs has {name!r}, which is not a data input of the ONNX "
                             f"{cell.upper()}; expected some of {allowed} (X is always an input).")
    return tuple(n for n in allowed if n in inputs)


def _weights(cell: str, layers: Sequence[Any], d: int, direction: str) -> list[dict[str, np.ndarray]]:
    """Each layer's weights by field (absent b / p left out), as numpy, checked to form a stack."""
    spec = cells.spec(cell)
    meaning = {f: m for f, (_, m) in spec.param_shapes(d, 0, 0).items()}
    out: list[dict[str, np.ndarray]] = []
    hidden = 0
    for k, params in enumerate(layers):
        if getattr(params, "proj", None) is not None:
            raise NotImplementedError(f"{_FNAME}: layers[{k}].proj is set (a projected LSTM); ONNX's LSTM has "
                                      "no projection, so the model cannot be expressed. Expected proj=None.")
        arrays: dict[str, np.ndarray] = {}
        for field in spec.param_fields:
            v = getattr(params, field)
            if v is None:
                if field in ("w", "r"):
                    raise TypeError(f"{_FNAME}: layers[{k}].{field} is required; got None.")
                continue
            arrays[field] = C.to_numpy(_FNAME, f"layers[{k}].{field}", v)
        r, w = arrays["r"], arrays["w"]
        C.check_rank(_FNAME, f"layers[{k}].r", r, 3, meaning["r"])
        C.check_rank(_FNAME, f"layers[{k}].w", w, 3, meaning["w"])
        if r.shape[0] != d:
            raise ValueError(f"{_FNAME}: layers[{k}] holds {r.shape[0]} direction(s) (r of shape {r.shape}) but "
                             f"direction={direction!r} runs {d}.")
        if k == 0:
            hidden = r.shape[-1]
        expected = spec.param_shapes(d, hidden, w.shape[-1] if k == 0 else d * hidden)
        for field, a in arrays.items():
            C.check_shape(_FNAME, f"layers[{k}].{field}", a, *expected[field])
        out.append(arrays)
    return out


# --------------------------------------------------------------------------------------
# the exporter
# --------------------------------------------------------------------------------------
def to_onnx(
    layers: Sequence[GRUParams] | Sequence[LSTMParams],
    options: Mapping[str, Any],
    *,
    opset: int | None = None,
    inputs: Sequence[str] = (),
) -> onnx.ModelProto:
    """An ONNX model computing ``jaxgru.gru_stack`` / ``lstm_stack(layers, x, **options)``.

    The inverse of :func:`from_onnx`: the weights become initializers (exactly, in their
    dtype; ``b=None`` / ``p=None`` leave ``B`` / ``P`` out), each layer one ``GRU``/``LSTM``
    node, chained as PyTorch's exporter chains a stack (``Transpose`` + ``Reshape``: the
    directions side by side). The graph input is ``X`` (``[L, N, I]``, or ``[N, L, I]`` with
    ``layout=1``), plus the ``inputs`` asked for, in this order: ``sequence_lens`` (int32
    ``[N]``), ``initial_h``, ``initial_c`` (the stack's layout: ``[num_layers*D, N, H]``, or
    ``[N, num_layers*D, H]``). The outputs are ``Y`` and ``Y_h`` (and ``Y_c``) with exactly
    ``gru_stack`` / ``lstm_stack``'s shapes; ``L`` and ``N`` are symbolic.

    The nodes' attributes come from the options (defaults omitted; activations with every
    alpha/beta explicit). The nodes are layout 0, as onnxruntime refuses ``layout=1`` at run
    time: with ``layout=1`` the graph transposes around them and the model's metadata records
    ``jaxgru.layout = "1"``, which ``from_onnx`` reads back. ``backend`` (how jaxgru runs, not
    what it computes) and the stacks' ``dropout`` (the identity at inference, as a stack
    without a key computes) are ignored.

    Args:
      layers: one ``GRUParams`` / ``LSTMParams`` per layer, as ``gru_stack`` / ``lstm_stack``
        take them (concrete arrays, one floating dtype).
      options: the keyword options of ``gru`` / ``lstm`` (as the converters return them), and
        optionally the stacks' ``dropout``.
      opset: the default-domain opset to import, from 10 to the installed onnx's newest;
        None for 22, the version jaxgru follows (bfloat16 weights need 22 or more).
      inputs: the data inputs to expose besides ``X``: some of ``"sequence_lens"``,
        ``"initial_h"`` and (LSTM) ``"initial_c"``; those left out are absent (full lengths,
        zero states).

    Returns:
      An ``onnx.ModelProto`` (IR version the lowest that ``opset`` allows).

    Raises:
      TypeError: ``layers`` is not a list of one kind of params, a weight is missing, not an
        array or not floating, the weights' dtypes differ, ``opset`` is not an int, ``inputs``
        is not a list of names, or an option the cell does not take.
      ValueError: a bad option value, weights that do not fit ``direction`` or do not chain,
        an ``opset`` out of range (or below 22 for bfloat16), an unknown name in ``inputs``.
      NotImplementedError: what ONNX cannot express (a projected LSTM's ``proj``).

    Example:
      >>> import jax, numpy as np, onnxruntime, jaxgru
      >>> from jaxgru.interop import to_onnx
      >>> layers = [jaxgru.init_gru(jax.random.key(0), 3, 5, bidirectional=True),
      ...           jaxgru.init_gru(jax.random.key(1), 10, 5, bidirectional=True)]
      >>> options = {"direction": "bidirectional", "linear_before_reset": True, "layout": 1}
      >>> model = to_onnx(layers, options, inputs=["sequence_lens"])
      >>> print(" ".join(n.op_type for n in model.graph.node))
      Transpose GRU Transpose Reshape GRU Transpose Concat Transpose
      >>> x, lens = np.ones((2, 7, 3), np.float32), np.array([7, 4], np.int32)
      >>> session = onnxruntime.InferenceSession(model.SerializeToString(),
      ...                                        providers=["CPUExecutionProvider"])
      >>> y, y_h = session.run(None, {"X": x, "sequence_lens": lens})
      >>> want_y, want_h = jaxgru.gru_stack(layers, x, sequence_lens=lens, **options)
      >>> y.shape, y_h.shape, bool(np.allclose(y, want_y, atol=1e-5))
      ((2, 7, 2, 5), (2, 4, 5), True)
    """
    from onnx import TensorProto, helper, numpy_helper

    import jaxgru

    cell = _cell_of(layers)
    if not isinstance(options, Mapping):
        raise TypeError(f"{_FNAME}: options must be a dict; got {type(options).__name__}.")
    options = dict(options)
    if "dropout" in options:  # the stacks' (from_torch returns it): the identity at inference
        check_rate(_FNAME, options.pop("dropout"))
    check_names(_FNAME, options, option_names(cell))
    cfg = make_config(cell, _FNAME, **options)
    opset = _opset(opset)
    wanted = _data_inputs(cell, inputs)
    d, n_layers, layout = cfg.num_directions, len(layers), cfg.layout
    weights = _weights(cell, layers, d, cfg.direction)
    dtype = C.same_dtype(_FNAME, {f"layers[{k}].{f}": a for k, ws in enumerate(weights) for f, a in ws.items()})
    elem = helper.np_dtype_to_tensor_dtype(dtype)
    if elem == TensorProto.BFLOAT16 and opset < _BFLOAT16_OPSET:
        raise ValueError(f"{_FNAME}: bfloat16 weights need opset {_BFLOAT16_OPSET} or more (GRU-22 / LSTM-22 "
                         f"added the type); got opset={opset}.")
    if rounds_recurrent(_FNAME, cfg.recurrent_dtype, dtype):  # as the layer computes: R in float16
        weights = [{**ws, "r": C.rounded_f16(ws["r"])} for ws in weights]
    input_size, hidden = weights[0]["w"].shape[-1], weights[0]["r"].shape[-1]
    op = cell.upper()
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []

    def const(name: str, value: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(value, name))
        return name

    def node(op_type: str, ins: Sequence[str], outs: Sequence[str], name: str, **attrs: Any) -> None:
        ins = list(ins)
        while ins and not ins[-1]:
            ins.pop()  # trailing absent optional inputs
        nodes.append(helper.make_node(op_type, ins, list(outs), name=name, **attrs))

    def time_major(name: str, perm: list[int]) -> str:
        if layout == 0:
            return name
        node("Transpose", [name], [f"{name}_time_major"], f"{name}_to_time_major", perm=perm)
        return f"{name}_time_major"

    x = time_major("X", [1, 0, 2])
    lens = "sequence_lens" if "sequence_lens" in wanted else ""
    states = {f: time_major(_ROLE[f], [1, 0, 2]) for f in ("h0", "c0") if _ROLE[f] in wanted}
    if n_layers > 1 and states:
        const("slice_axes", np.array([0], np.int64))
    state_fields = [o.field for o in cells.spec(cell).state_operands]
    finals: dict[str, list[str]] = {f: [] for f in state_fields}
    y = x
    for k, arrays in enumerate(weights):
        given = {f: const(f"{_ROLE[f]}_{k}", a) for f, a in arrays.items()}
        given.update(x=y, lens=lens)
        if n_layers == 1:
            given.update(states)
        elif states:  # this layer's D entries of the stack's states
            starts = const(f"slice_starts_{k}", np.array([k * d], np.int64))
            ends = const(f"slice_ends_{k}", np.array([(k + 1) * d], np.int64))
            for f, s in states.items():
                given[f] = f"{_ROLE[f]}_{k}"
                node("Slice", [s, starts, ends, "slice_axes"], [given[f]], f"{_ROLE[f]}_slice_{k}")
        last = k == n_layers - 1
        y_k = "Y" if last and layout == 0 else f"Y_{k}"
        outs = {f: (_OUTPUT_NAMES[f] if n_layers == 1 and layout == 0 else f"{_OUTPUT_NAMES[f]}_{k}")
                for f in state_fields}
        for f in state_fields:
            finals[f].append(outs[f])
        node(op, [given.get(f, "") for f in _NODE_INPUTS[cell]], [y_k, *outs.values()], f"{op}_{k}",
             **node_attributes(cfg, hidden))
        if last:
            if layout == 1:  # [L, D, N, H] -> [N, L, D, H]
                node("Transpose", [y_k], ["Y"], "Y_to_batch_major", perm=[2, 0, 1, 3])
        else:  # the next layer's input [L, N, D*H]: PyTorch's Transpose + Reshape
            node("Transpose", [y_k], [f"Y_{k}_directions_last"], f"Y_{k}_transpose", perm=[0, 2, 1, 3])
            shape = "layer_input_shape" if k else const("layer_input_shape", np.array([0, 0, -1], np.int64))
            y = f"X_{k + 1}"
            node("Reshape", [f"Y_{k}_directions_last", shape], [y], f"X_{k + 1}_reshape")
    for f in state_fields:
        name, parts = _OUTPUT_NAMES[f], finals[f]
        if n_layers == 1 and layout == 0:
            continue  # the node's output is the graph's
        joined = parts[0] if n_layers == 1 else (name if layout == 0 else f"{name}_time_major")
        if n_layers > 1:
            node("Concat", parts, [joined], f"{name}_concat", axis=0)
        if layout == 1:
            node("Transpose", [joined], [name], f"{name}_to_batch_major", perm=[1, 0, 2])

    length, batch, states_n = "sequence_length", "batch", n_layers * d
    state_shape = [states_n, batch, hidden] if layout == 0 else [batch, states_n, hidden]
    x_shape = [length, batch, input_size] if layout == 0 else [batch, length, input_size]
    graph_inputs = [helper.make_tensor_value_info("X", elem, x_shape)]
    for name in wanted:
        if name == "sequence_lens":
            graph_inputs.append(helper.make_tensor_value_info(name, TensorProto.INT32, [batch]))
        else:
            graph_inputs.append(helper.make_tensor_value_info(name, elem, state_shape))
    y_shape = [length, d, batch, hidden] if layout == 0 else [batch, length, d, hidden]
    graph_outputs = [helper.make_tensor_value_info("Y", elem, y_shape)]
    graph_outputs += [helper.make_tensor_value_info(_OUTPUT_NAMES[f], elem, state_shape) for f in state_fields]
    graph = helper.make_graph(nodes, f"jaxgru_{cell}_stack", graph_inputs, graph_outputs, initializer=inits)
    model = helper.make_model_gen_version(graph, opset_imports=[helper.make_opsetid("", opset)],
                                          producer_name="jaxgru", producer_version=jaxgru.__version__)
    if layout == 1:
        helper.set_model_props(model, {LAYOUT_METADATA: "1"})
    return model


# --------------------------------------------------------------------------------------
# jax2onnx: the jaxgru primitives as ONNX GRU/LSTM nodes
# --------------------------------------------------------------------------------------
def _exportable(params: Mapping[str, Any]) -> RNNConfig:
    """The config of a forward primitive's equation that the jax2onnx plugin can export."""
    cfg: RNNConfig = params["cfg"]
    where = f"jaxgru.interop.register_jax2onnx: a {cfg.cell.upper()} call"
    if params.get("ensemble", 0):
        raise NotImplementedError(f"{where} with an ensemble axis of {params['ensemble']} (jax.vmap over the "
                                  "weights) has no ONNX equivalent; export one member at a time.")
    if params.get("residuals", False):
        raise NotImplementedError(f"{where} saving residuals (the forward inside jax.grad / jax.jvp) cannot be "
                                  "exported; export the inference function.")
    if cfg.proj:
        raise NotImplementedError(f"{where} with params.proj (a projected LSTM, PyTorch's proj_size) has no ONNX "
                                  "equivalent: ONNX's LSTM has no projection. Expected proj=None.")
    return cfg


def register_jax2onnx() -> None:
    """Teach jax2onnx to export jaxgru's layers as ONNX ``GRU`` / ``LSTM`` nodes.

    Registers a jax2onnx plugin for each forward primitive (``jaxgru_gru``, ``jaxgru_lstm``),
    so that ``jax2onnx.to_onnx`` exports whole JAX models that call ``jaxgru.gru`` / ``lstm``
    / the stacks / the cells / the Flax and Equinox modules: each layer call becomes one
    layout-0 node (with ``Transpose`` nodes around it for ``layout=1``) whose attributes
    come from the call's options, as in :func:`to_onnx`. Call it once before exporting;
    calling it again does nothing. jax2onnx (0.17, Python 3.11+) is an optional dependency,
    imported here.

    Exported: inference calls. Not exported (the plugin raises): a call whose weights carry a
    vmapped ensemble axis (``vmap`` over the weights), a projected LSTM (``params.proj``: ONNX
    has no projection), and the forward with residuals (inside ``jax.grad`` / ``jvp``; the
    derivative primitives have no plugin either).

    Raises:
      ModuleNotFoundError: jax2onnx is not installed.

    Example:
      >>> import importlib.util, jax, jax.numpy as jnp, numpy as np, onnxruntime, jaxgru
      >>> from jaxgru.interop import register_jax2onnx
      >>> params = jaxgru.init_lstm(jax.random.key(0), 3, 5)
      >>> def model(x):  # a JAX model calling jaxgru: an LSTM, then a readout
      ...     y, y_h, y_c = jaxgru.lstm(params, x, layout=1)
      ...     return jnp.tanh(y[:, :, 0]).sum(-1)
      >>> if importlib.util.find_spec("jax2onnx"):  # the optional dependency
      ...     import jax2onnx
      ...     register_jax2onnx()
      ...     exported = jax2onnx.to_onnx(model, [("B", 7, 3)])
      ...     assert "LSTM" in {n.op_type for n in exported.graph.node}
      ...     session = onnxruntime.InferenceSession(exported.SerializeToString(),
      ...                                            providers=["CPUExecutionProvider"])
      ...     x = np.ones((2, 7, 3), np.float32)
      ...     (got,) = session.run(None, {session.get_inputs()[0].name: x})
      ...     np.testing.assert_allclose(got, model(x), atol=1e-5)
    """
    plugin_system = importlib.import_module("jax2onnx.plugins.plugin_system")
    registry = plugin_system.PLUGIN_REGISTRY
    if all(getattr(registry.get(f"jaxgru_{c}"), "_jaxgru", False) for c in cells.CELLS):
        return
    ir = importlib.import_module("onnx_ir")
    shapes_mod = importlib.import_module("jax2onnx.plugins._ir_shapes")
    ir_utils = importlib.import_module("jax2onnx.ir_utils")

    def finish(ctx: Any, value: Any, dtype: Any, shape: Sequence[Any]) -> Any:
        value.type = ir.TensorType(ir_utils.numpy_dtype_to_ir(np.dtype(dtype)))
        shapes_mod._stamp_type_and_shape(value, tuple(shapes_mod._to_ir_dim_for_shape(s) for s in shape))
        shapes_mod._ensure_value_metadata(ctx, value)
        return value

    def lower(self: Any, ctx: Any, eqn: Any) -> None:
        del self
        cfg = _exportable(eqn.params)
        spec = cells.spec(cfg.cell)
        fields = [o.field for o in spec.operands]
        values = {f: ctx.get_value_for_var(v, name_hint=ctx.fresh_name(f"jaxgru_{f}"))
                  for f, v in zip(fields, eqn.invars)}
        avals = {f: v.aval for f, v in zip(fields, eqn.invars)}
        dtype = avals["x"].dtype
        hidden = int(avals["r"].shape[-1])

        def transpose(value: Any, perm: list[int], shape: Sequence[Any], hint: str) -> Any:
            out = ctx.builder.Transpose(value, perm=perm, _outputs=[ctx.fresh_name(hint)])
            return finish(ctx, out, dtype, [shape[p] for p in perm])

        state_fields = [o.field for o in spec.state_operands]
        if cfg.layout == 1:
            values["x"] = transpose(values["x"], [1, 0, 2], avals["x"].shape, "jaxgru_x_time_major")
            for f in state_fields:
                values[f] = transpose(values[f], [1, 0, 2], avals[f].shape, f"jaxgru_{f}_time_major")
        if not cfg.ragged:
            values["lens"] = None
        if spec.peepholes and not cfg.peepholes:
            values["p"] = None
        node_inputs = [values[f] for f in _NODE_INPUTS[cfg.cell]]
        while node_inputs[-1] is None:
            node_inputs.pop()
        outs = getattr(ctx.builder, cfg.cell.upper())(
            *node_inputs, _outputs=[ctx.fresh_name(f"jaxgru_{n}") for n in ("Y", *state_fields)],
            **node_attributes(cfg, hidden))
        outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
        out_shapes = [tuple(v.aval.shape) for v in eqn.outvars]
        if cfg.layout == 1:  # the node's shapes: Y [L, D, N, H], states [D, N, H]
            n, length, d, h = out_shapes[0]
            node_shapes = [(length, d, n, h)] + [(s[1], s[0], s[2]) for s in out_shapes[1:]]
        else:
            node_shapes = out_shapes
        outs = [finish(ctx, o, dtype, s) for o, s in zip(outs, node_shapes)]
        if cfg.layout == 1:
            outs = [transpose(outs[0], [2, 0, 1, 3], node_shapes[0], "jaxgru_Y")] + [
                transpose(o, [1, 0, 2], s, "jaxgru_state") for o, s in zip(outs[1:], node_shapes[1:])]
        for var, value in zip(eqn.outvars, outs):
            ctx.bind_value_for_var(var, value)

    for cell in cells.CELLS:
        cls = type(f"Jaxgru{cell.upper()}Plugin", (plugin_system.PrimitiveLeafPlugin,),
                   {"lower": lower, "_jaxgru": True})
        plugin_system.register_primitive(
            jaxpr_primitive=f"jaxgru_{cell}", since="jaxgru 0.1.0", context="primitives.jaxgru",
            component=f"jaxgru_{cell}", onnx=[{"component": cell.upper(),
                                               "doc": f"https://onnx.ai/onnx/operators/onnx__{cell.upper()}.html"}],
        )(cls)
