"""Equinox modules around ``jaxgru.gru_stack`` and ``jaxgru.lstm_stack``.

``jaxgru.equinox.GRU`` and ``jaxgru.equinox.LSTM`` are pytrees whose array leaves are the
weights, ``self.layers``: a list of ``jaxgru.GRUParams`` / ``jaxgru.LSTMParams`` (jaxgru's
ONNX layout), one per layer; every option is a static field. They work with
``eqx.filter_jit`` / ``eqx.filter_grad`` and, since nothing but weights is a leaf, with plain
``jax.jit`` / ``jax.grad`` and optax. Needs equinox (``pip install jaxgru[equinox]``);
``import jaxgru`` does not import it.

Shapes are ONNX's: ``x [L, N, I]`` (layout 0) or ``[N, L, I]`` (layout 1); ``y [L, D, N, H]``
or ``[N, L, D, H]`` (the last layer, directions apart); states ``[num_layers*D, N, H]`` or
``[N, num_layers*D, H]``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp

from jaxgru._src import api
from jaxgru._src.modules import check_converted, lstm_states, stack_options, static_tuple
from jaxgru._src.params import GRUParams, LSTMParams, init_gru, init_lstm
from jaxgru._src.shapes import check_size

__all__ = ["GRU", "LSTM"]

Params = GRUParams | LSTMParams


class _Stack(eqx.Module):
    """What GRU and LSTM share: construction, the options of the stack call, from_params."""

    layers: list
    input_size: int = eqx.field(static=True)
    hidden_size: int = eqx.field(static=True)
    num_layers: int = eqx.field(static=True)
    bidirectional: bool = eqx.field(static=True)
    layout: int = eqx.field(static=True)
    activations: tuple[str, ...] | None = eqx.field(static=True)
    activation_alpha: tuple[float, ...] | None = eqx.field(static=True)
    activation_beta: tuple[float, ...] | None = eqx.field(static=True)
    clip: float | None = eqx.field(static=True)
    backend: str = eqx.field(static=True)

    _cell = "gru"
    _flag = "linear_before_reset"

    def _setup(self, input_size, hidden_size, num_layers, bidirectional, layout, flag, activations,
               activation_alpha, activation_beta, clip, backend, dtype, key) -> None:
        fname = f"jaxgru.equinox.{type(self).__name__}"
        self.input_size = check_size(fname, "input_size", input_size)
        self.hidden_size = check_size(fname, "hidden_size", hidden_size)
        self.num_layers = check_size(fname, "num_layers", num_layers)
        self.bidirectional = bool(bidirectional)
        self.layout = layout
        self.activations = static_tuple(activations)
        self.activation_alpha = static_tuple(activation_alpha)
        self.activation_beta = static_tuple(activation_beta)
        self.clip = clip
        self.backend = backend
        # validate every option now rather than at the first call
        api.make_config(self._cell, fname, **self._options(), **{self._flag: flag})
        # equinox's convention: float64 weights by default when x64 is on
        dtype = (jnp.float64 if jax.config.jax_enable_x64 else jnp.float32) if dtype is None else dtype
        init = init_gru if self._cell == "gru" else init_lstm
        d = 2 if self.bidirectional else 1
        self.layers = [
            init(k, self.input_size if i == 0 else d * self.hidden_size, self.hidden_size,
                 bidirectional=self.bidirectional, dtype=dtype)
            for i, k in enumerate(jax.random.split(key, self.num_layers))
        ]

    def _options(self) -> dict:
        return stack_options(self)

    def _run(self, x, states, sequence_lens):
        stack = api.gru_stack if self._cell == "gru" else api.lstm_stack
        return stack(self.layers, x, **states, sequence_lens=sequence_lens, **self._options(),
                     **{self._flag: getattr(self, self._flag)})

    @classmethod
    def _from_params(cls, layers: Sequence[Params], options: dict) -> _Stack:
        fname = f"jaxgru.equinox.{cls.__name__}.from_params"
        d, options = check_converted(fname, cls._cell, layers, options)
        module = cls(jnp.shape(layers[0].w)[-1], jnp.shape(layers[0].r)[-1], num_layers=len(layers),
                     bidirectional=d == 2, key=jax.random.key(0), **options)
        given = [type(p)(*(None if a is None else jnp.asarray(a) for a in p)) for p in layers]
        return eqx.tree_at(lambda m: m.layers, module, given)


class GRU(_Stack):
    """A multi-layer GRU (the ONNX ``GRU`` operator per layer) as an Equinox module.

    The weights are ``self.layers``, one ``jaxgru.GRUParams`` (gates z, r, h) per layer,
    initialised like PyTorch; layer k > 0 reads layer k-1's outputs with the directions side by
    side (input size ``D * hidden_size``).

    Args:
      input_size: I, the number of input features.
      hidden_size: H, the number of hidden units.
      num_layers: stacked layers.
      bidirectional: run each layer in both directions (D = 2).
      layout: 0 (time-major ``[L, N, I]``) or 1 (batch-major ``[N, L, I]``).
      linear_before_reset: apply the reset gate after the recurrent matmul (PyTorch's and
        Keras' formula); False is the ONNX default.
      activations: 2 names per direction (f, g); default ("Sigmoid", "Tanh") per direction.
      activation_alpha: alpha values of the activations, as in ``jaxgru.gru``.
      activation_beta: beta values of the activations, as in ``jaxgru.gru``.
      clip: clamp every activation input into ``[-clip, clip]``; None for no clipping.
      backend: "auto", "xla" or "wgsl".
      dtype: dtype of the weights; float32 (float64 with ``jax_enable_x64``) if None.
      key: a JAX PRNG key for the initialisation.

    Raises:
      ValueError, TypeError: a bad option, named in the message.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> from jaxgru.equinox import GRU
      >>> model = GRU(3, 5, num_layers=2, bidirectional=True, key=jax.random.key(0))
      >>> y, h_n = model(jnp.ones((7, 2, 3)), sequence_lens=jnp.array([7, 4]))
      >>> y.shape, h_n.shape
      ((7, 2, 2, 5), (4, 2, 5))
    """

    layers: list[GRUParams]
    linear_before_reset: bool = eqx.field(static=True)

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        *,
        num_layers: int = 1,
        bidirectional: bool = False,
        layout: int = 0,
        linear_before_reset: bool = False,
        activations: Sequence[str] | None = None,
        activation_alpha: Sequence[float] | None = None,
        activation_beta: Sequence[float] | None = None,
        clip: float | None = None,
        backend: str = "auto",
        dtype: Any = None,
        key: jax.Array,
    ) -> None:
        self.linear_before_reset = linear_before_reset
        self._setup(input_size, hidden_size, num_layers, bidirectional, layout, linear_before_reset,
                    activations, activation_alpha, activation_beta, clip, backend, dtype, key)

    def __call__(
        self,
        x: jax.Array,
        initial_state: jax.Array | None = None,
        sequence_lens: jax.Array | None = None,
        *,
        key: jax.Array | None = None,
    ) -> tuple[jax.Array, jax.Array]:
        """Run the stack over a sequence.

        Args:
          x: inputs ``[L, N, I]`` (layout 0) or ``[N, L, I]`` (layout 1).
          initial_state: ``h_0``, ``[num_layers*D, N, H]`` (layout 0) or ``[N, num_layers*D, H]``
            (layout 1), layer-major then direction; zeros if None.
          sequence_lens: ``[N]`` integer lengths in ``[0, L]``; outputs are zero past each
            length and the final state is the last valid one.
          key: unused (the computation is deterministic); accepted as equinox layers accept it.

        Returns:
          ``(y, h_n)``: the last layer's outputs ``[L, D, N, H]`` (layout 0) or ``[N, L, D, H]``
          (layout 1), and the final states of every layer, shaped like ``initial_state``.
        """
        del key
        return self._run(x, {"initial_h": initial_state}, sequence_lens)

    @classmethod
    def from_params(cls, layers: Sequence[GRUParams], **options: Any) -> GRU:
        """A module holding given weights, e.g. a converter's ``(layers, options)``.

        Args:
          layers: one ``jaxgru.GRUParams`` per layer.
          **options: the module's keyword options. The number of directions comes from the
            weights; a converter's ``direction`` ("forward" or "bidirectional") is accepted in
            place of ``bidirectional``, so its options pass through unchanged.

        Returns:
          A ``GRU`` whose sizes and direction are those of ``layers`` and whose weights are them.

        Raises:
          TypeError: ``layers`` is not a list of ``GRUParams``.
          ValueError: a reverse-only direction, layers with different numbers of directions, or
            a ``direction`` / ``bidirectional`` that disagrees with the weights.

        Example:
          >>> import torch
          >>> from jaxgru.interop import from_torch
          >>> from jaxgru.equinox import GRU
          >>> layers, options = from_torch(torch.nn.GRU(3, 5, num_layers=2))
          >>> model = GRU.from_params(layers, **options)
          >>> model.num_layers, model.linear_before_reset
          (2, True)
        """
        return cls._from_params(layers, options)


class LSTM(_Stack):
    """A multi-layer LSTM (the ONNX ``LSTM`` operator per layer) as an Equinox module.

    The weights are ``self.layers``, one ``jaxgru.LSTMParams`` (gates i, o, f, c; no peepholes
    unless loaded with ``from_params``) per layer, initialised like PyTorch.

    Args:
      input_size: I, the number of input features.
      hidden_size: H, the number of hidden units.
      num_layers: stacked layers.
      bidirectional: run each layer in both directions (D = 2).
      layout: 0 (time-major ``[L, N, I]``) or 1 (batch-major ``[N, L, I]``).
      input_forget: couple the forget gate to the input gate (f = 1 - i).
      activations: 3 names per direction (f, g, h); default ("Sigmoid", "Tanh", "Tanh").
      activation_alpha: alpha values of the activations, as in ``jaxgru.lstm``.
      activation_beta: beta values of the activations, as in ``jaxgru.lstm``.
      clip: clamp every gate's activation input into ``[-clip, clip]``; None for no clipping.
      backend: "auto", "xla" or "wgsl".
      dtype: dtype of the weights; float32 (float64 with ``jax_enable_x64``) if None.
      key: a JAX PRNG key for the initialisation.

    Raises:
      ValueError, TypeError: a bad option, named in the message.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> from jaxgru.equinox import LSTM
      >>> model = LSTM(3, 5, layout=1, key=jax.random.key(0))
      >>> y, (h_n, c_n) = model(jnp.ones((2, 7, 3)))
      >>> y.shape, c_n.shape
      ((2, 7, 1, 5), (2, 1, 5))
    """

    layers: list[LSTMParams]
    input_forget: bool = eqx.field(static=True)

    _cell = "lstm"
    _flag = "input_forget"

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        *,
        num_layers: int = 1,
        bidirectional: bool = False,
        layout: int = 0,
        input_forget: bool = False,
        activations: Sequence[str] | None = None,
        activation_alpha: Sequence[float] | None = None,
        activation_beta: Sequence[float] | None = None,
        clip: float | None = None,
        backend: str = "auto",
        dtype: Any = None,
        key: jax.Array,
    ) -> None:
        self.input_forget = input_forget
        self._setup(input_size, hidden_size, num_layers, bidirectional, layout, input_forget,
                    activations, activation_alpha, activation_beta, clip, backend, dtype, key)

    def __call__(
        self,
        x: jax.Array,
        initial_state: tuple[jax.Array | None, jax.Array | None] | None = None,
        sequence_lens: jax.Array | None = None,
        *,
        key: jax.Array | None = None,
    ) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
        """Run the stack over a sequence.

        Args:
          x: inputs ``[L, N, I]`` (layout 0) or ``[N, L, I]`` (layout 1).
          initial_state: ``(h_0, c_0)``, each ``[num_layers*D, N, H]`` (layout 0) or
            ``[N, num_layers*D, H]`` (layout 1) or None (zeros); None for both zero.
          sequence_lens: ``[N]`` integer lengths in ``[0, L]``.
          key: unused (the computation is deterministic); accepted as equinox layers accept it.

        Returns:
          ``(y, (h_n, c_n))``: the last layer's outputs ``[L, D, N, H]`` (layout 0) or
          ``[N, L, D, H]`` (layout 1), and the final hidden and cell states of every layer.

        Raises:
          TypeError: ``initial_state`` is not a pair.
        """
        del key
        y, h_n, c_n = self._run(x, lstm_states("jaxgru.equinox.LSTM", initial_state), sequence_lens)
        return y, (h_n, c_n)

    @classmethod
    def from_params(cls, layers: Sequence[LSTMParams], **options: Any) -> LSTM:
        """A module holding given weights, e.g. a converter's ``(layers, options)``.

        Args:
          layers: one ``jaxgru.LSTMParams`` per layer (peepholes are kept).
          **options: the module's keyword options. The number of directions comes from the
            weights; a converter's ``direction`` ("forward" or "bidirectional") is accepted in
            place of ``bidirectional``, so its options pass through unchanged.

        Returns:
          An ``LSTM`` whose sizes and direction are those of ``layers`` and whose weights are them.

        Raises:
          TypeError: ``layers`` is not a list of ``LSTMParams``.
          ValueError: a reverse-only direction, layers with different numbers of directions, or
            a ``direction`` / ``bidirectional`` that disagrees with the weights.

        Example:
          >>> import torch
          >>> from jaxgru.interop import from_torch
          >>> from jaxgru.equinox import LSTM
          >>> layers, options = from_torch(torch.nn.LSTM(3, 5, bidirectional=True))
          >>> model = LSTM.from_params(layers, **options)
          >>> model.bidirectional, model.layers[0].w.shape
          (True, (2, 20, 3))
        """
        return cls._from_params(layers, options)
