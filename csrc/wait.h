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
#include <pthread.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#elif defined(__APPLE__)
#include <mach/mach.h>
#include <pthread.h>
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

// A thread's CPU clock, readable from other threads: whether a thread that holds up the others
// is running (a long unit, a page fault) or has lost its core. Linux: the kernel's per-thread
// clock, exact for a running thread. macOS: the thread's user and system time from Mach's
// thread_info (microseconds; the thread's port from pthread_mach_thread_np holds no reference, and
// it is read only while the thread runs a unit of the call). Elsewhere none (`ok` false): callers
// then assume it lost it.
struct CpuClock {
#if defined(__linux__)
  clockid_t id{};
#elif defined(__APPLE__)
  mach_port_t port = MACH_PORT_NULL;
#endif
  bool ok = false;
};

inline CpuClock this_thread_clock() {
  CpuClock c;
#if defined(__linux__)
  c.ok = pthread_getcpuclockid(pthread_self(), &c.id) == 0;
#elif defined(__APPLE__)
  c.port = pthread_mach_thread_np(pthread_self());
  c.ok = c.port != MACH_PORT_NULL;
#endif
  return c;
}

// CPU nanoseconds of the clock's thread (-1: unknown).
inline int64_t cpu_ns(const CpuClock& c) {
#if defined(__linux__)
  timespec ts;
  if (c.ok && clock_gettime(c.id, &ts) == 0) return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
#elif defined(__APPLE__)
  thread_basic_info_data_t info;
  mach_msg_type_number_t count = THREAD_BASIC_INFO_COUNT;
  if (c.ok && thread_info(c.port, THREAD_BASIC_INFO, reinterpret_cast<thread_info_t>(&info), &count) == KERN_SUCCESS) {
    const int64_t us = (int64_t{info.user_time.seconds} + info.system_time.seconds) * 1000000 +
                       info.user_time.microseconds + info.system_time.microseconds;
    return us * 1000;
  }
#else
  (void)c;
#endif
  return -1;
}

}  // namespace jaxgru_cpu
