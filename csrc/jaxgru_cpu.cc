// jaxgru's native CPU lowering: one XLA FFI call per GRU/LSTM layer (forward).
//
// A call runs as phases per direction (layer.h: pack the weights into panels, project a chunk
// of steps' inputs, then the steps of the chunk), each phase a set of independent units (a
// forward on two threads may pipeline them: its helper projects chunks ahead while the caller
// runs the steps, work_pipelined). The
// caller's thread and up to T-1 tasks on XLA's intra-op thread pool work through the phases:
// each first claims units from its own range (the hidden units whose panels it packed, so they
// stay in its cache), then steals from the others, then waits for the phase to finish. Nobody
// waits for a particular thread, so a task that starts late (a busy pool, another process on the
// core) only means the others do its share; the two directions of a bidirectional layer start
// on different threads. A thread that loses its core while holding a unit stalls the phase: the
// waiters then sleep (wait.h) and, once that thread's CPU clock shows it is not running, mark
// the phase late; a thread that finishes a unit of a late phase leaves the call to the others,
// so a busy core costs a call one stall, not one per step. All state of a call is on the heap and owned by that call.
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

constexpr int kMaxRanges = 16;  // owners per direction (threads beyond that only steal)
// A waiter spins for kSpinUs, then sleeps (wait.h). After kLateUs (or a phase's late_us, for
// long units) it looks at the CPU clocks of the threads running a unit: one that ran for less
// than half of a sleep has lost its core, and the phase is marked late. Most units take 1-20 us,
// a scheduler's time slice on a busy core is milliseconds, and a running thread can take longer
// than both without having lost anything (a fault on a fresh 2 MiB page of a result compacts
// memory first: 1 ms and more, seen at H = 1024).
constexpr int64_t kSpinUs = 100;
constexpr int64_t kLateUs = 1000;
constexpr int kMaxWorkers = 2 * kMaxRanges;
constexpr int kMaxChains = kMaxWorkers;  // (direction, row group) pairs
// Times a thread left a call after holding up a late phase, since the module was loaded: a
// diagnostic for tests and benchmarks (late_exits() below), never read by the kernels.
std::atomic<uint64_t> late_exits{0};
// Helpers that left a call whose steps they shared at no gain (work_chain), since the module was
// loaded: the same kind of diagnostic (costly_meeting_exits() below).
std::atomic<uint64_t> costly_meeting_exits{0};
// Calls run in more than one row group (plan_threads), since the module was loaded: the same kind
// of diagnostic (grouped_calls() below).
std::atomic<uint64_t> grouped_calls{0};
// Backward calls whose dH = dG . R ran its reduction in parts (plan_bwd_product): the same kind.
std::atomic<uint64_t> split_products{0};
// Calls whose helper projected ahead of the steps (work_pipelined): the same kind.
std::atomic<uint64_t> pipelined_calls{0};

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

// A phase's completion: `done` counts finished units, added once per worker and range it ran
// units of (not per unit: every add moves the line between the cores, ~0.1 us, and a step at
// N = 64 has ~90 units of ~1 us).
struct alignas(64) PhaseSync {
  std::atomic<int64_t> done;
  std::atomic<bool> late;  // a waiter saw a unit's thread lose its core (wait_for)
};

// The next unit to claim in one range of a phase, on its own cache line: its owner claims from
// it without moving a line the other owners write.
struct alignas(64) Claim {
  std::atomic<int64_t> next;
};

struct Phase {
  int kind;
  int64_t arg;
  int64_t nrt;    // row tiles per block
  int rows;       // rows per tile
  int64_t units;  // nb * nrt
  int64_t late_us;  // a wait this long marks the phase late
  bool reverse = false;  // its ranges' units run last to first (Planner::add)
};

// Phase (kind, arg) over `rows_total` rows in tiles of `rows`. A unit's time is bounded from
// above (packing at 1 GB/s, which includes faulting its fresh pages; matmuls at 20 GFLOP/s, a
// fifth of a core) and a wait of four such units, or kLateUs if longer, marks the phase late.
Phase make_phase(const Layer& ly, int kind, int64_t arg, int64_t rows_total, int rows) {
  const int64_t nrt = std::max<int64_t>(1, (rows_total + rows - 1) / rows);
  const int64_t cols = ly.G * kBlock;
  const bool pack = kind == kPack || kind == kBwdPack || kind == kTanPack;
  const int64_t bytes = pack ? 4 * cols * (ly.H + (kind == kPack ? ly.I : 0)) : 0;
  const int64_t k = kind == kProject ? ly.I : (kind == kBwdRGrad ? ly.rchunk * ly.group_rows_max() : ly.H);
  const int64_t flops = pack ? 0 : 2 * rows * (kind == kBwdRGrad ? kBlock : cols) * k;
  const int64_t unit_us = bytes / 1000 + flops / 20000;
  return Phase{kind, arg, nrt, rows, ly.nb * nrt, std::max<int64_t>(kLateUs, 4 * unit_us)};
}

// The work of a call is chains of phases, one per direction and row group (chain ch: direction
// ch % D, group ch / D); a direction's first phase (packing its weights) is its group 0's, and
// the other groups wait for it.
struct Call {
  Layer ly;
  const Kernels* k = nullptr;
  int threads = 1, chains = 1;
  std::vector<Phase> phases[kMaxChains];
  std::unique_ptr<PhaseSync[]> sync[kMaxChains];
  std::unique_ptr<Claim[]> claims[kMaxChains];  // [phase][range]: set up by execute, once ranges are known
  int ranges[kMaxChains] = {};
  Scratch scratch;  // not zeroed: every buffer is initialised or written before it is read
  std::atomic<int64_t>* verdict = nullptr;  // where this call's probe writes (null: it does not probe)
  std::vector<int64_t> row_tables;    // Layer::row_tables
  std::atomic<bool> finished{false};
  std::atomic<int> active{0};
  // bumped when a phase completes or a task ends; sleepers wait for it to change (wait.h)
  alignas(64) std::atomic<int32_t> epoch{0};
  std::atomic<int32_t> sleepers{0};
  struct alignas(64) Slot {  // per worker: its CPU clock, and whether it is running a unit
    CpuClock clock;
    std::atomic<bool> in_unit{false};
  };
  Slot slots[kMaxWorkers];
};

