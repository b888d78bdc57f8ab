// AVX2 + FMA kernels (compiled with -mavx2 -mfma). 16 ymm registers, two per 16-float block
// (simd.inc): GRU step tiles 2 rows x 3 gates (12 accumulators); LSTM steps and the input
// projection 3 rows, as tiles of 3 x 2 gates (tile_g). Timed alone on Zen 5 (GFLOP/s, its peak at
// 256 bits ~128): 2 x 3 ~115, 3 x 2 ~115, 4 x 1 ~107, while one row's 1 x 4 ran at ~70.
#define JAXGRU_ISA avx2
#define JAXGRU_ISA_NAME "avx2"
static constexpr int kMaxRows = 4, kRowsProj = 3, kRowsGru = 2, kRowsGruB = 4, kRowsLstm = 3;
#include "kernels.inc"
namespace jaxgru_cpu { const Kernels& kernels_avx2() { return avx2::kernels(); } }
