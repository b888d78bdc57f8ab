"""Dispatch of one layer call: bind the forward primitive of its cell."""

from __future__ import annotations

from jaxgru._src import rules  # noqa: F401  (registers the autodiff and batching rules)
from jaxgru._src.compat import match_varying
from jaxgru._src.options import RNNConfig
from jaxgru._src.primitives import forward_p


def run_layer(cfg: RNNConfig, operands):
    """Run one GRU/LSTM layer on fully materialised operands (see reference.py)."""
    return tuple(forward_p[cfg.cell].bind(*match_varying(*operands), cfg=cfg, ensemble=0, residuals=False))
