// gru_tiled.wgsl — the tiled GRU step (gate math of gru.wgsl, tiles of recurrence_tiled.wgsl).
//
// Module = header + recurrence_common.wgsl + `act` + gru.wgsl + recurrence_tiled.wgsl +
// tile_reduce_wg.wgsl or tile_reduce_sg.wgsl (kernel gru_tiled_sg) + this file: the
// per-row math (gru_zr, gru_lbr1, gru_finish) is gru.wgsl's, so Y, the states and
// the residuals are those of the stepwise kernels.
//
// Bindings: the table in recurrence_common.wgsl (state slots: 0/1 h ping-pong, 2 z, 3 r⊙h).
// Overrides: those of recurrence_common.wgsl, recurrence_tiled.wgsl and gru.wgsl (LBR).
//
// Entry points (one dispatch of D·ceil(N/TR)·ceil(H4/TU) workgroups each):
//   gru_tiled_gates_zr  lbr=0 phase 1 of step sched.t0: z → slot 2, r⊙h → slot 3
//   gru_tiled_step      one step (lbr=1) or lbr=0 phase 2 (h-gate from r⊙h of every unit)

@compute @workgroup_size(WG_T)
fn gru_tiled_gates_zr(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  let tile = tile_of(wid, nwg);
  if !tile.ok {
    return;
  }
  let it = tile_item(tile, lid);
  let t = sched.t0;
  let acc = tile_matvec(tile, it, lid, t & 1u, 0u, 2u);
  if !it.ok || !tile_owner(lid) {
    return;
  }
  let hb = slot_index(t & 1u, it.d, it.n, 0u);
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

@compute @workgroup_size(WG_T)
fn gru_tiled_step(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  let tile = tile_of(wid, nwg);
  if !tile.ok {
    return;
  }
  let it = tile_item(tile, lid);
  let t = sched.t0;
  let cur = t & 1u;
  var acc = array<vec4<f32>, 16>();
  if LBR {
    acc = tile_matvec(tile, it, lid, cur, 0u, 3u);
  } else {
    acc = tile_matvec(tile, it, lid, 3u, 2u, 1u);
  }
  if !it.ok || !tile_owner(lid) {
    return;
  }
  let hb = slot_index(cur, it.d, it.n, 0u);
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
