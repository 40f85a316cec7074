// Measuring direct reads against the FIFO between two CPUs (direct_read_calibration.h).
#include "algorithms/direct_read_calibration.h"

#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>

#include "algorithms/calibration_cpus.h"
#include "base/spin_barrier.h"

namespace loom {
namespace {

using Clock = std::chrono::steady_clock;

// From 32 KiB: on a host of the second Intel Xeon VM whose cores exchange lines at half its
// speed, direct reads from 32 KiB ran allgather and all-to-all of 64-128 KiB between 2 ranks
// (blocks of 32-64 KiB) 2.3-3.8x faster than the FIFO, where that VM itself tied at 64 KiB
// (7.7-8.1 against 8.0-8.3 µs); so the smallest sizes are measured too (docs/RESULTS.md).
constexpr size_t kSizes[] = {size_t{32} << 10, size_t{64} << 10,  size_t{128} << 10,
                             size_t{256} << 10, size_t{1} << 20, size_t{4} << 20};
constexpr size_t kRingBytes = size_t{1} << 20;  // LOOM_SHM_FIFO_BYTES's default
constexpr size_t kPieceBytes = size_t{64} << 10;
constexpr int kRounds = 3;
// Direct reads win at a size only when at least this much faster: within it, a tie.
constexpr double kWinMargin = 0.97;
// Every exchange starts at the ring's start and moves whole pieces but its last, so a piece
// starts at a multiple of kPieceBytes and never wraps around the ring's end.
static_assert(kRingBytes % kPieceBytes == 0);

// One direction's ring: bytes written and read so far, each on its own cache line.
struct Ring {
  alignas(64) std::atomic<uint64_t> written{0};
  alignas(64) std::atomic<uint64_t> read{0};
  alignas(64) uint8_t data[kRingBytes];
};

struct Side {
  std::unique_ptr<uint8_t[]> send, recv;
};

// Moves `bytes` of `from` into `out` while taking as many from `in` into `to`, a piece at a
// time whichever has room or data, as a rank that sends and receives at once does.
void pumpBothWays(const uint8_t* from, uint8_t* to, size_t bytes, Ring& out, Ring& in) {
  size_t sent = 0, got = 0;
  while (sent < bytes || got < bytes) {
    if (sent < bytes) {
      const uint64_t at = out.written.load(std::memory_order_relaxed);
      const size_t n = std::min(kPieceBytes, bytes - sent);
      if (at + n - out.read.load(std::memory_order_acquire) <= kRingBytes) {
        std::memcpy(out.data + at % kRingBytes, from + sent, n);
        out.written.store(at + n, std::memory_order_release);
        sent += n;
      }
    }
    if (got < bytes) {
      const uint64_t at = in.read.load(std::memory_order_relaxed);
      const size_t n = std::min<uint64_t>(kPieceBytes, in.written.load(std::memory_order_acquire) - at);
      if (n > 0) {
        std::memcpy(to + got, in.data + at % kRingBytes, n);
        in.read.store(at + n, std::memory_order_release);
        got += n;
      }
    }
  }
}

}  // namespace

size_t directReadMinBytes(const std::vector<DirectReadFigures::Size>& sizes) {
  size_t from = 0;
  for (size_t i = sizes.size(); i-- > 0 && sizes[i].directUs <= kWinMargin * sizes[i].fifoUs;) from = sizes[i].bytes;
  return from;
}

bool measureDirectReads(DirectReadFigures* out, std::string* whyNot) {
  const std::vector<int> cpus = calibrationCpus(2);
  if (cpus.size() < 2) {
    *whyNot = "a thread of this process may run on one CPU only";
    return false;
  }
  const size_t maxBytes = kSizes[std::size(kSizes) - 1];
  Side sides[2];
  for (Side& s : sides) {
    s.send = std::make_unique<uint8_t[]>(maxBytes);
    s.recv = std::make_unique<uint8_t[]>(maxBytes);
  }
  // The kernel's answer first: where it refuses, nothing is measured.
  iovec local{sides[0].recv.get(), 64}, remote{sides[1].send.get(), 64};
  if (::process_vm_readv(::getpid(), &local, 1, &remote, 1, 0) != 64) {
    *whyNot = std::string("process_vm_readv: ") + std::strerror(errno);
    return false;
  }
  auto rings = std::make_unique<Ring[]>(2);  // rings[s]: from side s to the other
  SpinBarrier pair(2);  // the timed part holds no wake-up
  std::vector<double> fifoUs(std::size(kSizes), 1e30), directUs(std::size(kSizes), 1e30);
  std::atomic<bool> failed{false};
  // Each on a thread of its own: the caller's binding stays as it was.
  auto work = [&](int me) {
    runOnCpu(cpus[static_cast<size_t>(me)]);
    Side& mine = sides[me];
    const Side& peer = sides[1 - me];
    for (int round = 0; round < kRounds; ++round) {
      for (size_t i = 0; i < std::size(kSizes); ++i) {
        const size_t bytes = kSizes[i];
        const int reps = static_cast<int>(std::max<size_t>(3, (size_t{8} << 20) / bytes));
        for (bool direct : {false, true}) {
          double total = 0;
          for (int r = 0; r < reps; ++r) {
            std::memset(mine.send.get(), round * 16 + r, bytes);
            // The peer read all of this side's ring in the last exchange (before the barrier
            // that ended it) and touches it again only after the next one.
            rings[me].written.store(0, std::memory_order_relaxed);
            rings[me].read.store(0, std::memory_order_relaxed);
            pair.arriveAndWait();
            const Clock::time_point start = Clock::now();
            if (direct) {
              iovec to{mine.recv.get(), bytes}, from{peer.send.get(), bytes};
              if (::process_vm_readv(::getpid(), &to, 1, &from, 1, 0) != static_cast<ssize_t>(bytes)) failed = true;
            } else {
              pumpBothWays(mine.send.get(), mine.recv.get(), bytes, rings[me], rings[1 - me]);
            }
            pair.arriveAndWait();
            total += std::chrono::duration<double, std::micro>(Clock::now() - start).count();
          }
          if (me == 0) {
            double& best = direct ? directUs[i] : fifoUs[i];
            best = std::min(best, total / reps);
          }
        }
      }
    }
  };
  std::thread first(work, 0), second(work, 1);
  first.join();
  second.join();
  if (failed) {
    *whyNot = "process_vm_readv read less than asked";
    return false;
  }
  DirectReadFigures figures;
  for (size_t i = 0; i < std::size(kSizes); ++i) figures.sizes.push_back({kSizes[i], fifoUs[i], directUs[i]});
  figures.minBytes = directReadMinBytes(figures.sizes);
  *out = figures;
  return true;
}

}  // namespace loom
