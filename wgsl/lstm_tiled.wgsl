// lstm_tiled.wgsl — the tiled LSTM step (cell math of lstm.wgsl, tiles of recurrence_tiled.wgsl).
//
// Module = header + recurrence_common.wgsl + `act` + lstm.wgsl + recurrence_tiled.wgsl +
// tile_reduce_wg.wgsl or tile_reduce_sg.wgsl (kernel lstm_tiled_sg) + this file: the
// per-row math (lstm_cell) is lstm.wgsl's, so Y, the states and the residuals are
// those of the stepwise kernel.
//
// Bindings: the table in recurrence_common.wgsl (state slots: 0/1 h ping-pong, 2 c; pr = P).
// Overrides: those of recurrence_common.wgsl, recurrence_tiled.wgsl and lstm.wgsl (PEEPHOLES,
// INPUT_FORGET).
//
// Entry points:
//   lstm_tiled_step  step sched.t0; D·ceil(N/TR)·ceil(H4/TU) workgroups

@compute @workgroup_size(WG_T)
fn lstm_tiled_step(
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
  let acc = tile_matvec(tile, it, lid, cur, 0u, 4u);
  if !it.ok || !tile_owner(lid) {
    return;
  }
  let hb = slot_index(cur, it.d, it.n, 0u);
  for (var r = 0u; r < NB; r++) {
    if r < it.rows {
      let n = it.n + r;
      let ci = slot_index(2u, it.d, n, it.j4);
      let prev = HC(state[hb + r * H4 + it.j4], state[ci]);
      let hc = lstm_cell(it.d, t, n, it.j4, u32(lens[n]), acc, r, prev);
      state[slot_index(1u - cur, it.d, n, it.j4)] = hc.h;
      state[ci] = hc.c;
      if sched.last != 0u {
        store_final(0u, it.d, n, it.j4, hc.h);
        store_final(1u, it.d, n, it.j4, hc.c);
      }
    }
  }
}
