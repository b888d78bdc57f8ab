// AVX2 + FMA kernels (compiled with -mavx2 -mfma). 16 ymm registers, two per 16-float block
// (simd.inc): tiles of 6 rows x 1 gate (12 accumulators) on panels of one stream per gate
// (pack_panel), for the steps (GRU: its first phase; the second, r*H's, 4 rows) and the input
// projection; tile_g runs a step's gates one after the other. Timed alone on Zen 3 (GFLOP/s, its
// peak ~100 per core; benchmarks/tile_rates.cc): 6 x 1 ~100, 4 x 1 ~99, 3 x 2 ~100. The tiles of
// 3 x 2 and 2 x 3 used before on one stream of all gates: see pack_panel.
#define JAXGRU_ISA avx2
#define JAXGRU_ISA_NAME "avx2"
static constexpr int kMaxRows = 6, kRowsProj = 6, kRowsGru = 6, kRowsGruB = 4, kRowsLstm = 6;
static constexpr bool kGatePanels = true;
// the inference forward's row groups hold two full step tiles at least (plan.inc plan_threads)
static constexpr int kGroupTiles = 2;
#include "kernels.inc"
namespace jaxgru_cpu { const Kernels& kernels_avx2() { return avx2::kernels(); } }
