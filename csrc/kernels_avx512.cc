// AVX-512 kernels (compiled with -mavx512f -mavx512dq -mfma; run only where cpuid has them).
// 32 zmm registers: GRU tiles 8 rows x 3 gates, LSTM 6 x 4 (24 accumulators).
#define JAXGRU_ISA avx512
#define JAXGRU_ISA_NAME "avx512"
static constexpr int kMaxRows = 8, kRowsProj = 6, kRowsGru = 8, kRowsGruB = 8, kRowsLstm = 6;
#include "kernels.inc"
namespace jaxgru_cpu { const Kernels& kernels_avx512() { return avx512::kernels(); } }
