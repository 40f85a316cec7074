// Whether the tests run under ThreadSanitizer, and skips for what it cannot or need not see.
//
// TSan sees synchronisation only between threads of one process: device ranks that are
// processes order their work through FIFOs in memory shared between processes (a rank reads a
// buffer, its peers pass the data on, a later step of the same rank writes that buffer), and
// TSan would report every such pair as a race. Tests with ranks as processes skip under TSan,
// saying so; the same configurations run as threads, where TSan sees every order, and ASan
// runs them as processes.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>

#if defined(__SANITIZE_THREAD__)
#define LOOM_TEST_UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define LOOM_TEST_UNDER_TSAN 1
#endif
#endif
#ifndef LOOM_TEST_UNDER_TSAN
#define LOOM_TEST_UNDER_TSAN 0
#endif

// Skips a test under ThreadSanitizer, printing why (a test whose work runs in one thread
// gives TSan nothing to see, at 10-20 times the time).
#define SKIP_UNDER_TSAN(why)                                    \
  if (LOOM_TEST_UNDER_TSAN) {                                   \
    std::printf("skipped under ThreadSanitizer: %s\n", why);    \
    std::fflush(stdout);                                        \
    GTEST_SKIP() << "under ThreadSanitizer: " << why;           \
  }

#define SKIP_PROCESSES_UNDER_TSAN(isProcesses)                                                        \
  if (LOOM_TEST_UNDER_TSAN && (isProcesses)) {                                                        \
    std::printf("skipped: ranks as processes under ThreadSanitizer, which cannot see the order "    \
                "their shared FIFOs give (the threads configurations run)\n");                      \
    std::fflush(stdout);                                                                              \
    GTEST_SKIP() << "ranks as processes under ThreadSanitizer";                                       \
  }
