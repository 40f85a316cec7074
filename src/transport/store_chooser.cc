#include "transport/store_chooser.h"

#include <algorithm>
#include <string>

#include "base/env.h"

namespace loom::transport {

const char* storesName(Stores stores) {
  switch (stores) {
    case Stores::kCached: return "cached";
    case Stores::kStreaming: return "streaming";
    case Stores::kAuto: return "auto";
  }
  return "?";
}

Status readStoresSetting(const char* variable, Stores* out, env::From from) {
  const std::string word = env::getOrDefault(variable, from);
  for (Stores s : {Stores::kCached, Stores::kStreaming, Stores::kAuto}) {
    if (word == storesName(s)) {
      *out = s;
      return Status::ok();
    }
  }
  return error(loomInvalidArgument, "%s=%s: expected cached, streaming or auto", variable, word.c_str());
}

StoreChooser::Choice StoreChooser::next(size_t bytes) {
  if (bytes < kStreamingMinBytes) return {false, false};
  if (rules_.setting != Stores::kAuto || bytes < kSampledMinBytes) return {streaming_, false};
  if (++sized_ % kSampleEvery != 0) return {streaming_, false};
  const bool other = ++samples_ % kOtherEvery == 0;
  return {other != streaming_, true, std::chrono::steady_clock::now()};
}

bool StoreChooser::ended(const Choice& choice, size_t bytes) {
  const auto elapsed = std::chrono::steady_clock::now() - choice.start;
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed).count();
  return record(choice, bytes, static_cast<uint64_t>(ns));
}

bool StoreChooser::record(const Choice& choice, size_t bytes, uint64_t nanoseconds) {
  const int kind = choice.streaming ? 1 : 0;
  samplesOf_[kind][count_[kind]++ % kWindow] =
      static_cast<double>(bytes) / static_cast<double>(nanoseconds > 0 ? nanoseconds : 1);
  if (count_[0] == 0 || count_[1] == 0) return false;
  const bool before = streaming_;
  const double share = streaming_ ? rules_.plainShare * rules_.margin : rules_.plainShare / rules_.margin;
  streaming_ = recentGbps(false) < share * recentGbps(true);
  return streaming_ != before;
}

double StoreChooser::recentGbps(bool streaming) const {
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
