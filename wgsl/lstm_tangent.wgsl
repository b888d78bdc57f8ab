// lstm_tangent.wgsl — the LSTM's tangent (forward-mode derivative) recurrence, after
// recurrence_common.wgsl, the generated activation switches and tangent_common.wgsl.
//
// The linearisation of lstm.wgsl around the forward's residuals (a_i, a_o, a_f, a_c, c') and
// Y, as reference/lstm.py:tangent_step (h and c the forward's state before the step; E from
// tangent_proj.wgsl: d(X·Wᵀ + b) + h·dRᵀ):
//   da = E + dh·Rᵀ;  peepholes: da_i += dP_i⊙c + P_i⊙dc, da_f likewise
//   di = f'(a_i)⊙da_i;  df = f'(a_f)⊙da_f (input_forget: −di)
//   dc' = df⊙c + f_t⊙dc + di⊙g(a_c) + i⊙g'(a_c)⊙da_c;  peepholes: da_o += dP_o⊙c' + P_o⊙dc'
//   dh' = f'(a_o)⊙da_o⊙h(c') + o⊙h'(c')⊙dc';  masked steps keep dh and dc, dY = 0.
//   PROJ (h' = proj·m, m = o⊙h(c')): the above is dm; dh' = dm·projᵀ + m·dprojᵀ has P features
//   (dh·Rᵀ reads P of them). As the forward's lstm_step / lstm_proj, two dispatches per step:
//   lstm_tangent_step writes dm and m to slots 2 and 3 (and dc), lstm_tangent_proj computes dh'.
//
// Bindings: the table in tangent_common.wgsl (S_A: dc, S_B: the forward's c before the step;
// PROJ: slot S_HP dm, S_HP + 1 m; rt holds [projt | dprojt] [2, D, HP, P4] at vec4 PROJ_OFF,
// projt[d, k, p] = proj[d, p, k]).
// Overrides: recurrence_common's, PEEPHOLES, INPUT_FORGET, PROJ and PROJ_OFF.
//
// Entry points (stepwise; each invocation owns NB batch rows x 4 hidden units of one direction):
//   lstm_tangent_step  step sched.t0; D·ceil(N/NB)·H4 invocations
//   lstm_tangent_proj  PROJ, after lstm_tangent_step; D·ceil(N/NB)·P4 invocations (4 features)

override PEEPHOLES: bool = false;
override INPUT_FORGET: bool = false;
override PROJ: bool = false;
override PROJ_OFF: u32 = 0u;

