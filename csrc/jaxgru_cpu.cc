// jaxgru's native CPU lowering: one XLA FFI call per GRU/LSTM layer (forward, backward, tangent).
// This file holds the FFI handlers and the Python module. A call's other parts are included
// below, inside this file's anonymous namespace (one translation unit, as when they were one
// file):
//   schedule.inc  how its threads share its phases (claims, stealing, waits, lost cores, probes
//                 of small shared steps, the pipelined forward);
//   plan.inc      what it runs: its scratch, its phases, its threads and row groups;
//   layer.h       what a call is (sizes, options, operands, the scratch's addresses);
//   kernels.inc   the arithmetic of its units, compiled once per ISA (kernels_<isa>.cc).
#include <Python.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define JAXGRU_PAUSE() _mm_pause()
#else
#define JAXGRU_PAUSE() ((void)0)
#endif

#include "layer.h"
#include "memory.h"
#include "wait.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace jaxgru_cpu {
namespace {

// The best kernels this CPU runs, at most `want` (0 best, 1 avx512, 2 avx2, 3 generic).
const Kernels& select_kernels(int want) {
#if (defined(__x86_64__) || defined(__i386__)) && defined(JAXGRU_HAVE_X86_KERNELS)
  if (want <= 1 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("fma"))
    return kernels_avx512();
  if (want <= 2 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return kernels_avx2();
#endif
  (void)want;
  return kernels_generic();
}

#include "schedule.inc"
#include "plan.inc"

// Runs a configured call and writes its carried state out; shared by the forward (h and c)
// and the backward (their cotangents). With no step to run (L or N is 0) the state passes
// through from `in_h`/`in_c`; otherwise it is the padded per-direction carry after the last
// step (`h`/`c`, or `dh`/`dc` for the backward), unpadded from Hp to H. The c pointers are
// null for GRU.
ffi::Error run_and_finish(const std::shared_ptr<Call>& call, ffi::ThreadPool& pool, int64_t threads,
                          const float* in_h, const float* in_c, float* out_h, float* out_c, bool cotangents) {
  Layer& ly = call->ly;
  const size_t states = sizeof(float) * ly.D * ly.N * ly.H;
  if (ly.L == 0 || ly.N == 0) {
    std::memcpy(out_h, in_h, states);
    if (out_c) std::memcpy(out_c, in_c, states);
    return ffi::Error::Success();
  }
  plan_threads(*call, pool, threads);
  prepare(*call);
  execute(call, pool);
  for (int d = 0; d < ly.D; ++d) {
    const float* hf = cotangents ? ly.dir[d].dh[ly.L & 1] : ly.dir[d].h[ly.L & 1];
    const float* cf = cotangents ? ly.dir[d].dc : ly.dir[d].c;
    rows_out(ly, d, hf, out_h);
    if (out_c) rows_out(ly, d, cf, out_c);
  }
  return ffi::Error::Success();
}

ffi::Error run_layer(ffi::ThreadPool pool, const Attrs& at, ffi::Buffer<ffi::F32> x,
                     ffi::Buffer<ffi::F32> w, ffi::Buffer<ffi::F32> r, ffi::Buffer<ffi::F32> b,
                     const float* p, ffi::Buffer<ffi::F32> h0, const float* c0,
                     ffi::Buffer<ffi::S32> lens, ffi::ResultBuffer<ffi::F32> y,
                     ffi::ResultBuffer<ffi::F32> yh, float* yc, ffi::ResultBuffer<ffi::F32> res) {
  auto call = std::make_shared<Call>();
  Call& c = *call;
  Layer& ly = c.ly;
  auto xd = x.dimensions();
  if (xd.size() != 3 || !configure(c, at, xd[0], xd[1], xd[2], r.dimensions()))
    return ffi::Error::InvalidArgument("jaxgru_cpu: operands of unexpected shapes");
  if (!at.residuals) ly.K = 0;
  // batch 1, a few steps: R is not packed (1 MiB read and written per call at LSTM H = 256); the
  // steps read its rows (gemv_rows). Its reduction by transposes costs more per step than the
  // panel's tile<1, G>: from 16 steps on, R is packed (benchmarks/performance_notes.md). Nor are
  // R and W for a few rows in all (kFewRows).
  const bool few_rows = ly.L * ly.N <= kFewRows, h_blocks = ly.H % kBlock == 0;
  ly.r_rows = h_blocks && (few_rows || (ly.N == 1 && ly.L < kRowsMaxSteps));
  ly.w_rows = h_blocks && few_rows && ly.I % kBlock == 0;
  ly.x = x.typed_data(); ly.w = w.typed_data(); ly.r = r.typed_data(); ly.b = b.typed_data();
  ly.p = p; ly.h0 = h0.typed_data(); ly.c0 = c0; ly.lens = lens.typed_data();
  ly.y = y->typed_data(); ly.yh = yh->typed_data(); ly.yc = yc; ly.res = at.residuals ? res->typed_data() : nullptr;
  advise_huge_pages(ly.y, y->size_bytes());
  if (ly.res) advise_huge_pages(ly.res, res->size_bytes());
  // final states: the state after each row's last valid step (held through the padding)
  return run_and_finish(call, pool, at.threads, ly.h0, ly.c0, ly.yh, ly.yc, /*cotangents=*/false);
}

// The backward's reverse recurrence (the serial part) and, where `dr` is not empty, dR; the other
// weight gradients are GEMMs over all steps that XLA does after it (native.py). gy in time order
// as Y is, [L][D][N][H] (in processing order per direction it was a copy XLA made for a
// bidirectional or reverse layer, where it could not fuse it into gy's producer), res in
// processing order, [D][L][N][K*H]; the states before each step from the forward's Y
// ([L][D][N][H], GRU) and h0, and (LSTM) its residuals and c0, instead of a copy of them per step.
ffi::Error run_backward(ffi::ThreadPool pool, const Attrs& at, ffi::Buffer<ffi::F32> gy,
                        ffi::Buffer<ffi::F32> res, const ffi::Buffer<ffi::F32>* y,
                        const ffi::Buffer<ffi::F32>* h0, const ffi::Buffer<ffi::F32>* c0,
                        ffi::Buffer<ffi::F32> r, const float* p, ffi::Buffer<ffi::F32> dhT,
                        const float* dcT, ffi::Buffer<ffi::S32> lens, ffi::ResultBuffer<ffi::F32> dgx,
                        ffi::ResultBuffer<ffi::F32>* dgh, ffi::ResultBuffer<ffi::F32> dh0, float* dc0,
                        ffi::ResultBuffer<ffi::F32> sums, ffi::ResultBuffer<ffi::F32> dr) {
  auto call = std::make_shared<Call>();
  Call& c = *call;
  Layer& ly = c.ly;
  ly.backward = true;
  auto gd = gy.dimensions();  // [L, D, N, H]
  if (gd.size() != 4 || !configure(c, at, gd[0], gd[2], 0, r.dimensions()) || gd[1] != ly.D || gd[3] != ly.H ||
      static_cast<int64_t>(dgx->element_count()) != ly.D * ly.L * ly.N * ly.G * ly.H ||
      (dgh && static_cast<int64_t>((*dgh)->element_count()) != ly.D * ly.L * ly.N * ly.H) ||
      (y && static_cast<int64_t>(y->element_count()) != ly.L * ly.D * ly.N * ly.H) ||
      (h0 && static_cast<int64_t>(h0->element_count()) != ly.D * ly.N * ly.H) ||
      (c0 && static_cast<int64_t>(c0->element_count()) != ly.D * ly.N * ly.H) ||
      static_cast<int64_t>(res.element_count()) != ly.D * ly.L * ly.N * ly.K * ly.H ||
      static_cast<int64_t>(sums->element_count()) != ly.D * (ly.G + (dgh ? 1 : 0)) * ly.H)
    return ffi::Error::InvalidArgument("jaxgru_cpu: operands of unexpected shapes");
  // dR: empty (XLA computes it) or [D][G*H][H], which needs H_prev (y, h0) and, for the GRU, lbr=1
  const int64_t dr_size = static_cast<int64_t>(dr->element_count());
  if (dr_size != 0 && (dr_size != ly.D * ly.G * ly.H * ly.H || !h0 || (ly.cell == 0 && (!y || !ly.lbr))))
    return ffi::Error::InvalidArgument("jaxgru_cpu: dR of unexpected shape");
  ly.dr = dr_size ? dr->typed_data() : nullptr;
  ly.rows_bwd = c.k->rows_bwd;
  ly.r = r.typed_data(); ly.p = p; ly.lens = lens.typed_data();
  ly.gy = gy.typed_data(); ly.res = const_cast<float*>(res.typed_data());
  ly.y = y ? const_cast<float*>(y->typed_data()) : nullptr;  // read only
  ly.h0 = h0 ? h0->typed_data() : nullptr;
  ly.c0 = c0 ? c0->typed_data() : nullptr;
  ly.dhT = dhT.typed_data(); ly.dcT = dcT;
  ly.dgx = dgx->typed_data(); ly.dgh = dgh ? (*dgh)->typed_data() : nullptr;
  ly.dh0 = dh0->typed_data(); ly.dc0 = dc0;
  advise_huge_pages(ly.dgx, dgx->size_bytes());
  if (dgh) advise_huge_pages(ly.dgh, (*dgh)->size_bytes());
  // the initial states' cotangents: the carry after the last processed step
  ffi::Error e = run_and_finish(call, pool, at.threads, ly.dhT, ly.dcT, ly.dh0, ly.dc0, /*cotangents=*/true);
  // the bias gradients' sums over steps and batch: the units' sums added over the row tiles
  const int64_t S = ly.G + (dgh ? 1 : 0), H = ly.H, GH = ly.G * H;
  float* out = sums->typed_data();
  std::fill(out, out + ly.D * S * H, 0.f);
  if (ly.dr) std::fill(ly.dr, ly.dr + ly.D * GH * H, 0.f);
  if (ly.L == 0 || ly.N == 0) return e;
  if (ly.dr)  // dR: the groups' running sums added, unpadded from Hp to H
    for (int d = 0; d < ly.D; ++d)
      for (int64_t g = 0; g < ly.groups; ++g)
        for (int64_t k = 0; k < GH; ++k) {
          const float* v = ly.dir[d].racc + (g * GH + k) * ly.Hp;
          float* o = ly.dr + (d * GH + k) * H;
          for (int64_t u = 0; u < H; ++u) o[u] += v[u];
        }
  for (int d = 0; d < ly.D; ++d)
    for (int64_t rt = 0; rt < ly.bwd_row_tiles(); ++rt)
      for (int64_t j = 0; j < ly.nb; ++j)
        for (int64_t g = 0; g < S; ++g) {
          const float* v = ly.dsum_of(d, rt, j) + g * kBlock;
          float* o = out + (d * S + g) * H + j * kBlock;
          for (int64_t u = 0; u < std::min<int64_t>(kBlock, H - j * kBlock); ++u) o[u] += v[u];
        }
  return e;
}

// The tangent recurrence (the serial part; its non-recurrent terms `ex`/`exh` are GEMMs over all
// steps that XLA does before it, native.make_tangent). Operands in processing order, [D][L][N][.];
// dY out in processing order, the last states' tangents as the forward's final states.
ffi::Error run_tangent(ffi::ThreadPool pool, const Attrs& at, ffi::Buffer<ffi::F32> ex, const float* exh,
                       ffi::Buffer<ffi::F32> res, const float* hp, const float* cp,
                       ffi::Buffer<ffi::F32> r, const float* p, ffi::Buffer<ffi::F32> dh0,
                       const float* dc0, ffi::Buffer<ffi::S32> lens, ffi::ResultBuffer<ffi::F32> dy,
                       ffi::ResultBuffer<ffi::F32> dyh, float* dyc) {
  auto call = std::make_shared<Call>();
  Call& c = *call;
  Layer& ly = c.ly;
  ly.tangent = true;
  auto ed = ex.dimensions();  // [D, L, N, G*H]
  if (ed.size() != 4 || !configure(c, at, ed[1], ed[2], 0, r.dimensions()))
    return ffi::Error::InvalidArgument("jaxgru_cpu: operands of unexpected shapes");
  ly.r = r.typed_data(); ly.p = p; ly.lens = lens.typed_data();
  ly.ex = ex.typed_data(); ly.exh = exh; ly.res = const_cast<float*>(res.typed_data());
  ly.hp = hp; ly.cp = cp; ly.h0 = dh0.typed_data(); ly.c0 = dc0;
  ly.dy = dy->typed_data(); ly.yh = dyh->typed_data(); ly.yc = dyc;
  advise_huge_pages(ly.dy, dy->size_bytes());
  return run_and_finish(call, pool, at.threads, ly.h0, ly.c0, ly.yh, ly.yc, /*cotangents=*/false);
}

#define JAXGRU_ATTRS(B)                                                                              \
  B.Attr<int32_t>("lbr").Attr<int32_t>("input_forget").Attr<int32_t>("peepholes").Attr<int32_t>("ragged") \
      .Attr<int32_t>("direction").Attr<int32_t>("residuals").Attr<int32_t>("threads").Attr<int32_t>("isa")  \
      .Attr<float>("clip")                                                                           \
      .Attr<int32_t>("act0").Attr<int32_t>("act1").Attr<int32_t>("act2").Attr<int32_t>("act3")          \
      .Attr<int32_t>("act4").Attr<int32_t>("act5")                                                   \
      .Attr<float>("alpha0").Attr<float>("alpha1").Attr<float>("alpha2").Attr<float>("alpha3")          \
      .Attr<float>("alpha4").Attr<float>("alpha5")                                                   \
      .Attr<float>("beta0").Attr<float>("beta1").Attr<float>("beta2").Attr<float>("beta3")              \
      .Attr<float>("beta4").Attr<float>("beta5")

Attrs make_attrs(int32_t cell, int32_t lbr, int32_t input_forget, int32_t peepholes, int32_t ragged,
                 int32_t direction, int32_t residuals, int32_t threads, int32_t isa, float clip,
                 int32_t a0, int32_t a1, int32_t a2, int32_t a3, int32_t a4, int32_t a5,
                 float al0, float al1, float al2, float al3, float al4, float al5,
                 float be0, float be1, float be2, float be3, float be4, float be5) {
  return Attrs{cell, lbr, input_forget, peepholes, ragged, direction, residuals, threads, isa, clip,
               {a0, a1, a2, a3, a4, a5}, {al0, al1, al2, al3, al4, al5}, {be0, be1, be2, be3, be4, be5}};
}

ffi::Error gru_impl(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x, ffi::Buffer<ffi::F32> w,
                    ffi::Buffer<ffi::F32> r, ffi::Buffer<ffi::F32> b, ffi::Buffer<ffi::F32> h0,
                    ffi::Buffer<ffi::S32> lens, ffi::ResultBuffer<ffi::F32> y,
                    ffi::ResultBuffer<ffi::F32> yh, ffi::ResultBuffer<ffi::F32> res,
                    int32_t lbr, int32_t input_forget, int32_t peepholes, int32_t ragged,
                    int32_t direction, int32_t residuals, int32_t threads, int32_t isa, float clip,
                    int32_t a0, int32_t a1, int32_t a2, int32_t a3, int32_t a4, int32_t a5,
                    float al0, float al1, float al2, float al3, float al4, float al5,
                    float be0, float be1, float be2, float be3, float be4, float be5) {
  Attrs at = make_attrs(0, lbr, input_forget, peepholes, ragged, direction, residuals, threads, isa, clip,
                        a0, a1, a2, a3, a4, a5, al0, al1, al2, al3, al4, al5, be0, be1, be2, be3, be4, be5);
  return run_layer(pool, at, x, w, r, b, nullptr, h0, nullptr, lens, y, yh, nullptr, res);
}

ffi::Error lstm_impl(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x, ffi::Buffer<ffi::F32> w,
                     ffi::Buffer<ffi::F32> r, ffi::Buffer<ffi::F32> b, ffi::Buffer<ffi::F32> p,
                     ffi::Buffer<ffi::F32> h0, ffi::Buffer<ffi::F32> c0, ffi::Buffer<ffi::S32> lens,
                     ffi::ResultBuffer<ffi::F32> y, ffi::ResultBuffer<ffi::F32> yh,
                     ffi::ResultBuffer<ffi::F32> yc, ffi::ResultBuffer<ffi::F32> res,
                     int32_t lbr, int32_t input_forget, int32_t peepholes, int32_t ragged,
                     int32_t direction, int32_t residuals, int32_t threads, int32_t isa, float clip,
                     int32_t a0, int32_t a1, int32_t a2, int32_t a3, int32_t a4, int32_t a5,
                     float al0, float al1, float al2, float al3, float al4, float al5,
                     float be0, float be1, float be2, float be3, float be4, float be5) {
  Attrs at = make_attrs(1, lbr, input_forget, peepholes, ragged, direction, residuals, threads, isa, clip,
                        a0, a1, a2, a3, a4, a5, al0, al1, al2, al3, al4, al5, be0, be1, be2, be3, be4, be5);
  return run_layer(pool, at, x, w, r, b, p.typed_data(), h0, c0.typed_data(), lens, y, yh,
                   yc->typed_data(), res);
}

#define JAXGRU_ATTR_ARGS                                                                         \
  int32_t lbr, int32_t input_forget, int32_t peepholes, int32_t ragged, int32_t direction,        \
      int32_t residuals, int32_t threads, int32_t isa, float clip, int32_t a0, int32_t a1,         \
      int32_t a2, int32_t a3, int32_t a4, int32_t a5, float al0, float al1, float al2, float al3,  \
      float al4, float al5, float be0, float be1, float be2, float be3, float be4, float be5
#define JAXGRU_ATTR_VALUES(cell)                                                                 \
  make_attrs(cell, lbr, input_forget, peepholes, ragged, direction, residuals, threads, isa, clip, \
             a0, a1, a2, a3, a4, a5, al0, al1, al2, al3, al4, al5, be0, be1, be2, be3, be4, be5)

ffi::Error gru_bwd_impl(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> gy, ffi::Buffer<ffi::F32> res,
                        ffi::Buffer<ffi::F32> y, ffi::Buffer<ffi::F32> h0, ffi::Buffer<ffi::F32> r,
                        ffi::Buffer<ffi::F32> dhT, ffi::Buffer<ffi::S32> lens, ffi::ResultBuffer<ffi::F32> dgx,
                        ffi::ResultBuffer<ffi::F32> dgh, ffi::ResultBuffer<ffi::F32> dh0,
                        ffi::ResultBuffer<ffi::F32> sums, ffi::ResultBuffer<ffi::F32> dr, JAXGRU_ATTR_ARGS) {
  Attrs at = JAXGRU_ATTR_VALUES(0);
  return run_backward(pool, at, gy, res, &y, &h0, nullptr, r, nullptr, dhT, nullptr, lens, dgx,
                      lbr ? &dgh : nullptr, dh0, nullptr, sums, dr);
}

ffi::Error lstm_bwd_impl(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> gy, ffi::Buffer<ffi::F32> res,
                         ffi::Buffer<ffi::F32> h0, ffi::Buffer<ffi::F32> c0,
                         ffi::Buffer<ffi::F32> r, ffi::Buffer<ffi::F32> p, ffi::Buffer<ffi::F32> dhT,
                         ffi::Buffer<ffi::F32> dcT, ffi::Buffer<ffi::S32> lens,
                         ffi::ResultBuffer<ffi::F32> dgx, ffi::ResultBuffer<ffi::F32> dh0,
                         ffi::ResultBuffer<ffi::F32> dc0, ffi::ResultBuffer<ffi::F32> sums,
                         ffi::ResultBuffer<ffi::F32> dr, JAXGRU_ATTR_ARGS) {
  Attrs at = JAXGRU_ATTR_VALUES(1);
  return run_backward(pool, at, gy, res, nullptr, &h0, &c0, r, p.typed_data(), dhT, dcT.typed_data(),
                      lens, dgx, nullptr, dh0, dc0->typed_data(), sums, dr);
}

ffi::Error gru_tan_impl(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> ex, ffi::Buffer<ffi::F32> exh,
                        ffi::Buffer<ffi::F32> res, ffi::Buffer<ffi::F32> hp, ffi::Buffer<ffi::F32> r,
                        ffi::Buffer<ffi::F32> dh0, ffi::Buffer<ffi::S32> lens, ffi::ResultBuffer<ffi::F32> dy,
                        ffi::ResultBuffer<ffi::F32> dyh, JAXGRU_ATTR_ARGS) {
  Attrs at = JAXGRU_ATTR_VALUES(0);
  return run_tangent(pool, at, ex, lbr ? exh.typed_data() : nullptr, res, hp.typed_data(), nullptr, r,
                     nullptr, dh0, nullptr, lens, dy, dyh, nullptr);
}

ffi::Error lstm_tan_impl(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> ex, ffi::Buffer<ffi::F32> res,
                         ffi::Buffer<ffi::F32> cp, ffi::Buffer<ffi::F32> r, ffi::Buffer<ffi::F32> p,
                         ffi::Buffer<ffi::F32> dh0, ffi::Buffer<ffi::F32> dc0, ffi::Buffer<ffi::S32> lens,
                         ffi::ResultBuffer<ffi::F32> dy, ffi::ResultBuffer<ffi::F32> dyh,
                         ffi::ResultBuffer<ffi::F32> dyc, JAXGRU_ATTR_ARGS) {
  Attrs at = JAXGRU_ATTR_VALUES(1);
  return run_tangent(pool, at, ex, nullptr, res, nullptr, cp.typed_data(), r, p.typed_data(), dh0,
                     dc0.typed_data(), lens, dy, dyh, dyc->typed_data());
}

}  // namespace
}  // namespace jaxgru_cpu

