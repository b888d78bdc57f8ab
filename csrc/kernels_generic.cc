// Portable kernels (the compiler's baseline ISA: SSE2 on x86-64, NEON on aarch64), four 4-float
// registers per 16-float block (simd.inc). SSE2's 16 registers hold tiles of 1 row x 3 gates; NEON's
// tiles of 2 rows x 2 gates (tile_g splits the GRU's 3 gates and the LSTM's 4).
#define JAXGRU_ISA generic
#define JAXGRU_ISA_NAME "generic"
#if defined(__aarch64__)
static constexpr int kMaxRows = 4, kRowsProj = 2, kRowsGru = 2, kRowsGruB = 4, kRowsLstm = 2;
#else
static constexpr int kMaxRows = 2, kRowsProj = 1, kRowsGru = 1, kRowsGruB = 2, kRowsLstm = 1;
#endif
static constexpr bool kGatePanels = false;
static constexpr int kGroupTiles = 1;  // plan.inc plan_threads
#include "kernels.inc"
namespace jaxgru_cpu { const Kernels& kernels_generic() { return generic::kernels(); } }
