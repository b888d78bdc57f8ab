"""Converters from other systems' GRU/LSTM weights to jaxgru parameters and options.

Every converter returns ``(layers, options)``: a list of ``jaxgru.GRUParams`` /
``jaxgru.LSTMParams`` (one per layer) and a dict of keyword options with which
``jaxgru.gru_stack`` / ``lstm_stack`` (or ``gru`` / ``lstm`` / the cells, for one layer)
reproduce the source. Optional dependencies (torch, keras, onnx, flax, equinox) are imported only by
the converter that needs them. See docs/converters.md.
"""

from jaxgru.interop._bnns import from_bnns_gru as from_bnns_gru
from jaxgru.interop._bnns import from_bnns_lstm as from_bnns_lstm
from jaxgru.interop._equinox import from_equinox as from_equinox
from jaxgru.interop._flax import from_flax as from_flax
from jaxgru.interop._keras import from_keras as from_keras
from jaxgru.interop._onnx import from_onnx as from_onnx
from jaxgru.interop._onnx_export import register_jax2onnx as register_jax2onnx
from jaxgru.interop._onnx_export import to_onnx as to_onnx
from jaxgru.interop._packed import from_packed_sequence as from_packed_sequence
from jaxgru.interop._torch import from_torch as from_torch
from jaxgru.interop._torch import to_torch as to_torch
from jaxgru.interop._webnn import from_webnn_gru as from_webnn_gru
from jaxgru.interop._webnn import from_webnn_lstm as from_webnn_lstm

__all__ = [
    "from_bnns_gru",
    "from_bnns_lstm",
    "from_equinox",
    "from_flax",
    "from_keras",
    "from_onnx",
    "from_packed_sequence",
    "from_torch",
    "from_webnn_gru",
    "from_webnn_lstm",
    "register_jax2onnx",
    "to_onnx",
    "to_torch",
]
