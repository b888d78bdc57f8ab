// gru.wgsl — ONNX GRU recurrence (gate order z, r, h), after recurrence_common.wgsl.
//
//   z = f(a_z), r = f(a_r),  a_z = XP_z + h·Rzᵀ (+ Rbz), a_r likewise
//   lbr=0: a_h = XP_h + (r⊙h)·Rhᵀ              (every bias folded into XP by the host)
//   lbr=1: a_h = XP_h + r⊙lin, lin = h·Rhᵀ + Rbh (Rb in `pr`, not folded)
//   h' = (1 − z)⊙g(a_h) + z⊙h = h~ + z⊙(h − h~);  masked steps (t ≥ len) keep h, write Y = 0.
// Residuals (K = 3, or 4 with lbr=1): a_z, a_r, a_h[, lin].
//
// Bindings: the table in recurrence_common.wgsl (state slots: 0/1 h ping-pong, 2 z, 3 r⊙h).
// Overrides: those of recurrence_common.wgsl, and LBR (linear_before_reset).
//
// Entry points (each invocation owns NB batch rows x 4 hidden units of one direction):
//   gru_gates_zr    stepwise, lbr=0 phase 1 of step sched.t0: z → slot 2, r⊙h → slot 3
//   gru_step        stepwise, one step (lbr=1) or lbr=0 phase 2; D·ceil(N/NB)·H4 invocations
//   gru_persistent  workgroup (row block, d) runs steps [sched.t0, sched.t1) with h in `hs`

override LBR: bool = false;

struct ZR {
  z: vec4<f32>,
  r: vec4<f32>,
}

// lbr=0, phase 1: z and r of one row from its h·Rzᵀ, h·Rrᵀ.
fn gru_zr(d: u32, t: u32, n: u32, j4: u32, tt: u32, hz: vec4<f32>, hr: vec4<f32>) -> ZR {
  let az = xp4(d, tt, n, 0u, j4) + hz;
  let ar = xp4(d, tt, n, 1u, j4) + hr;
  store_res(d, t, n, 0u, j4, az);
  store_res(d, t, n, 1u, j4, ar);
  return ZR(f4(d, az), f4(d, ar));
}

// lbr=1: z and a_h of one row from its h·Rᵀ (all gates); ZR.r holds a_h.
fn gru_lbr1(d: u32, t: u32, n: u32, j4: u32, tt: u32, hz: vec4<f32>, hr: vec4<f32>, hh: vec4<f32>
            ) -> ZR {
  let az = xp4(d, tt, n, 0u, j4) + (hz + pr4(d, 0u, j4));
  let ar = xp4(d, tt, n, 1u, j4) + (hr + pr4(d, 1u, j4));
  let lin = hh + pr4(d, 2u, j4);
  store_res(d, t, n, 0u, j4, az);
  store_res(d, t, n, 1u, j4, ar);
  store_res(d, t, n, 3u, j4, lin);
  return ZR(f4(d, az), xp4(d, tt, n, 2u, j4) + f4(d, ar) * lin);
}

// h' of one row from z, a_h and the previous h; writes Y and returns the state to carry.
fn gru_finish(d: u32, t: u32, n: u32, j4: u32, tt: u32, len: u32, z: vec4<f32>, ah: vec4<f32>,
              h: vec4<f32>) -> vec4<f32> {
  store_res(d, t, n, 2u, j4, ah);
  let hh = g4(d, ah);
  let hn = pad0(j4, hh + z * (h - hh));
  let valid = t < len;
  store_y(d, tt, n, j4, select(vec4<f32>(0.0), hn, valid));
  return select(h, hn, valid);
}

@compute @workgroup_size(WG_STEP)
fn gru_gates_zr(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  let it = stepwise_item(linear_id(wid, nwg, lid));
  if !it.ok {
    return;
  }
  let t = sched.t0;
  let hb = slot_index(t & 1u, it.d, it.n, 0u);
  let acc = matvec(it.d, hb, it.rows, it.j4, 0u, 2u);
  for (var r = 0u; r < NB; r++) {
    if r < it.rows {
      let n = it.n + r;
      let len = u32(lens[n]);
      let zr = gru_zr(it.d, t, n, it.j4, time_of(it.d, t, len), acc[4u * r], acc[4u * r + 1u]);
      state[slot_index(2u, it.d, n, it.j4)] = zr.z;
      state[slot_index(3u, it.d, n, it.j4)] = pad0(it.j4, zr.r * state[hb + r * H4 + it.j4]);
    }
  }
}

