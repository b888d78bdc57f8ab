// The AVX2 register tiles timed alone on one core (GFLOP/s, best of 7 runs): the shape the AVX2
// kernels use (6 x 1, one gate's stream at a time: pack_panel) and the others tried. Panels of
// K x ldp floats (ldp 64: read one or two gates of four at a time), rows and panel L2-resident.
// 6 x 1 ran at 44 until its loop took one row's broadcast at a time (tile), now at ~100. The rows
// sit in a buffer of 8 x K floats: in one of exactly R x K floats the 3 x 2 and 2 x 2 tiles ran at
// 81 and 58 GFLOP/s at K >= 256 instead of 99 and 92 (Zen 3), so where the rows lie matters; the
// cause was not found. It prints the core's AVX2 FMA peak first: the clock from a chain of
// dependent FMAs (4 cycles each on Zen 3 and 4 and on Intel since Skylake) times 32 FLOP per
// cycle (two 8-lane FMA pipes). A scratch loop of independent FMAs is no substitute: GCC merges
// accumulators that compute the same values. Build and run from the repository root:
//   g++ -O3 -std=c++17 -mavx2 -mfma -Wno-psabi -Wno-attributes -o /tmp/tile_rates benchmarks/tile_rates.cc
//   /tmp/tile_rates
// Built with -mavx512f -mavx512dq instead, it times the AVX-512 kernels' tiles (the LSTM's R x 4
// and the GRU's R x 3 blocks, and those of the backward) against the same peak, which is a Zen 4
// core's (each 512-bit FMA runs as two 256-bit halves); a Zen 5 core's is twice that, and so is
// an Intel server core's with two 512-bit FMA units (Sapphire and Emerald Rapids).
#if defined(__AVX512F__)
#include "../csrc/kernels_avx512.cc"
using namespace jaxgru_cpu::avx512;
#else
#include "../csrc/kernels_avx2.cc"
using namespace jaxgru_cpu::avx2;
#endif

#include <chrono>
#include <cstdio>
#include <vector>

using namespace jaxgru_cpu;

namespace {

// The least wall seconds of `runs` calls of body().
template <class F>
double best_seconds(int runs, F body) {
  double best = 1e9;
  for (int t = 0; t < runs; ++t) {
    const auto t0 = std::chrono::steady_clock::now();
    body();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s < best) best = s;
  }
  return best;
}

// GFLOP/s of tile<R, G>. Its panel rows hold 4 gates (the R x 1 and R x 2 tiles read one or two
// of them), or 3 for the GRU's R x 3.
template <int R, int G>
double rate(int64_t K, int reps) {
  const int64_t ldp = kBlock * (G == 3 ? 3 : 4);
  std::vector<float> panel(K * ldp + 64, 0.5f), rows(8 * K, 0.25f);
  const float* a[8];
  for (int r = 0; r < 8; ++r) a[r] = rows.data() + r * K;
  alignas(64) vf out[32];
  const double best = best_seconds(7, [&] {
    for (int i = 0; i < reps; ++i) {
      tile<R, G>(a, K, panel.data(), ldp, kBlock, out, G);
      asm volatile("" ::: "memory");  // every call's results count
    }
  });
  return 2.0 * R * G * kBlock * K * reps / best / 1e9;
}

// Prints the GFLOP/s of two 8-lane FMAs per cycle at the clock that a chain of dependent FMAs shows.
void print_fma_peak() {
  constexpr long kPasses = 50000000;
  constexpr int kFmasPerPass = 2;      // the asm below
  constexpr double kFmaCycles = 4.0;   // an FMA's latency (Zen 3 and 4, Intel since Skylake)
  constexpr double kFlopPerCycle = 2 * 8 * 2;  // two FMA pipes x 8 lanes x (multiply, add)
  // The chain's operands are zeros, handed to the asm. It read ymm1 and ymm2 as they were left,
  // subnormals in some lanes: their products were subnormal, and on an Intel Emerald Rapids host
  // each FMA then took 44-51 ns (a microcode assist; 0.09 GHz printed) instead of 1.4-1.6.
  const double best = best_seconds(5, [] {
    __m256 acc = _mm256_setzero_ps();
    const __m256 zero = _mm256_setzero_ps();
    for (long i = 0; i < kPasses; ++i)
      asm volatile("vfmadd231ps %1, %1, %0\n\tvfmadd231ps %1, %1, %0" : "+x"(acc) : "x"(zero));
  });
  const double ns = best / (kFmasPerPass * kPasses) * 1e9, ghz = kFmaCycles / ns;
  std::printf("dependent FMA: %.3f ns, so ~%.2f GHz; FMA peak %.1f GFLOP/s\n", ns, ghz, kFlopPerCycle * ghz);
}

// A tile shape to time.
struct Shape {
  int rows, gates;
  double (*rate)(int64_t K, int reps);
};
template <int R, int G>
constexpr Shape shape() { return {R, G, rate<R, G>}; }

// The shapes the kernels use and the others tried, and the reductions K, per instruction set.
#if defined(__AVX512F__)
constexpr Shape kShapes[] = {shape<6, 4>(), shape<5, 4>(), shape<4, 4>(), shape<3, 4>(), shape<2, 4>(),
                             shape<1, 4>(), shape<6, 3>(), shape<7, 3>(), shape<8, 3>(), shape<3, 3>(),
                             shape<2, 3>(), shape<8, 2>(), shape<8, 1>()};
constexpr int64_t kReductions[] = {128, 256, 512, 1024};
#else
constexpr Shape kShapes[] = {shape<3, 2>(), shape<2, 3>(), shape<2, 2>(), shape<4, 1>(), shape<5, 1>(), shape<6, 1>()};
constexpr int64_t kReductions[] = {128, 256, 512};
#endif

}  // namespace

int main() {
  print_fma_peak();
  std::printf("K   ");
  for (const Shape& t : kShapes) std::printf("    %dx%d", t.rows, t.gates);
  std::printf("\n");
  for (int64_t K : kReductions) {
    const int reps = static_cast<int>(2000000 / K);
    std::printf("%-4ld", static_cast<long>(K));
    for (const Shape& t : kShapes) std::printf(" %6.1f", t.rate(K, reps));
    std::printf("\n");
  }
}