#define JAXGRU_F32 xla::ffi::Buffer<xla::ffi::F32>
XLA_FFI_DEFINE_HANDLER_SYMBOL(
    jaxgru_gru_tangent, jaxgru_cpu::gru_tan_impl,
    JAXGRU_ATTRS(xla::ffi::Ffi::Bind()
                     .Ctx<xla::ffi::ThreadPool>()
                     .Arg<JAXGRU_F32>().Arg<JAXGRU_F32>().Arg<JAXGRU_F32>().Arg<JAXGRU_F32>().Arg<JAXGRU_F32>()
                     .Arg<JAXGRU_F32>()
                     .Arg<xla::ffi::Buffer<xla::ffi::S32>>()
                     .Ret<JAXGRU_F32>().Ret<JAXGRU_F32>()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    jaxgru_lstm_tangent, jaxgru_cpu::lstm_tan_impl,
    JAXGRU_ATTRS(xla::ffi::Ffi::Bind()
                     .Ctx<xla::ffi::ThreadPool>()
                     .Arg<JAXGRU_F32>().Arg<JAXGRU_F32>().Arg<JAXGRU_F32>().Arg<JAXGRU_F32>().Arg<JAXGRU_F32>()
                     .Arg<JAXGRU_F32>().Arg<JAXGRU_F32>()
                     .Arg<xla::ffi::Buffer<xla::ffi::S32>>()
                     .Ret<JAXGRU_F32>().Ret<JAXGRU_F32>().Ret<JAXGRU_F32>()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    jaxgru_gru_backward, jaxgru_cpu::gru_bwd_impl,
    JAXGRU_ATTRS(xla::ffi::Ffi::Bind()
                     .Ctx<xla::ffi::ThreadPool>()
                     .Arg<JAXGRU_F32>().Arg<JAXGRU_F32>().Arg<JAXGRU_F32>().Arg<JAXGRU_F32>().Arg<JAXGRU_F32>()
                     .Arg<JAXGRU_F32>()
                     .Arg<xla::ffi::Buffer<xla::ffi::S32>>()
                     .Ret<JAXGRU_F32>().Ret<JAXGRU_F32>().Ret<JAXGRU_F32>()
                     .Ret<JAXGRU_F32>().Ret<JAXGRU_F32>()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    jaxgru_lstm_backward, jaxgru_cpu::lstm_bwd_impl,
    JAXGRU_ATTRS(xla::ffi::Ffi::Bind()
                     .Ctx<xla::ffi::ThreadPool>()
                     .Arg<JAXGRU_F32>().Arg<JAXGRU_F32>().Arg<JAXGRU_F32>().Arg<JAXGRU_F32>().Arg<JAXGRU_F32>()
                     .Arg<JAXGRU_F32>().Arg<JAXGRU_F32>().Arg<JAXGRU_F32>()
                     .Arg<xla::ffi::Buffer<xla::ffi::S32>>()
                     .Ret<JAXGRU_F32>().Ret<JAXGRU_F32>().Ret<JAXGRU_F32>()
                     .Ret<JAXGRU_F32>().Ret<JAXGRU_F32>()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    jaxgru_gru_forward, jaxgru_cpu::gru_impl,
    JAXGRU_ATTRS(xla::ffi::Ffi::Bind()
                     .Ctx<xla::ffi::ThreadPool>()
                     .Arg<JAXGRU_F32>().Arg<JAXGRU_F32>().Arg<JAXGRU_F32>().Arg<JAXGRU_F32>().Arg<JAXGRU_F32>()
                     .Arg<xla::ffi::Buffer<xla::ffi::S32>>()
                     .Ret<JAXGRU_F32>().Ret<JAXGRU_F32>().Ret<JAXGRU_F32>()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    jaxgru_lstm_forward, jaxgru_cpu::lstm_impl,
    JAXGRU_ATTRS(xla::ffi::Ffi::Bind()
                     .Ctx<xla::ffi::ThreadPool>()
                     .Arg<JAXGRU_F32>().Arg<JAXGRU_F32>().Arg<JAXGRU_F32>().Arg<JAXGRU_F32>().Arg<JAXGRU_F32>()
                     .Arg<JAXGRU_F32>().Arg<JAXGRU_F32>()
                     .Arg<xla::ffi::Buffer<xla::ffi::S32>>()
                     .Ret<JAXGRU_F32>().Ret<JAXGRU_F32>().Ret<JAXGRU_F32>().Ret<JAXGRU_F32>()));

// ---- the Python module: capsules of the handlers and what this build and CPU can run ----
namespace {

PyObject* registrations(PyObject*, PyObject*) {
  PyObject* d = PyDict_New();
  if (!d) return nullptr;
  const std::pair<const char*, void*> targets[] = {
      {"jaxgru_gru_forward", reinterpret_cast<void*>(jaxgru_gru_forward)},
      {"jaxgru_lstm_forward", reinterpret_cast<void*>(jaxgru_lstm_forward)},
      {"jaxgru_gru_backward", reinterpret_cast<void*>(jaxgru_gru_backward)},
      {"jaxgru_lstm_backward", reinterpret_cast<void*>(jaxgru_lstm_backward)},
      {"jaxgru_gru_tangent", reinterpret_cast<void*>(jaxgru_gru_tangent)},
      {"jaxgru_lstm_tangent", reinterpret_cast<void*>(jaxgru_lstm_tangent)},
  };
  for (const auto& t : targets) {
    PyObject* cap = PyCapsule_New(t.second, nullptr, nullptr);
    if (!cap || PyDict_SetItemString(d, t.first, cap) < 0) {
      Py_XDECREF(cap);
      Py_DECREF(d);
      return nullptr;
    }
    Py_DECREF(cap);
  }
  return d;
}

// A diagnostic counter of the module (schedule.inc, plan.inc), read for tests and benchmarks.
template <std::atomic<uint64_t>* kCount>
PyObject* count(PyObject*, PyObject*) {
  return PyLong_FromUnsignedLongLong(kCount->load(std::memory_order_relaxed));
}

PyObject* isa(PyObject*, PyObject* arg) {
  long want = PyLong_AsLong(arg);
  if (want == -1 && PyErr_Occurred()) return nullptr;
  return PyUnicode_FromString(jaxgru_cpu::select_kernels(static_cast<int>(want)).name);
}

PyObject* force_probe(PyObject*, PyObject* arg) {
  const long v = PyLong_AsLong(arg);
  if (v == -1 && PyErr_Occurred()) return nullptr;
  if (v < 0 || v > jaxgru_cpu::kNoProbe) {
    PyErr_Format(PyExc_ValueError, "force_probe: expected 0 (measure), 1 (shared), 2 (alone) or 3 (no probe); got %ld", v);
    return nullptr;
  }
  jaxgru_cpu::forced_verdict.store(static_cast<int>(v), std::memory_order_relaxed);
  if (v == jaxgru_cpu::kShared || v == jaxgru_cpu::kAlone)  // the next calls probe
    for (auto& kind : jaxgru_cpu::verdicts)
      for (auto& w : kind) w.store(0, std::memory_order_relaxed);
  Py_RETURN_NONE;
}

PyObject* force_stall(PyObject*, PyObject* arg) {
  const long long v = PyLong_AsLongLong(arg);
  if (v == -1 && PyErr_Occurred()) return nullptr;
  if (v < -1) {
    PyErr_Format(PyExc_ValueError, "force_stall: expected a phase (0 or more) or -1 (off); got %lld", v);
    return nullptr;
  }
  jaxgru_cpu::stall_phase.store(v, std::memory_order_relaxed);
  Py_RETURN_NONE;
}

PyObject* dr_min_rows(PyObject*, PyObject*) { return PyLong_FromLongLong(jaxgru_cpu::kDrRows); }

PyObject* scratch_reuses(PyObject*, PyObject*) {
  return PyLong_FromUnsignedLongLong(jaxgru_cpu::ScratchPool::get().reuses.load(std::memory_order_relaxed));
}

PyMethodDef methods[] = {
    {"registrations", registrations, METH_NOARGS, "FFI target name -> PyCapsule of its handler."},
    {"isa", isa, METH_O, "The kernels used for a requested ISA (0 best, 1 avx512, 2 avx2, 3 generic)."},
    {"late_exits", count<&jaxgru_cpu::late_exits>, METH_NOARGS,
     "Threads that left a call after holding up a phase, so far."},
    {"caller_late_exits", count<&jaxgru_cpu::caller_late_exits>, METH_NOARGS,
     "Of those, the calls' callers (never where a helper leads or may lead), so far."},
    {"kept_callers", count<&jaxgru_cpu::kept_callers>, METH_NOARGS,
     "Late phases whose caller stayed in the call (its helper leads or may lead), so far."},
    {"force_stall", force_stall, METH_O,
     "Tests: in calls whose probe may lead, the caller stops at the start of this phase (if unfinished) until the "
     "helper leads, which enters it only then; at most 1 s (-1: off)."},
    {"led_stalls", count<&jaxgru_cpu::led_stalls>, METH_NOARGS,
     "force_stall's stops that saw the helper lead, so far."},
    {"force_probe", force_probe, METH_O,
     "Tests, benchmarks: probes of small shared steps measure (0), decide 1 (shared) or 2 (alone: one thread, or "
     "a helper projecting ahead; both clear the kept verdicts), or are off (3)."},
    {"costly_meeting_exits", count<&jaxgru_cpu::costly_meeting_exits>, METH_NOARGS,
     "Probes that found a call's steps faster unshared (its helper left the call or led it), so far."},
    {"grouped_calls", count<&jaxgru_cpu::grouped_calls>, METH_NOARGS,
     "Calls that ran their rows in more than one group, so far."},
    {"split_products", count<&jaxgru_cpu::split_products>, METH_NOARGS,
     "Backward calls whose dH = dG . R ran in parts, so far."},
    {"pipelined_calls", count<&jaxgru_cpu::pipelined_calls>, METH_NOARGS,
     "Calls whose helper projected ahead of the steps, so far."},
    {"wrapped_rings", count<&jaxgru_cpu::wrapped_rings>, METH_NOARGS,
     "Of those, calls with more chunks of projections than their ring's slots (slots reused), so far."},
    {"fused_calls", count<&jaxgru_cpu::fused_calls>, METH_NOARGS,
     "Calls whose steps made their own input projections (no projection phase), so far."},
    {"thread_group_calls", count<&jaxgru_cpu::thread_group_calls>, METH_NOARGS,
     "Inference calls that gave each of many threads its own row group, so far."},
    {"wide_step_calls", count<&jaxgru_cpu::wide_step_calls>, METH_NOARGS,
     "Calls whose steps each ran as one unit of all their blocks, so far."},
    {"sleeps", count<&jaxgru_cpu::sleeps>, METH_NOARGS, "Waits of a call's threads that slept, so far."},
    {"lost_wakes", count<&jaxgru_cpu::lost_wakes>, METH_NOARGS,
     "Sleeps whose awaited change came without its wake, so far (a broken wake: always 0)."},
    {"scratch_reuses", scratch_reuses, METH_NOARGS, "Calls whose scratch was a block an earlier call gave back, so far."},
    {"dr_min_rows", dr_min_rows, METH_NOARGS, "The smallest batch (and row group) whose backward computes dR."},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_jaxgru_cpu", "jaxgru's native CPU lowering (XLA FFI).", -1,
                      methods, nullptr, nullptr, nullptr, nullptr};

}  // namespace

PyMODINIT_FUNC PyInit__jaxgru_cpu(void) { return PyModule_Create(&module); }
