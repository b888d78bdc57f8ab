// activations.wgsl — helpers of the generated activation switches (`act`, and `act_d` in the
// backward modules; both generated from jaxgru/_src/activations.py, which names these helpers
// in its WGSL forms). Overflow-free forms.
//
// Prepended to the recurrence modules after recurrence_common.wgsl and to the backward modules
// after backward_common.wgsl (webgpu/shaders.py); `clip_` lives in those preludes.
// Bindings: none. Overrides: none (alpha and beta reach the generated switches as arguments).

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
