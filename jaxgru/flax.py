"""Flax NNX modules around ``jaxgru.gru_stack`` and ``jaxgru.lstm_stack``.

``jaxgru.flax.GRU`` and ``jaxgru.flax.LSTM`` hold one ``LayerWeights`` per layer, whose
``nnx.Param`` attributes ``w``, ``r``, ``b`` (and ``p``, LSTM peepholes, when present) are
jaxgru's ONNX layout. Calling a module calls the stack function with its options, so it works
under ``nnx.jit``, ``nnx.grad``, ``nnx.vmap`` and ``nnx.Optimizer`` like any NNX module.
Needs flax (``pip install jaxgru[flax]``); ``import jaxgru`` does not import it.

Shapes are ONNX's: ``x [L, N, I]`` (layout 0) or ``[N, L, I]`` (layout 1); ``y [L, D, N, H]``
or ``[N, L, D, H]`` (the last layer, directions apart); states ``[num_layers*D, N, H]`` or
``[N, num_layers*D, H]``.

Dropout between layers (``dropout=p``, PyTorch's ``nn.GRU(dropout=p)``) follows
``nnx.Dropout``: masks come from the ``dropout`` stream of the constructor's ``rngs`` (or a
call's ``rngs=``), and ``deterministic`` (the constructor's, a call's, ``model.train()`` /
``model.eval()`` / ``nnx.view``) switches it off.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar, cast

import jax
import jax.numpy as jnp
from flax import nnx

from jaxgru._src.modules import (
    CELL_SIZES,
    MODULE_OPTIONS,
    ModuleSpec,
    check_converted,
    check_flag,
    converted_sizes,
    module_options,
    spec_attribute,
    states_for,
)
from jaxgru._src.options import pick
from jaxgru._src.params import PARAMS_TYPE, GRUParams, LSTMParams

__all__ = ["GRU", "LSTM", "LayerWeights"]

Params = GRUParams | LSTMParams


class LayerWeights(nnx.Module):
    """One layer's weights as ``nnx.Param``, in jaxgru's (ONNX) layout.

    Attributes ``w``, ``r``, ``b``, ``p`` and ``proj`` are ``nnx.Param`` or ``None`` (no bias / no
    peepholes / no projection), with the fields and shapes of ``jaxgru.GRUParams`` / ``jaxgru.LSTMParams``.

    Args:
      params: the layer's ``jaxgru.GRUParams`` or ``jaxgru.LSTMParams``.

    Example:
      >>> import jax, jaxgru
      >>> from jaxgru.flax import LayerWeights
      >>> weights = LayerWeights(jaxgru.init_gru(jax.random.key(0), 3, 5))
      >>> weights.w.shape, weights.params().b.shape
      ((1, 15, 3), (1, 30))
    """

    def __init__(self, params: Params) -> None:
        if not isinstance(params, (GRUParams, LSTMParams)):
            raise TypeError(f"jaxgru.flax.LayerWeights: params must be jaxgru.GRUParams or jaxgru.LSTMParams; "
                            f"got {type(params).__name__}.")
        self.cell = "gru" if isinstance(params, GRUParams) else "lstm"
        for name, value in zip(params._fields, params):
            setattr(self, name, None if value is None else nnx.Param(jnp.asarray(value)))

    def params(self) -> Params:
        """The weights' current values as ``jaxgru.GRUParams`` / ``jaxgru.LSTMParams``."""
        cls = PARAMS_TYPE[self.cell]
        values = {f: getattr(self, f) for f in cls._fields}
        return cls(**{f: v[...] for f, v in values.items() if v is not None})


