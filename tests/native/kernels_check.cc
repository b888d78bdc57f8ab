// The kernels' building blocks against plain double-precision loops, for a target this machine
// cannot run natively (tests/test_cpu_portable_arm64.py cross-compiles this file for aarch64,
// where the portable kernels use NEON, and runs it under qemu) and for each instruction set it
// runs (tests/test_cpu_backend.py). It includes one kernels translation unit, so it checks the
// code and the tile shapes that target compiles:
//   - tile_g: every gate count and row count up to kMaxRows (the register tiles, and the split of
//     those whose accumulators do not fit), with K not a multiple of anything, padded panels and
//     panels of one stream per gate (a gate stride);
//   - pack: the 16 x 16 register transposes, including a partial last block;
//   - gemv_rows: batch 1's product from R's rows (its row groups and transpose reduction);
//   - the activations: exp, sigmoid and tanh to their documented accuracy, NaN kept, and every
//     other activation's value.
// Prints one line per failure and a summary; exits 1 on any failure.
// The translation unit under test: the portable one, or an x86 one (-DJAXGRU_CHECK_AVX2 or
// -DJAXGRU_CHECK_AVX512, with that instruction set's flags).
#if defined(JAXGRU_CHECK_AVX512)
#include "../../csrc/kernels_avx512.cc"
namespace kernels_under_test = jaxgru_cpu::avx512;
#elif defined(JAXGRU_CHECK_AVX2)
#include "../../csrc/kernels_avx2.cc"
namespace kernels_under_test = jaxgru_cpu::avx2;
#else
#include "../../csrc/kernels_generic.cc"
namespace kernels_under_test = jaxgru_cpu::generic;
#endif

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

using namespace jaxgru_cpu;
using namespace kernels_under_test;

