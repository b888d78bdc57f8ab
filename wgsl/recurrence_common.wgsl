// recurrence_common.wgsl — prelude shared by the GRU and LSTM recurrence kernels: the binding
// table, index helpers, activations, the recurrent mat-vec and the output stores.
//
// Module = `enable f16;` (f16 storage only) + `alias ST = f32|f16;` + `alias RT = f32|f16;`
// (R's device element type: ST, or f16 with f32 storage, plan.r_storage) + this file +
// activations.wgsl + the generated `fn act(kind, x, A, B)` (one `case` per activation of jaxgru/_src/activations.py, ids =
// Activation.kind_id) + gru.wgsl or lstm.wgsl (their entry points).
//
// Shapes: D directions, L steps, N batch rows (of this chunk), H hidden units, H4 = ceil(H/4),
// HP = 4·H4; P features of h and Y (= H, but an LSTM's projection size with one), P4, PP likewise;
// per-unit data is vec4-packed over 4 consecutive units j = 4·j4 .. 4·j4+3, padding
// units (j ≥ H) are zero in every weight and kept zero in the state.
// Step t is in *processing order*; tt = time_of(d, t, len) is the time index it reads/writes.
//
// Bindings (group 0), the same for every recurrence kernel:
//   0  xp      array<vec4<f32>>  [D, L, N, G, H4]  read        X·Wᵀ + folded biases, time order
//   1  rt      array<vec4<RT>>   [D, PP, G, H4]    read        rt[d,k,g,j] = R[d, g·H+j, k]
//                                                              (LSTM proj: then projt [D, HP, P4])
//   2  pr      array<vec4<f32>>  [D, 3, H4]        read        GRU lbr=1: Rb (z,r,h); LSTM: P (i,o,f)
//   3  lens    array<i32>        [N]               read        lengths, clamped to [0, L] by the host
//   4  state   array<vec4<f32>>  [S, D, N, S4]     read_write  slots: 0/1 h (ping-pong); 2 c (LSTM)
//                                                              or z (GRU); 3 r⊙h (GRU stepwise) or
//                                                              o⊙h(c) (LSTM proj)
//   5  y       array<ST>         Y in the user layout          read_write
//   6  yfinal  array<ST>         [Y_h | Y_c], user layout      read_write
//   7  res     array<f32>        [D, L, N, K·H]    read_write  residuals (dummy unless RESIDUALS)
//   8  dims    uniform Dims
//   9  sched   uniform Sched, dynamic offset: one entry per dispatch
//
// Overrides (the host sets what a pipeline needs; G and K have no default: they come from the
// cell's table, jaxgru/_src/cells.py):
//   G                       gates per unit (GRU 3, LSTM 4)
//   K                       residual blocks of H per step (cells.CellSpec.residuals)
//   H                       hidden size;  H4, HP derived
//   P, S4                   features of h and Y (default H); vec4s per state-slot row (default H4,
//                           max(H4, P4) with a projection)
//   LAYOUT                  0: Y [L,D,N,H], states [D,N,H];  1: Y [N,L,D,H], states [N,D,H]
//   REV0, REV1              direction slot d runs backwards in time
//   HAS_CLIP, CLIP          clamp of every f/g activation input (declared in activations.wgsl)
//   RESIDUALS               write res
//   ACT_{F,G,H}{0,1}, ALPHA_*, BETA_*   activation kind ids and parameters per direction slot
//                           (declared in activations.wgsl)
//   PERSISTENT              h is read from workgroup memory `hs` (persistent kernels)
//   NB                      batch rows per invocation (1..4; register blocking)
//   WG_STEP                 invocations per workgroup of the stepwise kernels
//   BPW, WG_P, HS_LEN       persistent kernels: rows per workgroup (a multiple of NB),
//                           (BPW/NB)·H4 invocations, vec4 length of `hs` (2·BPW·H4)

override G: u32;
override K: u32;
override H: u32 = 1u;
override H4: u32 = (H + 3u) / 4u;
override HP: u32 = 4u * H4;
override P: u32 = H;
override P4: u32 = (P + 3u) / 4u;
override PP: u32 = 4u * P4;
override S4: u32 = H4;
override LAYOUT: u32 = 0u;
override REV0: bool = false;
override REV1: bool = true;
override RESIDUALS: bool = false;
override PERSISTENT: bool = false;
override NB: u32 = 1u;
override WG_STEP: u32 = 64u;
override BPW: u32 = 1u;
override WG_P: u32 = 1u;
override HS_LEN: u32 = 2u;

