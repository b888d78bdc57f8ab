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
//
// Bindings: the table in tangent_common.wgsl (S_A: dc, S_B: the forward's c before the step).
// Overrides: recurrence_common's, PEEPHOLES and INPUT_FORGET.
//
// Entry point (stepwise; each invocation owns NB batch rows x 4 hidden units of one direction):
//   lstm_tangent_step  step sched.t0; D·ceil(N/NB)·H4 invocations

override PEEPHOLES: bool = false;
override INPUT_FORGET: bool = false;

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
      let dh = state[hb + r * H4 + it.j4];
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
      let dhn = pad0(it.j4, df4(it.d, ao) * dao * h4(it.d, c) + f4(it.d, ao) * dh4(it.d, c) * dcn);
      let valid = t < len;
      let carried = select(dc, dcn, valid);
      state[ci] = carried;
      state[cpi] = select(cp, c, valid);
      tangent_store_h(it.d, t, n, it.j4, tt, valid, dh, dhn);
      if sched.last != 0u {
        store_final(1u, it.d, n, it.j4, carried);
      }
    }
  }
}
