// gru_tangent.wgsl — the GRU's tangent (forward-mode derivative) recurrence, after
// recurrence_common.wgsl, the generated activation switches and tangent_common.wgsl.
//
// The linearisation of gru.wgsl around the forward's residuals (a_z, a_r, a_h[, lin]) and Y,
// as reference/gru.py:tangent_step (h the forward's state before the step; E from
// tangent_proj.wgsl: d(X·Wᵀ + b), plus h·dRᵀ in the z and r gates):
//   lbr=1: dz = f'(a_z)⊙(E_z + dh·Rzᵀ + dRbz), dr likewise,
//          da_h = E_h + dr⊙lin + r⊙(dh·Rhᵀ + h·dRhᵀ + dRbh)
//   lbr=0: dz = f'(a_z)⊙(E_z + dh·Rzᵀ), dr likewise,
//          da_h = E_h + (dr⊙h + r⊙dh)·Rhᵀ + (r⊙h)·dRhᵀ        (two phases: needs all of r)
//   dh' = g'(a_h)⊙da_h + dz⊙(h − h~) + z⊙(dh − g'(a_h)⊙da_h);  masked steps keep dh, dY = 0.
//
// Bindings: the table in tangent_common.wgsl. Overrides: recurrence_common's, and LBR.
//
// Entry points (stepwise; each invocation owns NB batch rows x 4 hidden units of one direction):
//   gru_tangent_zr    lbr=0 phase 1 of step sched.t0: dz → S_A, dr⊙h + r⊙dh → S_B, r⊙h → S_C
//   gru_tangent_step  one step (lbr=1) or lbr=0 phase 2; D·ceil(N/NB)·H4 invocations

override LBR: bool = false;

@compute @workgroup_size(WG_STEP)
fn gru_tangent_zr(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  let it = stepwise_item(linear_id(wid, nwg, lid));
  if !it.ok {
    return;
  }
  let t = sched.t0;
  let cur = t & 1u;
  let hb = slot_index(S_DH + cur, it.d, it.n, 0u);
  let pb = slot_index(S_HP + cur, it.d, it.n, 0u);
  let a = matvec(it.d, hb, it.rows, it.j4, 0u, 2u);  // dh·R_zrᵀ
  for (var r = 0u; r < NB; r++) {
    if r < it.rows {
      let n = it.n + r;
      let tt = time_of(it.d, t, u32(lens[n]));
      let dh = state[hb + r * H4 + it.j4];
      let hp = state[pb + r * H4 + it.j4];
      let ar = res4(it.d, t, n, 1u, it.j4);
      let dz = df4(it.d, res4(it.d, t, n, 0u, it.j4)) * (xp4(it.d, tt, n, 0u, it.j4) + a[4u * r]);
      let dr = df4(it.d, ar) * (xp4(it.d, tt, n, 1u, it.j4) + a[4u * r + 1u]);
      let rr = f4(it.d, ar);
      state[slot_index(S_A, it.d, n, it.j4)] = dz;
      state[slot_index(S_B, it.d, n, it.j4)] = pad0(it.j4, dr * hp + rr * dh);
      state[slot_index(S_C, it.d, n, it.j4)] = pad0(it.j4, rr * hp);
    }
  }
}

@compute @workgroup_size(WG_STEP)
fn gru_tangent_step(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  let it = stepwise_item(linear_id(wid, nwg, lid));
  if !it.ok {
    return;
  }
  let t = sched.t0;
  let cur = t & 1u;
  let hb = slot_index(S_DH + cur, it.d, it.n, 0u);
  let pb = slot_index(S_HP + cur, it.d, it.n, 0u);
  var a = array<vec4<f32>, 16>();
  var b = array<vec4<f32>, 16>();
  if LBR {
    a = matvec(it.d, hb, it.rows, it.j4, 0u, 3u);           // dh·Rᵀ
    b = matvec(it.d + dims.D, pb, it.rows, it.j4, 2u, 1u);  // h·dRhᵀ
  } else {
    a = matvec(it.d, slot_index(S_B, it.d, it.n, 0u), it.rows, it.j4, 2u, 1u);           // u·Rhᵀ
    b = matvec(it.d + dims.D, slot_index(S_C, it.d, it.n, 0u), it.rows, it.j4, 2u, 1u);  // (r⊙h)·dRhᵀ
  }
  for (var r = 0u; r < NB; r++) {
    if r < it.rows {
      let n = it.n + r;
      let len = u32(lens[n]);
      let tt = time_of(it.d, t, len);
      let dh = state[hb + r * H4 + it.j4];
      let hp = state[pb + r * H4 + it.j4];
      let az = res4(it.d, t, n, 0u, it.j4);
      let ah = res4(it.d, t, n, 2u, it.j4);
      var dz = vec4<f32>(0.0);
      var dah = vec4<f32>(0.0);
      if LBR {
        let ar = res4(it.d, t, n, 1u, it.j4);
        let lin = res4(it.d, t, n, 3u, it.j4);
        dz = df4(it.d, az) * (xp4(it.d, tt, n, 0u, it.j4) + a[4u * r] + pr4(it.d, 0u, it.j4));
        let dr = df4(it.d, ar) * (xp4(it.d, tt, n, 1u, it.j4) + a[4u * r + 1u] + pr4(it.d, 1u, it.j4));
        let dgh = a[4u * r + 2u] + b[4u * r] + pr4(it.d, 2u, it.j4);
        dah = xp4(it.d, tt, n, 2u, it.j4) + dr * lin + f4(it.d, ar) * dgh;
      } else {
        dz = state[slot_index(S_A, it.d, n, it.j4)];
        dah = xp4(it.d, tt, n, 2u, it.j4) + a[4u * r] + b[4u * r];
      }
      let z = f4(it.d, az);
      let hh = g4(it.d, ah);
      let dhh = dg4(it.d, ah) * dah;
      let dhn = pad0(it.j4, dhh + dz * (hp - hh) + z * (dh - dhh));
      let valid = t < len;
      tangent_store_h(it.d, t, n, it.j4, tt, valid, dh, dhn);
      state[slot_index(S_HP + 1u - cur, it.d, n, it.j4)] = select(hp, y4(tt, it.d, n, it.j4), valid);
    }
  }
}