struct Dims {
  L: u32,
  N: u32,
  D: u32,
  _p: u32,
}

// Steps [t0, t1) of this dispatch; last != 0 when t1 == L (write Y_h / Y_c).
struct Sched {
  t0: u32,
  t1: u32,
  last: u32,
  _p: u32,
}

@group(0) @binding(0) var<storage, read> xp: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> rt: array<vec4<RT>>;
@group(0) @binding(2) var<storage, read> pr: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> lens: array<i32>;
@group(0) @binding(4) var<storage, read_write> state: array<vec4<f32>>;
@group(0) @binding(5) var<storage, read_write> y: array<ST>;
@group(0) @binding(6) var<storage, read_write> yfinal: array<ST>;
@group(0) @binding(7) var<storage, read_write> res: array<f32>;
@group(0) @binding(8) var<uniform> dims: Dims;
@group(0) @binding(9) var<uniform> sched: Sched;

// Persistent kernels: the hidden state of the workgroup's rows (layout set by the kernel).
var<workgroup> hs: array<vec4<f32>, HS_LEN>;

// ---- activations: overrides, clip_ and helpers in activations.wgsl, `act` generated (see the header)
// f and g see clipped inputs; LSTM's h(C) does not (as onnxruntime).
fn act_f(d: u32, x: f32) -> f32 {
  if d == 0u {
    return act(ACT_F0, clip_(x), ALPHA_F0, BETA_F0);
  }
  return act(ACT_F1, clip_(x), ALPHA_F1, BETA_F1);
}

fn act_g(d: u32, x: f32) -> f32 {
  if d == 0u {
    return act(ACT_G0, clip_(x), ALPHA_G0, BETA_G0);
  }
  return act(ACT_G1, clip_(x), ALPHA_G1, BETA_G1);
}

fn act_h(d: u32, x: f32) -> f32 {
  if d == 0u {
    return act(ACT_H0, x, ALPHA_H0, BETA_H0);
  }
  return act(ACT_H1, x, ALPHA_H1, BETA_H1);
}

fn f4(d: u32, v: vec4<f32>) -> vec4<f32> {
  return vec4<f32>(act_f(d, v.x), act_f(d, v.y), act_f(d, v.z), act_f(d, v.w));
}

fn g4(d: u32, v: vec4<f32>) -> vec4<f32> {
  return vec4<f32>(act_g(d, v.x), act_g(d, v.y), act_g(d, v.z), act_g(d, v.w));
}

fn h4(d: u32, v: vec4<f32>) -> vec4<f32> {
  return vec4<f32>(act_h(d, v.x), act_h(d, v.y), act_h(d, v.z), act_h(d, v.w));
}

// ---- indices ------------------------------------------------------------------------------
fn is_rev(d: u32) -> bool {
  return select(REV0, REV1, d == 1u);
}

// Time index of processing step t: reverse directions read x[len-1-t] inside the sequence and
// t itself on padding (masked anyway), so every (tt, n) of Y is written exactly once.
fn time_of(d: u32, t: u32, len: u32) -> u32 {
  if is_rev(d) && t < len {
    return len - 1u - t;
  }
  return t;
}

fn xp_index(d: u32, tt: u32, n: u32, g: u32, j4: u32) -> u32 {
  return (((d * dims.L + tt) * dims.N + n) * G + g) * H4 + j4;
}

fn slot_index(s: u32, d: u32, n: u32, j4: u32) -> u32 {
  return ((s * dims.D + d) * dims.N + n) * S4 + j4;
}

fn y_index(tt: u32, d: u32, n: u32, j: u32) -> u32 {
  if LAYOUT == 0u {
    return ((tt * dims.D + d) * dims.N + n) * P + j;
  }
  return ((n * dims.L + tt) * dims.D + d) * P + j;
}

// A final state's element j (of w features: P for Y_h, H for Y_c).
fn state_index(d: u32, n: u32, j: u32, w: u32) -> u32 {
  if LAYOUT == 0u {
    return (d * dims.N + n) * w + j;
  }
  return (n * dims.D + d) * w + j;
}

fn lane_ok(j4: u32) -> vec4<bool> {
  return vec4<u32>(4u * j4) + vec4<u32>(0u, 1u, 2u, 3u) < vec4<u32>(H);
}

// Padding units forced to 0 so they never grow (their activations need not map 0 to 0).
fn pad0(j4: u32, v: vec4<f32>) -> vec4<f32> {
  return select(vec4<f32>(0.0), v, lane_ok(j4));
}

