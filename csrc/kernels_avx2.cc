// AVX2 + FMA kernels (compiled with -mavx2 -mfma). 16 ymm registers, two per 16-float vector:
// GRU tiles 2 rows x 3 gates (12 accumulators), LSTM 1 x 4.
#define JAXGRU_ISA avx2
#define JAXGRU_ISA_NAME "avx2"
static constexpr int kMaxRows = 4, kRowsProj = 1, kRowsGru = 2, kRowsGruB = 4, kRowsLstm = 1;
#include "kernels.inc"
namespace jaxgru_cpu { const Kernels& kernels_avx2() { return avx2::kernels(); } }
