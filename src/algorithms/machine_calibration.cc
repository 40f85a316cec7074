// Measuring the host constants of the cost model in this process (machine_calibration.h).
#include "algorithms/machine_calibration.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include "algorithms/calibration_cpus.h"
#include "algorithms/select.h"
#include "base/spin_barrier.h"
#include "kernels/reduce.h"

namespace loom {
namespace {

using Clock = std::chrono::steady_clock;

double secondsBetween(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// Copy sizes per thread: from below any core's private cache to past a large shared one.
constexpr size_t kMinCopyBytes = size_t{512} << 10;
// All threads' buffers together stay under this, which caps the largest size with many
// threads (their shares of a shared cache shrink alike).
constexpr size_t kBufferBudget = size_t{256} << 20;
// Each figure is the best of this many rounds, interleaved across sizes and store kinds, so
// that a slow phase of a shared machine has to last the whole calibration to spoil one.
constexpr int kRounds = 3;
// Non-temporal stores win at a size only when at least this much faster: within it the
// two are a tie, and a tie keeps the cache.
constexpr double kWinMargin = 0.97;
// Plain copies run at memory speed within this factor of the largest size's speed, and a
// cache shows as a size at least kCacheFactor faster than the largest.
constexpr double kMemoryFactor = 1.5;
constexpr double kCacheFactor = 2;

// GB/s of `run` moving `bytes` per call in this thread, best of a few rounds.
template <typename Run>
double kernelGbps(size_t bytes, Run run) {
  double best = 0;
  const int iters = static_cast<int>(std::max<size_t>(1, (size_t{50} << 20) / bytes));  // 50 MiB a round
  for (int round = 0; round < 5; ++round) {
    const Clock::time_point start = Clock::now();
    for (int i = 0; i < iters; ++i) run();
    best = std::max(best, static_cast<double>(bytes) * iters / secondsBetween(start, Clock::now()) / 1e9);
  }
  return best;
}

// Threads that copy between their own two buffers at once, as the ranks of a host do during
// a collective. Between jobs they sleep; within a job they meet at a spinning barrier, so that
// the timed part holds no wake-up (tens of microseconds on a virtual machine, as long as a
// 512 KiB copy).
class CopyTeam {
 public:
  CopyTeam(int threads, size_t maxBytes)
      : buffers_(static_cast<size_t>(threads)), barrier_(static_cast<size_t>(threads)) {
    const std::vector<int> cpus = calibrationCpus(static_cast<size_t>(threads));
    const bool pin = cpus.size() == static_cast<size_t>(threads);
    for (int i = 0; i < threads; ++i) {
      workers_.emplace_back([this, i, maxBytes, cpu = pin ? cpus[static_cast<size_t>(i)] : -1] {
        work(i, maxBytes, cpu);
      });
    }
    waitDone(1);  // every thread has touched its buffers where it runs
  }

  ~CopyTeam() {
    post(Job{0, 0, false, true});
    for (std::thread& worker : workers_) worker.join();
  }

  CopyTeam(const CopyTeam&) = delete;
  CopyTeam& operator=(const CopyTeam&) = delete;

  // Seconds for every thread to copy `bytes` `reps` times, from the first start to the last end.
  double time(size_t bytes, int reps, bool streaming) {
    post(Job{bytes, reps, streaming, false});
    waitDone(generation_);
    return secondsBetween(start_, end_);
  }

 private:
  struct Job {
    size_t bytes;
    int reps;
    bool streaming;
    bool stop;
  };
  struct Buffers {
    std::unique_ptr<char[]> from, to;
  };

  void post(const Job& job) {
    std::lock_guard<std::mutex> lock(mutex_);
    job_ = job;
    ++generation_;
    changed_.notify_all();
  }

  void waitDone(unsigned generation) {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return done_ == workers_.size() && doneGeneration_ == generation; });
  }

  void finish(unsigned generation) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (doneGeneration_ != generation) {
      doneGeneration_ = generation;
      done_ = 0;
    }
    if (++done_ == workers_.size()) changed_.notify_all();
  }

