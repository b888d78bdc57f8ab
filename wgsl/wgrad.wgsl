// wgrad.wgsl — the GEMMs of the backward, after the reverse-time loop (gru_backward.wgsl,
// lstm_backward.wgsl), tiled in workgroup memory (16x16 output tiles, 16-deep slices of the
// reduction staged in `as_` / `bs_`, two barriers per slice):
//
//   C[z, p, q] = Σ_k A(z, p, k) · B(z, k, q)
//
//   wgrad (weight gradients, z = direction d, k = m = t·N + n over every step and row):
//     A(d, p, k) = a[(d·M + k)·SA + a_off + p]                (dg or ext, processing order)
//     B(d, k, q) = BMODE 0: b[off_b + (d·M + k)·SB + b_off + q]   (hb: h_prev or r⊙h_prev)
//                  BMODE 1: x of step t, row n at time tt = time_of(d, t, len[n])
//                  BMODE 2: 1 (Q = 1: column sums, for the biases and the peepholes)
//     out[out_off + (d·OUTR + row0 + p)·Q + q]
//     dW = dgᵀ·x, dR = dgᵀ·h_prev (ext for GRU lbr=1; r⊙h_prev for GRU lbr=0's h-block),
//     db = Σ dg (and Σ ext), dP = Σ ext.
//   dx (the cotangent of x, z = 0, p = tt·N + n over time rows, k = d·G·H + g):
//     A(p, k) = a[((d·L + t)·N + n)·GH + g] at t = time_of(d, tt, len[n]) (dg, zero on padding)
//     B(k, q) = W[k·I + q] (W [D, G·H, I] at off_w in sx);  out[out_off + x index (user layout)]
//
// Prepended by the host: `enable f16;` (f16 storage only) and `alias ST = f32|f16;`.
//
// Bindings (group 0), family "wgrad":
//   0  a     array<f32>  read        A operand (dg or aux)
//   1  b     array<f32>  read        B operand (aux) for BMODE 0 (any buffer otherwise)
//   2  sx    array<ST>   read        x (user layout) at 0 | W [D, G·H, I] at dims.off_w
//   3  lens  array<i32>  [N] read    lengths, clamped to [0, L] by the host
//   4  out   array<f32>  read_write  the gradients (layout: webgpu/backward.py)
//   5  dims  uniform GDims
//
// Overrides: LAYOUT (x's layout), REV0, REV1 (direction slot d runs backwards in time).
// Dispatch: (ceil(Q/16), ceil(P/16), Z) workgroups of 16x16 invocations.

override LAYOUT: u32 = 0u;
override REV0: bool = false;
override REV1: bool = true;

const T: u32 = 16u;

struct GDims {
  P: u32,
  Q: u32,
  KR: u32,      // reduction length
  N: u32,
  L: u32,
  I: u32,
  GH: u32,
  SA: u32,
  a_off: u32,
  SB: u32,
  b_off: u32,
  off_b: u32,
  bmode: u32,
  out_off: u32,
  outr: u32,
  row0: u32,
  off_w: u32,
  _p0: u32,
  _p1: u32,
  _p2: u32,
}

@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read> sx: array<ST>;
@group(0) @binding(3) var<storage, read> lens: array<i32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;
@group(0) @binding(5) var<uniform> dims: GDims;

var<workgroup> as_: array<array<f32, T>, T>;  // [k][p]
var<workgroup> bs_: array<array<f32, T>, T>;  // [k][q]

fn time_of(d: u32, t: u32, len: u32) -> u32 {
  if select(REV0, REV1, d == 1u) && t < len {
    return len - 1u - t;
  }
  return t;
}

fn x_index(tt: u32, n: u32, i: u32) -> u32 {
  if LAYOUT == 0u {
    return (tt * dims.N + n) * dims.I + i;
  }
  return (n * dims.L + tt) * dims.I + i;
}

fn wgrad_a(d: u32, p: u32, k: u32) -> f32 {
  return a[(d * dims.L * dims.N + k) * dims.SA + dims.a_off + p];
}

fn wgrad_b(d: u32, k: u32, q: u32) -> f32 {
  if dims.bmode == 0u {
    return b[dims.off_b + (d * dims.L * dims.N + k) * dims.SB + dims.b_off + q];
  }
  if dims.bmode == 1u {
    let n = k % dims.N;
    return f32(sx[x_index(time_of(d, k / dims.N, u32(lens[n])), n, q)]);
  }
  return 1.0;
}

fn dx_a(p: u32, k: u32) -> f32 {
  let d = k / dims.GH;
  let n = p % dims.N;
  let t = time_of(d, p / dims.N, u32(lens[n]));
  return a[((d * dims.L + t) * dims.N + n) * dims.GH + k % dims.GH];
}

fn dx_b(k: u32, q: u32) -> f32 {
  return f32(sx[dims.off_w + k * dims.I + q]);
}

// One output tile; `is_dx` picks the operands (uniform across the dispatch).
fn tile(wid: vec3<u32>, lx: u32, ly: u32, is_dx: bool) {
  let q0 = wid.x * T;
  let p0 = wid.y * T;
  let z = wid.z;
  var acc = 0.0;
  for (var k0 = 0u; k0 < dims.KR; k0 += T) {
    // stage A(p0 + lx, k0 + ly) and B(k0 + ly, q0 + lx); zeros past the edges
    let k = k0 + ly;
    var av = 0.0;
    var bv = 0.0;
    if k < dims.KR {
      if p0 + lx < dims.P {
        if is_dx {
          av = dx_a(p0 + lx, k);
        } else {
          av = wgrad_a(z, p0 + lx, k);
        }
      }
      if q0 + lx < dims.Q {
        if is_dx {
          bv = dx_b(k, q0 + lx);
        } else {
          bv = wgrad_b(z, k, q0 + lx);
        }
      }
    }
    as_[ly][lx] = av;
    bs_[ly][lx] = bv;
    workgroupBarrier();
    for (var kk = 0u; kk < T; kk++) {
      acc += as_[kk][ly] * bs_[kk][lx];
    }
    workgroupBarrier();
  }
  let p = p0 + ly;
  let q = q0 + lx;
  if p < dims.P && q < dims.Q {
    if is_dx {
      let n = p % dims.N;
      out[dims.out_off + x_index(p / dims.N, n, q)] = acc;
    } else {
      out[dims.out_off + (z * dims.outr + dims.row0 + p) * dims.Q + q] = acc;
    }
  }
}

@compute @workgroup_size(16, 16)
fn wgrad(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
  tile(wid, lid.x, lid.y, false);
}

@compute @workgroup_size(16, 16)
fn dx(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
  tile(wid, lid.x, lid.y, true);
}