@compute @workgroup_size(WG_STEP)
fn gru_step(
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
  let hb = slot_index(cur, it.d, it.n, 0u);
  var acc = array<vec4<f32>, 16>();
  if LBR {
    acc = matvec(it.d, hb, it.rows, it.j4, 0u, 3u);
  } else {
    acc = matvec(it.d, slot_index(3u, it.d, it.n, 0u), it.rows, it.j4, 2u, 1u);
  }
  for (var r = 0u; r < NB; r++) {
    if r < it.rows {
      let n = it.n + r;
      let len = u32(lens[n]);
      let tt = time_of(it.d, t, len);
      var za = ZR(vec4<f32>(0.0), vec4<f32>(0.0));  // (z, a_h)
      if LBR {
        za = gru_lbr1(it.d, t, n, it.j4, tt, acc[4u * r], acc[4u * r + 1u], acc[4u * r + 2u]);
      } else {
        za = ZR(state[slot_index(2u, it.d, n, it.j4)], xp4(it.d, tt, n, 2u, it.j4) + acc[4u * r]);
      }
      let h = gru_finish(it.d, t, n, it.j4, tt, len, za.z, za.r, state[hb + r * H4 + it.j4]);
      state[slot_index(1u - cur, it.d, n, it.j4)] = h;
      if sched.last != 0u {
        store_final(0u, it.d, n, it.j4, h);
      }
    }
  }
}

@compute @workgroup_size(WG_P)
fn gru_persistent(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  let it = persistent_item(wid, lid);
  let half = BPW * H4;
  let row = (lid / H4) * NB * H4;  // the invocation's first row in each half of hs
  var h = array<vec4<f32>, 4>();
  var z = array<vec4<f32>, 4>();
  var len = array<u32, 4>();
  for (var r = 0u; r < NB; r++) {
    if r < it.rows {
      h[r] = state[slot_index(0u, it.d, it.n + r, it.j4)];
      len[r] = u32(lens[it.n + r]);
      hs[row + r * H4 + it.j4] = h[r];
    }
  }
  workgroupBarrier();
  for (var t = sched.t0; t < sched.t1; t++) {
    if LBR {
      // hs = [h | h']: read one half, write the other; one barrier per step
      let cur = select(0u, half, ((t - sched.t0) & 1u) == 1u);
      if it.ok {
        let acc = matvec(it.d, cur + row, it.rows, it.j4, 0u, 3u);
        for (var r = 0u; r < NB; r++) {
          if r < it.rows {
            let n = it.n + r;
            let tt = time_of(it.d, t, len[r]);
            let za = gru_lbr1(it.d, t, n, it.j4, tt, acc[4u * r], acc[4u * r + 1u], acc[4u * r + 2u]);
            h[r] = gru_finish(it.d, t, n, it.j4, tt, len[r], za.z, za.r, h[r]);
            hs[half - cur + row + r * H4 + it.j4] = h[r];
          }
        }
      }
      workgroupBarrier();
    } else {
      // hs = [h | r⊙h]: phase 1 reads h, writes r⊙h; phase 2 reads r⊙h, writes h
      if it.ok {
        let acc = matvec(it.d, row, it.rows, it.j4, 0u, 2u);
        for (var r = 0u; r < NB; r++) {
          if r < it.rows {
            let tt = time_of(it.d, t, len[r]);
            let zr = gru_zr(it.d, t, it.n + r, it.j4, tt, acc[4u * r], acc[4u * r + 1u]);
            z[r] = zr.z;
            hs[half + row + r * H4 + it.j4] = pad0(it.j4, zr.r * h[r]);
          }
        }
      }
      workgroupBarrier();
      if it.ok {
        let acc = matvec(it.d, half + row, it.rows, it.j4, 2u, 1u);
        for (var r = 0u; r < NB; r++) {
          if r < it.rows {
            let n = it.n + r;
            let tt = time_of(it.d, t, len[r]);
            let ah = xp4(it.d, tt, n, 2u, it.j4) + acc[4u * r];
            h[r] = gru_finish(it.d, t, n, it.j4, tt, len[r], z[r], ah, h[r]);
            hs[row + r * H4 + it.j4] = h[r];
          }
        }
      }
      workgroupBarrier();
    }
  }
  for (var r = 0u; r < NB; r++) {
    if r < it.rows {
      state[slot_index(0u, it.d, it.n + r, it.j4)] = h[r];
      if sched.last != 0u {
        store_final(0u, it.d, it.n + r, it.j4, h[r]);
      }
    }
  }
}
