"""jaxgru: ONNX-exact GRU and LSTM layers for JAX, with XLA and WebGPU (WGSL) backends."""

from jaxgru._src.api import gru as gru
from jaxgru._src.api import gru_cell as gru_cell
from jaxgru._src.api import gru_stack as gru_stack
from jaxgru._src.api import lstm as lstm
from jaxgru._src.api import lstm_cell as lstm_cell
from jaxgru._src.api import lstm_stack as lstm_stack
from jaxgru._src.backends import backend_info as backend_info
from jaxgru._src.params import GRUParams as GRUParams
from jaxgru._src.params import LSTMParams as LSTMParams
from jaxgru._src.params import init_gru as init_gru
from jaxgru._src.params import init_lstm as init_lstm
from jaxgru._src.sharding import sharded as sharded

__version__ = "0.1.0"

__all__ = [
    "GRUParams",
    "LSTMParams",
    "backend_info",
    "gru",
    "gru_cell",
    "gru_stack",
    "init_gru",
    "init_lstm",
    "lstm",
    "lstm_cell",
    "lstm_stack",
    "sharded",
]