  void work(int index, size_t maxBytes, int cpu) {
    if (cpu >= 0) runOnCpu(cpu);
    Buffers& mine = buffers_[static_cast<size_t>(index)];
    mine.from = std::make_unique<char[]>(maxBytes);  // zeroed: touched by this thread
    mine.to = std::make_unique<char[]>(maxBytes);
    unsigned seen = 0;
    finish(++seen);
    for (;;) {
      Job job;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        changed_.wait(lock, [&] { return generation_ != seen; });
        seen = generation_;
        job = job_;
      }
      if (job.stop) return;
      // Back and forth between the two buffers: each copy reads what the one before wrote,
      // as a collective reads what arrived. Non-temporal stores skip the cache, so they win
      // only where the data would not have stayed in it anyway.
      auto copy = job.streaming ? kernels::copyStreaming : kernels::copy;
      auto pass = [&](int r) {
        char* a = mine.from.get();
        char* b = mine.to.get();
        if (r % 2 == 0) {
          copy(b, a, job.bytes);
        } else {
          copy(a, b, job.bytes);
        }
      };
      pass(0);  // untimed: the first touch of the size
      pass(1);
      barrier_.arriveAndWait();
      if (index == 0) start_ = Clock::now();
      for (int r = 0; r < job.reps; ++r) pass(r);
      barrier_.arriveAndWait();
      if (index == 0) end_ = Clock::now();
      finish(seen);
    }
  }

  std::vector<Buffers> buffers_;
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable changed_;
  Job job_{};
  unsigned generation_ = 1;  // the setup counts as the first job
  unsigned doneGeneration_ = 0;
  size_t done_ = 0;
  SpinBarrier barrier_;
  Clock::time_point start_, end_;  // written by thread 0 inside a job, read after it
};

// Three significant digits: what the measurement can tell on a shared machine, and what
// reads well in a log line.
double rounded(double value) {
  if (!(value > 0)) return value;
  const double scale = std::pow(10.0, 2 - std::floor(std::log10(value)));
  return std::round(value * scale) / scale;
}

}  // namespace

Status measureMachine(int threads, size_t maxCopyBytes, MachineFigures* out, const LinkMeasurer& measureLinks) {
  if (threads < 1 || maxCopyBytes < kMinCopyBytes) {
    return error(loomInvalidArgument, "machine calibration: %d threads, copies up to %zu bytes", threads, maxCopyBytes);
  }
  const Clock::time_point begin = Clock::now();
  MachineFigures figures;
  figures.threads = threads;

  // What a step reduces or copies while it reads a slice out of the FIFO: arrays that stay in
  // a core's L2 (384 KiB for a reduction's three). 1 MiB arrays, used before, left the L2 of
  // both VMs we meet (the reduction at 10.5 GB/s where it runs at 33 in the L2), and the model
  // then priced a 2-rank ring allreduce of 256 KiB-1 MiB at 1.2-1.3x the time it took, and
  // recursive doubling's 64 KiB at 1.45x (docs/RESULTS.md).
  const size_t kernelBytes = size_t{128} << 10;
  std::vector<float> a(kernelBytes / sizeof(float), 1.0f), b(a.size(), 2.0f), sum(a.size());
  figures.reduceGbps = kernelGbps(
      kernelBytes, [&] { kernels::reduce(sum.data(), a.data(), b.data(), a.size(), loomFloat32, loomSum); });
  figures.copyGbps = kernelGbps(kernelBytes, [&] { kernels::copy(sum.data(), a.data(), kernelBytes); });

  figures.maxBytes = std::max(kMinCopyBytes, std::min(maxCopyBytes, kBufferBudget / 2 / static_cast<size_t>(threads)));
  std::vector<size_t> sizes;
  for (size_t bytes = kMinCopyBytes; bytes <= figures.maxBytes; bytes *= 2) sizes.push_back(bytes);
  figures.maxBytes = sizes.back();
  std::vector<double> plain(sizes.size(), 1e30), streaming(sizes.size(), 1e30);
  {
    CopyTeam team(threads, figures.maxBytes);
    for (int round = 0; round < kRounds; ++round) {
      for (size_t i = 0; i < sizes.size(); ++i) {
        // At least 16 MiB a timing: a millisecond or more at any memory speed met so far.
        const int reps = static_cast<int>(std::max<size_t>(2, (size_t{16} << 20) / sizes[i]));
        plain[i] = std::min(plain[i], team.time(sizes[i], reps, false) / reps);
        streaming[i] = std::min(streaming[i], team.time(sizes[i], reps, true) / reps);
      }
    }
  }
  figures.streamingSpeedup = plain.back() / streaming.back();
  for (size_t i = 0; i < sizes.size(); ++i) {
    const double bytes = static_cast<double>(sizes[i]);
    figures.copies.push_back({sizes[i], bytes / plain[i] / 1e9, bytes / streaming[i] / 1e9});
  }
  figures.streamingMinBytes = pastCacheBytes(figures.copies);
  // Ranks copying at once on two CPUs or more: how they best read each other's sends.
  if (threads >= 2) figures.directMeasured = measureDirectReads(&figures.direct, &figures.directNote);
  if (threads >= 2 && measureLinks) {
    Status links = measureLinks(&figures.links);
    if (links.isOk()) links = fitLinkCost(figures.links.exchangeUs, &figures.intra);
    figures.linksMeasured = links.isOk();
    if (!links.isOk()) figures.linksNote = links.message();
  }
  figures.seconds = secondsBetween(begin, Clock::now());
  *out = figures;
  return Status::ok();
}

