"""Equinox modules around ``jaxgru.gru_stack`` and ``jaxgru.lstm_stack``.

``jaxgru.equinox.GRU`` and ``jaxgru.equinox.LSTM`` are pytrees whose array leaves are the
weights, ``self.layers``: a list of ``jaxgru.GRUParams`` / ``jaxgru.LSTMParams`` (jaxgru's
ONNX layout), one per layer; every option is a static field. They work with
``eqx.filter_jit`` / ``eqx.filter_grad`` and, since nothing but weights is a leaf, with plain
``jax.jit`` / ``jax.grad`` and optax. Needs equinox (``pip install jaxgru[equinox]``);
``import jaxgru`` does not import it.

Shapes are ONNX's: ``x [L, N, I]`` (layout 0) or ``[N, L, I]`` (layout 1); ``y [L, D, N, H]``
or ``[N, L, D, H]`` (the last layer, directions apart); states ``[num_layers*D, N, H]`` or
``[N, num_layers*D, H]``. As Equinox layers do, a module also runs on one example: ``x [L, I]``
gives ``y [L, D, H]`` and states ``[num_layers*D, H]``, and ``jax.vmap(model)`` over a batch of
them runs one primitive call per layer (the primitives fold vmap into their batch axis).

Dropout between layers (``dropout=p``, PyTorch's ``nn.GRU(dropout=p)``) follows
``eqx.nn.Dropout``: a call's ``key=`` draws the masks, and ``inference`` (the field, which
``eqx.nn.inference_mode`` sets, or a call's ``inference=``) switches it off.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, cast

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from jaxgru._src import shapes
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
from jaxgru._src.params import GRUParams, LSTMParams

__all__ = ["GRU", "LSTM"]

Params = GRUParams | LSTMParams


@jax.tree_util.register_pytree_node_class
class _Flag:
    """A bool that is a pytree node without leaves: the ``inference`` field as constructed.

    ``eqx.nn.inference_mode`` finds it (it is a node of the tree) and replaces it with a plain
    bool, as it sets ``eqx.nn.Dropout``'s; until then the module's only leaves are its weights,
    so it passes through plain ``jax.jit`` / ``jax.grad`` / optax as before.
    """

    __slots__ = ("value",)

    def __init__(self, value: bool) -> None:
        self.value = bool(value)

    def tree_flatten(self) -> tuple[tuple[()], bool]:
        return (), self.value

    @classmethod
    def tree_unflatten(cls, value: bool, children: Any) -> _Flag:
        del children
        return cls(value)

    def __bool__(self) -> bool:
        return self.value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, (bool, _Flag)) and bool(other) == self.value

    def __hash__(self) -> int:
        return hash(self.value)

    def __repr__(self) -> str:
        return repr(self.value)


class _Stack(eqx.Module):
    """What GRU and LSTM share: the module spec (sizes, options), the call, from_params.

    Abstract (``cell`` is an ``eqx.AbstractClassVar``); GRU and LSTM are its final subclasses.
    Every option is read from the static ``spec`` (``jaxgru._src.modules.ModuleSpec``);
    ``model.layout``, ``model.linear_before_reset``, ... are its values.
    """

    layers: list
    spec: ModuleSpec = eqx.field(static=True)
    inference: bool | _Flag
    if TYPE_CHECKING:  # what AbstractClassVar is to a type checker (pyright reads the alias as a field)
        cell: ClassVar[str]
    else:
        cell: eqx.AbstractClassVar[str]

    def _setup(self, input_size: int, hidden_size: int, num_layers: int, bidirectional: bool,
               options: dict[str, Any], inference: bool, dtype: Any, key: jax.Array) -> None:
        self.spec = ModuleSpec.make(self.cell, f"jaxgru.equinox.{type(self).__name__}", input_size, hidden_size,
                                    num_layers, bidirectional, options)
        self.inference = _Flag(check_flag(self.spec.name, "inference", inference))
        # equinox's convention: float64 weights by default when x64 is on
        dtype = (jnp.float64 if jax.config.read("jax_enable_x64") else jnp.float32) if dtype is None else dtype
        self.layers = self.spec.init_layers(list(jax.random.split(key, self.spec.num_layers)), dtype)

    def __getattr__(self, name: str) -> Any:
        # sizes and options live in the spec (one place); reached only for names not set here
        return spec_attribute(self, name)

    def _dropout_key(self, key: Any, inference: Any) -> Any:
        """The call's dropout key, or None (no dropout), by eqx.nn.Dropout's rules."""
        if self.spec.dropout == 0.0:
            return None
        inference = self.inference if inference is None else inference
        if check_flag(self.spec.name, "inference", bool(inference) if isinstance(inference, _Flag) else inference):
            return None
        if key is None:
            raise RuntimeError(
                f"{self.spec.name}: dropout={self.spec.dropout} requires a key when not in inference mode; "
                "pass key=..., or inference=True (or use eqx.nn.inference_mode(model))."
            )
        return key

    def _run(self, x: Any, initial_state: Any, sequence_lens: Any, key: Any, inference: Any) -> tuple[Any, ...]:
        key = self._dropout_key(key, inference)
        states = states_for(self.spec, initial_state)
        if np.ndim(x) != 2:  # a batch (or a bad rank, which the stack names)
            return self.spec.run(self.layers, x, states, sequence_lens, key)
        # one example: run it as a batch of one (x, states and lengths gain the batch axis)
        batch_x, batch_y, batch_state = (1, 2, 1) if self.spec.attribute("layout") == 0 else (0, 0, 0)
        names = {"initial_h": "initial_state"} if len(states) == 1 else {
            "initial_h": "initial_state[0]", "initial_c": "initial_state[1]"}
        for name, s in states.items():
            if s is not None:
                s = jnp.asarray(s)
                shapes.check_rank(self.spec.name, names[name], s, 2,
                                  "(num_layers*num_directions, hidden) for an unbatched x [L, I]")
                states[name] = jnp.expand_dims(s, batch_state)
        if sequence_lens is not None:
            sequence_lens = jnp.asarray(sequence_lens)
            shapes.check_rank(self.spec.name, "sequence_lens", sequence_lens, 0, "(a scalar) for an unbatched x [L, I]")
            sequence_lens = sequence_lens[None]
        y, *finals = self.spec.run(self.layers, jnp.expand_dims(jnp.asarray(x), batch_x), states, sequence_lens, key)
        return (jnp.squeeze(y, batch_y), *(jnp.squeeze(s, batch_state) for s in finals))

    @classmethod
    def _from_params(cls, layers: Sequence[Params], options: dict) -> Any:
        fname = f"jaxgru.equinox.{cls.__name__}.from_params"
        d, options = check_converted(fname, cls.cell, layers, options)
        make = cast(Callable[..., Any], cls)  # a concrete GRU / LSTM: their constructors take these
        input_size, hidden, sizes = converted_sizes(layers)
        module = make(input_size, hidden, num_layers=len(layers), bidirectional=d == 2, key=jax.random.key(0),
                      **sizes, **options)
        given = [p._replace(**{f: jnp.asarray(a) for f, a in p._asdict().items() if a is not None}) for p in layers]
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
      recurrent_dtype: None, or "float16": R rounded to float16 in every call (see ``jaxgru.gru``).
      backend: "auto", "xla", "wgsl" or "cpu" (see docs/backends.md).
      dropout: the rate in [0, 1) of dropout on each layer's output but the last, as PyTorch's
        ``dropout`` (inverted: kept values scaled by ``1 / (1 - dropout)``); 0 for none.
      inference: as ``eqx.nn.Dropout``'s: if True, no dropout. A field, set by
        ``eqx.nn.inference_mode`` (then a plain bool leaf, as ``eqx.nn.Dropout``'s: use
        ``eqx.filter_jit``) and overridden by a call's ``inference=``.
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
      >>> y, h_n = model(jnp.ones((7, 3)))  # one example, as Equinox layers take (jax.vmap batches it)
      >>> y.shape, h_n.shape
      ((7, 2, 5), (4, 5))
      >>> dropping = GRU(3, 5, num_layers=2, dropout=0.5, key=jax.random.key(0))
      >>> y, h_n = dropping(jnp.ones((7, 3)), key=jax.random.key(1))  # training: a key per call
    """

    layers: list[GRUParams]
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
        inference: bool = False,
        dtype: Any = None,
        key: jax.Array,
    ) -> None:
        self._setup(input_size, hidden_size, num_layers, bidirectional,
                    pick((*module_options("gru"), *MODULE_OPTIONS), locals()), inference, dtype, key)

    def __call__(
        self,
        x: jax.Array,
        initial_state: jax.Array | None = None,
        sequence_lens: jax.Array | None = None,
        *,
        key: jax.Array | None = None,
        inference: bool | None = None,
    ) -> tuple[jax.Array, jax.Array]:
        """Run the stack over a sequence, or over one example.

        Args:
          x: inputs ``[L, N, I]`` (layout 0) or ``[N, L, I]`` (layout 1); or one example
            ``[L, I]`` (then every shape below loses its batch axis N).
          initial_state: ``h_0``, ``[num_layers*D, N, H]`` (layout 0) or ``[N, num_layers*D, H]``
            (layout 1), layer-major then direction; ``[num_layers*D, H]`` for one example;
            zeros if None.
          sequence_lens: ``[N]`` integer lengths in ``[0, L]`` (a scalar for one example);
            outputs are zero past each length and the final state is the last valid one.
          key: a JAX PRNG key for the dropout masks (as ``eqx.nn.Dropout``'s); needed with
            ``dropout > 0`` unless in inference mode, unused otherwise.
          inference: overrides ``self.inference`` for this call (True: no dropout).

        Returns:
          ``(y, h_n)``: the last layer's outputs ``[L, D, N, H]`` (layout 0) or ``[N, L, D, H]``
          (layout 1) (``[L, D, H]`` for one example), and the final states of every layer,
          shaped like ``initial_state``.

        Raises:
          RuntimeError: ``dropout > 0`` without a key, not in inference mode.
          TypeError, ValueError: a bad argument, named in the message.
        """
        y, h_n = self._run(x, initial_state, sequence_lens, key, inference)
        return y, h_n

    @classmethod
    def from_params(cls, layers: Sequence[GRUParams], **options: Any) -> GRU:
        """A module holding given weights, e.g. a converter's ``(layers, options)``.

        Args:
          layers: one ``jaxgru.GRUParams`` per layer.
          **options: the module's keyword options. The number of directions comes from the
            weights; a converter's ``direction`` ("forward" or "bidirectional") is accepted in
            place of ``bidirectional``, so its options pass through unchanged (``dropout``
            included).

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
      inference: as ``eqx.nn.Dropout``'s: if True, no dropout. A field, set by
        ``eqx.nn.inference_mode`` (then a plain bool leaf, as ``eqx.nn.Dropout``'s: use
        ``eqx.filter_jit``) and overridden by a call's ``inference=``.
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
        inference: bool = False,
        dtype: Any = None,
        key: jax.Array,
    ) -> None:
        self._setup(input_size, hidden_size, num_layers, bidirectional,
                    pick((*module_options("lstm"), *MODULE_OPTIONS, *CELL_SIZES["lstm"]), locals()),
                    inference, dtype, key)

    def __call__(
        self,
        x: jax.Array,
        initial_state: tuple[jax.Array | None, jax.Array | None] | None = None,
        sequence_lens: jax.Array | None = None,
        *,
        key: jax.Array | None = None,
        inference: bool | None = None,
    ) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
        """Run the stack over a sequence, or over one example.

        Args:
          x: inputs ``[L, N, I]`` (layout 0) or ``[N, L, I]`` (layout 1); or one example
            ``[L, I]`` (then every shape below loses its batch axis N).
          initial_state: ``(h_0, c_0)``, each ``[num_layers*D, N, H]`` (layout 0) or
            ``[N, num_layers*D, H]`` (layout 1) (``[num_layers*D, H]`` for one example) or None
            (zeros); None for both zero.
          sequence_lens: ``[N]`` integer lengths in ``[0, L]`` (a scalar for one example).
          key: a JAX PRNG key for the dropout masks (as ``eqx.nn.Dropout``'s); needed with
            ``dropout > 0`` unless in inference mode, unused otherwise.
          inference: overrides ``self.inference`` for this call (True: no dropout).

        Returns:
          ``(y, (h_n, c_n))``: the last layer's outputs ``[L, D, N, H]`` (layout 0) or
          ``[N, L, D, H]`` (layout 1) (``[L, D, H]`` for one example), and the final hidden and
          cell states of every layer.

        Raises:
          RuntimeError: ``dropout > 0`` without a key, not in inference mode.
          TypeError: ``initial_state`` is not a pair.
        """
        y, h_n, c_n = self._run(x, initial_state, sequence_lens, key, inference)
        return y, (h_n, c_n)

    @classmethod
    def from_params(cls, layers: Sequence[LSTMParams], **options: Any) -> LSTM:
        """A module holding given weights, e.g. a converter's ``(layers, options)``.

        Args:
          layers: one ``jaxgru.LSTMParams`` per layer (peepholes are kept).
          **options: the module's keyword options. The number of directions comes from the
            weights; a converter's ``direction`` ("forward" or "bidirectional") is accepted in
            place of ``bidirectional``, so its options pass through unchanged (``dropout``
            included).

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