namespace {

// lane i of a block
float lane(vf v, int i) {
  float f[kBlock];
  store(f, v);
  return f[i];
}

int failures = 0;
int checks = 0;

void expect(bool ok, const char* what, double got, double want, int a = 0, int b = 0, int c = 0) {
  ++checks;
  if (ok) return;
  if (++failures <= 20) std::printf("FAIL %s (%d, %d, %d): got %.9g, want %.9g\n", what, a, b, c, got, want);
}

// A dot product's result against the double-precision sum of its K terms (`term(k)`), to within
// float rounding relative to the sum of the terms' magnitudes.
template <class Term>
void expect_dot(const char* what, double got, int64_t K, Term term, int a, int b, int c) {
  double want = 0, scale = 0;
  for (int64_t k = 0; k < K; ++k) {
    const double t = term(k);
    want += t;
    scale += std::fabs(t);
  }
  expect(std::fabs(got - want) <= 1e-6 * scale + 1e-7, what, got, want, a, b, c);
}

std::mt19937 rng(7);
float uniform() { return std::uniform_real_distribution<float>(-1.f, 1.f)(rng); }

// Panels as the kernels lay them out: one stream of [K][G][16] (ldp 0), the same with rows padded
// apart, and one stream of [K][16] per gate (the gates K * 16 floats apart: pack_panel's split
// layout, through tile_g's gate stride). Element (k, g, u) is at k * ldp + g * gs + u.
void check_tiles() {
  enum { kInterleaved, kPadded, kGateStreams };
  for (int G = 1; G <= 4; ++G)
    for (int rows = 1; rows <= kMaxRows; ++rows)
      for (int64_t K : {1, 3, 16, 37})
        for (int layout : {kInterleaved, kPadded, kGateStreams}) {
          const int64_t ldp = layout == kGateStreams ? kBlock : G * kBlock + (layout == kPadded ? 16 : 0);
          const int64_t gs = layout == kGateStreams ? K * kBlock : kBlock;
          std::vector<float> panel((K - 1) * ldp + (G - 1) * gs + kBlock), a(rows * K);
          for (auto& v : panel) v = uniform();
          for (auto& v : a) v = uniform();
          const float* rows_p[kMaxRows];
          for (int r = 0; r < rows; ++r) rows_p[r] = a.data() + r * K;
          vf out[kMaxRows * 4];
          tile_g(G, rows, rows_p, K, panel.data(), out, layout == kInterleaved ? 0 : ldp, gs);
          for (int r = 0; r < rows; ++r)
            for (int g = 0; g < G; ++g)
              for (int u = 0; u < kBlock; ++u)
                expect_dot("tile_g", lane(out[r * G + g], u), K,
                           [&](int64_t k) { return double(a[r * K + k]) * panel[k * ldp + g * gs + u]; },
                           G, rows, int(K) * 4 + layout);
        }
}

void check_pack() {
  const int64_t H = 40, K = 37, G = 3;  // blocks of 16, 16 and 8 units
  std::vector<float> m(G * H * K);
  for (auto& v : m) v = uniform();
  for (int64_t j = 0; j < 3; ++j) {
    const int64_t nu = imin(kBlock, H - j * kBlock);
    std::vector<float> dst(K * G * kBlock, 99.f);
    pack(m.data(), H, G, 0, K, j, dst.data());
    for (int64_t k = 0; k < K; ++k)
      for (int g = 0; g < G; ++g)
        for (int u = 0; u < kBlock; ++u) {
          const float want = u < nu ? m[(g * H + j * kBlock + u) * K + k] : 0.f;
          const float got = dst[(k * G + g) * kBlock + u];
          expect(got == want, "pack", got, want, int(j), int(k), g * kBlock + u);
        }
  }
}

void check_gemv_rows() {
  const int64_t H = 48, K = 48;
  std::vector<float> m(3 * H * K), a(K);
  for (auto& v : m) v = uniform();
  for (auto& v : a) v = uniform();
  for (int64_t j = 0; j < 3; ++j)
    for (auto [G, row0] : {std::pair<int, int64_t>{3, 0}, {1, 2 * H}}) {
      vf out[4];
      gemv_rows(m.data(), H, G, row0, K, j, a.data(), out);
      const int64_t first = row0;  // C++17 lambdas cannot capture a structured binding
      for (int g = 0; g < G; ++g)
        for (int u = 0; u < kBlock; ++u)
          expect_dot("gemv_rows", lane(out[g], u), K,
                     [&](int64_t k) { return double(m[(first + g * H + j * kBlock + u) * K + k]) * a[k]; },
                     int(j), g, u);
    }
}

// f at float x, lane by lane over the whole block
template <class F>
vf lanes_of(float x0, float step, F f) {
  float in[kBlock];
  for (int i = 0; i < kBlock; ++i) in[i] = x0 + i * step;
  return f(load(in));
}

double ref_act(int id, double x, double alpha, double beta) {
  switch (id) {
    case kRelu: return x < 0 ? 0 : x;
    case kTanh: return std::tanh(x);
    case kSigmoid: return 1 / (1 + std::exp(-x));
    case kAffine: return alpha * x + beta;
    case kLeakyRelu: return x >= 0 ? x : alpha * x;
    case kThresholdedRelu: return x > alpha ? x : 0;
    case kScaledTanh: return alpha * std::tanh(beta * x);
    case kHardSigmoid: return std::fmin(1, std::fmax(0, alpha * x + beta));
    case kElu: return x >= 0 ? x : alpha * (std::exp(x) - 1);
    case kSoftsign: return x / (1 + std::fabs(x));
    default: return std::log1p(std::exp(x));  // kSoftplus
  }
}

void check_activations() {
  double exp_rel = 0, sig_abs = 0, tanh_abs = 0;
  for (int n = 0; n < 20000; ++n) {
    const float x0 = -87.f + n * (175.f / 20000);
    const float step = 175.f / 20000 / kBlock;
    const vf e = lanes_of(x0, step, [](vf v) { return vexp(v); });
    const vf s = lanes_of(x0 / 4, step / 4, [](vf v) { return vsigmoid(v); });
    const vf t = lanes_of(x0 / 4, step / 4, [](vf v) { return vtanh(v); });
    for (int i = 0; i < kBlock; ++i) {
      const double x = double(x0 + i * step), xq = double(x0 / 4 + i * (step / 4));
      exp_rel = std::fmax(exp_rel, std::fabs(lane(e, i) - std::exp(x)) / std::exp(x));
      sig_abs = std::fmax(sig_abs, std::fabs(lane(s, i) - 1 / (1 + std::exp(-xq))));
      tanh_abs = std::fmax(tanh_abs, std::fabs(lane(t, i) - std::tanh(xq)));
    }
  }
  // csrc/kernels.inc: exp within 1.2e-7 relative; the Python tests' bounds for sigmoid and tanh
  expect(exp_rel <= 1.5e-7, "exp relative error", exp_rel, 1.5e-7);
  expect(sig_abs <= 1.5e-7, "sigmoid absolute error", sig_abs, 1.5e-7);
  expect(tanh_abs <= 2.5e-7, "tanh absolute error", tanh_abs, 2.5e-7);
  const vf nan = splat(NAN);
  expect(std::isnan(lane(vtanh(nan), 3)), "tanh(NaN)", lane(vtanh(nan), 3), NAN);
  expect(std::isnan(lane(vsigmoid(nan), 5)), "sigmoid(NaN)", lane(vsigmoid(nan), 5), NAN);
  for (int id = 0; id < kNumActs; ++id) {
    const Activation a{id, 0.7f, 0.3f};
    for (int n = 0; n < 64; ++n) {
      const float x0 = -6.f + n * (12.f / 64);
      const vf y = lanes_of(x0, 12.f / 64 / kBlock, [&](vf v) { return act(a, v, 0.f); });
      for (int i = 0; i < kBlock; ++i) {
        const double x = double(x0 + i * (12.f / 64 / kBlock));
        const double want = ref_act(id, x, a.alpha, a.beta);
        expect(std::fabs(lane(y, i) - want) <= 1e-6 * (1 + std::fabs(want)), "act", lane(y, i), want, id, n, i);
      }
    }
  }
}

}  // namespace

int main() {
  check_tiles();
  check_pack();
  check_gemv_rows();
  check_activations();
  std::printf("%s kernels (%d-float vectors, %d per block): %d checks, %d failures\n", JAXGRU_ISA_NAME, kLanes,
              kParts, checks, failures);
  return failures ? 1 : 0;
}