// Whether a worker other than `me` that is running a unit got less than half of a core during
// [the samples in `before` (taken at `since`), now]; refreshes the samples. Without CPU clocks
// (neither Linux nor macOS: wait.h) a long wait counts as a lost core.
bool holder_lost_core(Call& c, int me, int64_t* before, std::chrono::steady_clock::time_point* since) {
  const auto now = std::chrono::steady_clock::now();
  const int64_t wall = std::chrono::duration_cast<std::chrono::nanoseconds>(now - *since).count();
  bool lost = false;
  for (int i = 0; i < kMaxWorkers; ++i) {
    if (i == me) continue;
    if (!c.slots[i].in_unit.load(std::memory_order_acquire)) {  // (its clock is set before)
      before[i] = -1;
      continue;
    }
    const int64_t t = cpu_ns(c.slots[i].clock);
    if (t < 0 || (before[i] >= 0 && 2 * (t - before[i]) < wall)) lost = true;
    before[i] = t;
  }
  *since = now;
  return lost;
}

void bump(Call& c) {
  c.epoch.fetch_add(1);
  if (c.sleepers.load() > 0) wake_all(c.epoch);
}

// Wait until `ready()`: spin for kSpinUs, then sleep in slices of 1 ms (the bump of `epoch`
// wakes it; the timeout only bounds a lost wake); after `late_us`, mark the phase late (`late`,
// may be null) once a thread running a unit has lost its core. `me`: this worker's index.
template <typename Ready>
void wait_for(Call& c, Ready ready, std::atomic<bool>* late, int64_t late_us, int me) {
  // most waits are over at the first look: no clock read for them (a read per phase was ~3% of
  // a GRU lbr=0 forward at batch 1, H = 64: two phases a step, one thread)
  if (ready()) return;
  const auto start = std::chrono::steady_clock::now();
  int64_t before[kMaxWorkers];  // set at the first look (most waits never get there)
  auto since = start;
  bool sampled = false;
  for (int spin = 0; !ready(); ++spin) {
    if (spin < 64 || (spin & 63)) {
      JAXGRU_PAUSE();
      continue;
    }
    const auto waited = std::chrono::steady_clock::now() - start;
    if (waited < std::chrono::microseconds(kSpinUs)) {
      JAXGRU_PAUSE();
      continue;
    }
    if (late) {  // each look compares the clocks with the look before (the first only samples)
      if (!sampled) std::fill(before, before + kMaxWorkers, int64_t{-1});
      const bool lost = holder_lost_core(c, me, before, &since) && sampled;
      if (lost && waited >= std::chrono::microseconds(late_us)) late->store(true, std::memory_order_relaxed);
      sampled = true;
    }
    c.sleepers.fetch_add(1);
    const int32_t seen = c.epoch.load();
    if (!ready()) sleep_while_equal(c.epoch, seen, 1000);
    c.sleepers.fetch_sub(1);
  }
}

// Units of range q (of `ranges`) of a phase: the blocks [q*nb/ranges, (q+1)*nb/ranges).
inline void range_of(const Call& c, const Phase& ph, int ranges, int q, int64_t* lo, int64_t* hi) {
  const int64_t nb = c.ly.nb;
  *lo = (q * nb / ranges) * ph.nrt;
  *hi = ((q + 1) * nb / ranges) * ph.nrt;
}

// Run phase p of chain ch with the other threads on it and wait for it to complete; `own` is
// this worker's range (-1: none). False: this worker finished a unit of a late phase and leaves
// the call.
bool do_phase(Call& c, int ch, size_t p, int own, int me) {
  const int ranges = c.ranges[ch];
  const int D = static_cast<int>(c.ly.D), d = ch % D, group = ch / D;
  const Phase& ph = c.phases[ch][p];
  PhaseSync& s = c.sync[ch][p];
  if (s.done.load(std::memory_order_acquire) >= ph.units) return true;
  Claim* claims = &c.claims[ch][p * ranges];
  int64_t finished = 0;  // units this worker ran and has not yet added to s.done
  auto report = [&] {  // after each range: the last unit's thread then reports before it
    // tries the next range (a claim on another owner's line), not after
    if (finished && s.done.fetch_add(finished, std::memory_order_acq_rel) + finished == ph.units) bump(c);
    finished = 0;
  };
  const int first = own < 0 ? 0 : own;
  for (int i = 0; i < ranges; ++i) {
    const int q = (first + i) % ranges;
    int64_t lo, hi;
    range_of(c, ph, ranges, q, &lo, &hi);
    for (;;) {
      // up to 4 units per claim while many are left: a claim is a locked add, which waits for
      // the stores of the unit before it (~7% of an LSTM forward at N = 64 was spent there)
      const int64_t left = hi - lo - claims[q].next.load(std::memory_order_relaxed);
      const int64_t take = left >= 16 ? 4 : (left >= 8 ? 2 : 1);
      int64_t u = lo + claims[q].next.fetch_add(take, std::memory_order_relaxed);
      if (u >= hi) break;
      const int64_t end = std::min(hi, u + take);
      c.slots[me].in_unit.store(true, std::memory_order_release);
      for (; u < end; ++u, ++finished)
        c.k->run(c.ly, d, ph.kind, ph.arg, group, ph.reverse ? lo + hi - 1 - u : u, ph.rows);
      c.slots[me].in_unit.store(false, std::memory_order_relaxed);
      if (s.late.load(std::memory_order_relaxed)) {  // it held the others up
        report();
        late_exits.fetch_add(1, std::memory_order_relaxed);
        return false;
      }
    }
    report();
  }
  wait_for(c, [&] { return s.done.load(std::memory_order_acquire) >= ph.units; }, &s.late, ph.late_us, me);
  return true;
}

