// backward_common.wgsl — prelude shared by the GRU and LSTM backward (reverse-time) kernels:
// the binding table, index helpers and the activations with their derivatives.
//
// Module = `enable f16;` (f16 storage only) + `alias ST = f32|f16;` + this file + activations.wgsl
// + the generated `fn act(kind, x, A, B)` and `fn act_d(kind, x, A, B)` (derivative), one `case`
// per activation of jaxgru/_src/activations.py (ids = Activation.kind_id) + gru_backward.wgsl or
// lstm_backward.wgsl (their entry points).
//
// The math is the transpose of the forward, exactly as jaxgru/_src/reference/{gru,lstm}.py
// `backward_step` defines it (the reference is the contract). The elementwise kernels
// (`*_bwd_gates`) run one invocation per (direction d, batch row n, hidden unit j):
// i = (d·N + n)·H + j; the mat-vec kernels (`gru_bwd_reset`, `*_bwd_hidden`) one per
// (d, block of 4 rows, block of 4 units): each load of R serves 4 rows and each load of the
// gate cotangents 4 units (register blocking). Step t is in processing order (the forward's
// residuals are stored that way); tt = time_of(d, t, len) is the time index of Y and x. Steps
// t ≥ len (padding) have zero gate cotangents and pass the carried dh (and dc) through.
//
// A projected LSTM (PROJ, P = proj_size; lstm_backward.wgsl): h, Y and dh have P features
// (`yw()`), R is [D, G·H, P] and the mat-vec kernels run over blocks of P units; the elementwise
// kernel runs one invocation per unit of max(H, P) (`sw()`, also the row width of the carry and
// of h0, c0: each state's row padded to it).
//
// Bindings (group 0), the same for every backward recurrence kernel (family "backward"):
//   0  fdata   array<f32>  read        res [D, L, N, K·H] at 0 (the forward's residuals, processing
//                                    order) | h0, c0 [S, D, N, sw()] at dims.off_init | P [D, 3H]
//                                    at dims.off_p (LSTM peepholes)
//   1  sdata   array<ST>   read        Y (user layout) at 0 | dY (user layout) at dims.off_gy |
//                                    R [D, G·H, yw()] (ONNX layout) at dims.off_r | proj
//                                    [D, P, H] at dims.off_proj (PROJ)
//   2  lens  array<i32>  [N]         read        lengths, clamped to [0, L] by the host
//   3  st    array<f32>  read_write  carry [S, D, N, sw()] at 0 (dh, dc: the cotangents of the
//                                    final states on entry, of the initial states at the end) |
//                                    gh [D, N, H] at dims.off_gh (dY_t + dh of the step) |
//                                    drh [D, N, H] at dims.off_drh (GRU lbr=0: d(r⊙h))
//   4  dg    array<f32>  read_write  [D, L, N, G·H]: d(X·Wᵀ + b) per step (gate cotangents)
//   5  aux   array<f32>  read_write  ext [D, L, N, E·H] at 0 | hb [D, L, N, B·H] at dims.off_hb:
//                                    the other operands of the weight-gradient GEMMs (wgrad.wgsl).
//                                    ext: GRU lbr=1 d(H·Rᵀ + Rb) (E = 3); LSTM with peepholes
//                                    dai⊙c_prev, dao⊙c, daf⊙c_prev (E = 3); else none.
//                                    hb: h_prev (B = 1), and r⊙h_prev for GRU lbr=0 (B = 2),
//                                    [D, L, N, B·yw()]. PROJ: ghs [D, L, N, P] at dims.off_ghs
//                                    (dY_t + dh, zero on padding) | m [D, L, N, H] at dims.off_m
//                                    (o⊙h(c)): d proj = Σ ghsᵀ·m.
//   6  dims  uniform BDims
//   7  sched uniform Sched, dynamic offset: the step t of each dispatch
//
// Overrides (G and K have no default: they come from the cell's table, jaxgru/_src/cells.py):
//   G, K, H                 gates, residual blocks of H per step, hidden size
//   LAYOUT                  0: Y [L,D,N,H];  1: Y [N,L,D,H]
//   REV0, REV1              direction slot d runs backwards in time
//   HAS_CLIP, CLIP          clamp of every f/g activation input (derivative 0 where it clamps)
//   ACT_{F,G,H}{0,1}, ALPHA_*, BETA_*   activation kind ids and parameters per direction slot
//                           (these two rows: declared in activations.wgsl)
//   WG_STEP                 invocations per workgroup
//   PROJ, P                 a projected LSTM and its projection size (lstm_backward.wgsl)
// Dispatch: a 2-D grid of ceil(D·N·sw() / WG_STEP) workgroups for the elementwise kernels,
// ceil(D·ceil(N/4)·ceil(yw()/4) / WG_STEP) for the mat-vec kernels (x ≤ 65535, y spills over).

