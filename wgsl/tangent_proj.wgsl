// tangent_proj.wgsl — everything of the tangent that does not depend on the carried tangent
// state, for every time step and direction in one dispatch (xproj.wgsl's 4-row blocking):
//
//   E[d, m, :] = dx_row(m)·Wt[d] + x_row(m)·dWt[d] + dxb[d] + h(m)·dRt[d]      m = tt·N + n
//
// i.e. d(X·Wᵀ + b) of the tangent map plus the forward state's h·dRᵀ (reference/scan.py:tangent,
// the cells' tangent_inputs), in time order. h(m) is the forward's state before the step that
// reads time tt: initial_h at the first processed step, else Y of the step processed before
// (time tt−1, or tt+1 in a reverse direction); 0 past the row's length (masked). h·dRᵀ is added
// to the first HG gates only: all of them for LSTM, z and r for GRU (its h-gate term is
// multiplied by r or needs r⊙h: kept in the step kernel). dxb holds the bias tangents in the
// layout of xproj's xb (dWb + dRb per gate; dWb alone for GRU with linear_before_reset).
// A projected LSTM's h has P features (R and dR are [4H, P]): the sum runs over k < P.
//
// Prepended by the host: `enable f16;` (f16 storage only) and `alias ST = f32|f16;`.
//
// Bindings (group 0), family "tangent_proj":
//   0  x     array<ST>         x in the user layout, [L, N, I] or [N, L, I]        read
//   1  dx    array<ST>         its tangent, same layout                            read
//   2  wt    array<vec4<ST>>   [2, D, I, C4]: Wᵀ then dWᵀ (prep_t with 2·D directions) read
//   3  xb    array<vec4<f32>>  [D, C4]     bias tangents, gates padded to H4 vec4s read
//   4  e     array<vec4<f32>>  [D, M, C4]  output, M = L·N                        read_write
//   5  rt    array<vec4<ST>>   [2, D, PP, C4]: Rᵀ then dRᵀ (only dRᵀ is read)     read
//   6  aux   array<f32>        the forward's [res | Y (user layout) | initial_h [D, N, 4·S4]] read
//   7  lens  array<i32>        [N] lengths, clamped to [0, L]                      read
//   8  dims  uniform XDims (as xproj.wgsl)
//
// Overrides:
//   C4      vec4 columns per row = G·H4
//   H, H4   hidden size, ceil(H/4)
//   P, PP   features of h and Y (default H; an LSTM's projection size), padded to vec4s
//   S4      vec4s per row of initial_h (default H4; max(H4, P4) with a projection)
//   HG      gates that get h·dRᵀ (LSTM 4, GRU 2)
//   K       the forward's residual blocks per step (where Y starts in aux)
//   LAYOUT  0 time-major x and Y, 1 batch-major
//   REV0, REV1  direction slot d runs backwards in time
//   WG      invocations per workgroup
// Dispatch: a 2-D grid of ceil(D·ceil(M/4)·C4 / WG) workgroups (x ≤ 65535, y spills over).

override C4: u32 = 1u;
override H: u32 = 1u;
override H4: u32 = (H + 3u) / 4u;
override P: u32 = H;
override PP: u32 = 4u * ((P + 3u) / 4u);
override S4: u32 = H4;
override HG: u32 = 0u;
override K: u32 = 0u;
override LAYOUT: u32 = 0u;
override REV0: bool = false;
override REV1: bool = true;
override WG: u32 = 64u;

struct XDims {
  M: u32,   // rows = L·N
  N: u32,
  L: u32,
  I: u32,
  D: u32,
  MB: u32,  // row blocks = ceil(M / 4)
  _p0: u32,
  _p1: u32,
}

@group(0) @binding(0) var<storage, read> x: array<ST>;
@group(0) @binding(1) var<storage, read> dx: array<ST>;
@group(0) @binding(2) var<storage, read> wt: array<vec4<ST>>;
@group(0) @binding(3) var<storage, read> xb: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read_write> e: array<vec4<f32>>;
@group(0) @binding(5) var<storage, read> rt: array<vec4<ST>>;
@group(0) @binding(6) var<storage, read> aux: array<f32>;
@group(0) @binding(7) var<storage, read> lens: array<i32>;
@group(0) @binding(8) var<uniform> dims: XDims;

