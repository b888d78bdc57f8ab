// Transparent huge pages for the large results a call writes. XLA allocates its buffers per
// call, and glibc maps large blocks fresh from the OS: the call's first write to each 4 KiB
// page of them then faults, and the kernel clears the page (measured: 16% of an LSTM training
// step at N = 64, H = 128 in run_step / run_bwd_elem). With MADV_HUGEPAGE the 2 MiB parts of a
// buffer fault once each. Advice only: contents are unchanged, and where the kernel ignores it
// (THP "never", not Linux) nothing changes.
#pragma once

#include <cstddef>
#include <cstdint>

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

}  // namespace jaxgru_cpu
