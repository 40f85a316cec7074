#include "transport/fifo_stores.h"

namespace loom::transport {

const char* fifoStoresName(FifoStores stores) {
  switch (stores) {
    case FifoStores::kCached: return "cached";
    case FifoStores::kStreaming: return "streaming";
    case FifoStores::kAuto: return "auto";
  }
  return "?";
}

FifoStoreChooser::Choice FifoStoreChooser::next(size_t bytes) {
  if (bytes < kStreamingMinBytes) return {false, false};
  if (setting_ != FifoStores::kAuto || bytes < kSampledMinBytes) return {streaming_, false};
  if (++sized_ % kSampleEvery != 0) return {streaming_, false};
  // Plain and non-temporal in turn: each kind's speed stays recent.
  return {samples_++ % 2 == 1, true};
}

bool FifoStoreChooser::record(const Choice& choice, size_t bytes, uint64_t nanoseconds) {
  const double speed = static_cast<double>(bytes) / static_cast<double>(nanoseconds > 0 ? nanoseconds : 1);
  double& recent = bytesPerNs_[choice.streaming ? 1 : 0];
  // A moving average over the last few samples: one copy cut by an interrupt does not decide.
  recent = recent == 0 ? speed : recent + (speed - recent) / 4;
  if (bytesPerNs_[0] == 0 || bytesPerNs_[1] == 0) return false;
  const bool before = streaming_;
  streaming_ = bytesPerNs_[0] < kPlainShare * bytesPerNs_[1];
  return streaming_ != before;
}

}  // namespace loom::transport