// Whether a phase of this kind is one of a step's (the threads sharing a chain meet at its end
// once per step), not the packing or a projection over many steps.
bool per_step(int kind) {
  return kind != kPack && kind != kProject && kind != kBwdPack && kind != kTanPack && kind != kBwdRGrad;
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Where two threads share a call's small steps, whether they should. What a step's meeting costs
// is the distance between the two cores, and on a VM that changes while a process runs: on the
// 2-vCPU Zen 4 of the benchmarks a cache line's round trip between the vCPUs took 50-80 ns at
// times and 170-340 ns at others, seconds apart (a ping-pong of two pinned threads), and at the
// far end the LSTM forward at N = 2-8, H = 64 took 1.2-1.7x one thread's time on two
// (benchmarks/cpu_threads.py), where near it took 0.70x. plan_threads' fixed rules cannot see
// that, so such a call measures it: its helper shares kProbeSteps steps (after kProbeWarmSteps
// that bring its part of R into its core's caches), then sits out as many (the other thread
// takes its units: the ranges' claims), timing both from the phases' completions; where the
// steps alone took less than kAloneBy of the shared ones' time, it leaves the call. At the far
// end they took ~0.5x, near ~1.2-1.4x; without the warm steps and the margin, the LSTM at
// batch 1, H = 64 left calls in which two threads took 0.8x one's time. Probing costs the
// steps run alone where sharing was faster, so its verdict is kept for kVerdictNs per kind of
// call and size of step (Verdicts), and a call that finds "alone" there plans one thread.
// Only calls of one chain shared by two threads (no JAXGRU_CPU_THREADS cap) whose step's work
// is at most kProbeFlops probe: larger steps amortise a meeting (at LSTM N = 16, H = 64 two
// threads took 0.60x one's time), and more threads per chain (a many-core host) are not
// measured and keep their plan.
constexpr int kProbeSteps = 16, kProbeWarmSteps = 8;
constexpr double kAloneBy = 0.9;  // leave where the steps alone took less than this part of the time
constexpr int64_t kProbeFlops = 256 << 10;
constexpr int64_t kVerdictNs = 100'000'000;

// The verdicts: per kind of call (inference, backward, tangent, forward keeping residuals) and
// step work (its log2), the time
// of the last probe (ns, now_ns) and what it found (two bits: 1 shared, 2 alone). A verdict is a
// hint that any call may overwrite; concurrent calls read and write it lock-free.
std::atomic<int64_t> verdicts[4][32];
enum Verdict : int64_t { kUnknown = 0, kShared = 1, kAlone = 2 };
// Tests and benchmarks only (force_probe() below): kShared or kAlone decides every probe whatever
// it measured; kNoProbe turns probing off (the plans before it).
constexpr int kNoProbe = 3;
std::atomic<int> forced_verdict{kUnknown};

std::atomic<int64_t>* verdict_slot(const Layer& ly, int64_t step_flops) {
  const int kind = ly.backward ? 1 : ly.tangent ? 2 : ly.res ? 3 : 0;
  int b = 0;
  while (b < 31 && (int64_t{2} << b) <= step_flops) ++b;
  return &verdicts[kind][b];
}

Verdict fresh_verdict(const std::atomic<int64_t>* slot) {
  const int64_t w = slot->load(std::memory_order_relaxed);
  return w != 0 && now_ns() - (w >> 2) < kVerdictNs ? static_cast<Verdict>(w & 3) : kUnknown;
}

// The probe (above) of helper `me` from phase p on: true where it leaves the call (then every
// phase it sat out is complete). *next: the first phase it has not run or waited for. Where the
// caller has left the call meanwhile (it held up a late phase: do_phase), the helper stops
// sitting out, without a verdict, and runs the rest.
bool probe_leaves(Call& c, int ch, int own, int me, size_t p, size_t* next) {
  const std::vector<Phase>& ph = c.phases[ch];
  size_t steps = 0;
  for (size_t q = p; q < ph.size(); ++q) steps += per_step(ph[q].kind);
  *next = p;
  if (steps < 4 * kProbeSteps) return false;  // too short to pay for it (kProbeWarmSteps included)
  for (int n = 0; n < kProbeWarmSteps; ++*next)  // its first steps: R's panels into this core's caches
    if (!do_phase(c, ch, *next, own, me)) return true;
    else n += per_step(ph[*next].kind);
  int64_t shared = 0, alone = 0;
  int n = 0;
  for (; n < kProbeSteps; ++*next) {  // shared: the phases' wall time from this thread
    const int64_t t0 = now_ns();
    if (!do_phase(c, ch, *next, own, me)) return true;
    if (per_step(ph[*next].kind)) shared += now_ns() - t0, ++n;
  }
  // alone: the next kProbeSteps step phases, [*next, end), timed from the completions of the last
  // step of each run of steps (a projection between two runs, this thread joins). It waits on
  // that phase's line alone, which the other thread writes once: polling the line of every step
  // it completes slowed the other thread at the far end (the LSTM at batch 1, H = 64: the
  // probe stayed in calls that took 1.8x one thread's time).
  size_t end = *next;
  for (n = 0; n < kProbeSteps; ++end) n += per_step(ph[end].kind);
  int64_t t_prev = now_ns();
  for (size_t q = *next; q < end; ++q) {
    if (!per_step(ph[q].kind)) {  // a projection: the steps before it are done (waited for below)
      if (!do_phase(c, ch, q, own, me)) return true;
      t_prev = now_ns();
      continue;
    }
    if (q + 1 < end && per_step(ph[q + 1].kind)) continue;  // not the last of its run
    const PhaseSync& s = c.sync[ch][q];
    wait_for(c, [&] { return s.done.load(std::memory_order_acquire) >= ph[q].units || c.finished.load(); }, nullptr,
             kLateUs, me);
    if (s.done.load(std::memory_order_acquire) < ph[q].units) {  // the caller left (a late phase): go on
      while (c.sync[ch][*next].done.load(std::memory_order_acquire) >= ph[*next].units) ++*next;
      return false;
    }
    const int64_t t = now_ns();
    alone += t - t_prev, t_prev = t;
  }
  *next = end;
  const int forced = forced_verdict.load(std::memory_order_relaxed);
  const bool leave = forced ? forced == kAlone : alone < kAloneBy * shared;
  c.verdict->store((now_ns() << 2) | (leave ? kAlone : kShared), std::memory_order_relaxed);
  if (leave) costly_meeting_exits.fetch_add(1, std::memory_order_relaxed);
  return leave;
}

// The helper of a pipelined call (plan_threads): it projects the chunks ahead of the steps, each
// into its slot of the ring once the steps that read the slot's last chunk are done, and shares
// the steps while no slot is free and after the last chunk. The caller runs the phases in order,
// as in any call: it finds a chunk projected, or takes the units left of it. Either thread may
// take the other's work, so neither waits on the other's progress beyond a phase's end.
// False: the helper leaves the call (do_phase).
bool work_pipelined(Call& c, int own, int me) {
  const std::vector<Phase>& ph = c.phases[0];
  const PhaseSync* sync = c.sync[0].get();
  auto done = [&](size_t q) { return sync[q].done.load(std::memory_order_acquire) >= ph[q].units; };
  std::vector<size_t> proj;  // the projection phases, chunk by chunk
  for (size_t q = 0; q < ph.size(); ++q)
    if (ph[q].kind == kProject) proj.push_back(q);
  const size_t ring = static_cast<size_t>(c.ly.ring);
  if (!do_phase(c, 0, 0, own, me)) return false;  // the packing (W's panels)
  size_t p = 1, k = 0;  // the first phase not known to be done; the next chunk to project
  for (;;) {
    while (p < ph.size() && done(p)) ++p;
    if (p == ph.size()) return true;
    while (k < proj.size() && proj[k] < p) ++k;  // chunks the caller projected
    // chunk k's slot is free once chunk k - ring's steps are done: the phases before chunk
    // k - ring + 1's projection
    const bool ahead = k < proj.size() && (k < ring || done(proj[k - ring + 1] - 1));
    if (!do_phase(c, 0, ahead ? proj[k] : p, own, me)) return false;
    k += ahead;
  }
}

// Work through every phase of chain ch from the current one (a group after the first helps
// with, or waits for, its direction's packing first). False: this worker leaves the call.
bool work_chain(Call& c, int ch, int own, int me) {
  const int D = static_cast<int>(c.ly.D);
  if (ch >= D && !do_phase(c, ch % D, 0, -1, me)) return false;
  if (c.ly.pipelined() && me == 1) return work_pipelined(c, own, me);
  size_t p = 0;
  if (c.verdict && me == 1) {  // the helper of a call that probes: from the first step not yet done
    while (p < c.phases[ch].size() &&
           (!per_step(c.phases[ch][p].kind) ||
            c.sync[ch][p].done.load(std::memory_order_acquire) >= c.phases[ch][p].units)) {
      if (!do_phase(c, ch, p, own, me)) return false;
      ++p;
    }
    if (probe_leaves(c, ch, own, me, p, &p)) return false;
  }
  for (; p < c.phases[ch].size(); ++p)
    if (!do_phase(c, ch, p, own, me)) return false;
  return true;
}

void worker(Call& c, int index) {
  const int C = c.chains;
  const int ch0 = index % C;  // chains alternate over the workers
  const int local = index / C;
  const int own = local < c.ranges[ch0] ? local : -1;
  c.slots[index].clock = this_thread_clock();
  if (!work_chain(c, ch0, own, index)) return;
  for (int i = 1; i < C; ++i)  // help the others
    if (!work_chain(c, (ch0 + i) % C, -1, index)) return;
}

// The tangent's initial state and phases (defined with its FFI handler below).
void init_dir_tangent(Layer& ly, int d);
void plan_tangent(Call& c, int ch);

// Scratch of one direction: sets its pointers from `base` (nullptr: only counts) and returns
// its size in floats. Every buffer starts on a 64-byte boundary. The tangent has the forward's
// R panels and states, and neither W's panels nor the projection (its W terms are hoisted out).
int64_t layout_dir(Layer& ly, Dir& dr, float* base) {
  int64_t used = 0;
  auto take = [&](int64_t n) -> float* {
    float* out = base ? base + used : nullptr;
    used += (n + 15) / 16 * 16;
    return out;
  };
  const int64_t G = ly.G, Hp = ly.Hp, nb = ly.nb, N = ly.N;
  const bool gru0 = ly.cell == 0 && !ly.lbr;
  dr.peep = take(3 * Hp);
  if (ly.backward) {
    dr.rtpanel = take(ly.rtpanel_floats());
    dr.dh[0] = take(N * Hp);
    dr.dh[1] = take(N * Hp);
    dr.dc = take(N * Hp);
    dr.ghz = take(N * Hp);
    dr.dah = gru0 ? take(N * Hp) : nullptr;
    dr.dg = take(N * G * ly.H);
    dr.dgh = ly.dgh ? take(N * ly.H) : nullptr;
    dr.dsum = take(ly.bwd_row_tiles() * nb * (G + 1) * kBlock);
    if (ly.dr) {
      dr.hpack = take(ly.groups * nb * ly.rchunk * ly.group_rows_max() * kBlock);
      dr.racc = take(ly.groups * G * ly.H * Hp);
    }
    return used;
  }
  if (!ly.tangent && !ly.w_rows) dr.wpanel = take(nb * ly.I * G * kBlock);
  dr.rpanel = ly.r_rows ? nullptr : take(nb * ly.H * (gru0 ? 2 : G) * kBlock);
  dr.rhpanel = gru0 && !ly.r_rows ? take(nb * ly.H * kBlock) : nullptr;
  if (!ly.tangent) {
    dr.bx = take(G * Hp);
    dr.bh = take(Hp);
    dr.proj = take(ly.ring * ly.chunk * ly.proj_step());
  }
  dr.h[0] = take(N * Hp);
  dr.h[1] = take(N * Hp);
  dr.c = take(N * Hp);
  dr.z = gru0 ? take(N * Hp) : nullptr;
  dr.rh = gru0 ? take(N * Hp) : nullptr;
  return used;
}

void init_peepholes(Layer& ly, int d) {
  Dir& dr = ly.dir[d];
  std::fill(dr.peep, dr.peep + 3 * ly.Hp, 0.f);
  if (ly.cell == 1 && ly.peepholes)
    for (int64_t g = 0; g < 3; ++g)
      for (int64_t u = 0; u < ly.H; ++u) dr.peep[g * ly.Hp + u] = ly.p[d * 3 * ly.H + g * ly.H + u];
}

// Backward: the cotangents of the last states into the double buffers, the rest zero.
void init_dir_backward(Layer& ly, int d) {
  Dir& dr = ly.dir[d];
  const int64_t H = ly.H, Hp = ly.Hp, N = ly.N;
  init_peepholes(ly, d);
  for (float* b : {dr.dh[0], dr.dh[1], dr.dc, dr.ghz}) std::fill(b, b + N * Hp, 0.f);
  if (dr.dah) std::fill(dr.dah, dr.dah + N * Hp, 0.f);
  std::fill(dr.dsum, dr.dsum + ly.bwd_row_tiles() * ly.nb * (ly.G + 1) * kBlock, 0.f);
  if (dr.racc) std::fill(dr.racc, dr.racc + ly.groups * ly.G * H * Hp, 0.f);
  for (int64_t n = 0; n < N; ++n) {
    std::memcpy(dr.dh[0] + n * Hp, ly.dhT + (d * N + n) * H, H * sizeof(float));
    if (ly.cell == 1) std::memcpy(dr.dc + n * Hp, ly.dcT + (d * N + n) * H, H * sizeof(float));
  }
}

void init_dir(Layer& ly, int d) {
  Dir& dr = ly.dir[d];
  const int64_t G = ly.G, H = ly.H, Hp = ly.Hp, N = ly.N;
  std::fill(dr.bx, dr.bx + G * Hp, 0.f);
  std::fill(dr.bh, dr.bh + Hp, 0.f);
  init_peepholes(ly, d);
  const float* b = ly.b + d * 2 * G * H;  // [Wb (G*H), Rb (G*H)]
  for (int64_t g = 0; g < G; ++g)
    for (int64_t u = 0; u < H; ++u) {
      const bool apart = ly.cell == 0 && ly.lbr && g == 2;  // r * (H.Rh^T + Rbh)
      dr.bx[g * Hp + u] = b[g * H + u] + (apart ? 0.f : b[G * H + g * H + u]);
      if (apart) dr.bh[u] = b[G * H + g * H + u];
    }
  for (int s = 0; s < 2; ++s) std::fill(dr.h[s], dr.h[s] + N * Hp, 0.f);
  std::fill(dr.c, dr.c + N * Hp, 0.f);
  for (int64_t n = 0; n < N; ++n) {
    std::memcpy(dr.h[0] + n * Hp, ly.h0 + (d * N + n) * H, H * sizeof(float));
    if (ly.cell == 1) std::memcpy(dr.c + n * Hp, ly.c0 + (d * N + n) * H, H * sizeof(float));
  }
  if (dr.z) std::fill(dr.z, dr.z + N * Hp, 0.f);
  if (dr.rh) std::fill(dr.rh, dr.rh + N * Hp, 0.f);
}

void finish_plan(Call& c, int ch);

// Appends phase (kind, arg) over `rows_total` rows of chain ch in tiles of `rows`.
struct Planner {
  Call& c;
  int ch;
  int64_t group, rows;  // the chain's group and its row count
  Planner(Call& call, int chain) : c(call), ch(chain), group(chain / call.ly.D) {
    int64_t lo, hi;
    c.ly.group_rows(group, &lo, &hi);
    rows = hi - lo;
  }
  // the packing phase is group 0's (the other groups of the direction wait for it)
  void pack(int kind) {
    if (group == 0) add(kind, 0, 1, 1);
  }
  // Where a step's phase reads each of R's panels once (its rows fit one tile: batch 1),
  // consecutive such phases run their units in opposite orders, so a step starts on the panels
  // the step before read last, still in the core's L1/L2: at batch 1 a step streams R from L2
  // (64 KiB at LSTM H = 64). One thread, batch 1: 0.93-1.00x the time (the suite's 12 cases);
  // at N = 16-64, where a tile's rows share each panel load, 0.98-1.06x, so they keep one order.
  void add(int kind, int64_t arg, int64_t rows_total, int tile) {
    Phase ph = make_phase(c.ly, kind, arg, rows_total, tile);
    const bool streams_r = kind == kStep || kind == kStepB || kind == kBwdMat || kind == kTanStep || kind == kTanStepB;
    if (streams_r && rows_total <= tile) ph.reverse = flip[kind] = !flip[kind];
    c.phases[ch].push_back(ph);
  }
  bool flip[kTanStepB + 1] = {};
};

void plan_phases(Call& c, int ch) {
  const Layer& ly = c.ly;
  Planner pl(c, ch);
  const int cell = ly.cell;
  const int rs = c.k->rows_step[cell][0], rb = c.k->rows_step[cell][1];
  pl.pack(kPack);
  for (int64_t k = 0; k < ly.chunks(); ++k) {
    const int64_t t0 = k * ly.chunk, t1 = t0 + ly.chunk_steps(k);
    pl.add(kProject, k, (t1 - t0) * pl.rows, c.k->rows_proj);
    for (int64_t t = t0; t < t1; ++t) {
      pl.add(kStep, t, pl.rows, rs);
      if (cell == 0 && !ly.lbr) pl.add(kStepB, t, pl.rows, rb);
    }
  }
  finish_plan(c, ch);
}

void plan_backward(Call& c, int ch) {
  const Layer& ly = c.ly;
  Planner pl(c, ch);
  const int rows = ly.rows_bwd;
  pl.pack(kBwdPack);
  for (int64_t t = ly.L - 1; t >= 0; --t) {
    pl.add(kBwdElem, t, pl.rows, rows);
    if (ly.cell == 0 && !ly.lbr) pl.add(kBwdRh, t, pl.rows, rows);
    for (int64_t part = 0; part < ly.kparts; ++part) pl.add(kBwdMat, t * ly.kparts + part, pl.rows, rows);
    if (ly.dr && t % ly.rchunk == 0) pl.add(kBwdRGrad, t / ly.rchunk, ly.G * ly.H, rows);
  }
  finish_plan(c, ch);
}

void finish_plan(Call& c, int ch) {
  std::vector<Phase>& ph = c.phases[ch];
  c.sync[ch].reset(new PhaseSync[ph.size()]);
  for (size_t i = 0; i < ph.size(); ++i) {
    c.sync[ch][i].done.store(0, std::memory_order_relaxed);
    c.sync[ch][i].late.store(false, std::memory_order_relaxed);
  }
}

struct Attrs {
  int32_t cell, lbr, input_forget, peepholes, ragged, direction, residuals, threads, isa;
  float clip;
  int32_t act[6];
  float alpha[6], beta[6];
};

// What every call shares: sizes, flags, activations, the kernels. False: bad shapes.
bool configure(Call& c, const Attrs& at, int64_t L, int64_t N, int64_t I, ffi::Span<const int64_t> rd) {
  Layer& ly = c.ly;
  if (rd.size() != 3) return false;
  ly.cell = at.cell;
  ly.G = at.cell == 0 ? 3 : 4;
  ly.L = L; ly.N = N; ly.I = I;
  ly.D = rd[0]; ly.H = rd[2];
  if (rd[1] != ly.G * ly.H || ly.D < 1 || ly.D > 2) return false;
  ly.Hp = (ly.H + kBlock - 1) / kBlock * kBlock;
  ly.nb = ly.Hp / kBlock;
  ly.lbr = at.lbr; ly.input_forget = at.input_forget; ly.peepholes = at.peepholes; ly.ragged = at.ragged;
  ly.clip = at.clip;
  ly.K = at.cell == 0 ? (at.lbr ? 4 : 3) : 5;
  const int per_dir = at.cell == 0 ? 2 : 3;
  for (int d = 0; d < ly.D; ++d) {
    ly.dir[d].reversed = at.direction == 1 || (at.direction == 2 && d == 1);
    for (int i = 0; i < per_dir; ++i) {
      const int k = d * per_dir + i;
      ly.dir[d].act[i] = Activation{at.act[k], at.alpha[k], at.beta[k]};
    }
  }
  c.k = &select_kernels(at.isa);
  // input-projection chunks of about 256 KiB of projections (at least one step): W's panels are
  // read once per chunk, so a chunk of one step at a large batch would re-read them every step;
  // with 1 MiB chunks (a whole sequence at batch 1, H = 64, up to L = 1000), one thread's batch-1
  // forwards at L = 1000 took 1.04-1.09x the time (CPU time, two runs of 11 rounds; two threads,
  // wall, 21 rounds: the batch-1 forwards 1.03x, geo-mean), N >= 16 within the noise either way.
  // 64 and 128 KiB gained more on one thread but took 1.04-1.10x at batch 1, H = 256 on two.
  const int64_t step_bytes = ly.N * ly.Hp * ly.G * 4;
  ly.chunk = std::max<int64_t>(1, std::min<int64_t>(std::max<int64_t>(1, ly.L),
                                                    (256 << 10) / std::max<int64_t>(1, step_bytes)));
  return true;
}

// The backward's dH = dG . R (run_bwd_mat) in parts and pairs. A thread's units go block by block,
// each over all of its row tiles: a block's panel is read from L2 once per row tile, and all of
// the group's dG rows once per block. Where those rows and a unit's panel exceed kBwdCache, they
// did not stay in L2 (LSTM H = 1024, N = 64: 1 MiB of dG and a 256 KiB panel per block, whose
// tile ran at ~0.8x the forward's rate), so the reduction is split into parts (phases), each
// within it, and at least kBwdPartK rows of R long (a tile's reduction of hundreds, like the other
// phases'). Blocks go in pairs (one 8 x 2 tile, ~1.35x the 8 x 1's rate) where the kernels' tile
// fits in the registers (Kernels::bwd_blocks).
constexpr int64_t kBwdCache = 512 << 10;
constexpr int64_t kBwdPartK = 256;
void plan_bwd_product(Call& c) {
  Layer& ly = c.ly;
  ly.rt_blocks = c.k->bwd_blocks;
  const int64_t K = ly.mat_k(), bytes = static_cast<int64_t>(sizeof(float)) * K;
  const int64_t need = bytes * (ly.group_rows_max() + ly.rt_blocks * kBlock);
  ly.kparts = std::max<int64_t>(1, std::min<int64_t>((need + kBwdCache - 1) / kBwdCache, K / kBwdPartK));
  if (ly.kparts > 1) split_products.fetch_add(1, std::memory_order_relaxed);
}

// Allocate the scratch (one block for every direction), initialise it and plan the phases.
void prepare(Call& c) {
  Layer& ly = c.ly;
  if (ly.backward) plan_bwd_product(c);
  // native dR: chunks of steps whose rows make reductions of ~256 (a tile's K)
  if (ly.dr) ly.rchunk = std::min<int64_t>(ly.L, (256 + ly.group_rows_max() - 1) / ly.group_rows_max());
  int64_t total = 0;
  Layer probe = ly;
  for (int d = 0; d < ly.D; ++d) total += layout_dir(probe, probe.dir[d], nullptr);
  float* base = c.scratch.reset(static_cast<size_t>(total) + 16);
  base = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(base) + 63) & ~uintptr_t(63));
  for (int d = 0; d < ly.D; ++d) {
    base += layout_dir(ly, ly.dir[d], base);
    if (ly.tangent) init_dir_tangent(ly, d);
    else if (ly.backward) init_dir_backward(ly, d);
    else init_dir(ly, d);
  }
  for (int ch = 0; ch < c.chains; ++ch) {
    if (ly.tangent) plan_tangent(c, ch);
    else if (ly.backward) plan_backward(c, ch);
    else plan_phases(c, ch);
  }
  // the row tiles of the tile heights the phases use, tabled (Layer::table_rows)
  bool used[Layer::kTabledRows + 1] = {};
  for (int ch = 0; ch < c.chains; ++ch)
    for (const Phase& ph : c.phases[ch]) used[ph.rows >= 1 && ph.rows <= Layer::kTabledRows ? ph.rows : 0] = true;
  int64_t at[Layer::kTabledRows + 2] = {};  // each height's offset in c.row_tables
  for (int r = 1; r <= Layer::kTabledRows; ++r) at[r + 1] = at[r] + (used[r] ? ly.row_table_size(r) : 0);
  c.row_tables.assign(at[Layer::kTabledRows + 1], 0);
  for (int r = 1; r <= Layer::kTabledRows; ++r)
    if (used[r]) ly.table_rows(r, c.row_tables.data() + at[r]);
}

