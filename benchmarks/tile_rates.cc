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
// core's (each 512-bit FMA runs as two 256-bit halves); a Zen 5 core's is twice that.
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

template <int R, int G>
double rate(int64_t K, int64_t ldp, int reps) {
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
  const double best = best_seconds(5, [] {
    for (long i = 0; i < kPasses; ++i)
      asm volatile("vfmadd231ps %%ymm1, %%ymm2, %%ymm0\n\tvfmadd231ps %%ymm1, %%ymm2, %%ymm0" ::: "xmm0");
  });
  const double ns = best / (kFmasPerPass * kPasses) * 1e9, ghz = kFmaCycles / ns;
  std::printf("dependent FMA: %.3f ns, so ~%.2f GHz; FMA peak %.1f GFLOP/s\n", ns, ghz, kFlopPerCycle * ghz);
}

}  // namespace

int main() {
  print_fma_peak();
#if defined(__AVX512F__)
  std::printf("K     6x4    5x4    4x4    6x3    7x3    8x3    8x2    8x1\n");
  for (int64_t K : {128, 256, 512, 1024}) {
    const int reps = static_cast<int>(2000000 / K);
    std::printf("%-4ld %6.1f %6.1f %6.1f %6.1f %6.1f %6.1f %6.1f %6.1f\n", static_cast<long>(K), rate<6, 4>(K, 64, reps),
                rate<5, 4>(K, 64, reps), rate<4, 4>(K, 64, reps), rate<6, 3>(K, 48, reps), rate<7, 3>(K, 48, reps),
                rate<8, 3>(K, 48, reps), rate<8, 2>(K, 64, reps), rate<8, 1>(K, 64, reps));
  }
#else
  std::printf("K     3x2    2x3    2x2    4x1    5x1    6x1\n");
  for (int64_t K : {128, 256, 512}) {
    const int reps = static_cast<int>(2000000 / K);
    std::printf("%-4ld %6.1f %6.1f %6.1f %6.1f %6.1f %6.1f\n", static_cast<long>(K), rate<3, 2>(K, 64, reps),
                rate<2, 3>(K, 48, reps), rate<2, 2>(K, 64, reps), rate<4, 1>(K, 64, reps), rate<5, 1>(K, 64, reps),
                rate<6, 1>(K, 64, reps));
  }
#endif
}
