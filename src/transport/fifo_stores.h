// Which stores a shared-memory FIFO's writer uses for its large writes: plain ones, whose lines
// the reader then fetches from the writer's cache, or non-temporal ones, which send them to
// memory. Plain stores are twice as fast where the two cores share a cache; non-temporal ones
// 2-5x where the cores reach each other's caches slowly (two CCDs or sockets, or a VM's
// slow phase; docs/RESULTS.md). LOOM_SHM_FIFO_STORES=auto lets each writer tell which from the
// speed of its own copies into the FIFO: a plain copy has to take every line back from the
// reader's cache, so it slows down with the distance, where a non-temporal copy does not.
#pragma once

#include <cstddef>
#include <cstdint>

namespace loom::transport {

enum class FifoStores { kCached, kStreaming, kAuto };
// LOOM_SHM_FIFO_STORES's word for it.
const char* fifoStoresName(FifoStores stores);

class FifoStoreChooser {
 public:
  // Writes smaller than this are plain whatever the setting: their reader waits for them,
  // and a trip through memory would cost it latency.
  static constexpr size_t kStreamingMinBytes = 4096;
  // Writes from this size are timed when sampled: long enough for two clock reads not to
  // count.
  static constexpr size_t kSampledMinBytes = 16384;
  // One sampled write in this many of the timed-size ones.
  static constexpr uint32_t kSampleEvery = 32;
  // One sample in this many times the kind of stores not in use, the rest the kind in use:
  // where the other kind is the slow one (plain stores in the slow phase, 20x slower), each of
  // its samples costs the time of many writes.
  static constexpr uint32_t kOtherEvery = 8;
  // Plain stores are kept while their copies run at least this share of the non-temporal
  // ones' speed. Measured inside Loom's allreduce on the AMD EPYC VM (docs/RESULTS.md): the
  // median plain copy at 0.85-0.9 of the non-temporal one where the cores share a cache, its
  // slowest tenth at 0.5; 0.05 in the slow phase, its fastest tenth at 0.2.
  static constexpr double kPlainShare = 0.25;
  // Each kind's speed is the median of its last samples: a copy cut by an interrupt or a
  // preemption does not decide.
  static constexpr int kWindow = 5;

  explicit FifoStoreChooser(FifoStores setting) : setting_(setting) {}

  // Whether a write of `bytes` uses non-temporal stores, and whether to time it (record()).
  struct Choice {
    bool streaming;
    bool timed;
  };
  Choice next(size_t bytes);
  // A timed write's duration; true when it changed the choice.
  bool record(const Choice& choice, size_t bytes, uint64_t nanoseconds);
  // What auto chose so far (the setting itself otherwise).
  bool streaming() const { return streaming_; }
  // The recent speed of one kind's timed copies, GB/s (0: none timed yet).
  double recentGbps(bool streaming) const;

 private:
  FifoStores setting_;
  bool streaming_ = setting_ == FifoStores::kStreaming;
  uint32_t sized_ = 0;       // writes of kSampledMinBytes or more
  uint32_t samples_ = 0;     // sampled so far
  // The last samples of plain [0] and non-temporal [1] copies, bytes per ns, in a ring.
  double samplesOf_[2][kWindow] = {};
  int count_[2] = {0, 0};  // samples taken of each kind
};

}  // namespace loom::transport
