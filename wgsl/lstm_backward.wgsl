// lstm_backward.wgsl — one reverse step of the ONNX LSTM backward, after backward_common.wgsl;
// the transpose of the forward as jaxgru/_src/reference/lstm.py `backward_step` defines it:
//
//   gh = dY_t + dh;  i = f(a_i), o = f(a_o), c~ = g(a_c), f_t = f(a_f) (or 1 − i), from the
//   residuals a_i, a_o, a_f, a_c, c (K = 5); c_prev = c0 at t = 0, else c of step t − 1
//   da_o = gh⊙h(c)⊙f'(a_o);  dcell = dc + gh⊙o⊙h'(c) (+ da_o⊙P_o)
//   di = dcell⊙c~ (input_forget: − dcell⊙c_prev, da_f = 0), else da_f = dcell⊙c_prev⊙f'(a_f)
//   da_i = di⊙f'(a_i);  dc_prev = dcell⊙f_t (+ da_i⊙P_i + da_f⊙P_f)
//   dg = [da_i, da_o, da_f, dcell⊙i⊙g'(a_c)];  dh_prev = dg·R
//   padding steps: dg = 0, dh and dc pass through.
//
// A projected LSTM (PROJ: h' = proj·m, m = o⊙h(c), P features): gh = dY_t + dh has P
// features and is saved (ghs, zero on padding) for d proj = Σ ghsᵀ·m; the cotangent of m is
// projᵀ·gh, which each unit j < H sums itself (P terms: no other unit's result is needed, so
// it stays one dispatch), and replaces gh in the formulas above; m is saved for the GEMM
// (recomputing it there would need the residuals and the activations in wgrad.wgsl);
// dh_prev = dg·R has P features (R [D, 4H, P]).
//
// Bindings: the table in backward_common.wgsl (ext = da_i⊙c_prev, da_o⊙c, da_f⊙c_prev with
// peepholes; hb = h_prev; ghs, m with PROJ). Overrides: those of backward_common.wgsl,
// PEEPHOLES, INPUT_FORGET.
//
// Entry points, dispatched in this order for step sched.t:
//   lstm_bwd_gates   gh, dg, ext, hb and dc_prev (in place in the carry), with PROJ ghs and m;
//                    one invocation per unit (of max(H, P) with PROJ)
//   lstm_bwd_hidden  dh_prev into the carry (needs every unit's gate cotangents); mat-vec blocks

override PEEPHOLES: bool = false;
override INPUT_FORGET: bool = false;

fn peep(d: u32, q: u32, j: u32) -> f32 {
  return fdata[dims.off_p + (d * 3u + q) * H + j];
}

@compute @workgroup_size(WG_STEP)
fn lstm_bwd_gates(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  let u = unit(wid, nwg, lid);
  if !u.ok {
    return;
  }
  let d = u.d;
  let n = u.n;
  let j = u.j;
  let t = sched.t;
  let len = u32(lens[n]);
  let valid = t < len;
  if PROJ {
    if j < P {  // the cotangent of h' (P features) and h_prev, the GEMMs' operands (zero on padding)
      var ghp = 0.0;
      var hp = 0.0;
      if valid {
        ghp = gy_at(time_of(d, t, len), d, n, j) + st[carry_index(0u, d, n, j)];
        hp = h_prev(d, t, n, j, len);
      }
      aux[ghs_index(d, t, n, j)] = ghp;
      aux[hb_index(d, t, n, 0u, j)] = hp;
    }
    if j >= H {
      return;
    }
  }
  if !valid {
    if !PROJ {
      st[gh_index(d, n, j)] = st[carry_index(0u, d, n, j)];
    }
    zero_step(d, t, n, j);
    return;
  }
  var gh = 0.0;
  if PROJ {  // the cotangent of m = o⊙h(c): projᵀ·(dY_t + dh)
    let tt = time_of(d, t, len);
    for (var p = 0u; p < P; p++) {
      gh += (gy_at(tt, d, n, p) + st[carry_index(0u, d, n, p)]) * proj_at(d, p, j);
    }
  } else {
    gh = gy_at(time_of(d, t, len), d, n, j) + st[carry_index(0u, d, n, j)];
    st[gh_index(d, n, j)] = gh;
  }
  let dc = st[carry_index(1u, d, n, j)];
  let i = f_vd(d, res(d, t, n, 0u, j));
  let o = f_vd(d, res(d, t, n, 1u, j));
  let cc = g_vd(d, res(d, t, n, 3u, j));
  let c = res(d, t, n, 4u, j);
  let hc = h_vd(d, c);
  var cp = init(1u, d, n, j);
  if t > 0u {
    cp = res(d, t - 1u, n, 4u, j);
  }
  let dao = gh * hc.v * o.d;
  var dcell = dc + gh * o.v * hc.d;
  if PEEPHOLES {
    dcell += dao * peep(d, 1u, j);
  }
  var di = dcell * cc.v;
  var fg = 1.0 - i.v;
  var daf = 0.0;
  if INPUT_FORGET {
    di -= dcell * cp;
  } else {
    let f = f_vd(d, res(d, t, n, 2u, j));
    fg = f.v;
    daf = dcell * cp * f.d;
  }
  let dai = di * i.d;
  var dcp = dcell * fg;
  if PEEPHOLES {
    dcp += dai * peep(d, 0u, j) + daf * peep(d, 2u, j);
    aux[ext_index(d, t, n, 0u, j)] = dai * cp;
    aux[ext_index(d, t, n, 1u, j)] = dao * c;
    aux[ext_index(d, t, n, 2u, j)] = daf * cp;
  }
  dg[dg_index(d, t, n, 0u, j)] = dai;
  dg[dg_index(d, t, n, 1u, j)] = dao;
  dg[dg_index(d, t, n, 2u, j)] = daf;
  dg[dg_index(d, t, n, 3u, j)] = dcell * i.v * cc.d;
  if PROJ {
    aux[m_index(d, t, n, j)] = o.v * hc.v;
  } else {
    aux[hb_index(d, t, n, 0u, j)] = h_prev(d, t, n, j, len);
  }
  st[carry_index(1u, d, n, j)] = dcp;
}

@compute @workgroup_size(WG_STEP)
fn lstm_bwd_hidden(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  let b = block(wid, nwg, lid);
  if !b.ok {
    return;
  }
  let t = sched.t;
  let acc = matvec_rows(b, t, 0u, 4u * H, false);  // dg·R
  for (var r = 0u; r < 4u; r++) {
    let n = b.n0 + r;
    if n < dims.N {
      let valid = t < u32(lens[n]);
      for (var c = 0u; c < 4u; c++) {
        let k = b.k0 + c;
        if k < yw() {
          if valid {
            st[carry_index(0u, b.d, n, k)] = acc[r][c];
          } else if !PROJ {  // PROJ: the carried dh is left as it is on padding
            st[carry_index(0u, b.d, n, k)] = st[gh_index(b.d, n, k)];
          }
        }
      }
    }
  }
}
