// lstm.wgsl — ONNX LSTM recurrence (gate order i, o, f, c; peepholes i, o, f), after
// recurrence_common.wgsl.
//
//   a = XP + h·Rᵀ (all biases folded into XP);  a_i += P_i⊙c, a_f += P_f⊙c  (peepholes)
//   i = f(a_i), f_t = f(a_f) or 1 − i (input_forget), c' = f_t⊙c + i⊙g(a_c)
//   a_o += P_o⊙c' (the NEW cell state), o = f(a_o), h' = o⊙h(c')  (h(·) is never clipped)
//   masked steps (t ≥ len) keep h and c, write Y = 0.
//   PROJ (PyTorch's proj_size): m = o⊙h(c'), h' = proj·m has P features (R is [4H, P]). The
//   projection needs all of m: stepwise, lstm_step writes m to slot 3 (and c'), then lstm_proj
//   computes h', Y and Y_h (two dispatches per step); persistent (P4 ≤ H4), m goes to a third
//   part of `hs` and a workgroup barrier separates the two phases of each step.
// Residuals (K = 5): a_i, a_o, a_f, a_c (peephole terms included), c'.
//
// Bindings: the table in recurrence_common.wgsl (state slots: 0/1 h ping-pong, 2 c, 3 m (PROJ);
// pr = P; with PROJ, rt holds projt [D, HP, P4] (projt[d,k,p] = proj[d,p,k]) at vec4 PROJ_OFF).
// Overrides: those of recurrence_common.wgsl, PEEPHOLES, INPUT_FORGET, PROJ and PROJ_OFF.
//
// Entry points (each invocation owns NB batch rows x 4 hidden units of one direction):
//   lstm_step        stepwise, step sched.t0; D·ceil(N/NB)·H4 invocations
//   lstm_proj        PROJ, after lstm_step: h' = proj·m; D·ceil(N/NB)·P4 invocations (4 features)
//   lstm_persistent  workgroup (row block, d) runs steps [sched.t0, sched.t1) with h in `hs`
//                    (PROJ: hs = [h | h' | m], HS_LEN = 3·BPW·H4; invocation j4 < P4 projects)

override PEEPHOLES: bool = false;
override INPUT_FORGET: bool = false;
override PROJ: bool = false;
override PROJ_OFF: u32 = 0u;

struct HC {
  h: vec4<f32>,
  c: vec4<f32>,
}

// One step of one row from its h·Rᵀ (acc[4·r .. 4·r+3]); writes res and Y and returns the
// (masked) state to carry. With PROJ the returned h is m = o⊙h(c') and Y is lstm_proj's.
fn lstm_cell(d: u32, t: u32, n: u32, j4: u32, len: u32, acc: array<vec4<f32>, 16>, r: u32,
             prev: HC) -> HC {
  let tt = time_of(d, t, len);
  let c = prev.c;
  var ai = xp4(d, tt, n, 0u, j4) + acc[4u * r];
  var ao = xp4(d, tt, n, 1u, j4) + acc[4u * r + 1u];
  var af = xp4(d, tt, n, 2u, j4) + acc[4u * r + 2u];
  let ac = xp4(d, tt, n, 3u, j4) + acc[4u * r + 3u];
  if PEEPHOLES {
    ai += pr4(d, 0u, j4) * c;
    af += pr4(d, 2u, j4) * c;
  }
  let i = f4(d, ai);
  var fg = 1.0 - i;
  if !INPUT_FORGET {
    fg = f4(d, af);
  }
  let cn = pad0(j4, fg * c + i * g4(d, ac));
  if PEEPHOLES {
    ao += pr4(d, 1u, j4) * cn;
  }
  let hn = pad0(j4, f4(d, ao) * h4(d, cn));
  store_res(d, t, n, 0u, j4, ai);
  store_res(d, t, n, 1u, j4, ao);
  store_res(d, t, n, 2u, j4, af);
  store_res(d, t, n, 3u, j4, ac);
  store_res(d, t, n, 4u, j4, cn);
  let valid = t < len;
  if !PROJ {
    store_y(d, tt, n, j4, select(vec4<f32>(0.0), hn, valid));
  }
  return HC(select(prev.h, hn, valid), select(c, cn, valid));
}