class _Stack(nnx.Module):
    """What GRU and LSTM share: the module spec (sizes, options), weights, the call, from_params.

    Every option is read from ``self.spec`` (see ``jaxgru._src.modules.ModuleSpec``);
    ``model.layout``, ``model.linear_before_reset``, ... are its values.
    """

    cell: ClassVar[str]
    spec: ModuleSpec
    layers: nnx.List

    def _setup(self, input_size: int, hidden_size: int, num_layers: int, bidirectional: bool,
               options: dict[str, Any], deterministic: bool, dtype: Any, param_dtype: Any,
               rngs: nnx.Rngs) -> None:
        self.spec = ModuleSpec.make(self.cell, f"jaxgru.flax.{type(self).__name__}", input_size, hidden_size,
                                    num_layers, bidirectional, options)
        self.deterministic = check_flag(self.spec.name, "deterministic", deterministic)
        self.dtype = dtype
        self.param_dtype = param_dtype
        keys = [rngs.params() for _ in range(self.spec.num_layers)]
        self.layers = nnx.List([LayerWeights(p) for p in self.spec.init_layers(keys, param_dtype)])
        # as nnx.Dropout: a fork of the `dropout` stream (drawn after the weights, and only with
        # dropout, so that the weights and `rngs` are those of a module without dropout)
        self.rngs: nnx.RngStream | None = rngs["dropout"].fork() if self.spec.dropout > 0 else nnx.data(None)

    def __getattr__(self, name: str) -> Any:
        # sizes and options live in the spec (one place); reached only for names not set here
        return spec_attribute(self, name)

    def layer_params(self) -> list[Params]:
        """The current weights, one ``jaxgru.GRUParams`` / ``LSTMParams`` per layer.

        Returns:
          What ``jaxgru.gru_stack`` / ``lstm_stack`` take as ``layers``.
        """
        return [layer.params() for layer in self.layers]

    def set_view(self, deterministic: bool | None = None) -> None:
        """What ``nnx.view(model, deterministic=...)`` sets (as ``nnx.Dropout.set_view``).

        Args:
          deterministic: if True, no dropout; None leaves it as it is.
        """
        if deterministic is not None:
            self.deterministic = deterministic

    def _dropout_key(self, deterministic: Any, rngs: Any) -> jax.Array | None:
        """The call's dropout key, or None (no dropout), by nnx.Dropout's rules."""
        deterministic = self.deterministic if deterministic is None else deterministic
        if self.spec.dropout == 0.0 or check_flag(self.spec.name, "deterministic", deterministic):
            return None
        rngs = self.rngs if rngs is None else rngs
        if isinstance(rngs, nnx.Rngs):
            return rngs["dropout"]()
        if isinstance(rngs, nnx.RngStream):
            return rngs()
        if isinstance(rngs, jax.Array):
            return rngs
        raise TypeError(f"{self.spec.name}: rngs must be an nnx.Rngs, nnx.RngStream or a JAX PRNG key; "
                        f"got {type(rngs).__name__}.")

    def _run(self, x: Any, initial_state: Any, sequence_lens: Any, deterministic: Any = None,
             rngs: Any = None) -> tuple[Any, ...]:
        key = self._dropout_key(deterministic, rngs)
        layers = self.layer_params()
        states = states_for(self.spec, initial_state)
        if self.dtype is not None:
            cast = lambda a: None if a is None else jnp.asarray(a).astype(self.dtype)
            x = cast(x)
            layers = [jax.tree.map(cast, p) for p in layers]
            states = {k: cast(v) for k, v in states.items()}
        return self.spec.run(layers, x, states, sequence_lens, key)

    @classmethod
    def _from_params(cls, layers: Sequence[Params], options: dict, rngs: nnx.Rngs | None) -> Any:
        fname = f"jaxgru.flax.{cls.__name__}.from_params"
        d, options = check_converted(fname, cls.cell, layers, options)
        w0 = jnp.asarray(layers[0].w)
        make = cast(Callable[..., Any], cls)  # a concrete GRU / LSTM: their constructors take these
        input_size, hidden, sizes = converted_sizes(layers)
        module = make(input_size, hidden, num_layers=len(layers), bidirectional=d == 2, param_dtype=w0.dtype,
                      rngs=nnx.Rngs(0) if rngs is None else rngs, **sizes, **options)
        module.layers = nnx.List([LayerWeights(p) for p in layers])
        return module


