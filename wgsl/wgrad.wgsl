// wgrad.wgsl — the GEMMs of the backward, after the reverse-time loop (gru_backward.wgsl,
// lstm_backward.wgsl), tiled in workgroup memory: 64x64 output tiles per workgroup of 16x16
// invocations (4x4 outputs each, register-blocked), 16-deep slices of the reduction staged in
// `as_` / `bs_`, two barriers per slice (lavapipe pays per invocation and barrier: 16x fewer
// invocations than one output each ran dW 16x faster there):
//
//   C[z, p, q] = Σ_k A(z, p, k) · B(z, k, q)
//
//   wgrad (weight gradients, z = direction d, k = m = t·N + n over every step and row):
//     A(d, p, k) = a[(d·M + k)·SA + a_off + p]                (dg or ext, processing order)
//     B(d, k, q) = BMODE 0: b[off_b + (d·M + k)·SB + b_off + q]   (hb: h_prev or r⊙h_prev)
//                  BMODE 1: x of step t, row n at time tt = time_of(d, t, len[n])
//     out[out_off + (d·OUTR + row0 + p)·Q + q]   (dims.accum = 1: += onto the earlier batch chunks')
//     dW = dgᵀ·x, dR = dgᵀ·h_prev (ext for GRU lbr=1; r⊙h_prev for GRU lbr=0's h-block).
//   colsum (barrier-free, one invocation per column): out[out_off + z·OUTR + row0 + p] =
//     Σ_k A(z, p, k): db = Σ dg (and Σ ext for GRU lbr=1), dP = Σ ext.
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
// Overrides: LAYOUT (x's layout), REV0, REV1 (direction slot d runs backwards in time), TILED
// (stage the slices in workgroup memory; false: the same 4x4 blocking read straight from the
// buffers, barrier-free, which software adapters run faster: webgpu/backward.py chooses).
// Dispatch: wgrad, dx: (ceil(Q/64), ceil(P/64), Z) workgroups of 16x16 invocations;
// colsum: a 2-D grid of ceil(Z·P/64) workgroups of 64 (x ≤ 65535, y spills over).

override LAYOUT: u32 = 0u;
override REV0: bool = false;
override REV1: bool = true;
override TILED: bool = true;

const TP: u32 = 64u;  // output tile side (16x16 invocations, 4x4 outputs each)
const TK: u32 = 16u;  // reduction slice staged per barrier pair

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
  Z: u32,       // colsum: slices (directions)
  accum: u32,   // wgrad, colsum: 1 adds into out (a later batch chunk of the call), 0 stores
  _p2: u32,
}

@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read> sx: array<ST>;
@group(0) @binding(3) var<storage, read> lens: array<i32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;
@group(0) @binding(5) var<uniform> dims: GDims;

var<workgroup> as_: array<array<f32, TP>, TK>;  // [k][p]
var<workgroup> bs_: array<array<f32, TP>, TK>;  // [k][q]

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
  let n = k % dims.N;
  return f32(sx[x_index(time_of(d, k / dims.N, u32(lens[n])), n, q)]);
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

// A weight gradient's element: the first batch chunk of a call stores it, the later ones add
// their sums over their rows (dispatches of one pass see the previous ones' writes).
fn store(o: u32, v: f32) {
  if dims.accum != 0u {
    out[o] += v;
  } else {
    out[o] = v;
  }
}

// One 64x64 output tile; `is_dx` picks the operands (uniform across the dispatch). Invocation
// (lx, ly) owns rows p0 + ly + 16·i and columns q0 + lx + 16·j (i, j < 4) and stages 4 elements
// of each operand per slice.
fn tile(wid: vec3<u32>, lx: u32, ly: u32, is_dx: bool) {
  let q0 = wid.x * TP;
  let p0 = wid.y * TP;
  let z = wid.z;
  let lin = ly * 16u + lx;
  var acc = array<array<f32, 4>, 4>();
  if !TILED {
    // rows past P / columns past Q re-read the last valid one (in bounds) and are not stored
    var ps = array<u32, 4>();
    var qs = array<u32, 4>();
    for (var i = 0u; i < 4u; i++) {
      ps[i] = min(p0 + ly + 16u * i, dims.P - 1u);
      qs[i] = min(q0 + lx + 16u * i, dims.Q - 1u);
    }
    for (var k = 0u; k < dims.KR; k++) {
      var av = array<f32, 4>();
      var bv = array<f32, 4>();
      for (var i = 0u; i < 4u; i++) {
        if is_dx {
          av[i] = dx_a(ps[i], k);
          bv[i] = dx_b(k, qs[i]);
        } else {
          av[i] = wgrad_a(z, ps[i], k);
          bv[i] = wgrad_b(z, k, qs[i]);
        }
      }
      for (var i = 0u; i < 4u; i++) {
        for (var j = 0u; j < 4u; j++) {
          acc[i][j] += av[i] * bv[j];
        }
      }
    }
  }
  for (var k0 = 0u; TILED && k0 < dims.KR; k0 += TK) {
    // stage A(p0 + c, k0 + kk) and B(k0 + kk, q0 + c) for 4 (kk, c) pairs each; zeros past the edges
    for (var e = 0u; e < 4u; e++) {
      let slot = lin + 256u * e;
      let kk = slot / TP;
      let c = slot % TP;
      let k = k0 + kk;
      var av = 0.0;
      var bv = 0.0;
      if k < dims.KR {
        if p0 + c < dims.P {
          if is_dx {
            av = dx_a(p0 + c, k);
          } else {
            av = wgrad_a(z, p0 + c, k);
          }
        }
        if q0 + c < dims.Q {
          if is_dx {
            bv = dx_b(k, q0 + c);
          } else {
            bv = wgrad_b(z, k, q0 + c);
          }
        }
      }
      as_[kk][c] = av;
      bs_[kk][c] = bv;
    }
    workgroupBarrier();
    for (var kk = 0u; kk < TK; kk++) {
      var av = array<f32, 4>();
      var bv = array<f32, 4>();
      for (var i = 0u; i < 4u; i++) {
        av[i] = as_[kk][ly + 16u * i];
        bv[i] = bs_[kk][lx + 16u * i];
      }
      for (var i = 0u; i < 4u; i++) {
        for (var j = 0u; j < 4u; j++) {
          acc[i][j] += av[i] * bv[j];
        }
      }
    }
    workgroupBarrier();
  }
  for (var i = 0u; i < 4u; i++) {
    for (var j = 0u; j < 4u; j++) {
      let p = p0 + ly + 16u * i;
      let q = q0 + lx + 16u * j;
      if p < dims.P && q < dims.Q {
        if is_dx {
          out[dims.out_off + x_index(p / dims.N, p % dims.N, q)] = acc[i][j];
        } else {
          store(dims.out_off + (z * dims.outr + dims.row0 + p) * dims.Q + q, acc[i][j]);
        }
      }
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

// Column sums Σ_k A(z, p, k) (the biases' and peepholes' gradients), barrier-free: one
// invocation per (z, p), adjacent invocations reading adjacent columns.
@compute @workgroup_size(64)
fn colsum(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  let i = (wid.y * nwg.x + wid.x) * 64u + lid;
  let z = i / dims.P;
  let p = i % dims.P;
  if z >= dims.Z {
    return;
  }
  var acc = 0.0;
  for (var k = 0u; k < dims.KR; k++) {
    acc += wgrad_a(z, p, k);
  }
  store(dims.out_off + z * dims.outr + dims.row0 + p, acc);
}
