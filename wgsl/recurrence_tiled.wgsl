// recurrence_tiled.wgsl — the tiled step kernels' split of one step over many workgroups, after
// recurrence_common.wgsl and the cell's file (gru.wgsl / lstm.wgsl, whose per-row math the tiled
// entry points call), before gru_tiled.wgsl / lstm_tiled.wgsl.
//
// One step's h·Rᵀ is a GEMM [N, HP] x [HP, G·HP]. A workgroup owns a *tile*: direction d, TR
// batch rows n0 .. n0+TR-1 and TU vec4s of hidden units u0 .. u0+TU-1, with all G gates of those
// units (so the gate math stays in the workgroup). It reads only its units' columns of rt, and
// stages its rows of h through workgroup memory `ts`, KT4 vec4s of k at a time. Each invocation
// owns NB rows x one unit vec4 of the tile and a 1/KS share of the k sum (the KS invocations of
// an output are adjacent); `tile_reduce` sums the shares: through `ts` in split order
// (tile_reduce_wg.wgsl), or with subgroup shuffles where the device has subgroups and the
// subgroup holds whole groups of KS adjacent invocations (tile_reduce_sg.wgsl, falling back to
// `ts` per subgroup otherwise). Workgroups are linearised over a 2-D grid: unit block fastest,
// then row block, then direction.
//
// Bindings: the table in recurrence_common.wgsl.
// Overrides (besides those of recurrence_common.wgsl; NB is the rows per invocation):
//   TR      batch rows per workgroup (a multiple of NB)
//   TU      vec4s of hidden units per workgroup
//   KS      invocations sharing one output's k sum
//   KT4     vec4s of k per staged tile of h (a multiple of KS)
//   WG_T    invocations per workgroup, KS·(TR/NB)·TU
//   TS_LEN  vec4 length of `ts`: max(TR·KT4, KS·TR·TU·G)

override TR: u32 = 1u;
override TU: u32 = 1u;
override KS: u32 = 1u;
override KT4: u32 = 1u;
override WG_T: u32 = 1u;
override TS_LEN: u32 = 1u;

var<workgroup> ts: array<vec4<f32>, TS_LEN>;

struct Tile {
  d: u32,
  n0: u32,
  u0: u32,
  ok: bool,
}

// Workgroup -> its tile; ok is false for the grid's spare workgroups (uniform per workgroup).
fn tile_of(wid: vec3<u32>, nwg: vec3<u32>) -> Tile {
  let w = wid.y * nwg.x + wid.x;
  let unit_blocks = (H4 + TU - 1u) / TU;
  let row_blocks = (dims.N + TR - 1u) / TR;
  let rest = w / unit_blocks;
  return Tile(rest / row_blocks, (rest % row_blocks) * TR, (w % unit_blocks) * TU, rest < dims.D * row_blocks);
}

// Outputs (lanes) per split: (TR/NB)·TU; invocation lid = ((row group)·TU + unit)·KS + split.
fn tile_lanes() -> u32 {
  return TR / NB * TU;
}

// What invocation lid of a tile owns (the same for each of its KS splits).
fn tile_item(tile: Tile, lid: u32) -> Item {
  let lane = lid / KS;
  let n = tile.n0 + (lane / TU) * NB;
  let j4 = tile.u0 + lane % TU;
  return Item(tile.d, n, min(NB, dims.N - min(n, dims.N)), j4, tile.ok && n < dims.N && j4 < H4);
}

// Whether invocation lid holds its output's full sum after tile_matvec (split 0).
fn tile_owner(lid: u32) -> bool {
  return lid % KS == 0u;
}

// matvec (recurrence_common.wgsl) for a tile: the same sums, with h of state slot `s` staged
// through `ts`. Every invocation of the workgroup must call it (it has barriers); the full sums
// end in the tile_owner invocations, the others may hold partial ones.
fn tile_matvec(tile: Tile, it: Item, lid: u32, s: u32, g0: u32, ng: u32) -> array<vec4<f32>, 16> {
  let split = lid % KS;
  let row = it.n - min(it.n, tile.n0);  // the invocation's first row within the tile
  var acc = array<vec4<f32>, 16>();
  for (var k0 = 0u; k0 < H4; k0 += KT4) {
    for (var i = lid; i < TR * KT4; i += WG_T) {
      let n = tile.n0 + i / KT4;
      let k4 = k0 + i % KT4;
      var v = vec4<f32>(0.0);
      if n < dims.N && k4 < H4 {
        v = state[slot_index(s, tile.d, n, k4)];
      }
      ts[i] = v;
    }
    workgroupBarrier();
    if it.ok {
      for (var k = split; k < KT4 && k0 + k < H4; k += KS) {
        var hv = array<vec4<f32>, 4>();
        for (var r = 0u; r < NB; r++) {
          hv[r] = ts[(row + min(r, it.rows - 1u)) * KT4 + k];
        }
        for (var c = 0u; c < 4u; c++) {
          let ri = ((it.d * HP + 4u * (k0 + k) + c) * G + g0) * H4 + it.j4;
          for (var q = 0u; q < ng; q++) {
            let w = vec4<f32>(rt[ri + q * H4]);
            for (var r = 0u; r < NB; r++) {
              acc[4u * r + q] += hv[r][c] * w;
            }
          }
        }
      }
    }
    workgroupBarrier();
  }
  return tile_reduce(acc, lid, it.ok, ng);
}

// The KS shares of each output summed through `ts` into split 0: the shares of splits that are
// multiples of `step` (each already holding the sum of its run of `step` splits, step a power of
// two dividing KS; 1 when nothing was summed), in split order. Every invocation takes part (barrier).
fn tile_reduce_shared(partial: array<vec4<f32>, 16>, lid: u32, ok: bool, ng: u32, step: u32
                      ) -> array<vec4<f32>, 16> {
  var acc = partial;
  let split = lid % KS;
  let lane = lid / KS;
  let slot = split / step;  // the share's index among the KS/step shares
  if ok && split % step == 0u && slot > 0u {
    for (var r = 0u; r < NB; r++) {
      for (var q = 0u; q < ng; q++) {
        ts[(((slot - 1u) * tile_lanes() + lane) * NB + r) * ng + q] = acc[4u * r + q];
      }
    }
  }
  workgroupBarrier();
  if ok && split == 0u {
    for (var p = 1u; p < KS / step; p++) {
      for (var r = 0u; r < NB; r++) {
        for (var q = 0u; q < ng; q++) {
          acc[4u * r + q] += ts[(((p - 1u) * tile_lanes() + lane) * NB + r) * ng + q];
        }
      }
    }
  }
  return acc;
}