// The call's threads and row groups. Threads: XLA's intra-op pool size (or the caller's cap),
// fewer where a step is too small to share. A thread takes >= 16 kFLOP (~0.2 us) of a step. And
// the threads that share a row group's step meet at its end, a meeting that costs more the more
// threads meet (each adds to the phase's count and reads the state rows the others wrote): with
// a group's step of work W split T ways and a meeting of ~m*T, the step takes W/T + m*T, least
// at T = sqrt(W/m); so T*T*8 kFLOP <= W (kThreadFlops). On two cores the first bound decides
// (both allow two threads from 32 kFLOP on); on a 16-core Xeon the second takes batch 1 at
// H = 256 from 16 threads to 8 (LSTM) or 6 (GRU): 0.75-0.97x the time, forward and training, in
// two runs (benchmarks/gpu/cpu16_ab.sh). Groups of rows meet only within a group, so the GRU
// at N = 16, H = 64 keeps its two groups of 4 threads (6 threads in all took 1.18x the time). At
// batch 1 a second thread also halves the part of R each core streams (LSTM H = 256: 1 MiB,
// more than one core's L2).
// A thread that loses its core costs one stall (the header comment), so this holds on a busy
// machine too. JAXGRU_CPU_THREADS (`cap`) asks for that many, at most one per block of 16 units
// and row group. Row groups: where each thread of a direction can have a group of at least one
// full row tile and R is small (<= kGroupR), the rows are split into one group per thread, and
// the threads never meet per step nor read the hidden state another core wrote. Each core then
// reads all of R instead of its blocks' part: at LSTM H = 1024 (16 MiB) the forward ran 1.14x
// slower that way, at H = 64-128 and N = 16 0.85-0.92x of the time of threads meeting per step
// (benchmarks/cpu_native_ab.py --wall). The inference forward (no residuals) groups rows only
// where each group holds two full tiles (Kernels::group_tiles), unless that leaves threads
// without a block to take: with AVX2 at N = 16, two groups of two 4-row tiles (8 accumulators,
// barely the FMAs' latency x throughput) ran slower than one group of 6 + 5 + 5 rows shared per
// step (the N = 16 forwards 0.94-0.96x the time, the LSTM at L = 1000 0.90-0.96x; three A/Bs);
// with AVX-512 (Zen 4), against two groups of 4 + 4 rows, the N = 16 forwards took 0.94-1.00x
// (geo-mean ~0.98, nine A/Bs, 21 rounds each). On 16 cores one group would have left threads
// idle at N = 16 (8 blocks at H = 128, 4 at H = 64), where 8 threads took 1.07x the time of 16
// (LSTM H = 128) and 4 threads 1.35x (H = 64, L = 1000; a Xeon, benchmarks/gpu/cpu16.sh); where
// the blocks do outnumber many threads (H >= 256), one group is what 2 cores measured, unmeasured
// with more. The forward with residuals keeps one tile:
// a training step at L = 1000, N = 16 took 1.14-1.20x the time with two (not understood).
constexpr int64_t kGroupR = 512 << 10;
constexpr int64_t kThreadFlops = 8192;  // T threads share a group's step of at least T*T times this
// Batch 1 reads R's rows instead of packing it for sequences shorter than this (run_layer):
// at L = 1-4 rows were 0.6-0.9x of panels' time, at 16 even, at 100-1000 1.3-1.5x.
constexpr int64_t kRowsMaxSteps = 16;
// A call of at most this many rows of X in all (L * N: a step or a few of a small batch, as a
// streaming model calls it) packs neither W nor R: the projection and the steps read their rows
// (Layer::w_rows, r_rows). Packing reads and writes all of W and R to read them L * N times at
// most. On two threads (Zen 4), against packing both: L = 1 at N = 1-4, H = 256 0.27-0.65x the
// time (the LSTM's at N = 2-4 had been 2.3-2.7x onnxruntime's), at 8 rows 0.43-1.00x; W's rows
// alone for up to 15 rows took 1.04-1.11x the time at 15 (H = 256), hence 8.
constexpr int64_t kFewRows = 8;
// A training call (a forward keeping residuals, a backward) also gives each thread at least this
// much of its recurrence's work in all: a short one (a few steps at a small batch) spends more on
// a second thread's start and its per-step meetings (the backward meets several times a step)
// than that thread takes off. On two threads (Zen 4), training steps of 1-8 steps at batch 1-4,
// H = 64-128, that this leaves one thread: 0.71-0.87x the time in 9 of 10 cases (the LSTM at
// L = 2, H = 128: 1.05, where steps whose plan did not change moved 0.95-1.13); at 393 kFLOP (the
// GRU at L = 4, H = 128) two threads were faster, hence 192 kFLOP a thread. The inference
// forward does the same with 96 kFLOP where R is at most 64 KiB (LSTM H <= 64, GRU H <= 73):
// its second thread only adds meetings there. At L = 1-4, N = 1-4 that took 0.47-1.05x the time
// (the GRU at L = 1, N = 2-4: 0.47-0.61x; one LSTM 1.05). With a larger R (H = 128) a second
// thread halves the part each core streams, and one thread took up to 1.22x the time at L = 1-2.
constexpr int64_t kCallFlops = 192 << 10, kCallFlopsInference = 96 << 10, kCallR = 64 << 10;
// native dR: its reductions run over a row group's rows step by step, so a group keeps at least
// this many (and native.py leaves dR to XLA below this batch: dr_min_rows() below)
constexpr int64_t kDrRows = 32;
void plan_threads(Call& c, ffi::ThreadPool& pool, int64_t cap) {
  Layer& ly = c.ly;
  const int64_t avail = std::max<int64_t>(1, pool.num_threads());
  const int64_t step_flops = 2 * ly.N * ly.G * ly.H * ly.H * ly.D;
  int64_t threads = cap > 0 ? cap : std::min<int64_t>(avail, std::max<int64_t>(1, step_flops / 16384));
  threads = std::min<int64_t>(threads, kMaxWorkers);
  const int64_t r_bytes = 4 * ly.G * ly.H * ly.H;
  const bool training = ly.backward || ly.res, inference = !training && !ly.tangent;
  if (cap <= 0) {  // a short call: kCallFlops a thread (training), kCallFlopsInference (R <= kCallR)
    const int64_t per = training ? kCallFlops : inference && r_bytes <= kCallR ? kCallFlopsInference : 0;
    if (per) threads = std::min<int64_t>(threads, std::max<int64_t>(1, ly.L * step_flops / per));
  }
  const int64_t tile = ly.backward ? ly.rows_bwd : c.k->rows_step[ly.cell][0];
  const bool small_r = r_bytes <= kGroupR;
  const int64_t group_rows = ly.dr ? std::max<int64_t>(tile, kDrRows) : inference ? c.k->group_tiles * tile : tile;
  // a group per thread of a direction, each of at least `rows` rows
  auto groups_of = [&](int64_t rows) {
    return std::max<int64_t>(1, std::min<int64_t>(threads / ly.D, ly.N / rows));
  };
  ly.groups = small_r ? groups_of(group_rows) : 1;
  if (inference && small_r && group_rows > tile && ly.nb * ly.D * ly.groups < threads)  // idle threads
    ly.groups = groups_of(tile);
  const int64_t group_flops = 2 * ly.group_rows_max() * ly.G * ly.H * ly.H;  // a group's step
  if (cap <= 0) {  // the threads that meet per step of a group, from its step's work
    int64_t meet = 1;
    while ((meet + 1) * (meet + 1) * kThreadFlops <= group_flops) ++meet;
    threads = std::min<int64_t>(threads, meet * ly.D * ly.groups);
  }
  c.threads = static_cast<int>(std::min<int64_t>(threads, ly.nb * ly.D * ly.groups));
  c.chains = static_cast<int>(ly.D * ly.groups);
  if (ly.groups > 1) grouped_calls.fetch_add(1, std::memory_order_relaxed);
  // small steps shared by two threads: the last probe's verdict, or a probe (work_chain)
  if (cap <= 0 && c.threads == 2 && c.chains == 1 && group_flops <= kProbeFlops &&
      forced_verdict.load(std::memory_order_relaxed) != kNoProbe) {
    std::atomic<int64_t>* slot = verdict_slot(ly, group_flops);
    const Verdict v = fresh_verdict(slot);
    if (v == kAlone) c.threads = 1;
    if (v == kUnknown) c.verdict = slot;
  }
  // A forward of one chain on two threads whose steps are larger than probing's and whose R fits
  // one core's cache: the caller runs the steps, its helper projects the chunks ahead of them
  // (work_pipelined), so the steps' state rarely crosses the cores. Sharing every step, the LSTM
  // at N = 16, H = 128 spent 1.055x one thread's cycles on the steps (the state rows the other
  // core wrote, the meetings); pipelined, the caller's steps took 0.92x them (rdtsc, its caches
  // hold R and the states alone). On two threads (Zen 4, wall, three A/Bs of 21-31 rounds,
  // two copies of the shared build 0.99-1.03x apart), the suite's batch-16 forwards of one
  // direction took 0.82-0.99x the time (LSTM H = 128: 0.97-0.99x; L = 1000, H = 64: 0.93-0.96x;
  // ragged 0.84-0.99x), the LSTM at N = 16, I = 256, H = 128 0.87x; with a third process spinning
  // on a core, 0.90-1.08x (~1.02x, where the copies were 0.90-1.05x apart). Three slots against
  // two: 0.97-1.04x; the third lets a helper that ran ahead sit out a late step of the caller.
  // More threads a chain (a many-core host) are not measured and keep sharing the steps.
  constexpr int64_t kRing = 3;
  if (!ly.backward && !ly.tangent && c.threads == 2 && c.chains == 1 && group_flops > kProbeFlops && small_r &&
      ly.chunks() > 1) {
    ly.ring = kRing;
    pipelined_calls.fetch_add(1, std::memory_order_relaxed);
  }
}

