// tile_reduce_wg.wgsl — tile_reduce for devices without subgroups: the k-split shares of each
// output summed through workgroup memory (recurrence_tiled.wgsl's tile_reduce_shared).
//
// Bindings: none of its own (recurrence_common.wgsl's table).
// Overrides: those of recurrence_tiled.wgsl (KS).

fn tile_reduce(acc: array<vec4<f32>, 16>, lid: u32, ok: bool, ng: u32) -> array<vec4<f32>, 16> {
  if KS > 1u {
    return tile_reduce_shared(acc, lid, ok, ng, 1u);
  }
  return acc;
}