// ---- recurrent mat-vec --------------------------------------------------------------------
// h (4 units) at vec4 index i: workgroup memory in persistent kernels, else the state buffer.
fn hvec(i: u32) -> vec4<f32> {
  if PERSISTENT {
    return hs[i];
  }
  return state[i];
}

// acc[4·r + q] = Σ_k h_r[k]·R[d, (g0+q)·H + j, k] for the NB rows r of an invocation (h_r at
// vec4 index hb + r·S4, k < P; rows ≥ `rows` re-read the last valid one) and the ng gates q (1..4,
// constant at each call site), for the 4 units of j4. Each rt load serves NB rows (register
// blocking over the batch); adjacent invocations read adjacent vec4s of rt (coalesced).
fn matvec(d: u32, hb: u32, rows: u32, j4: u32, g0: u32, ng: u32) -> array<vec4<f32>, 16> {
  var acc = array<vec4<f32>, 16>();
  for (var k4 = 0u; k4 < P4; k4++) {
    var hv = array<vec4<f32>, 4>();
    for (var r = 0u; r < NB; r++) {
      hv[r] = hvec(hb + min(r, rows - 1u) * S4 + k4);
    }
    for (var c = 0u; c < 4u; c++) {
      let ri = ((d * PP + 4u * k4 + c) * G + g0) * H4 + j4;
      for (var q = 0u; q < ng; q++) {
        let w = vec4<f32>(rt[ri + q * H4]);
        for (var r = 0u; r < NB; r++) {
          acc[4u * r + q] += hv[r][c] * w;
        }
      }
    }
  }
  return acc;
}

// Padding units read 0: the projection computes them as x·0, which is NaN where x is ±inf.
fn xp4(d: u32, tt: u32, n: u32, g: u32, j4: u32) -> vec4<f32> {
  return pad0(j4, xp[xp_index(d, tt, n, g, j4)]);
}

fn pr4(d: u32, q: u32, j4: u32) -> vec4<f32> {
  return pr[(d * 3u + q) * H4 + j4];
}

// ---- stores -------------------------------------------------------------------------------
fn store_y(d: u32, tt: u32, n: u32, j4: u32, v: vec4<f32>) {
  for (var c = 0u; c < 4u; c++) {
    let j = 4u * j4 + c;
    if j < P {
      y[y_index(tt, d, n, j)] = ST(v[c]);
    }
  }
}

// which = 0: Y_h (P features), 1: Y_c (H features).
fn store_final(which: u32, d: u32, n: u32, j4: u32, v: vec4<f32>) {
  let base = which * dims.D * dims.N * P;
  let w = select(P, H, which == 1u);
  for (var c = 0u; c < 4u; c++) {
    let j = 4u * j4 + c;
    if j < w {
      yfinal[base + state_index(d, n, j, w)] = ST(v[c]);
    }
  }
}

// Residual q (of K per row) at processing step t.
fn store_res(d: u32, t: u32, n: u32, q: u32, j4: u32, v: vec4<f32>) {
  if RESIDUALS {
    let base = ((d * dims.L + t) * dims.N + n) * K * H + q * H;
    for (var c = 0u; c < 4u; c++) {
      let j = 4u * j4 + c;
      if j < H {
        res[base + j] = v[c];
      }
    }
  }
}

// Linear invocation index over a 2-D grid of WG_STEP-sized workgroups.
fn linear_id(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
  return (wid.y * nwg.x + wid.x) * WG_STEP + lid;
}

// What one invocation owns: direction d, batch rows n .. n+rows-1 (rows ≤ NB), units of j4.
struct Item {
  d: u32,
  n: u32,
  rows: u32,
  j4: u32,
  ok: bool,
}

// Stepwise: invocation i -> (d, block of NB rows, j4), j4 fastest.
fn stepwise_item(i: u32) -> Item {
  let blocks = (dims.N + NB - 1u) / NB;
  let r = i / H4;
  let n = (r % blocks) * NB;
  return Item(r / blocks, n, min(NB, dims.N - min(n, dims.N)), i % H4, r < dims.D * blocks);
}

// Persistent: workgroup (x, y) = (block of BPW rows, direction); invocation -> NB of them.
fn persistent_item(wid: vec3<u32>, lid: u32) -> Item {
  let n = wid.x * BPW + (lid / H4) * NB;
  return Item(wid.y, n, min(NB, dims.N - min(n, dims.N)), lid % H4, n < dims.N);
}