@compute @workgroup_size(WG_STEP)
fn lstm_tangent_step(
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
  let a = matvec(it.d, hb, it.rows, it.j4, 0u, 4u);  // dh·Rᵀ
  let dd = it.d + dims.D;  // dP's direction slot in pr
  for (var r = 0u; r < NB; r++) {
    if r < it.rows {
      let n = it.n + r;
      let len = u32(lens[n]);
      let tt = time_of(it.d, t, len);
      let dh = state[hb + r * S4 + it.j4];
      let ci = slot_index(S_A, it.d, n, it.j4);
      let cpi = slot_index(S_B, it.d, n, it.j4);
      let dc = state[ci];
      let cp = state[cpi];
      let ai = res4(it.d, t, n, 0u, it.j4);
      let ao = res4(it.d, t, n, 1u, it.j4);
      let af = res4(it.d, t, n, 2u, it.j4);
      let ac = res4(it.d, t, n, 3u, it.j4);
      let c = res4(it.d, t, n, 4u, it.j4);
      var dai = xp4(it.d, tt, n, 0u, it.j4) + a[4u * r];
      var dao = xp4(it.d, tt, n, 1u, it.j4) + a[4u * r + 1u];
      var daf = xp4(it.d, tt, n, 2u, it.j4) + a[4u * r + 2u];
      let dac = xp4(it.d, tt, n, 3u, it.j4) + a[4u * r + 3u];
      if PEEPHOLES {
        dai += pr4(dd, 0u, it.j4) * cp + pr4(it.d, 0u, it.j4) * dc;
        daf += pr4(dd, 2u, it.j4) * cp + pr4(it.d, 2u, it.j4) * dc;
      }
      let i = f4(it.d, ai);
      let di = df4(it.d, ai) * dai;
      var fg = 1.0 - i;
      var dfg = -di;
      if !INPUT_FORGET {
        fg = f4(it.d, af);
        dfg = df4(it.d, af) * daf;
      }
      let dcn = pad0(it.j4, dfg * cp + fg * dc + di * g4(it.d, ac) + i * dg4(it.d, ac) * dac);
      if PEEPHOLES {
        dao += pr4(dd, 1u, it.j4) * c + pr4(it.d, 1u, it.j4) * dcn;
      }
      let hc = h4(it.d, c);
      let o = f4(it.d, ao);
      let dhn = pad0(it.j4, df4(it.d, ao) * dao * hc + o * dh4(it.d, c) * dcn);
      let valid = t < len;
      let carried = select(dc, dcn, valid);
      state[ci] = carried;
      state[cpi] = select(cp, c, valid);
      if PROJ {  // dm and m for lstm_tangent_proj (which masks)
        state[slot_index(S_HP, it.d, n, it.j4)] = dhn;
        state[slot_index(S_HP + 1u, it.d, n, it.j4)] = pad0(it.j4, o * hc);
      } else {
        tangent_store_h(it.d, t, n, it.j4, tt, valid, dh, dhn);
      }
      if sched.last != 0u {
        store_final(1u, it.d, n, it.j4, carried);
      }
    }
  }
}

// acc[r] = proj·dm_r + dproj·m_r for the 4 features of p4 and the NB rows r (dm_r, m_r at vec4
// index dmb, mb + r·S4 of `state`); lanes of features ≥ P read 0.
fn tangent_proj_matvec(d: u32, dmb: u32, mb: u32, rows: u32, p4: u32) -> array<vec4<f32>, 4> {
  var acc = array<vec4<f32>, 4>();
  let dd = dims.D + d;  // dprojt's direction slot
  for (var k4 = 0u; k4 < H4; k4++) {
    var dmv = array<vec4<f32>, 4>();
    var mv = array<vec4<f32>, 4>();
    for (var r = 0u; r < NB; r++) {
      let at = min(r, rows - 1u) * S4 + k4;
      dmv[r] = state[dmb + at];
      mv[r] = state[mb + at];
    }
    for (var c = 0u; c < 4u; c++) {
      let k = 4u * k4 + c;
      let w = vec4<f32>(rt[PROJ_OFF + (d * HP + k) * P4 + p4]);
      let dw = vec4<f32>(rt[PROJ_OFF + (dd * HP + k) * P4 + p4]);
      for (var r = 0u; r < NB; r++) {
        acc[r] += dmv[r][c] * w + mv[r][c] * dw;
      }
    }
  }
  let lane = vec4<u32>(4u * p4) + vec4<u32>(0u, 1u, 2u, 3u) < vec4<u32>(P);
  for (var r = 0u; r < NB; r++) {
    acc[r] = select(vec4<f32>(0.0), acc[r], lane);
  }
  return acc;
}

// dh' = proj·dm + dproj·m for NB rows x 4 features (p4) of one direction; masked steps keep dh,
// write dY = 0.
@compute @workgroup_size(WG_STEP)
fn lstm_tangent_proj(
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
  let acc = tangent_proj_matvec(d, slot_index(S_HP, d, n0, 0u), slot_index(S_HP + 1u, d, n0, 0u), rows, p4);
  for (var r = 0u; r < NB; r++) {
    if r < rows {
      let n = n0 + r;
      let len = u32(lens[n]);
      let dh = state[slot_index(S_DH + cur, d, n, p4)];
      tangent_store_h(d, t, n, p4, time_of(d, t, len), t < len, dh, acc[r]);
    }
  }
}
