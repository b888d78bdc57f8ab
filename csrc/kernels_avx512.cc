// AVX-512 kernels (compiled with -mavx512f -mavx512dq -mfma; run only where cpuid has them).
// 32 zmm registers: GRU step tiles 7 rows x 3 gates, LSTM 6 x 4 (21 and 24 accumulators; 8 x 3 ran
// at ~172 GFLOP/s on an L1-resident panel against 7 x 3's ~224, short of registers for its broadcasts).
#define JAXGRU_ISA avx512
#define JAXGRU_ISA_NAME "avx512"
static constexpr int kMaxRows = 8, kRowsProj = 6, kRowsGru = 7, kRowsGruB = 8, kRowsLstm = 6;
static constexpr bool kGatePanels = false;
static constexpr int kGroupTiles = 2;  // plan.inc plan_threads
#include "kernels.inc"
namespace jaxgru_cpu { const Kernels& kernels_avx512() { return avx512::kernels(); } }
