// tile_reduce_sg.wgsl — tile_reduce with subgroup operations (device feature `subgroup`; the
// WGSL spec and Tint want `enable subgroups;`, which naga 29 rejects: shaders.source writes it
// for Tint only). The KS adjacent invocations of an output are summed by a butterfly of
// subgroupShuffleXor over runs of `run` = min(KS, the subgroup's lanes) invocations, then the
// KS/run run sums through workgroup memory (none when the subgroup holds all KS). WGSL promises
// neither how local_invocation_index maps to subgroups nor one subgroup size (8-64 in practice),
// so each subgroup checks that it is one run of adjacent invocations starting at a multiple of
// `run`; a subgroup that is not sums all KS shares through workgroup memory. Every subgroup
// operation runs in uniform control flow, on every invocation (results are selected after).
//
// Bindings: none of its own (recurrence_common.wgsl's table).
// Overrides: those of recurrence_tiled.wgsl (KS).

fn tile_reduce(acc: array<vec4<f32>, 16>, lid: u32, ok: bool, ng: u32) -> array<vec4<f32>, 16> {
  if KS > 1u {
    // every subgroup operation is evaluated unconditionally (`&&` would branch around them)
    let first = subgroupBroadcastFirst(lid);
    let index = subgroupExclusiveAdd(1u);
    let lanes = subgroupAdd(1u);
    let run = min(KS, lanes);
    let pow2 = (run & (run - 1u)) == 0u;
    let fits = subgroupAll((lid == first + index) & (first % run == 0u) & pow2);
    var sum = acc;
    for (var r = 0u; r < NB; r++) {
      for (var q = 0u; q < ng; q++) {
        for (var m = KS / 2u; m > 0u; m = m / 2u) {
          let other = subgroupShuffleXor(sum[4u * r + q], m);
          sum[4u * r + q] += select(vec4<f32>(0.0), other, m < run);
        }
      }
    }
    if !fits {
      sum = acc;
    }
    return tile_reduce_shared(sum, lid, ok, ng, select(1u, run, fits));
  }
  return acc;
}
