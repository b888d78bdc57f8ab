// Portable kernels (the compiler's baseline ISA: SSE2 on x86-64, NEON on aarch64).
#define JAXGRU_ISA generic
#define JAXGRU_ISA_NAME "generic"
static constexpr int kMaxRows = 2, kRowsProj = 1, kRowsGru = 1, kRowsGruB = 2, kRowsLstm = 1;
#include "kernels.inc"
namespace jaxgru_cpu { const Kernels& kernels_generic() { return generic::kernels(); } }
