// prep.wgsl — the weights' device layouts, built on the device from the raw ONNX weights that
// the host uploads unchanged (no host transposes, no per-call hashing):
//
//   prep_t:     dst[d, k, g, j4] = vec4 over c of src[d, g·H + 4·j4 + c, k]   (k < KIN, j < H; else 0)
//               W [D, G·H, I] -> wt [D, I, G, H4]   (KIN = KOUT = I)
//               R [D, G·H, H] -> rt [D, HP, G, H4]  (KIN = H, KOUT = HP: padded rows are zero)
//               R [D, G·H, P] -> rt [D, PP, G, H4] and proj [D, P, H] -> projt [D, HP, 1, P4]
//               after it (OUT_OFF; G = 1, "H" = P, KIN = H, KOUT = HP): an LSTM's projection
//   prep_bias:  dst[d, q, j4] = vec4 over c of src[d·STRIDE + OFF0 + q·H + j] (+ src[... + OFF1 ...] if FOLD)
//               b [D, 2·G·H] -> xb [D, G, HP] (Wb + Rb folded, or Wb alone for GRU lbr=1),
//               b or P -> pr [D, 3, HP] (GRU lbr=1: Rb; LSTM: P; else HAS_SRC = false: zeros)
//
// Prepended by the host: `enable f16;` (f16 storage only), `alias ST = f32|f16;` and
// `alias RT = f32|f16;`. prep_t converts ST elements to RT (RT = ST, except R in f16 with f32
// storage), prep_bias moves f32 elements (the biases are f32 on the device).
//
// Bindings (group 0), family "prep":
//   0  src   array<ST> (prep_t) / array<f32> (prep_bias)    read
//   1  dst   array<vec4<RT>> / array<vec4<f32>>              read_write
//
// Overrides:
//   G, H, H4      gates, hidden size, ceil(H/4)
//   KIN, KOUT     prep_t: source columns, destination rows
//   D             directions
//   NQ, STRIDE, OFF0, OFF1, FOLD, HAS_SRC   prep_bias: blocks per direction, source row length,
//                 offsets of the two terms, whether the second is added, whether there is a source
//   WG            invocations per workgroup
// Dispatch: a 2-D grid of ceil(count / WG) workgroups, one invocation per destination vec4.

override G: u32 = 1u;
override H: u32 = 1u;
override H4: u32 = (H + 3u) / 4u;
override KIN: u32 = 1u;
override KOUT: u32 = 1u;
override D: u32 = 1u;
override NQ: u32 = 1u;
override STRIDE: u32 = 1u;
override OFF0: u32 = 0u;
override OFF1: u32 = 0u;
override FOLD: bool = false;
override HAS_SRC: bool = true;
override WG: u32 = 64u;

fn linear_id(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
  return (wid.y * nwg.x + wid.x) * WG + lid;
}
