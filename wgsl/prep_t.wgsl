// prep_t.wgsl — the transposes W -> wt and R -> rt (ST elements in, RT out), after prep.wgsl.
//
// Bindings: the table in prep.wgsl (0 src, 1 dst). Overrides: those of prep.wgsl, and OUT_OFF:
// the vec4 offset of the layout in dst (an LSTM's projt follows rt in one buffer).

override OUT_OFF: u32 = 0u;

@group(0) @binding(0) var<storage, read> src: array<ST>;
@group(0) @binding(1) var<storage, read_write> dst: array<vec4<RT>>;

@compute @workgroup_size(WG)
fn prep_t(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  let o = linear_id(wid, nwg, lid);
  if o >= D * KOUT * G * H4 {
    return;
  }
  let j4 = o % H4;
  let g = (o / H4) % G;
  let k = (o / (H4 * G)) % KOUT;
  let d = o / (H4 * G * KOUT);
  var v = vec4<RT>(RT(0.0));
  if k < KIN {
    for (var c = 0u; c < 4u; c++) {
      let j = 4u * j4 + c;
      if j < H {
        v[c] = RT(src[(d * G * H + g * H + j) * KIN + k]);
      }
    }
  }
  dst[OUT_OFF + o] = v;
}