size_t pastCacheBytes(const std::vector<MachineFigures::Copy>& copies) {
  if (copies.empty()) return 0;
  double fastest = 0;
  for (const MachineFigures::Copy& c : copies) fastest = std::max(fastest, c.plainGbps);
  const double memory = copies.back().plainGbps;
  const bool cacheSeen = fastest >= kCacheFactor * memory;
  size_t atMemorySpeed = 0, streamingWins = 0;
  for (size_t i = copies.size(); i-- > 0 && cacheSeen && copies[i].plainGbps <= kMemoryFactor * memory;) {
    atMemorySpeed = copies[i].bytes;
  }
  // Non-temporal copies take at most kWinMargin of the plain ones' time.
  for (size_t i = copies.size(); i-- > 0 && 1 / copies[i].streamingGbps <= kWinMargin / copies[i].plainGbps;) {
    streamingWins = copies[i].bytes;
  }
  if (atMemorySpeed == 0 || streamingWins == 0) return std::max(atMemorySpeed, streamingWins);
  return std::min(atMemorySpeed, streamingWins);
}

size_t boardTimedMax(const LinkFigures::BoardTiming& timing) {
  for (size_t i = timing.bytes.size(); i-- > 0;) {
    if (timing.boardUs[i] <= timing.fifoUs[i]) return timing.bytes[i];
  }
  return timing.bytes.empty() ? 0 : timing.bytes[0] / 2;
}

std::vector<std::string> machineCalibrationKeys(bool links) {
  // In the tuning file's order.
  if (!links) return {"reduce.gbps", "copy.gbps", "streaming.gbps", "streaming.min_bytes"};
  std::vector<std::string> keys = {"intra.latency_us", "intra.gbps", "reduce.gbps", "copy.gbps", "oneshot.latency_us"};
  for (CallInfo::Kind kind : kBoardTimedKinds) keys.push_back(std::string("oneshot.max_bytes.") + collectiveName(kind));
  keys.insert(keys.end(), {"streaming.gbps", "streaming.min_bytes"});
  return keys;
}

DataPathSizes machineCalibrationSizes(const MachineFigures& figures) {
  DataPathSizes sizes;
  // Where the kernel refused, no rank may read another's memory: the FIFO.
  if (figures.threads >= 2) {
    sizes.shmDirectMinBytes = figures.directMeasured ? static_cast<long long>(figures.direct.minBytes) : 0;
  }
  return sizes;
}

CommProfile applyMachineFigures(const MachineFigures& figures, const CommProfile& base) {
  CommProfile p = base;
  p.copyGbps = rounded(figures.copyGbps);
  p.reduceGbps = rounded(figures.reduceGbps);
  p.streamingMinBytes = figures.streamingMinBytes;
  p.streamingGbps = rounded(base.memGbps * figures.streamingSpeedup);
  if (!figures.linksMeasured) return p;
  p.intra = {rounded(figures.intra.latencyUs), rounded(figures.intra.gbps)};
  // The allreduce ran between two ranks.
  CommProfile pair = CommProfile::defaults(2, 1);
  pair.intra = p.intra;
  pair.copyGbps = p.copyGbps;
  pair.reduceGbps = p.reduceGbps;
  p.oneShotLatencyUs = rounded(oneShotLatencyFrom(figures.links.oneShotUs, pair));
  for (const LinkFigures::BoardTiming& timing : figures.links.board) {
    p.oneShotTimedMax[static_cast<size_t>(timing.kind)] = boardTimedMax(timing);
  }
  return p;
}

}  // namespace loom