// Offset of x's (and dx's) row for (tt, n) = (m / N, m % N).
fn x_row(m: u32) -> u32 {
  if LAYOUT == 0u {
    return m * dims.I;
  }
  return ((m % dims.N) * dims.L + m / dims.N) * dims.I;
}

// As recurrence_common.wgsl: the time index of processing step t of a row of length len.
fn time_of(d: u32, t: u32, len: u32) -> u32 {
  if select(REV0, REV1, d == 1u) && t < len {
    return len - 1u - t;
  }
  return t;
}

// Offset in aux of the forward's h before the step reading (tt, n) = row m (P contiguous
// features), or -1 past the row's length.
fn h_row(d: u32, m: u32) -> i32 {
  let tt = m / dims.N;
  let n = m % dims.N;
  let len = u32(lens[n]);
  if tt >= len {
    return -1;
  }
  let y0 = dims.D * dims.L * dims.N * K * H;
  let t = time_of(d, tt, len);
  if t == 0u {
    return i32(y0 + dims.L * dims.D * dims.N * P + (d * dims.N + n) * 4u * S4);
  }
  let tp = time_of(d, t - 1u, len);
  if LAYOUT == 0u {
    return i32(y0 + ((tp * dims.D + d) * dims.N + n) * P);
  }
  return i32(y0 + ((n * dims.L + tp) * dims.D + d) * P);
}

fn h_at(base: i32, k: u32) -> f32 {
  if base < 0 {
    return 0.0;
  }
  return aux[u32(base) + k];
}

@compute @workgroup_size(WG)
fn tangent_proj(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  let i = (wid.y * nwg.x + wid.x) * WG + lid;
  let c4 = i % C4;
  let rest = i / C4;
  let mb = rest % dims.MB;
  let d = rest / dims.MB;
  if d >= dims.D {
    return;
  }
  let m0 = mb * 4u;
  let last = dims.M - 1u;
  // rows past M re-read the last row (in bounds) and are not stored
  let m1 = min(m0 + 1u, last);
  let m2 = min(m0 + 2u, last);
  let m3 = min(m0 + 3u, last);
  let r0 = x_row(m0);
  let r1 = x_row(m1);
  let r2 = x_row(m2);
  let r3 = x_row(m3);
  var a0 = vec4<f32>(0.0);
  var a1 = vec4<f32>(0.0);
  var a2 = vec4<f32>(0.0);
  var a3 = vec4<f32>(0.0);
  let wb = d * dims.I * C4 + c4;            // Wᵀ of direction d
  let db = (dims.D + d) * dims.I * C4 + c4; // dWᵀ of direction d
  for (var k = 0u; k < dims.I; k++) {
    let w = vec4<f32>(wt[wb + k * C4]);
    let dw = vec4<f32>(wt[db + k * C4]);
    a0 += f32(dx[r0 + k]) * w + f32(x[r0 + k]) * dw;
    a1 += f32(dx[r1 + k]) * w + f32(x[r1 + k]) * dw;
    a2 += f32(dx[r2 + k]) * w + f32(x[r2 + k]) * dw;
    a3 += f32(dx[r3 + k]) * w + f32(x[r3 + k]) * dw;
  }
  if c4 < HG * H4 {
    let h0 = h_row(d, m0);
    let h1 = h_row(d, m1);
    let h2 = h_row(d, m2);
    let h3 = h_row(d, m3);
    let rb = (dims.D + d) * PP * C4 + c4;  // dRᵀ of direction d
    for (var k = 0u; k < P; k++) {
      let dr = vec4<f32>(rt[rb + k * C4]);
      a0 += h_at(h0, k) * dr;
      a1 += h_at(h1, k) * dr;
      a2 += h_at(h2, k) * dr;
      a3 += h_at(h3, k) * dr;
    }
  }
  let b = xb[d * C4 + c4];
  let o = (d * dims.M + m0) * C4 + c4;
  e[o] = a0 + b;
  if m0 + 1u < dims.M {
    e[o + C4] = a1 + b;
  }
  if m0 + 2u < dims.M {
    e[o + 2u * C4] = a2 + b;
  }
  if m0 + 3u < dims.M {
    e[o + 3u * C4] = a3 + b;
  }
}
