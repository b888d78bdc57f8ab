// xproj.wgsl — input projection of every time step and every direction in one dispatch:
//
//   XP[d, m, :] = x_row(m) · Wt[d] + xb[d]      for m = tt·N + n (time order), d < D
//
// The biases that do not depend on h are folded into xb on the host. Two entry points:
//   xproj        each invocation computes a 4-row x 4-column block (one vec4 of columns) reading
//                x and wt from storage: barrier-free register blocking, which beat a
//                workgroup-memory tiled GEMM 5x on lavapipe; kept for shapes under one tile.
//   xproj_tiled  a workgroup computes an XM-row x 4·XN4-column tile (64 x 64), staging XK-deep
//                slices of x and wt in workgroup memory; each of its (XM/4)·XN4 invocations
//                computes a 4 x 4 block from them (each staged x value serves 4 columns, each
//                staged wt vec4 4 rows). Workgroups: D·ceil(M/XM)·ceil(C4/XN4) on a 2-D grid.
// Both sum over k in order, so they give the same sums. x is read in the user layout directly.
//
// Prepended by the host: `enable f16;` (f16 storage only) and `alias ST = f32|f16;`.
//
// Bindings (group 0):
//   0  x     array<ST>         [L, N, I] (LAYOUT 0) or [N, L, I] (LAYOUT 1)   read
//   1  wt    array<vec4<ST>>   [D, I, C4]  Wᵀ, gates padded to H4 vec4s (zeros) read
//   2  xb    array<vec4<f32>>  [D, C4]     folded biases, same padding     read
//   3  xp    array<vec4<f32>>  [D, M, C4]  output, M = L·N                  read_write
//   4  dims  uniform XDims
//
// Overrides:
//   C4      vec4 columns per row = G·ceil(H/4)
//   LAYOUT  0 time-major x, 1 batch-major x
//   WG      invocations per workgroup of xproj
//   XM, XN4, XK  xproj_tiled: rows, vec4 columns and k depth of a tile (XM a multiple of 4);
//                XWG = (XM/4)·XN4 invocations
// Dispatch: a 2-D grid of ceil(D·ceil(M/4)·C4 / WG) workgroups (xproj) or of D·ceil(M/XM)·
// ceil(C4/XN4) (xproj_tiled); x ≤ 65535, y spills over.

override C4: u32 = 1u;
override LAYOUT: u32 = 0u;
override WG: u32 = 64u;
override XM: u32 = 64u;
override XN4: u32 = 16u;
override XK: u32 = 16u;
override XWG: u32 = XM / 4u * XN4;

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
@group(0) @binding(1) var<storage, read> wt: array<vec4<ST>>;
@group(0) @binding(2) var<storage, read> xb: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> xp: array<vec4<f32>>;
@group(0) @binding(4) var<uniform> dims: XDims;

// Offset of x's row for (tt, n) = (m / N, m % N).
fn x_row(m: u32) -> u32 {
  if LAYOUT == 0u {
    return m * dims.I;
  }
  return ((m % dims.N) * dims.L + m / dims.N) * dims.I;
}

@compute @workgroup_size(WG)
fn xproj(
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
  let wb = d * dims.I * C4 + c4;
  for (var k = 0u; k < dims.I; k++) {
    let w = vec4<f32>(wt[wb + k * C4]);
    a0 += f32(x[r0 + k]) * w;
    a1 += f32(x[r1 + k]) * w;
    a2 += f32(x[r2 + k]) * w;
    a3 += f32(x[r3 + k]) * w;
  }
  let b = xb[d * C4 + c4];
  let o = (d * dims.M + m0) * C4 + c4;
  xp[o] = a0 + b;
  if m0 + 1u < dims.M {
    xp[o + C4] = a1 + b;
  }
  if m0 + 2u < dims.M {
    xp[o + 2u * C4] = a2 + b;
  }
  if m0 + 3u < dims.M {
    xp[o + 3u * C4] = a3 + b;
  }
}

var<workgroup> xs: array<f32, XM * XK>;
var<workgroup> ws: array<vec4<f32>, XK * XN4>;

@compute @workgroup_size(XWG)
fn xproj_tiled(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  let w = wid.y * nwg.x + wid.x;
  let col_tiles = (C4 + XN4 - 1u) / XN4;
  let row_tiles = (dims.M + XM - 1u) / XM;
  let rest = w / col_tiles;
  let d = rest / row_tiles;
  if d >= dims.D {
    return;  // a spare workgroup of the grid (uniform)
  }
  let m0 = (rest % row_tiles) * XM;
  let c0 = (w % col_tiles) * XN4;
  let cl = lid % XN4;           // the invocation's vec4 column in the tile
  let rl = (lid / XN4) * 4u;    // its first of 4 rows in the tile
  var acc = array<vec4<f32>, 4>();
  for (var k0 = 0u; k0 < dims.I; k0 += XK) {
    for (var i = lid; i < XM * XK; i += XWG) {
      let m = m0 + i / XK;
      let k = k0 + i % XK;
      var v = 0.0;
      if m < dims.M && k < dims.I {
        v = f32(x[x_row(m) + k]);
      }
      xs[i] = v;
    }
    for (var i = lid; i < XK * XN4; i += XWG) {
      let k = k0 + i / XN4;
      let c = c0 + i % XN4;
      var v = vec4<f32>(0.0);
      if k < dims.I && c < C4 {
        v = vec4<f32>(wt[(d * dims.I + k) * C4 + c]);
      }
      ws[i] = v;
    }
    workgroupBarrier();
    for (var k = 0u; k < XK; k++) {
      let wv = ws[k * XN4 + cl];
      for (var r = 0u; r < 4u; r++) {
        acc[r] += xs[(rl + r) * XK + k] * wv;
      }
    }
    workgroupBarrier();
  }
  let c = c0 + cl;
  if c < C4 {
    let b = xb[d * C4 + c];
    for (var r = 0u; r < 4u; r++) {
      let m = m0 + rl + r;
      if m < dims.M {
        xp[(d * dims.M + m) * C4 + c] = acc[r] + b;
      }
    }
  }
}