override G: u32;
override K: u32;
override H: u32 = 1u;
override LAYOUT: u32 = 0u;
override REV0: bool = false;
override REV1: bool = true;
override WG_STEP: u32 = 64u;
override PROJ: bool = false;
override P: u32 = 1u;

struct BDims {
  L: u32,
  N: u32,
  D: u32,
  E: u32,       // blocks of H in ext
  B: u32,       // blocks of H in hb
  off_init: u32,
  off_p: u32,
  off_gy: u32,
  off_r: u32,
  off_gh: u32,
  off_drh: u32,
  off_hb: u32,
  off_proj: u32,
  off_ghs: u32,
  off_m: u32,
  _p0: u32,
}

struct Sched {
  t: u32,
  _p0: u32,
  _p1: u32,
  _p2: u32,
}

@group(0) @binding(0) var<storage, read> fdata: array<f32>;
@group(0) @binding(1) var<storage, read> sdata: array<ST>;
@group(0) @binding(2) var<storage, read> lens: array<i32>;
@group(0) @binding(3) var<storage, read_write> st: array<f32>;
@group(0) @binding(4) var<storage, read_write> dg: array<f32>;
@group(0) @binding(5) var<storage, read_write> aux: array<f32>;
@group(0) @binding(6) var<uniform> dims: BDims;
@group(0) @binding(7) var<uniform> sched: Sched;

// ---- activations and their derivatives (f and g see clipped inputs, h does not; clip_ and
// clip_d in activations.wgsl) ----------------------------------------------------------------
// An activation's value and derivative at x.
struct VD {
  v: f32,
  d: f32,
}

fn vd(kind: u32, x: f32, A: f32, B: f32, clipped: bool) -> VD {
  if clipped {
    let c = clip_(x);
    return VD(act(kind, c, A, B), act_d(kind, c, A, B) * clip_d(x));
  }
  return VD(act(kind, x, A, B), act_d(kind, x, A, B));
}

fn f_vd(d: u32, x: f32) -> VD {
  if d == 0u {
    return vd(ACT_F0, x, ALPHA_F0, BETA_F0, true);
  }
  return vd(ACT_F1, x, ALPHA_F1, BETA_F1, true);
}

fn g_vd(d: u32, x: f32) -> VD {
  if d == 0u {
    return vd(ACT_G0, x, ALPHA_G0, BETA_G0, true);
  }
  return vd(ACT_G1, x, ALPHA_G1, BETA_G1, true);
}

fn h_vd(d: u32, x: f32) -> VD {
  if d == 0u {
    return vd(ACT_H0, x, ALPHA_H0, BETA_H0, false);
  }
  return vd(ACT_H1, x, ALPHA_H1, BETA_H1, false);
}

// ---- indices ------------------------------------------------------------------------------
// Features of h, Y and dh: P with a projection, else H.
fn yw() -> u32 {
  return select(H, P, PROJ);
}

// Units of the elementwise kernels and the row width of the carry and the initial states.
fn sw() -> u32 {
  return select(H, max(H, P), PROJ);
}

fn is_rev(d: u32) -> bool {
  return select(REV0, REV1, d == 1u);
}

fn time_of(d: u32, t: u32, len: u32) -> u32 {
  if is_rev(d) && t < len {
    return len - 1u - t;
  }
  return t;
}

fn y_index(tt: u32, d: u32, n: u32, j: u32) -> u32 {
  if LAYOUT == 0u {
    return ((tt * dims.D + d) * dims.N + n) * yw() + j;
  }
  return ((n * dims.L + tt) * dims.D + d) * yw() + j;
}

// What one invocation owns.
struct Unit {
  d: u32,
  n: u32,
  j: u32,
  ok: bool,
}