// Run every phase: the caller's thread and up to T-1 tasks on XLA's intra-op pool.
void execute(const std::shared_ptr<Call>& call, ffi::ThreadPool& pool) {
  Call& c = *call;
  const int T = c.threads, C = c.chains;
  for (int ch = 0; ch < C; ++ch) {
    int64_t mine = (T + (C - 1 - ch)) / C;  // workers ch, ch+C, ...
    c.ranges[ch] = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>({mine, kMaxRanges, c.ly.nb})));
  }
  for (int ch = 0; ch < C; ++ch) {
    const size_t n = c.phases[ch].size() * static_cast<size_t>(c.ranges[ch]);
    c.claims[ch].reset(new Claim[n]);
    for (size_t i = 0; i < n; ++i) c.claims[ch][i].next.store(0, std::memory_order_relaxed);
  }
  for (int i = 1; i < T; ++i) {
    pool.Schedule([call, i]() {
      Call& cc = *call;
      cc.active.fetch_add(1);
      if (!cc.finished.load()) worker(cc, i);
      cc.active.fetch_sub(1);
      bump(cc);
    });
  }
  worker(c, 0);
  c.finished.store(true);  // a task that starts from now on does nothing
  // the caller's worker may have left the call early (a late phase): wait for the others
  for (int ch = 0; ch < C; ++ch) {
    const PhaseSync& last = c.sync[ch][c.phases[ch].size() - 1];
    const int64_t units = c.phases[ch].back().units;
    wait_for(c, [&] { return last.done.load(std::memory_order_acquire) >= units; }, nullptr, kLateUs, 0);
  }
  wait_for(c, [&] { return c.active.load() == 0; }, nullptr, kLateUs, 0);
}

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
    for (int64_t n = 0; n < ly.N; ++n) {
      std::memcpy(out_h + (d * ly.N + n) * ly.H, hf + n * ly.Hp, ly.H * sizeof(float));
      if (out_c) std::memcpy(out_c + (d * ly.N + n) * ly.H, cf + n * ly.Hp, ly.H * sizeof(float));
    }
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

