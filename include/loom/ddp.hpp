// Header-only C++ layer over ddp.h: a reducer that is destroyed with its scope, errors as
// loom::cxx::Error exceptions carrying loomDdpGetLastError's message.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "loom/ddp.h"
#include "loom/loom.hpp"

namespace loom::cxx {

// Throws Error when `result` is not loomSuccess, with the reducer's message (reducer may be
// NULL: the calling thread's last DDP error).
inline void checkDdp(loomResult_t result, loomDdpReducer_t reducer = nullptr) {
  if (result == loomSuccess) return;
  throw Error(result, std::string(loomGetErrorString(result)) + ": " + loomDdpGetLastError(reducer));
}

class Reducer {
 public:
  // Collective over comm; see loomDdpReducerCreate.
  Reducer(loomComm_t comm, const std::vector<loomDdpTensor_t>& gradients,
          const loomDdpOptions_t& options = LOOM_DDP_OPTIONS_INITIALIZER) {
    checkDdp(loomDdpReducerCreate(&reducer_, comm, gradients.data(), static_cast<int>(gradients.size()),
                                  &options));
  }
  ~Reducer() {
    if (reducer_ != nullptr) loomDdpReducerDestroy(reducer_);
  }
  Reducer(Reducer&& other) noexcept : reducer_(std::exchange(other.reducer_, nullptr)) {}
  Reducer& operator=(Reducer&& other) noexcept {
    std::swap(reducer_, other.reducer_);
    return *this;
  }
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  void markReady(int index) { checkDdp(loomDdpMarkReady(reducer_, index), reducer_); }
  void finish() { checkDdp(loomDdpFinish(reducer_), reducer_); }
  void setSync(bool sync) { checkDdp(loomDdpSetSync(reducer_, sync ? 1 : 0), reducer_); }

  // The bucket of each gradient.
  std::vector<int> bucketOf(size_t ngradients) const {
    std::vector<int> out(ngradients);
    checkDdp(loomDdpGetBuckets(reducer_, out.data(), nullptr, nullptr), reducer_);
    return out;
  }
  int rebuilds() const {
    int n = 0;
    checkDdp(loomDdpGetBuckets(reducer_, nullptr, nullptr, &n), reducer_);
    return n;
  }

  loomDdpReducer_t get() const { return reducer_; }

 private:
  loomDdpReducer_t reducer_ = nullptr;
};

// Collective: every rank's tensors = root's (loomDdpBroadcastTensors).
inline void broadcastTensors(loomComm_t comm, const std::vector<loomDdpTensor_t>& tensors, int root = 0) {
  checkDdp(loomDdpBroadcastTensors(comm, tensors.data(), static_cast<int>(tensors.size()), root));
}

}  // namespace loom::cxx
