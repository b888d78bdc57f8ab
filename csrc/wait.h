// Sleeping until a word changes: what a thread of a call does when the unit it waits for is held
// by a thread that has lost its core. A sleeping thread leaves its core idle, and the scheduler
// then moves a runnable thread there (the one holding the unit, often); a yield loop would keep
// the core busy. Linux: a private futex. Elsewhere: a yield (correct, only slower to recover).
#pragma once

#include <atomic>
#include <climits>
#include <cstdint>
#include <thread>

#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#endif

namespace jaxgru_cpu {

static_assert(sizeof(std::atomic<int32_t>) == sizeof(int32_t) && std::atomic<int32_t>::is_always_lock_free,
              "a futex word is a plain 32-bit integer");

// Sleep while `word` still holds `seen`, at most `us` microseconds (it may return early).
inline void sleep_while_equal(std::atomic<int32_t>& word, int32_t seen, long us) {
#if defined(__linux__)
  timespec ts{us / 1000000, (us % 1000000) * 1000};
  syscall(SYS_futex, reinterpret_cast<int32_t*>(&word), FUTEX_WAIT_PRIVATE, seen, &ts, nullptr, 0);
#else
  (void)word, (void)seen, (void)us;
  std::this_thread::yield();
#endif
}

// Wake every thread sleeping on `word`.
inline void wake_all(std::atomic<int32_t>& word) {
#if defined(__linux__)
  syscall(SYS_futex, reinterpret_cast<int32_t*>(&word), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
#else
  (void)word;
#endif
}

}  // namespace jaxgru_cpu