fn unit(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> Unit {
  let i = (wid.y * nwg.x + wid.x) * WG_STEP + lid;
  let j = i % sw();
  let r = i / sw();
  return Unit(r / dims.N, r % dims.N, j, r < dims.D * dims.N);
}

// Mat-vec kernels: direction d, rows n0 .. n0+3 and units k0 .. k0+3 (those < N, < yw() valid).
struct Block {
  d: u32,
  n0: u32,
  k0: u32,
  ok: bool,
}

fn block(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> Block {
  let i = (wid.y * nwg.x + wid.x) * WG_STEP + lid;
  let h4 = (yw() + 3u) / 4u;
  let nblk = (dims.N + 3u) / 4u;
  let r = i / h4;
  return Block(r / nblk, 4u * (r % nblk), 4u * (i % h4), r < dims.D * nblk);
}

// acc[r][c] = Σ_{row0 ≤ row < row1} A(d, t, n0 + r, row) · R[d, row, k0 + c], A = the gate
// cotangents dg (or ext when `from_ext`) of step t; rows past N and units past yw() re-read the
// last valid one (in bounds; not stored).
fn matvec_rows(b: Block, t: u32, row0: u32, row1: u32, from_ext: bool) -> array<array<f32, 4>, 4> {
  var acc = array<array<f32, 4>, 4>();
  var ns = array<u32, 4>();
  var ks = array<u32, 4>();
  for (var r = 0u; r < 4u; r++) {
    ns[r] = min(b.n0 + r, dims.N - 1u);
    ks[r] = min(b.k0 + r, yw() - 1u);
  }
  for (var row = row0; row < row1; row++) {
    var w = array<f32, 4>();
    var a = array<f32, 4>();
    for (var c = 0u; c < 4u; c++) {
      w[c] = r_at(b.d, row, ks[c]);
      if from_ext {
        a[c] = aux[ext_index(b.d, t, ns[c], 0u, row)];
      } else {
        a[c] = dg[dg_index(b.d, t, ns[c], 0u, row)];
      }
    }
    for (var r = 0u; r < 4u; r++) {
      for (var c = 0u; c < 4u; c++) {
        acc[r][c] += a[r] * w[c];
      }
    }
  }
  return acc;
}

// Residual q (of K) of unit j at processing step t.
fn res(d: u32, t: u32, n: u32, q: u32, j: u32) -> f32 {
  return fdata[((d * dims.L + t) * dims.N + n) * K * H + q * H + j];
}

// Initial state s (0: h, 1: c) of unit j.
fn init(s: u32, d: u32, n: u32, j: u32) -> f32 {
  return fdata[dims.off_init + ((s * dims.D + d) * dims.N + n) * sw() + j];
}

fn y_at(tt: u32, d: u32, n: u32, j: u32) -> f32 {
  return f32(sdata[y_index(tt, d, n, j)]);
}

fn gy_at(tt: u32, d: u32, n: u32, j: u32) -> f32 {
  return f32(sdata[dims.off_gy + y_index(tt, d, n, j)]);
}

// R[d, row, k] (row = g·H + unit): adjacent invocations (k) read adjacent elements.
fn r_at(d: u32, row: u32, k: u32) -> f32 {
  return f32(sdata[dims.off_r + (d * G * H + row) * yw() + k]);
}

// proj[d, p, j] (PROJ): adjacent invocations (j) read adjacent elements.
fn proj_at(d: u32, p: u32, j: u32) -> f32 {
  return f32(sdata[dims.off_proj + (d * P + p) * H + j]);
}

// h before processing step t (t < len): h0 at t = 0, else Y of step t − 1.
fn h_prev(d: u32, t: u32, n: u32, j: u32, len: u32) -> f32 {
  if t == 0u {
    return init(0u, d, n, j);
  }
  return y_at(time_of(d, t - 1u, len), d, n, j);
}

fn carry_index(s: u32, d: u32, n: u32, j: u32) -> u32 {
  return ((s * dims.D + d) * dims.N + n) * sw() + j;
}

fn gh_index(d: u32, n: u32, j: u32) -> u32 {
  return dims.off_gh + (d * dims.N + n) * H + j;
}

fn drh_index(d: u32, n: u32, j: u32) -> u32 {
  return dims.off_drh + (d * dims.N + n) * H + j;
}

// Gate g of unit j at step t in dg.
fn dg_index(d: u32, t: u32, n: u32, g: u32, j: u32) -> u32 {
  return ((d * dims.L + t) * dims.N + n) * G * H + g * H + j;
}

fn ext_index(d: u32, t: u32, n: u32, q: u32, j: u32) -> u32 {
  return ((d * dims.L + t) * dims.N + n) * dims.E * H + q * H + j;
}

fn hb_index(d: u32, t: u32, n: u32, q: u32, j: u32) -> u32 {
  return dims.off_hb + ((d * dims.L + t) * dims.N + n) * dims.B * yw() + q * yw() + j;
}

fn ghs_index(d: u32, t: u32, n: u32, p: u32) -> u32 {
  return dims.off_ghs + ((d * dims.L + t) * dims.N + n) * P + p;
}

fn m_index(d: u32, t: u32, n: u32, j: u32) -> u32 {
  return dims.off_m + ((d * dims.L + t) * dims.N + n) * H + j;
}

// Zero gate cotangents (and GEMM operands) on a padding step (unit j < H; with PROJ the
// caller writes hb and ghs, whose units are P).
fn zero_step(d: u32, t: u32, n: u32, j: u32) {
  for (var g = 0u; g < G; g++) {
    dg[dg_index(d, t, n, g, j)] = 0.0;
  }
  for (var q = 0u; q < dims.E; q++) {
    aux[ext_index(d, t, n, q, j)] = 0.0;
  }
  if PROJ {
    aux[m_index(d, t, n, j)] = 0.0;
    return;
  }
  for (var q = 0u; q < dims.B; q++) {
    aux[hb_index(d, t, n, q, j)] = 0.0;
  }
}
