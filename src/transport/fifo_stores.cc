#include "transport/fifo_stores.h"

#include <algorithm>

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
  const bool other = ++samples_ % kOtherEvery == 0;
  return {other != streaming_, true};
}

bool FifoStoreChooser::record(const Choice& choice, size_t bytes, uint64_t nanoseconds) {
  const int kind = choice.streaming ? 1 : 0;
  samplesOf_[kind][count_[kind]++ % kWindow] =
      static_cast<double>(bytes) / static_cast<double>(nanoseconds > 0 ? nanoseconds : 1);
  if (count_[0] == 0 || count_[1] == 0) return false;
  const bool before = streaming_;
  streaming_ = recentGbps(false) < kPlainShare * recentGbps(true);
  return streaming_ != before;
}

double FifoStoreChooser::recentGbps(bool streaming) const {
  const int kind = streaming ? 1 : 0;
  const int n = std::min(count_[kind], kWindow);
  if (n == 0) return 0;
  double sorted[kWindow];
  std::copy(samplesOf_[kind], samplesOf_[kind] + n, sorted);
  // nth_element, not sort: GCC 12 warns of sort's 16-element insertion pass on 5 doubles.
  std::nth_element(sorted, sorted + n / 2, sorted + n);
  if (n % 2 == 1) return sorted[n / 2];
  return (*std::max_element(sorted, sorted + n / 2) + sorted[n / 2]) / 2;
}

}  // namespace loom::transport
