// prep_bias.wgsl — the bias layouts xb and pr (f32 elements), after prep.wgsl.
//
// Bindings: the table in prep.wgsl (0 src, 1 dst). Overrides: those of prep.wgsl.

@group(0) @binding(0) var<storage, read> src: array<f32>;
@group(0) @binding(1) var<storage, read_write> dst: array<vec4<f32>>;

@compute @workgroup_size(WG)
fn prep_bias(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  let o = linear_id(wid, nwg, lid);
  if o >= D * NQ * H4 {
    return;
  }
  let j4 = o % H4;
  let q = (o / H4) % NQ;
  let d = o / (H4 * NQ);
  var v = vec4<f32>(0.0);
  if HAS_SRC {
    for (var c = 0u; c < 4u; c++) {
      let j = 4u * j4 + c;
      if j < H {
        let base = d * STRIDE + q * H + j;
        var a = src[base + OFF0];
        if FOLD {
          a += src[base + OFF1];
        }
        v[c] = a;
      }
    }
  }
  dst[o] = v;
}
