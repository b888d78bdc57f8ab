// gru_backward.wgsl — one reverse step of the ONNX GRU backward, after backward_common.wgsl;
// the transpose of the forward as jaxgru/_src/reference/gru.py `backward_step` defines it:
//
//   gh = dY_t + dh;  z = f(a_z), r = f(a_r), h~ = g(a_h) (from the residuals, K = 3 or 4)
//   da_h = gh⊙(1 − z)⊙g'(a_h),  da_z = gh⊙(h_prev − h~)⊙f'(a_z)
//   lbr=1: da_r = da_h⊙lin⊙f'(a_r);  d(H·Rᵀ + Rb) = [da_z, da_r, da_h⊙r]
//          dh_prev = gh⊙z + d(H·Rᵀ + Rb)·R
//   lbr=0: d(r⊙h) = da_h·R_h;  da_r = d(r⊙h)⊙h_prev⊙f'(a_r)
//          dh_prev = gh⊙z + d(r⊙h)⊙r + [da_z, da_r]·R_zr
//   dg = d(X·Wᵀ + b) = [da_z, da_r, da_h]; padding steps: dg = 0, dh_prev = dh.
//
// Bindings: the table in backward_common.wgsl (ext = d(H·Rᵀ + Rb) for lbr=1; hb = h_prev, and
// r⊙h_prev for lbr=0). Overrides: those of backward_common.wgsl, and LBR.
//
// Entry points, dispatched in this order for step sched.t:
//   gru_bwd_gates   gh, da_z, da_h (and da_r, ext for lbr=1), hb; one invocation per unit
//   gru_bwd_reset   lbr=0 only: d(r⊙h) and da_r (needs every unit's da_h); mat-vec blocks
//   gru_bwd_hidden  dh_prev into the carry (needs every unit's gate cotangents); mat-vec blocks

override LBR: bool = false;

@compute @workgroup_size(WG_STEP)
fn gru_bwd_gates(
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
  let dh = st[carry_index(0u, d, n, j)];
  if t >= len {
    st[gh_index(d, n, j)] = dh;
    zero_step(d, t, n, j);
    return;
  }
  let gh = gy_at(time_of(d, t, len), d, n, j) + dh;
  st[gh_index(d, n, j)] = gh;
  let z = f_vd(d, res(d, t, n, 0u, j));
  let r = f_vd(d, res(d, t, n, 1u, j));
  let hh = g_vd(d, res(d, t, n, 2u, j));
  let hp = h_prev(d, t, n, j, len);
  let dah = gh * (1.0 - z.v) * hh.d;
  let daz = gh * (hp - hh.v) * z.d;
  dg[dg_index(d, t, n, 0u, j)] = daz;
  dg[dg_index(d, t, n, 2u, j)] = dah;
  aux[hb_index(d, t, n, 0u, j)] = hp;
  if LBR {
    let dar = dah * res(d, t, n, 3u, j) * r.d;
    dg[dg_index(d, t, n, 1u, j)] = dar;
    aux[ext_index(d, t, n, 0u, j)] = daz;
    aux[ext_index(d, t, n, 1u, j)] = dar;
    aux[ext_index(d, t, n, 2u, j)] = dah * r.v;
  } else {
    aux[hb_index(d, t, n, 1u, j)] = r.v * hp;
  }
}

@compute @workgroup_size(WG_STEP)
fn gru_bwd_reset(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  let b = block(wid, nwg, lid);
  if !b.ok {
    return;
  }
  let d = b.d;
  let t = sched.t;
  let acc = matvec_rows(b, t, 2u * H, 3u * H, false);  // d(r⊙h) = da_h·R_h
  for (var r = 0u; r < 4u; r++) {
    let n = b.n0 + r;
    if n < dims.N {
      let valid = t < u32(lens[n]);
      for (var c = 0u; c < 4u; c++) {
        let k = b.k0 + c;
        if k < H {
          let drh = select(0.0, acc[r][c], valid);
          st[drh_index(d, n, k)] = drh;
          if valid {
            let dr = f_vd(d, res(d, t, n, 1u, k)).d;
            dg[dg_index(d, t, n, 1u, k)] = drh * aux[hb_index(d, t, n, 0u, k)] * dr;
          }
        }
      }
    }
  }
}

@compute @workgroup_size(WG_STEP)
fn gru_bwd_hidden(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  let b = block(wid, nwg, lid);
  if !b.ok {
    return;
  }
  let d = b.d;
  let t = sched.t;
  var acc = array<array<f32, 4>, 4>();
  if LBR {
    acc = matvec_rows(b, t, 0u, 3u * H, true);  // d(H·Rᵀ + Rb)·R
  } else {
    acc = matvec_rows(b, t, 0u, 2u * H, false);  // [da_z, da_r]·R_zr
  }
  for (var r = 0u; r < 4u; r++) {
    let n = b.n0 + r;
    if n < dims.N {
      let valid = t < u32(lens[n]);
      for (var c = 0u; c < 4u; c++) {
        let k = b.k0 + c;
        if k < H {
          let gh = st[gh_index(d, n, k)];
          var dhp = gh;
          if valid {
            dhp = acc[r][c] + gh * f_vd(d, res(d, t, n, 0u, k)).v;
            if !LBR {
              dhp += st[drh_index(d, n, k)] * f_vd(d, res(d, t, n, 1u, k)).v;
            }
          }
          st[carry_index(0u, d, n, k)] = dhp;
        }
      }
    }
  }
}