// ---- the tangent (jax.jvp): its recurrence in tangent.inc ----
// The initial states' tangents into the carried buffers (h0 / c0 hold them), the rest zero.
void init_dir_tangent(Layer& ly, int d) {
  Dir& dr = ly.dir[d];
  const int64_t H = ly.H, Hp = ly.Hp, N = ly.N;
  init_peepholes(ly, d);
  for (float* b : {dr.h[0], dr.h[1], dr.c, dr.z, dr.rh})
    if (b) std::fill(b, b + N * Hp, 0.f);
  for (int64_t n = 0; n < N; ++n) {
    std::memcpy(dr.h[0] + n * Hp, ly.h0 + (d * N + n) * H, H * sizeof(float));
    if (ly.cell == 1) std::memcpy(dr.c + n * Hp, ly.c0 + (d * N + n) * H, H * sizeof(float));
  }
}

void plan_tangent(Call& c, int ch) {
  const Layer& ly = c.ly;
  Planner pl(c, ch);
  const int rs = c.k->rows_step[ly.cell][0], rb = c.k->rows_step[ly.cell][1];
  pl.pack(kTanPack);
  for (int64_t t = 0; t < ly.L; ++t) {
    pl.add(kTanStep, t, pl.rows, rs);
    if (ly.cell == 0 && !ly.lbr) pl.add(kTanStepB, t, pl.rows, rb);
  }
  finish_plan(c, ch);
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

PyObject* isa(PyObject*, PyObject* arg) {
  long want = PyLong_AsLong(arg);
  if (want == -1 && PyErr_Occurred()) return nullptr;
  return PyUnicode_FromString(jaxgru_cpu::select_kernels(static_cast<int>(want)).name);
}

PyObject* costly_meeting_exits(PyObject*, PyObject*) {
  return PyLong_FromUnsignedLongLong(jaxgru_cpu::costly_meeting_exits.load(std::memory_order_relaxed));
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
PyObject* late_exits(PyObject*, PyObject*) {
  return PyLong_FromUnsignedLongLong(jaxgru_cpu::late_exits.load(std::memory_order_relaxed));
}

PyObject* dr_min_rows(PyObject*, PyObject*) { return PyLong_FromLongLong(jaxgru_cpu::kDrRows); }

PyObject* grouped_calls(PyObject*, PyObject*) {
  return PyLong_FromUnsignedLongLong(jaxgru_cpu::grouped_calls.load(std::memory_order_relaxed));
}

PyObject* split_products(PyObject*, PyObject*) {
  return PyLong_FromUnsignedLongLong(jaxgru_cpu::split_products.load(std::memory_order_relaxed));
}

PyObject* pipelined_calls(PyObject*, PyObject*) {
  return PyLong_FromUnsignedLongLong(jaxgru_cpu::pipelined_calls.load(std::memory_order_relaxed));
}

PyObject* scratch_reuses(PyObject*, PyObject*) {
  return PyLong_FromUnsignedLongLong(jaxgru_cpu::ScratchPool::get().reuses.load(std::memory_order_relaxed));
}

PyMethodDef methods[] = {
    {"registrations", registrations, METH_NOARGS, "FFI target name -> PyCapsule of its handler."},
    {"isa", isa, METH_O, "The kernels used for a requested ISA (0 best, 1 avx512, 2 avx2, 3 generic)."},
    {"late_exits", late_exits, METH_NOARGS, "Threads that left a call after holding up a phase, so far."},
    {"force_probe", force_probe, METH_O,
     "Tests, benchmarks: probes of small shared steps measure (0), decide 1 (shared) or 2 (alone; both clear the "
     "kept verdicts), or are off (3)."},
    {"costly_meeting_exits", costly_meeting_exits, METH_NOARGS,
     "Helpers that left a call whose steps they shared at no gain, so far."},
    {"grouped_calls", grouped_calls, METH_NOARGS, "Calls that ran their rows in more than one group, so far."},
    {"split_products", split_products, METH_NOARGS, "Backward calls whose dH = dG . R ran in parts, so far."},
    {"pipelined_calls", pipelined_calls, METH_NOARGS, "Calls whose helper projected ahead of the steps, so far."},
    {"scratch_reuses", scratch_reuses, METH_NOARGS, "Calls whose scratch was a block an earlier call gave back, so far."},
    {"dr_min_rows", dr_min_rows, METH_NOARGS, "The smallest batch (and row group) whose backward computes dR."},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_jaxgru_cpu", "jaxgru's native CPU lowering (XLA FFI).", -1,
                      methods, nullptr, nullptr, nullptr, nullptr};

}  // namespace

PyMODINIT_FUNC PyInit__jaxgru_cpu(void) { return PyModule_Create(&module); }
