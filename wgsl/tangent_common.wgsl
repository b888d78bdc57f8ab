// tangent_common.wgsl — what the tangent (forward-mode) recurrences share, after
// recurrence_common.wgsl, activations.wgsl and the generated `act` and `act_d` switches.
//
// Bindings: recurrence_common's table (family "recurrence"), holding in the tangent kernels:
//   0  xp      E [D, L, N, G, H4], time order: d(X·Wᵀ + b) + h·dRᵀ (tangent_proj.wgsl)
//   1  rt      [2, D, PP, G, H4]: Rᵀ, then dRᵀ (direction slot D + d); LSTM PROJ: then
//              [projt | dprojt] (lstm_tangent.wgsl)
//   2  pr      LSTM: [2, D, 3, H4] P then dP;  GRU lbr=1: dRb [D, 3, H4];  else unused
//   3  lens    as the forward
//   4  state   [7, D, N, S4], the slots below
//   5  y       dY (user layout);  6 yfinal: [dY_h | dY_c]
//   7  res     the forward's [res [D, L, N, K·H] | Y as f32, user layout]   (read only)
// The forward's h before step t is kept in a state slot (initial_h, then Y of the step before):
// GRU's h-gate term h·dRhᵀ (lbr=1) or (r⊙h)·dRhᵀ (lbr=0) is a mat-vec in the step kernel.
// Overrides: recurrence_common's (RESIDUALS is off: the tangent writes no residuals; K is the
// forward's residual count, to read them).

const S_DH: u32 = 0u;  // 0/1: dh, ping-pong by step parity
const S_HP: u32 = 2u;  // 2/3: GRU: the forward's h before the step, ping-pong; LSTM PROJ: dm, m
const S_A: u32 = 4u;   // LSTM: dc;  GRU lbr=0: dz (phase 1 -> 2)
const S_B: u32 = 5u;   // LSTM: the forward's c before the step;  GRU lbr=0: u = dr⊙hp + r⊙dh
const S_C: u32 = 6u;   // GRU lbr=0: v = r⊙hp

// d/dx of act_f / act_g (clipped inputs) and act_h (never clipped)
fn dact_f(d: u32, x: f32) -> f32 {
  if d == 0u {
    return act_d(ACT_F0, clip_(x), ALPHA_F0, BETA_F0) * clip_d(x);
  }
  return act_d(ACT_F1, clip_(x), ALPHA_F1, BETA_F1) * clip_d(x);
}

fn dact_g(d: u32, x: f32) -> f32 {
  if d == 0u {
    return act_d(ACT_G0, clip_(x), ALPHA_G0, BETA_G0) * clip_d(x);
  }
  return act_d(ACT_G1, clip_(x), ALPHA_G1, BETA_G1) * clip_d(x);
}

fn dact_h(d: u32, x: f32) -> f32 {
  if d == 0u {
    return act_d(ACT_H0, x, ALPHA_H0, BETA_H0);
  }
  return act_d(ACT_H1, x, ALPHA_H1, BETA_H1);
}

fn df4(d: u32, v: vec4<f32>) -> vec4<f32> {
  return vec4<f32>(dact_f(d, v.x), dact_f(d, v.y), dact_f(d, v.z), dact_f(d, v.w));
}

fn dg4(d: u32, v: vec4<f32>) -> vec4<f32> {
  return vec4<f32>(dact_g(d, v.x), dact_g(d, v.y), dact_g(d, v.z), dact_g(d, v.w));
}

fn dh4(d: u32, v: vec4<f32>) -> vec4<f32> {
  return vec4<f32>(dact_h(d, v.x), dact_h(d, v.y), dact_h(d, v.z), dact_h(d, v.w));
}

// ---- the forward's values ------------------------------------------------------------------
// Residual q of processing step t (padding units 0).
fn res4(d: u32, t: u32, n: u32, q: u32, j4: u32) -> vec4<f32> {
  let base = ((d * dims.L + t) * dims.N + n) * K * H + q * H;
  var v = vec4<f32>(0.0);
  for (var c = 0u; c < 4u; c++) {
    let j = 4u * j4 + c;
    if j < H {
      v[c] = res[base + j];
    }
  }
  return v;
}

// The forward's Y at time tt (padding units 0), stored after the residuals.
fn y4(tt: u32, d: u32, n: u32, j4: u32) -> vec4<f32> {
  let base = dims.D * dims.L * dims.N * K * H;
  var v = vec4<f32>(0.0);
  for (var c = 0u; c < 4u; c++) {
    let j = 4u * j4 + c;
    if j < H {
      v[c] = res[base + y_index(tt, d, n, j)];
    }
  }
  return v;
}

// After step t of a row: carry dh on valid steps, write dY, and dY_h at the last dispatch.
// Returns the carried dh.
fn tangent_store_h(d: u32, t: u32, n: u32, j4: u32, tt: u32, valid: bool, dh: vec4<f32>,
                   dhn: vec4<f32>) -> vec4<f32> {
  let carried = select(dh, dhn, valid);
  state[slot_index(S_DH + 1u - (t & 1u), d, n, j4)] = carried;
  store_y(d, tt, n, j4, select(vec4<f32>(0.0), dhn, valid));
  if sched.last != 0u {
    store_final(0u, d, n, j4, carried);
  }
  return carried;
}