class GRU(_Stack):
    """A multi-layer GRU (the ONNX ``GRU`` operator per layer) as a Flax NNX module.

    The weights are ``self.layers[k].w`` / ``.r`` / ``.b`` (``nnx.Param``, gates z, r, h,
    initialised like PyTorch from ``rngs.params()``); layer k > 0 reads layer k-1's outputs
    with the directions side by side (input size ``D * hidden_size``).

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
      recurrent_dtype: None, or "float16": R rounded to float16 in every call (see ``jaxgru.gru``).
      backend: "auto", "xla", "wgsl" or "cpu" (see docs/backends.md).
      dropout: the rate in [0, 1) of dropout on each layer's output but the last, as PyTorch's
        ``dropout`` (inverted: kept values scaled by ``1 / (1 - dropout)``); 0 for none.
      deterministic: as ``nnx.Dropout``'s: if True, no dropout; ``model.train()`` sets it False,
        ``model.eval()`` True, and a call's ``deterministic=`` overrides it.
      dtype: cast inputs, weights and states to this dtype before the call (the outputs have
        it); None keeps jaxgru's promotion (outputs in the dtype of ``x``).
      param_dtype: dtype of the weights.
      rngs: the ``nnx.Rngs`` whose ``params`` stream initialises the weights; with
        ``dropout > 0``, a fork of its ``dropout`` stream (``default`` if it has none) draws the
        masks, one key per call, as ``nnx.Dropout`` does.

    Raises:
      ValueError, TypeError: a bad option, named in the message.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> from flax import nnx
      >>> from jaxgru.flax import GRU
      >>> model = GRU(3, 5, num_layers=2, bidirectional=True, rngs=nnx.Rngs(0))
      >>> y, h_n = model(jnp.ones((7, 2, 3)), sequence_lens=jnp.array([7, 4]))
      >>> y.shape, h_n.shape
      ((7, 2, 2, 5), (4, 2, 5))
      >>> dropping = GRU(3, 5, num_layers=2, dropout=0.5, rngs=nnx.Rngs(0))  # train mode by default
      >>> dropping.eval()  # deterministic=True: no dropout, as nnx.Dropout
      >>> bool(jnp.all(dropping(jnp.ones((7, 2, 3)))[0] == dropping(jnp.ones((7, 2, 3)))[0]))
      True
    """

    cell: ClassVar[str] = "gru"

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
        recurrent_dtype: str | None = None,
        backend: str = "auto",
        dropout: float = 0.0,
        deterministic: bool = False,
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
        rngs: nnx.Rngs,
    ) -> None:
        self._setup(input_size, hidden_size, num_layers, bidirectional,
                    pick((*module_options("gru"), *MODULE_OPTIONS), locals()), deterministic, dtype, param_dtype, rngs)

    def __call__(
        self,
        x: jax.Array,
        initial_state: jax.Array | None = None,
        sequence_lens: jax.Array | None = None,
        *,
        deterministic: bool | None = None,
        rngs: nnx.Rngs | nnx.RngStream | jax.Array | None = None,
    ) -> tuple[jax.Array, jax.Array]:
        """Run the stack over a sequence.

        Args:
          x: inputs ``[L, N, I]`` (layout 0) or ``[N, L, I]`` (layout 1).
          initial_state: ``h_0``, ``[num_layers*D, N, H]`` (layout 0) or ``[N, num_layers*D, H]``
            (layout 1), layer-major then direction; zeros if None.
          sequence_lens: ``[N]`` integer lengths in ``[0, L]``; outputs are zero past each
            length and the final state is the last valid one.
          deterministic: overrides ``self.deterministic`` for this call (True: no dropout).
          rngs: overrides the module's dropout stream for this call: an ``nnx.Rngs`` (its
            ``dropout`` stream), an ``nnx.RngStream`` or a JAX PRNG key.

        Returns:
          ``(y, h_n)``: the last layer's outputs ``[L, D, N, H]`` (layout 0) or ``[N, L, D, H]``
          (layout 1), and the final states of every layer, shaped like ``initial_state``.

        Raises:
          TypeError: ``deterministic`` is not a bool, or ``rngs`` is of another kind.
        """
        y, h_n = self._run(x, initial_state, sequence_lens, deterministic, rngs)
        return y, h_n

    @classmethod
    def from_params(cls, layers: Sequence[GRUParams], *, rngs: nnx.Rngs | None = None, **options: Any) -> GRU:
        """A module holding given weights, e.g. a converter's ``(layers, options)``.

        Args:
          layers: one ``jaxgru.GRUParams`` per layer (all with biases, or all without).
          **options: the module's keyword options. The number of directions comes from the
            weights; a converter's ``direction`` ("forward" or "bidirectional") is accepted in
            place of ``bidirectional``, so its options pass through unchanged (``dropout``
            included).
          rngs: the ``nnx.Rngs`` of the module (with ``dropout``, its dropout stream);
            ``nnx.Rngs(0)`` if None.

        Returns:
          A ``GRU`` whose ``input_size``, ``hidden_size``, ``num_layers``, direction and
          ``param_dtype`` are those of ``layers``.

        Raises:
          TypeError: ``layers`` is not a list of ``GRUParams``.
          ValueError: a reverse-only direction, layers with different numbers of directions, or
            a ``direction`` / ``bidirectional`` that disagrees with the weights.

        Example:
          >>> import torch
          >>> from jaxgru.interop import from_torch
          >>> from jaxgru.flax import GRU
          >>> layers, options = from_torch(torch.nn.GRU(3, 5, num_layers=2))
          >>> model = GRU.from_params(layers, **options)
          >>> model.num_layers, model.linear_before_reset
          (2, True)
        """
        return cls._from_params(layers, options, rngs)


