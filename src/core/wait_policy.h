// How a rank that waits for its peers spends the wait where shared memory gives it no
// descriptor to sleep on (the executor's idle passes, the one-shot board): it looks again for
// kSpinBeforeSleep after the last progress, when a peer on this host is usually about to
// write, and then naps in poll for a sixteenth of the time it has waited (20 us to 1 ms). A
// late peer is then noticed within about 6 % of the wait, and the cores go to whatever the
// peer is busy with (DDP's backward pass) instead of to the waiting rank.
#pragma once

#include <poll.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstddef>

namespace loom {

constexpr std::chrono::nanoseconds kSpinBeforeSleep = std::chrono::microseconds(100);

// For this long after the last progress a rank waiting on sockets or shared memory looks again
// without even yielding, unless its host's ranks outnumber the cores (the peer may need this
// core). On a core that other busy processes share, sched_yield hands it to them for their
// whole slice (a millisecond or more under EEVDF), long after the peer's reply came: a 2-rank
// 8-byte allreduce over TCP took 1.1-2.0 ms beside two busy loops, and 6.5-7.5 us without the
// yields. Where nothing else runs, a yield is still a system call, longer than the whole trip
// of a small message over shared memory.
constexpr std::chrono::nanoseconds kBusyBeforeYield = std::chrono::microseconds(30);

inline std::chrono::nanoseconds napAfter(std::chrono::nanoseconds waited) {
  return std::clamp<std::chrono::nanoseconds>(waited / 16, std::chrono::microseconds(20),
                                              std::chrono::milliseconds(1));
}

// ppoll for at most `wait`; its return value.
inline int pollFor(pollfd* fds, size_t count, std::chrono::nanoseconds wait) {
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(wait);
  const timespec timeout{static_cast<time_t>(seconds.count()), static_cast<long>((wait - seconds).count())};
  return ::ppoll(fds, count, &timeout, nullptr);
}

}  // namespace loom
