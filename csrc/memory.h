// Memory of a call: huge pages for its large buffers, and its scratch kept for the next call.
//
// Transparent huge pages for the large results a call writes. XLA allocates its buffers per
// call, and glibc maps large blocks fresh from the OS: the call's first write to each 4 KiB
// page of them then faults, and the kernel clears the page (measured: 16% of an LSTM training
// step at N = 64, H = 128 in run_step / run_bwd_elem). With MADV_HUGEPAGE the 2 MiB parts of a
// buffer fault once each. Advice only: contents are unchanged, and where the kernel ignores it
// (THP "never", not Linux) nothing changes.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

namespace jaxgru_cpu {

// Advise huge pages for the whole pages inside [p, p + bytes), if it spans at least 4 MiB
// (smaller buffers hold no 2 MiB page worth the system call).
inline void advise_huge_pages(void* p, size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (bytes < (size_t{4} << 20)) return;
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t lo = (reinterpret_cast<uintptr_t>(p) + page - 1) & ~(page - 1);
  const uintptr_t hi = (reinterpret_cast<uintptr_t>(p) + bytes) & ~(page - 1);
  if (hi > lo) madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_HUGEPAGE);
#else
  (void)p, (void)bytes;
#endif
}

// A call's scratch (packed weights, projections, states): a block of floats taken from the blocks
// earlier calls gave back, or a new one. glibc maps a block over 32 MiB fresh from the OS on every
// allocation and unmaps it on free, so without the pool every call faulted in and cleared every
// page of its scratch: ~15% of the samples of an LSTM forward at N = 1, H = 1024 (perf; the
// faults were in packing W and R). Blocks are handed out whole, one call each, under a mutex, so
// concurrent calls from different threads each get their own. At most kKeep blocks and kKeepBytes
// are kept; a block given back beyond that is freed. Contents are not cleared between calls.
class ScratchPool {
 public:
  static constexpr size_t kKeep = 4;
  static constexpr size_t kKeepBytes = size_t{1} << 30;
  // Calls that took a kept block, since the module was loaded: a diagnostic for the tests.
  std::atomic<uint64_t> reuses{0};

  // The pool of the process: never destroyed (a call may finish during exit).
  static ScratchPool& get() {
    static ScratchPool* pool = new ScratchPool;
    return *pool;
  }
  // A kept block of at least n floats, else a new one (advised huge pages).
  std::pair<std::unique_ptr<float[]>, size_t> take(size_t n) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      // of the smallest that fit, the one given back last (the likeliest to be in cache still)
      size_t best = kept_.size();
      for (size_t i = kept_.size(); i-- > 0;)
        if (kept_[i].second >= n && (best == kept_.size() || kept_[i].second < kept_[best].second)) best = i;
      if (best < kept_.size()) {
        reuses.fetch_add(1, std::memory_order_relaxed);
        auto block = std::move(kept_[best]);
        kept_.erase(kept_.begin() + static_cast<std::ptrdiff_t>(best));
        return block;
      }
    }
    std::unique_ptr<float[]> p(new float[n]);
    advise_huge_pages(p.get(), n * sizeof(float));
    return {std::move(p), n};
  }
  // Keep a block for a later call; the smallest kept blocks go first where the limits are reached.
  void give(std::unique_ptr<float[]> p, size_t n) {
    std::lock_guard<std::mutex> lock(mu_);
    kept_.emplace_back(std::move(p), n);
    auto total = [&] {
      size_t t = 0;
      for (const auto& b : kept_) t += b.second * sizeof(float);
      return t;
    };
    while (kept_.size() > kKeep || total() > kKeepBytes) {
      size_t smallest = 0;
      for (size_t i = 1; i < kept_.size(); ++i)
        if (kept_[i].second < kept_[smallest].second) smallest = i;
      kept_.erase(kept_.begin() + static_cast<std::ptrdiff_t>(smallest));
    }
  }

 private:
  std::mutex mu_;
  std::vector<std::pair<std::unique_ptr<float[]>, size_t>> kept_;
};

// A block of the pool, given back when the call that holds it is destroyed.
class Scratch {
 public:
  Scratch() = default;
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() { release(); }
  // A block of at least n floats (the one held before goes back to the pool).
  float* reset(size_t n) {
    release();
    auto block = ScratchPool::get().take(n);
    p_ = std::move(block.first);
    n_ = block.second;
    return p_.get();
  }

 private:
  void release() {
    if (p_) ScratchPool::get().give(std::move(p_), n_);
    n_ = 0;
  }
  std::unique_ptr<float[]> p_;
  size_t n_ = 0;
};

}  // namespace jaxgru_cpu