class LSTM(_Stack):
    """A multi-layer LSTM (the ONNX ``LSTM`` operator per layer) as a Flax NNX module.

    The weights are ``self.layers[k].w`` / ``.r`` / ``.b`` (``nnx.Param``, gates i, o, f, c,
    initialised like PyTorch from ``rngs.params()``; no peepholes unless loaded with
    ``from_params``).

    Args:
      input_size: I, the number of input features.
      hidden_size: H, the number of hidden units.
      num_layers: stacked layers.
      bidirectional: run each layer in both directions (D = 2).
      proj_size: P > 0 projects each layer's hidden state to P features (PyTorch's
        ``nn.LSTM(proj_size=P)``: weights ``proj [D, P, H]``, h, Y and ``h_n`` of P features,
        ``c_n`` of H); 0 for none.
      layout: 0 (time-major ``[L, N, I]``) or 1 (batch-major ``[N, L, I]``).
      input_forget: couple the forget gate to the input gate (f = 1 - i).
      activations: 3 names per direction (f, g, h); default ("Sigmoid", "Tanh", "Tanh").
      activation_alpha: alpha values of the activations, as in ``jaxgru.lstm``.
      activation_beta: beta values of the activations, as in ``jaxgru.lstm``.
      clip: clamp every gate's activation input into ``[-clip, clip]``; None for no clipping.
      recurrent_dtype: None, or "float16": R rounded to float16 in every call (see ``jaxgru.lstm``).
      backend: "auto", "xla", "wgsl" or "cpu" (see docs/backends.md).
      dropout: the rate in [0, 1) of dropout on each layer's output but the last, as PyTorch's
        ``dropout`` (inverted: kept values scaled by ``1 / (1 - dropout)``); 0 for none.
      deterministic: as ``nnx.Dropout``'s: if True, no dropout; ``model.train()`` sets it False,
        ``model.eval()`` True, and a call's ``deterministic=`` overrides it.
      dtype: cast inputs, weights and states to this dtype before the call (the outputs have
        it); None keeps jaxgru's promotion (outputs in the dtype of ``x``).
      param_dtype: dtype of the weights.
      rngs: the ``nnx.Rngs`` whose ``params`` stream initialises the weights; with
        ``dropout > 0``, a fork of its ``dropout`` stream (``default`` if it has none) draws the
        masks, one key per call, as ``nnx.Dropout`` does.

    Raises:
      ValueError, TypeError: a bad option, named in the message.

    Example:
      >>> import jax.numpy as jnp
      >>> from flax import nnx
      >>> from jaxgru.flax import LSTM
      >>> model = LSTM(3, 5, layout=1, rngs=nnx.Rngs(0))
      >>> y, (h_n, c_n) = model(jnp.ones((2, 7, 3)))
      >>> y.shape, c_n.shape
      ((2, 7, 1, 5), (2, 1, 5))
    """

    cell: ClassVar[str] = "lstm"

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        *,
        num_layers: int = 1,
        bidirectional: bool = False,
        proj_size: int = 0,
        layout: int = 0,
        input_forget: bool = False,
        activations: Sequence[str] | None = None,
        activation_alpha: Sequence[float] | None = None,
        activation_beta: Sequence[float] | None = None,
        clip: float | None = None,
        recurrent_dtype: str | None = None,
        backend: str = "auto",
        dropout: float = 0.0,
        deterministic: bool = False,
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
        rngs: nnx.Rngs,
    ) -> None:
        self._setup(input_size, hidden_size, num_layers, bidirectional,
                    pick((*module_options("lstm"), *MODULE_OPTIONS, *CELL_SIZES["lstm"]), locals()),
                    deterministic, dtype, param_dtype, rngs)

    def __call__(
        self,
        x: jax.Array,
        initial_state: tuple[jax.Array | None, jax.Array | None] | None = None,
        sequence_lens: jax.Array | None = None,
        *,
        deterministic: bool | None = None,
        rngs: nnx.Rngs | nnx.RngStream | jax.Array | None = None,
    ) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
        """Run the stack over a sequence.

        Args:
          x: inputs ``[L, N, I]`` (layout 0) or ``[N, L, I]`` (layout 1).
          initial_state: ``(h_0, c_0)``, each ``[num_layers*D, N, H]`` (layout 0) or
            ``[N, num_layers*D, H]`` (layout 1) or None (zeros); None for both zero.
          sequence_lens: ``[N]`` integer lengths in ``[0, L]``.
          deterministic: overrides ``self.deterministic`` for this call (True: no dropout).
          rngs: overrides the module's dropout stream for this call: an ``nnx.Rngs`` (its
            ``dropout`` stream), an ``nnx.RngStream`` or a JAX PRNG key.

        Returns:
          ``(y, (h_n, c_n))``: the last layer's outputs ``[L, D, N, H]`` (layout 0) or
          ``[N, L, D, H]`` (layout 1), and the final hidden and cell states of every layer.

        Raises:
          TypeError: ``initial_state`` is not a pair, ``deterministic`` is not a bool, or
            ``rngs`` is of another kind.
        """
        y, h_n, c_n = self._run(x, initial_state, sequence_lens, deterministic, rngs)
        return y, (h_n, c_n)

    @classmethod
    def from_params(cls, layers: Sequence[LSTMParams], *, rngs: nnx.Rngs | None = None, **options: Any) -> LSTM:
        """A module holding given weights, e.g. a converter's ``(layers, options)``.

        Args:
          layers: one ``jaxgru.LSTMParams`` per layer (peepholes are kept).
          **options: the module's keyword options. The number of directions comes from the
            weights; a converter's ``direction`` ("forward" or "bidirectional") is accepted in
            place of ``bidirectional``, so its options pass through unchanged (``dropout``
            included).
          rngs: the ``nnx.Rngs`` of the module (with ``dropout``, its dropout stream);
            ``nnx.Rngs(0)`` if None.

        Returns:
          An ``LSTM`` whose sizes, direction and ``param_dtype`` are those of ``layers``.

        Raises:
          TypeError: ``layers`` is not a list of ``LSTMParams``.
          ValueError: a reverse-only direction, layers with different numbers of directions, or
            a ``direction`` / ``bidirectional`` that disagrees with the weights.

        Example:
          >>> import torch
          >>> from jaxgru.interop import from_torch
          >>> from jaxgru.flax import LSTM
          >>> layers, options = from_torch(torch.nn.LSTM(3, 5, bidirectional=True))
          >>> model = LSTM.from_params(layers, **options)
          >>> model.bidirectional, model.layers[0].w.shape
          (True, (2, 20, 3))
        """
        return cls._from_params(layers, options, rngs)
