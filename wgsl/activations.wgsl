// activations.wgsl — helpers of the generated activation switches (`act`, and `act_d` in the
// backward modules; both generated from jaxgru/_src/activations.py, which names these helpers
// in its WGSL forms). Overflow-free forms.
//
// Prepended to the recurrence modules (forward, tiled, tangent) after recurrence_common.wgsl and
// to the backward modules after backward_common.wgsl (webgpu/shaders.py).
// Bindings: none. Overrides: the cell's activations and clip, per direction slot (set by
// kernels.cell_constants for every kernel that reads them; alpha and beta reach the generated
// switches as arguments):
//   HAS_CLIP, CLIP                       clamp of every f/g activation input
//   ACT_{F,G,H}{0,1}, ALPHA_*, BETA_*    activation kind ids and parameters

override HAS_CLIP: bool = false;
override CLIP: f32 = 0.0;
override ACT_F0: u32 = 2u;
override ACT_G0: u32 = 1u;
override ACT_H0: u32 = 1u;
override ACT_F1: u32 = 2u;
override ACT_G1: u32 = 1u;
override ACT_H1: u32 = 1u;
override ALPHA_F0: f32 = 0.0;
override ALPHA_G0: f32 = 0.0;
override ALPHA_H0: f32 = 0.0;
override ALPHA_F1: f32 = 0.0;
override ALPHA_G1: f32 = 0.0;
override ALPHA_H1: f32 = 0.0;
override BETA_F0: f32 = 0.0;
override BETA_G0: f32 = 0.0;
override BETA_H0: f32 = 0.0;
override BETA_F1: f32 = 0.0;
override BETA_G1: f32 = 0.0;
override BETA_H1: f32 = 0.0;

// clip of the f/g activation inputs, NaN kept
fn clip_(x: f32) -> f32 {
  if HAS_CLIP {
    return keep_nan(x, clamp(x, -CLIP, CLIP));
  }
  return x;
}

// d clip_(x) / dx as jax's jvp of jnp.clip gives it: 1 inside, 0 outside, 0.5 on a bound.
fn clip_d(x: f32) -> f32 {
  if HAS_CLIP {
    return select(select(0.0, 0.5, abs(x) == CLIP), 1.0, abs(x) < CLIP);
  }
  return 1.0;
}

// NaN test on the bits: WGSL's min/max/clamp return the non-NaN operand and compilers may
// assume `x != x` is false, so NaN is recognised by its exponent and mantissa instead.
fn is_nan_(x: f32) -> bool {
  return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u;
}

// `v`, or `x` when `x` is NaN: the activations propagate NaN as jnp's do (clamps would map it
// to a bound).
fn keep_nan(x: f32, v: f32) -> f32 {
  return select(v, x, is_nan_(x));
}

fn sigmoid_(x: f32) -> f32 {
  let e = exp(-abs(x));
  return select(e / (1.0 + e), 1.0 / (1.0 + e), x >= 0.0);
}

// log(1 + e^x) = max(x, 0) + log1p(e^-|x|). log1p(e) by its series below 0.05 (error < e^6/6),
// where log(1 + e) would lose the digits of a small e; no tricks that fast-math compilers
// (e.g. GL drivers folding (1 + e) - 1 to e) can break.
fn softplus_(x: f32) -> f32 {
  let e = exp(-abs(x));
  let series = e * (1.0 - e * (0.5 - e * (1.0 / 3.0 - e * (0.25 - e * 0.2))));
  return max(x, 0.0) + select(log(1.0 + e), series, e < 0.05);
}

// Derivatives, as jax.jvp of the jnp forms gives them (the backward kernels).
fn dsigmoid_(x: f32) -> f32 {
  let s = sigmoid_(x);
  return s * (1.0 - s);
}

fn dtanh_(x: f32) -> f32 {
  let t = tanh(clamp(x, -10.0, 10.0));
  return 1.0 - t * t;
}

// d clamp(v, 0, 1) / dv: 1 inside, 0 outside, 0.5 on a bound (jax's jvp of max/min at a tie).
fn dclamp01_(v: f32) -> f32 {
  return select(select(0.0, 0.5, v == 0.0 || v == 1.0), 1.0, v > 0.0 && v < 1.0);
}