@compute @workgroup_size(WG_STEP)
fn lstm_step(
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
  let acc = matvec(it.d, hb, it.rows, it.j4, 0u, 4u);
  for (var r = 0u; r < NB; r++) {
    if r < it.rows {
      let n = it.n + r;
      let ci = slot_index(2u, it.d, n, it.j4);
      if PROJ {  // m to slot 3 for lstm_proj (its value on padding steps is not read)
        let hc = lstm_cell(it.d, t, n, it.j4, u32(lens[n]), acc, r, HC(vec4<f32>(0.0), state[ci]));
        state[slot_index(3u, it.d, n, it.j4)] = hc.h;
        state[ci] = hc.c;
        if sched.last != 0u {
          store_final(1u, it.d, n, it.j4, hc.c);
        }
        continue;
      }
      let prev = HC(state[hb + r * S4 + it.j4], state[ci]);
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

// acc[r] = proj·m_r for the 4 features of p4 and the NB rows r (m_r at vec4 index mb + r·S4 of
// `state`, or of `hs` in the persistent kernel: see hvec); lanes of features ≥ P read 0.
fn proj_matvec(d: u32, mb: u32, rows: u32, p4: u32) -> array<vec4<f32>, 4> {
  var acc = array<vec4<f32>, 4>();
  for (var k4 = 0u; k4 < H4; k4++) {
    var mv = array<vec4<f32>, 4>();
    for (var r = 0u; r < NB; r++) {
      mv[r] = hvec(mb + min(r, rows - 1u) * S4 + k4);
    }
    for (var c = 0u; c < 4u; c++) {
      let w = vec4<f32>(rt[PROJ_OFF + (d * HP + 4u * k4 + c) * P4 + p4]);
      for (var r = 0u; r < NB; r++) {
        acc[r] += mv[r][c] * w;
      }
    }
  }
  let lane = vec4<u32>(4u * p4) + vec4<u32>(0u, 1u, 2u, 3u) < vec4<u32>(P);
  for (var r = 0u; r < NB; r++) {
    acc[r] = select(vec4<f32>(0.0), acc[r], lane);
  }
  return acc;
}

// h' = proj·m for NB rows x 4 features (p4) of one direction; masked steps keep h, write Y = 0.
@compute @workgroup_size(WG_STEP)
fn lstm_proj(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  let i = linear_id(wid, nwg, lid);
  let blocks = (dims.N + NB - 1u) / NB;
  let rb = i / P4;
  if rb >= dims.D * blocks {
    return;
  }
  let d = rb / blocks;
  let n0 = (rb % blocks) * NB;
  let rows = min(NB, dims.N - min(n0, dims.N));
  let p4 = i % P4;
  let t = sched.t0;
  let cur = t & 1u;
  let acc = proj_matvec(d, slot_index(3u, d, n0, 0u), rows, p4);
  for (var r = 0u; r < NB; r++) {
    if r < rows {
      let n = n0 + r;
      let len = u32(lens[n]);
      let valid = t < len;
      let hn = acc[r];
      let h = select(state[slot_index(cur, d, n, p4)], hn, valid);
      state[slot_index(1u - cur, d, n, p4)] = h;
      store_y(d, time_of(d, t, len), n, p4, select(vec4<f32>(0.0), hn, valid));
      if sched.last != 0u {
        store_final(0u, d, n, p4, h);
      }
    }
  }
}

@compute @workgroup_size(WG_P)
fn lstm_persistent(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  let it = persistent_item(wid, lid);
  let half = BPW * H4;
  let row = (lid / H4) * NB * H4;  // the invocation's first row in each half of hs
  var hc = array<HC, 4>();
  var len = array<u32, 4>();
  for (var r = 0u; r < NB; r++) {
    if r < it.rows {
      let n = it.n + r;
      hc[r] = HC(state[slot_index(0u, it.d, n, it.j4)], state[slot_index(2u, it.d, n, it.j4)]);
      len[r] = u32(lens[n]);
      hs[row + r * H4 + it.j4] = hc[r].h;
    }
  }
  workgroupBarrier();
  for (var t = sched.t0; t < sched.t1; t++) {
    // hs = [h | h']: read one half, write the other; one barrier per step. c stays in registers.
    let cur = select(0u, half, ((t - sched.t0) & 1u) == 1u);
    if it.ok {
      let acc = matvec(it.d, cur + row, it.rows, it.j4, 0u, 4u);
      for (var r = 0u; r < NB; r++) {
        if r < it.rows {
          if PROJ {  // m to the third part of hs; h' once every m of the step is there
            let mc = lstm_cell(it.d, t, it.n + r, it.j4, len[r], acc, r, HC(vec4<f32>(0.0), hc[r].c));
            hc[r].c = mc.c;
            hs[2u * half + row + r * H4 + it.j4] = mc.h;
          } else {
            hc[r] = lstm_cell(it.d, t, it.n + r, it.j4, len[r], acc, r, hc[r]);
            hs[half - cur + row + r * H4 + it.j4] = hc[r].h;
          }
        }
      }
    }
    if PROJ {
      workgroupBarrier();
      if it.ok && it.j4 < P4 {
        let acc = proj_matvec(it.d, 2u * half + row, it.rows, it.j4);
        for (var r = 0u; r < NB; r++) {
          if r < it.rows {
            let valid = t < len[r];
            hc[r].h = select(hs[cur + row + r * H4 + it.j4], acc[r], valid);
            hs[half - cur + row + r * H4 + it.j4] = hc[r].h;
            store_y(it.d, time_of(it.d, t, len[r]), it.n + r, it.j4, select(vec4<f32>(0.0), acc[r], valid));
          }
        }
      }
    }
    workgroupBarrier();
  }
  for (var r = 0u; r < NB; r++) {
    if r < it.rows {
      let n = it.n + r;
      state[slot_index(0u, it.d, n, it.j4)] = hc[r].h;
      state[slot_index(2u, it.d, n, it.j4)] = hc[r].c;
      if sched.last != 0u {
        store_final(0u, it.d, n, it.j4, hc[r].h);
        store_final(1u, it.d, n, it.j4, hc[r].c);
      }
    }
  }
}
