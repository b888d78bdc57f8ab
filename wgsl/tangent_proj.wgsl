// tangent_proj.wgsl — the tangent's input projection, every time step and direction in one
// dispatch (xproj.wgsl's blocking, two products):
//
//   E[d, m, :] = dx_row(m) · Wt[d] + x_row(m) · dWt[d] + dxb[d]      m = tt·N + n (time order)
//
// i.e. d(X·Wᵀ + b) of the tangent map (reference/scan.py:tangent). dxb holds the bias tangents
// in the layout of xproj's xb (dWb + dRb per gate; dWb alone for GRU with linear_before_reset).
//
// Prepended by the host: `enable f16;` (f16 storage only) and `alias ST = f32|f16;`.
//
// Bindings (group 0), family "tangent_proj":
//   0  x     array<ST>         x in the user layout, [L, N, I] or [N, L, I]        read
//   1  dx    array<ST>         its tangent, same layout                            read
//   2  wt    array<vec4<ST>>   [2, D, I, C4]: Wᵀ then dWᵀ (prep_t with 2·D directions) read
//   3  xb    array<vec4<f32>>  [D, C4]     bias tangents, gates padded to H4 vec4s read
//   4  e     array<vec4<f32>>  [D, M, C4]  output, M = L·N                        read_write
//   5  dims  uniform XDims (as xproj.wgsl)
//
// Overrides: C4 (= G·ceil(H/4)), LAYOUT, WG, as xproj.wgsl.
// Dispatch: a 2-D grid of ceil(D·ceil(M/4)·C4 / WG) workgroups (x ≤ 65535, y spills over).

override C4: u32 = 1u;
override LAYOUT: u32 = 0u;
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
@group(0) @binding(5) var<uniform> dims: XDims;

// Offset of x's (and dx's) row for (tt, n) = (m / N, m % N).
fn x_row(m: u32) -> u32 {
  if LAYOUT == 0u {
    return m * dims.I;
  }
  return ((m % dims.N) * dims.L + m / dims.N) * dims.I;
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
  let r0 = x_row(m0);
  let r1 = x_row(min(m0 + 1u, last));
  let r2 = x_row(min(m0 + 2u, last));
  let r3 = x_row(min(m0 + 3u, last));
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
