"""The 11 ONNX RNN activations: jnp form, WGSL form and WGSL derivative side by side.

Each activation is identified by its ONNX name; ``alpha``/``beta`` follow the ONNX operator
of the same name. Where ONNX defines no default (ScaledTanh) jaxgru uses alpha = beta = 1
(plain tanh); onnxruntime uses 0 for a missing Affine / ScaledTanh / ThresholdedRelu
parameter, a documented difference.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp


@dataclasses.dataclass(frozen=True)
class _Kind:
    name: str  # canonical ONNX spelling
    takes_alpha: bool
    takes_beta: bool
    alpha: float  # default
    beta: float  # default
    fn: Callable[[jax.Array, jax.Array, jax.Array], jax.Array]  # (x, alpha, beta), alpha/beta as x.dtype scalars
    # WGSL expression of `x` (f32), `A` and `B` (f32 constants). NaN in, NaN out wherever the
    # jnp form gives NaN (`keep_nan`): WGSL's max/min/clamp would map a NaN to a bound.
    wgsl: str
    # WGSL expression of the derivative d fn / dx, as ``jax.jvp`` of ``fn`` gives it (the
    # backward kernels): at a tie of max/clip (Relu at 0, HardSigmoid at 0 or 1) jax's jvp
    # gives 0.5, and so does this. Helpers: wgsl/activations.wgsl.
    wgsl_d: str


def _softplus(x: jax.Array, a: jax.Array, b: jax.Array) -> jax.Array:
    del a, b
    return jax.nn.softplus(x)


_KINDS = (  # name, takes alpha, takes beta, alpha, beta, jnp form, WGSL form, WGSL derivative
    _Kind(
        "Relu", False, False, 0.0, 0.0, lambda x, a, b: jnp.maximum(x, 0),
        "keep_nan(x, max(x, 0.0))",
        "select(select(0.0, 0.5, x == 0.0), 1.0, x > 0.0)",
    ),
    _Kind(
        "Tanh", False, False, 0.0, 0.0, lambda x, a, b: jnp.tanh(x),
        "keep_nan(x, tanh(clamp(x, -10.0, 10.0)))",
        "dtanh_(x)",
    ),
    _Kind(
        "Sigmoid", False, False, 0.0, 0.0, lambda x, a, b: jax.nn.sigmoid(x),
        "keep_nan(x, sigmoid_(x))",
        "dsigmoid_(x)",
    ),
    _Kind("Affine", True, True, 1.0, 0.0, lambda x, a, b: a * x + b, "A * x + B", "A"),
    _Kind(
        "LeakyRelu", True, False, 0.01, 0.0, lambda x, a, b: jnp.where(x >= 0, x, a * x),
        "select(A * x, x, x >= 0.0)",
        "select(A, 1.0, x >= 0.0)",
    ),
    _Kind(
        "ThresholdedRelu", True, False, 1.0, 0.0, lambda x, a, b: jnp.where(x > a, x, 0),
        "select(0.0, x, x > A)",
        "select(0.0, 1.0, x > A)",
    ),
    _Kind(
        "ScaledTanh", True, True, 1.0, 1.0, lambda x, a, b: a * jnp.tanh(b * x),
        "A * keep_nan(B * x, tanh(clamp(B * x, -10.0, 10.0)))",
        "A * B * dtanh_(B * x)",
    ),
    _Kind(
        "HardSigmoid", True, True, 0.2, 0.5, lambda x, a, b: jnp.clip(a * x + b, 0, 1),
        "keep_nan(A * x + B, clamp(A * x + B, 0.0, 1.0))",
        "A * dclamp01_(A * x + B)",
    ),
    _Kind(
        "Elu", True, False, 1.0, 0.0, lambda x, a, b: jnp.where(x >= 0, x, a * jnp.expm1(jnp.minimum(x, 0))),
        "keep_nan(x, select(A * (exp(min(x, 0.0)) - 1.0), x, x >= 0.0))",
        "select(A * exp(min(x, 0.0)), 1.0, x >= 0.0)",
    ),
    _Kind(
        "Softsign", False, False, 0.0, 0.0, lambda x, a, b: x / (1 + jnp.abs(x)),
        "x / (1.0 + abs(x))",
        "1.0 / ((1.0 + abs(x)) * (1.0 + abs(x)))",
    ),
    _Kind("Softplus", False, False, 0.0, 0.0, _softplus, "keep_nan(x, softplus_(x))", "sigmoid_(x)"),
)
_BY_NAME = {k.name.lower(): k for k in _KINDS}

NAMES: tuple[str, ...] = tuple(k.name for k in _KINDS)


@dataclasses.dataclass(frozen=True, repr=False)
class Activation:
    """A resolved activation: canonical ONNX name and the alpha/beta it applies."""

    name: str
    alpha: float = 0.0
    beta: float = 0.0

    def __repr__(self) -> str:
        k = _BY_NAME[self.name.lower()]
        args = [f"{v:g}" for v, takes in ((self.alpha, k.takes_alpha), (self.beta, k.takes_beta)) if takes]
        return f"{self.name}({','.join(args)})" if args else self.name

    @property
    def kind_id(self) -> int:
        """A small integer identifying the kind (used to specialise WGSL kernels)."""
        return NAMES.index(self.name)

    def __call__(self, x: jax.Array) -> jax.Array:
        k = _BY_NAME[self.name.lower()]
        return k.fn(x, jnp.asarray(self.alpha, x.dtype), jnp.asarray(self.beta, x.dtype))

    def wgsl(self) -> str:
        """The activation as a WGSL expression of ``x``, ``A`` and ``B``."""
        return _BY_NAME[self.name.lower()].wgsl

    def wgsl_derivative(self) -> str:
        """Its derivative with respect to ``x`` as a WGSL expression of ``x``, ``A`` and ``B``."""
        return _BY_NAME[self.name.lower()].wgsl_d


def lookup(name: object) -> _Kind | None:
    """The activation kind for a (case-insensitive) name, or None if unknown."""
    return _BY_NAME.get(name.lower()) if isinstance(name, str) else None


def resolve(names, alphas, betas, *, argname: str, fname: str) -> tuple[Activation, ...]:
    """Attach alpha/beta to a list of activation names, consuming the lists in order.

    As in ONNX, ``alphas``/``betas`` are consumed in the order of ``names``, only by the
    activations that take that parameter; missing values take the activation's default.

    Raises:
      ValueError: unknown name, or more alpha/beta values than activations that take them.
    """
    alphas, betas = list(alphas or ()), list(betas or ())
    out = []
    n_alpha = n_beta = 0
    for name in names:
        kind = lookup(name)
        if kind is None:
            raise ValueError(
                f"{fname}: {argname} has unknown activation {name!r}; expected one of "
                f"{', '.join(NAMES)} (case-insensitive)."
            )
        alpha, beta = kind.alpha, kind.beta
        if kind.takes_alpha:
            if n_alpha < len(alphas):
                alpha = float(alphas[n_alpha])
            n_alpha += 1
        if kind.takes_beta:
            if n_beta < len(betas):
                beta = float(betas[n_beta])
            n_beta += 1
        out.append(Activation(kind.name, alpha, beta))
    for arg, given, used in (("activation_alpha", alphas, n_alpha), ("activation_beta", betas, n_beta)):
        if len(given) > used:
            raise ValueError(
                f"{fname}: {arg} has {len(given)} values but the activations "
                f"{[a.name for a in out]} take at most {used}."
            )
    return tuple(out)
