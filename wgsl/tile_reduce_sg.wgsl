// tile_reduce_sg.wgsl — tile_reduce with subgroup operations (device feature `subgroup`; the
// WGSL spec and Tint want `enable subgroups;`, which naga 29 rejects: shaders.source writes it
// for Tint only). The KS adjacent invocations of an output are summed by a butterfly of
// subgroupShuffleXor where the subgroup is one run of adjacent invocations starting at a
// multiple of KS with a multiple of KS active lanes (checked here: WGSL does not promise how
// local_invocation_index maps to subgroups, nor one subgroup size, 8-64 in practice); any
// other subgroup sums through workgroup memory (tile_reduce_shared). Every subgroup operation
// runs in uniform control flow, on every invocation.
//
// Bindings: none of its own (recurrence_common.wgsl's table).
// Overrides: those of recurrence_tiled.wgsl (KS).

fn tile_reduce(acc: array<vec4<f32>, 16>, lid: u32, ok: bool, ng: u32) -> array<vec4<f32>, 16> {
  if KS > 1u {
    // every subgroup operation is evaluated unconditionally (`&&` would branch around them)
    let first = subgroupBroadcastFirst(lid);
    let index = subgroupExclusiveAdd(1u);
    let lanes = subgroupAdd(1u);
    let fits = subgroupAll((lid == first + index) & (first % KS == 0u) & (lanes % KS == 0u));
    var sum = acc;
    for (var r = 0u; r < NB; r++) {
      for (var q = 0u; q < ng; q++) {
        for (var m = KS / 2u; m > 0u; m = m / 2u) {
          sum[4u * r + q] += subgroupShuffleXor(sum[4u * r + q], m);
        }
      }
    }
    let staged = tile_reduce_shared(acc, lid, ok, ng, fits);
    if fits {
      return sum;
    }
    return staged;
  }
  return acc;
}
