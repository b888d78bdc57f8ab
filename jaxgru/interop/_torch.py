"""PyTorch ``nn.GRU`` / ``nn.LSTM`` / ``nn.GRUCell`` / ``nn.LSTMCell`` <-> jaxgru parameters.

PyTorch's formulas (per layer and direction), in its own names:

    GRU   r = σ(W_ir x + b_ir + W_hr h + b_hr)        z = σ(W_iz x + b_iz + W_hz h + b_hz)
          n = tanh(W_in x + b_in + r ⊙ (W_hn h + b_hn))   h' = (1 − z) ⊙ n + z ⊙ h
    LSTM  i, f, o = σ(W_i* x + b_i* + W_h* h + b_h*)    g = tanh(W_ig x + b_ig + W_hg h + b_hg)
          c' = f ⊙ c + i ⊙ g                            h' = o ⊙ tanh(c')

That is the ONNX GRU with ``linear_before_reset=1`` (rows r, z, n -> z, r, h) and the ONNX LSTM
without peepholes (rows i, f, g, o -> i, o, f, c); ``B = [b_ih, b_hh]``, both reordered.
``nn.LSTM(proj_size=P)`` (h' = W_hr (o ⊙ tanh(c'))) is ``LSTMParams.proj = weight_hr`` as it is
(``[P, H]``, no gates to reorder), with ``weight_hh`` ``[4H, P]``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import numpy as np

from jaxgru._src import dropout as _dropout
from jaxgru._src.cells import CELLS, spec
from jaxgru._src.options import OPTIONS_BY_NAME, flags_for, option_names, rounds_recurrent
from jaxgru._src.params import PARAMS_TYPE, GRUParams, LSTMParams
from jaxgru.interop import _common as C
from jaxgru.interop import _layout

if TYPE_CHECKING:  # pragma: no cover
    import torch

_ORDER = {"gru": _layout.TORCH_GRU, "lstm": _layout.TORCH_LSTM}


def _torch_to_numpy(t: torch.Tensor) -> np.ndarray:
    import ml_dtypes
    import torch

    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:  # numpy has no bfloat16; the float32 detour is exact
        return t.float().numpy().astype(ml_dtypes.bfloat16)
    return t.numpy().copy()


def _numpy_to_torch(a: np.ndarray) -> torch.Tensor:
    import ml_dtypes
    import torch

    a = np.asarray(a)
    if a.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(a.astype(np.float32)).to(torch.bfloat16)
    # a copy: a JAX array's numpy view is read-only, and a tensor sharing it would be writable
    # (torch.from_numpy warns that writing to it is undefined behaviour)
    return torch.tensor(a)


def _kind(module: Any) -> tuple[str, bool] | None:
    """("gru" | "lstm", is_cell) for a supported module, else None."""
    import torch.nn as nn

    for cls, kind in ((nn.GRU, ("gru", False)), (nn.LSTM, ("lstm", False)),
                      (nn.GRUCell, ("gru", True)), (nn.LSTMCell, ("lstm", True))):
        if isinstance(module, cls):
            return kind
    return None


def _suffixes(num_layers: int, d: int, is_cell: bool) -> list[list[str]]:
    """Parameter-name suffixes, per layer then direction (``_l0``, ``_l0_reverse``, ...)."""
    if is_cell:
        return [[""]]
    return [[f"_l{k}" + ("_reverse" if j else "") for j in range(d)] for k in range(num_layers)]


def from_torch(module: torch.nn.Module) -> tuple[list[GRUParams] | list[LSTMParams], dict[str, Any]]:
    """Convert a PyTorch GRU/LSTM module (or cell) to jaxgru parameters and options.

    Supports ``nn.GRU``, ``nn.LSTM`` (any ``num_layers``, ``bidirectional``, ``batch_first``,
    ``bias``, ``proj_size``: ``weight_hr_l{k}`` becomes ``LSTMParams.proj``), ``nn.GRUCell`` and
    ``nn.LSTMCell``. The module's dropout between layers
    becomes the stack option ``dropout`` (present only when ``module.dropout > 0``): the stack
    applies it only when called with a ``key`` (PyTorch's training mode), so without one the
    result reproduces the module in eval mode. With ``batch_first=True`` the options hold
    ``layout=1``; note that PyTorch's ``h_0``/``h_n`` stay ``[num_layers*D, N, H]`` even then,
    while jaxgru's layout-1 states are ``[N, num_layers*D, H]`` (swap axes 0 and 1).

    Args:
      module: an ``nn.GRU``, ``nn.LSTM``, ``nn.GRUCell`` or ``nn.LSTMCell``.

    Returns:
      ``(layers, options)``: one ``GRUParams``/``LSTMParams`` per layer (weights as jax arrays
      in the module's dtype, ``b=None`` when ``bias=False``), and keyword options for
      ``jaxgru.gru_stack``/``lstm_stack`` (``direction``, ``layout``,
      ``linear_before_reset=True`` for GRU, and ``dropout`` when nonzero), or, for a cell, for
      ``gru_cell``/``lstm_cell``.

    Raises:
      TypeError: ``module`` is not one of the supported modules.

    Example:
      >>> import torch, jaxgru
      >>> from jaxgru.interop import from_torch
      >>> layers, options = from_torch(torch.nn.GRU(3, 5, num_layers=2, batch_first=True))
      >>> y, h_n = jaxgru.gru_stack(layers, torch.randn(2, 7, 3).numpy(), **options)
      >>> y.shape, h_n.shape
      ((2, 7, 1, 5), (2, 2, 5))
    """
    fname = "jaxgru.interop.from_torch"
    kind = _kind(module)
    if kind is None:
        raise TypeError(
            f"{fname}: module must be a torch.nn.GRU, LSTM, GRUCell or LSTMCell; got "
            f"{type(module).__name__}."
        )
    cell, is_cell = kind
    projected = bool(getattr(module, "proj_size", 0))  # nn.LSTM(proj_size=P): weight_hr_l{k}
    d = 1 if is_cell or not module.bidirectional else 2
    num_layers = 1 if is_cell else cast(int, module.num_layers)  # torch types module attributes as Tensor | Module
    order = _ORDER[cell]
    layers = []
    for sfx_dirs in _suffixes(num_layers, d, is_cell):
        w, r, b, proj = [], [], [], []
        for sfx in sfx_dirs:
            get = lambda name, sfx=sfx: _torch_to_numpy(getattr(module, name + sfx))
            w.append(_layout.to_onnx(get("weight_ih"), order))
            r.append(_layout.to_onnx(get("weight_hh"), order))
            if module.bias:
                b.append(np.concatenate([_layout.to_onnx(get("bias_ih"), order),
                                         _layout.to_onnx(get("bias_hh"), order)]))
            if projected:
                proj.append(get("weight_hr"))  # [P, H]: no gate blocks
        arrays = [C.as_jax(np.stack(w)), C.as_jax(np.stack(r)), C.as_jax(np.stack(b)) if b else None]
        if projected:
            layers.append(LSTMParams(*arrays, proj=C.as_jax(np.stack(proj))))
        else:
            layers.append(PARAMS_TYPE[cell](*arrays))
    if is_cell:
        options: dict[str, Any] = {}
    else:
        options = {
            "direction": "bidirectional" if d == 2 else "forward",
            "layout": 1 if module.batch_first else 0,
        }
    if cell == "gru":
        options["linear_before_reset"] = True
    rate = 0.0 if is_cell else float(cast(float, module.dropout))  # torch types attributes as Tensor | Module
    if rate > 0:  # a stack option: gru_stack / lstm_stack, the modules
        options["dropout"] = rate
    return layers, options


# What to_torch accepts: every layer option (those PyTorch cannot express are refused by value)
# and the stack option `dropout` (nn.GRU / nn.LSTM's own).
_TORCH_OPTIONS = {cell: (*option_names(cell), "dropout") for cell in CELLS}
# The flags PyTorch's formulas fix away from the ONNX default; every other flag must be at its default.
_TORCH_FLAGS = {"linear_before_reset": True}


def _check_options(fname: str, cell: str, options: dict) -> tuple[str, int, float]:
    """(direction, layout, dropout) after refusing what PyTorch cannot express."""
    if not isinstance(options, dict):
        raise TypeError(f"{fname}: options must be a dict; got {type(options).__name__}.")
    for k in options:
        if k not in _TORCH_OPTIONS[cell]:
            raise ValueError(
                f"{fname}: option {k!r} has no PyTorch nn.{cell.upper()} equivalent; expected only "
                f"{', '.join(_TORCH_OPTIONS[cell])}."
            )
    for o in flags_for(cell):  # PyTorch's formulas fix every flag of the cell
        required = _TORCH_FLAGS.get(o.name, o.default)
        value = options.get(o.name, o.default)
        if bool(value) != required:
            raise ValueError(f"{fname}: PyTorch's {cell.upper()} fixes {o.name}={required!r} ({o.doc}); "
                             f"got {value!r}.")
    if not C.has_default_activations(cell, options):
        raise ValueError(
            f"{fname}: PyTorch uses the default activations only "
            f"({', '.join(C.DEFAULT_ACTIVATIONS[cell])}); got activations="
            f"{options.get('activations')!r}, activation_alpha={options.get('activation_alpha')!r}, "
            f"activation_beta={options.get('activation_beta')!r}."
        )
    if options.get("clip") is not None:
        raise ValueError(f"{fname}: PyTorch has no cell clip; expected clip=None, got "
                         f"{options['clip']!r}.")
    direction = options.get("direction", "forward")
    C.check_choice(fname, "options['direction']", direction, ("forward", "bidirectional"))
    layout = options.get("layout", 0)
    if layout not in (0, 1) or isinstance(layout, bool):
        raise ValueError(f"{fname}: options['layout'] must be 0 or 1; got {layout!r}.")
    return direction, int(layout), _dropout.check_rate(fname, options.get("dropout", 0.0))


def _layers_kind(fname: str, layers) -> str:
    """"gru" or "lstm" for a non-empty list of one parameter kind."""
    if isinstance(layers, (GRUParams, LSTMParams)) or not isinstance(layers, (list, tuple)) or not layers:
        raise TypeError(f"{fname}: layers must be a non-empty list of GRUParams or LSTMParams; got "
                        f"{type(layers).__name__}.")
    cls = type(layers[0])
    if cls not in (GRUParams, LSTMParams) or any(type(p) is not cls for p in layers):
        raise TypeError(f"{fname}: layers must all be GRUParams or all LSTMParams; got "
                        f"{[type(p).__name__ for p in layers]}.")
    return "gru" if cls is GRUParams else "lstm"


def _proj_size(fname: str, layers) -> int:
    """P of projected LSTM layers (PyTorch's proj_size, one for the whole module), 0 for none."""
    projs = [getattr(p, "proj", None) for p in layers]
    if all(a is None for a in projs):
        return 0
    sizes = [None if a is None else tuple(np.shape(a)) for a in projs]
    if any(a is None for a in projs) or any(len(s) != 3 for s in sizes if s is not None) or \
            len({s[1] for s in sizes if s is not None}) != 1:
        raise ValueError(f"{fname}: PyTorch's proj_size is one for every layer: every layers[k].proj must be "
                         f"(num_directions, proj_size, hidden) with one proj_size, or all None; got "
                         f"proj shapes {sizes}.")
    return int(sizes[0][1])  # type: ignore[index]


def _check_layers(fname: str, layers, cell: str, d: int):
    """(hidden, input_size, proj_size, numpy layers) after checking shapes across layers."""
    g = spec(cell).num_gates
    out = []
    proj_size = _proj_size(fname, layers) if cell == "lstm" else 0
    r0 = C.to_numpy(fname, "layers[0].r", layers[0].r)
    hidden = r0.shape[1] // g if proj_size and r0.ndim == 3 else r0.shape[-1]
    width = proj_size or hidden  # features of h: what R reads and the next layer gets
    what = "proj_size" if proj_size else "hidden"
    input_size = 0  # set by layer 0
    for k, p in enumerate(layers):
        w = C.to_numpy(fname, f"layers[{k}].w", p.w)
        r = C.to_numpy(fname, f"layers[{k}].r", p.r)
        C.check_rank(fname, f"layers[{k}].w", w, 3, "(num_directions, gates*hidden, input_size)")
        i = w.shape[-1]
        if k == 0:
            input_size = i
        elif i != d * width:
            raise ValueError(f"{fname}: layers[{k}].w must read the previous layer's outputs, input "
                             f"size num_directions*{what}={d * width}; got {i}.")
        C.check_shape(fname, f"layers[{k}].w", w, (d, g * hidden, i),
                      "(num_directions, gates*hidden, input_size)")
        C.check_shape(fname, f"layers[{k}].r", r, (d, g * hidden, width),
                      f"(num_directions, gates*hidden, {what})")
        pj = None
        if proj_size:
            pj = C.to_numpy(fname, f"layers[{k}].proj", p.proj)
            C.check_shape(fname, f"layers[{k}].proj", pj, (d, proj_size, hidden),
                          "(num_directions, proj_size, hidden)")
        b = None if p.b is None else C.to_numpy(fname, f"layers[{k}].b", p.b)
        if b is not None:
            C.check_shape(fname, f"layers[{k}].b", b, (d, 2 * g * hidden),
                          "(num_directions, 2*gates*hidden)")
        if cell == "lstm" and not C.is_zero(p.p):
            raise ValueError(f"{fname}: layers[{k}].p holds peephole weights, which PyTorch's LSTM "
                             "does not have; expected p=None (or zeros).")
        out.append((w, r, b, pj))
    return hidden, input_size, proj_size, out


def _check_module(fname: str, module, is_cell: bool, want: dict) -> None:
    got = {"hidden_size": module.hidden_size, "input_size": module.input_size,
           "proj_size": getattr(module, "proj_size", 0)}  # the cells have none
    if not is_cell:
        got.update(num_layers=module.num_layers, bidirectional=bool(module.bidirectional),
                   batch_first=bool(module.batch_first))
    for k, v in got.items():
        if k in want and want[k] != v:
            raise ValueError(f"{fname}: module.{k} must be {want[k]!r} to hold these weights; got "
                             f"{v!r}.")


def to_torch(
    layers: list[GRUParams] | list[LSTMParams],
    options: dict[str, Any],
    module: torch.nn.Module | None = None,
) -> torch.nn.Module:
    """Write jaxgru parameters into a PyTorch module (a new one, or ``module``).

    The inverse of ``from_torch``: ``from_torch(to_torch(layers, options))`` gives back the
    same arrays, and ``to_torch(*from_torch(m))`` has ``m``'s state dict, exactly.

    Args:
      layers: one ``GRUParams`` or ``LSTMParams`` per layer (all of one kind).
      options: the keyword options these layers run with (as ``from_torch`` returns them).
      module: an ``nn.GRU``/``nn.LSTM`` (or, for one forward layer, ``nn.GRUCell``/
        ``nn.LSTMCell``) whose configuration matches; its parameters are overwritten in place
        (cast to its dtype; absent biases written as zeros). If None, a new ``nn.GRU``/``nn.LSTM``
        is created with matching ``input_size``, ``hidden_size``, ``num_layers``,
        ``bidirectional``, ``batch_first``, ``bias`` (False when every ``b`` is None),
        ``proj_size`` (P of the layers' ``proj [D, P, H]``, 0 without),
        ``dropout`` (``options["dropout"]``, 0 if absent) and dtype. A given ``nn.GRU`` /
        ``nn.LSTM`` gets ``options["dropout"]`` as its ``dropout`` when the options hold one.

    Returns:
      The module holding the weights.

    Raises:
      TypeError: ``layers`` is not a list of one parameter kind, ``module`` is not a supported
        module of that kind, or ``options["dropout"]`` is not a number.
      ValueError: options PyTorch cannot express (a GRU without ``linear_before_reset=True``,
        non-default activations, ``clip``, ``direction="reverse"``, LSTM peepholes,
        ``input_forget``, dropout into a cell), a ``dropout`` outside [0, 1), shapes that do not
        chain, projections on some layers only (or of different sizes), or a ``module`` whose
        configuration differs (``proj_size`` included; named in the message).
    """
    import torch

    fname = "jaxgru.interop.to_torch"
    cell = _layers_kind(fname, layers)
    direction, layout, dropout = _check_options(fname, cell, options)
    d = C.num_directions(direction)
    hidden, input_size, proj_size, arrays = _check_layers(fname, layers, cell, d)
    recurrent = OPTIONS_BY_NAME["recurrent_dtype"].check(fname, "options['recurrent_dtype']",
                                                         options.get("recurrent_dtype"))
    if rounds_recurrent(fname, recurrent, arrays[0][1].dtype):
        # the module computes what the layers do: R and proj as the layer rounds them
        arrays = [(w, C.rounded_f16(r), b, None if pj is None else C.rounded_f16(pj)) for w, r, b, pj in arrays]
    has_bias = any(b is not None for _, _, b, _ in arrays)
    if module is None:
        dtype = _numpy_to_torch(np.zeros(0, arrays[0][0].dtype)).dtype
        kw: dict[str, Any] = dict(num_layers=len(arrays), bias=has_bias, batch_first=layout == 1,
                                  bidirectional=d == 2, dropout=dropout, dtype=dtype)
        if cell == "gru":
            module = torch.nn.GRU(input_size, hidden, **kw)
        else:
            module = torch.nn.LSTM(input_size, hidden, proj_size=proj_size, **kw)
        is_cell = False
    else:
        kind = _kind(module)
        if kind is None or kind[0] != cell:
            raise TypeError(f"{fname}: module must be a torch.nn.{cell.upper()} or "
                            f"{cell.upper()}Cell for {cell.upper()} layers; got "
                            f"{type(module).__name__}.")
        is_cell = kind[1]
        if is_cell and proj_size:
            raise ValueError(f"{fname}: a {type(module).__name__} has no projection (proj_size); got layers with "
                             f"proj_size={proj_size}. Pass an nn.LSTM(proj_size={proj_size}) or no module.")
        if is_cell and (len(arrays) != 1 or d != 1 or dropout):
            raise ValueError(f"{fname}: a {type(module).__name__} holds one forward layer without dropout; got "
                             f"{len(arrays)} layer(s), direction={direction!r}, dropout={dropout!r}.")
        _check_module(fname, module, is_cell, dict(
            hidden_size=hidden, input_size=input_size, num_layers=len(arrays),
            bidirectional=d == 2, batch_first=layout == 1, proj_size=proj_size,
        ))
        if not module.bias:
            for k, (_, _, b, _) in enumerate(arrays):
                if not C.is_zero(b):
                    raise ValueError(f"{fname}: module has bias=False but layers[{k}].b is nonzero; "
                                     "expected a module with bias=True.")
        if not is_cell and "dropout" in options:
            setattr(module, "dropout", dropout)  # noqa: B010  (torch types module attributes as Tensor | Module)
    order = _ORDER[cell]
    with torch.no_grad():
        for (w, r, b, pj), sfx_dirs in zip(arrays, _suffixes(len(arrays), d, is_cell), strict=True):
            for j, sfx in enumerate(sfx_dirs):
                put = lambda name, a, sfx=sfx: getattr(module, name + sfx).copy_(_numpy_to_torch(a))
                put("weight_ih", _layout.from_onnx(w[j], order))
                put("weight_hh", _layout.from_onnx(r[j], order))
                if module.bias:
                    bj = np.zeros((2 * w.shape[1],), w.dtype) if b is None else b[j]
                    wb, rb = _layout.split_onnx_bias(bj)
                    put("bias_ih", _layout.from_onnx(wb, order))
                    put("bias_hh", _layout.from_onnx(rb, order))
                if pj is not None:
                    put("weight_hr", pj[j])
    return module
