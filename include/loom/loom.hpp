// Header-only C++ layer over loom.h: RAII communicator and stream, errors as exceptions
// that carry loomGetLastError's message.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "loom/loom.h"

namespace loom::cxx {

class Error : public std::runtime_error {
 public:
  Error(loomResult_t code, const std::string& message)
      : std::runtime_error(message), code_(code) {}
  loomResult_t code() const { return code_; }

 private:
  loomResult_t code_;
};

// Throws Error when `result` is not loomSuccess; `comm` (may be NULL) names where to read
// the detailed message.
inline void check(loomResult_t result, loomComm_t comm = nullptr) {
  if (result == loomSuccess) return;
  throw Error(result, std::string(loomGetErrorString(result)) + ": " + loomGetLastError(comm));
}

// Owns a host stream.
class Stream {
 public:
  Stream() { check(loomStreamCreate(&stream_)); }
  ~Stream() {
    if (stream_ != nullptr) loomStreamDestroy(stream_);
  }
  Stream(Stream&& other) noexcept : stream_(std::exchange(other.stream_, nullptr)) {}
  Stream& operator=(Stream&& other) noexcept {
    std::swap(stream_, other.stream_);
    return *this;
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  loomStream_t get() const { return stream_; }
  void synchronize() { check(loomStreamSynchronize(stream_)); }

 private:
  loomStream_t stream_ = nullptr;
};

// Owns a communicator; destroys it when it goes out of scope.
class Comm {
 public:
  static Comm fromEnv(loomConfig_t* config = nullptr) {
    loomComm_t c = nullptr;
    check(loomCommInitFromEnv(&c, config));
    return Comm(c);
  }
  static Comm initRank(int nranks, const loomUniqueId& id, int rank, loomConfig_t* config = nullptr) {
    loomComm_t c = nullptr;
    check(loomCommInitRankConfig(&c, nranks, id, rank, config));
    return Comm(c);
  }
  explicit Comm(loomComm_t comm) : comm_(comm) {}
  ~Comm() {
    if (comm_ != nullptr) loomCommDestroy(comm_);
  }
  Comm(Comm&& other) noexcept : comm_(std::exchange(other.comm_, nullptr)) {}
  Comm& operator=(Comm&& other) noexcept {
    std::swap(comm_, other.comm_);
    return *this;
  }
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  loomComm_t get() const { return comm_; }
  int rank() const {
    int r = -1;
    check(loomCommUserRank(comm_, &r), comm_);
    return r;
  }
  int size() const {
    int n = 0;
    check(loomCommCount(comm_, &n), comm_);
    return n;
  }
  // A communicator of the ranks that passed the same color; empty for LOOM_SPLIT_NOCOLOR.
  Comm split(int color, int key, loomConfig_t* config = nullptr) const {
    loomComm_t c = nullptr;
    check(loomCommSplit(comm_, color, key, &c, config), comm_);
    return Comm(c);
  }
  // A communicator of the ranks not in `excluded` (which do not call; they may be dead).
  Comm shrink(const std::vector<int>& excluded, int flags = LOOM_SHRINK_DEFAULT,
              loomConfig_t* config = nullptr) const {
    loomComm_t c = nullptr;
    check(loomCommShrink(comm_, excluded.data(), static_cast<int>(excluded.size()), &c, config, flags), comm_);
    return Comm(c);
  }
  // Ends the calls in progress; the communicator then only splits, shrinks and is destroyed.
  void revoke() { check(loomCommRevoke(comm_, LOOM_REVOKE_DEFAULT), comm_); }
  explicit operator bool() const { return comm_ != nullptr; }

 private:
  loomComm_t comm_ = nullptr;
};

// Owns an op from loomRedOpCreatePreMulSum on one communicator (which must outlive it).
class PreMulSum {
 public:
  PreMulSum(const Comm& comm, void* scalar, loomDataType_t type, loomScalarResidence_t residence)
      : comm_(comm.get()) {
    check(loomRedOpCreatePreMulSum(&op_, scalar, type, residence, comm_), comm_);
  }
  ~PreMulSum() {
    if (comm_ != nullptr) loomRedOpDestroy(op_, comm_);
  }
  PreMulSum(PreMulSum&& other) noexcept : comm_(std::exchange(other.comm_, nullptr)), op_(other.op_) {}
  PreMulSum& operator=(PreMulSum&& other) noexcept {
    std::swap(comm_, other.comm_);
    std::swap(op_, other.op_);
    return *this;
  }
  PreMulSum(const PreMulSum&) = delete;
  PreMulSum& operator=(const PreMulSum&) = delete;

  loomRedOp_t op() const { return op_; }

 private:
  loomComm_t comm_ = nullptr;
  loomRedOp_t op_ = loomSum;
};

}  // namespace loom::cxx
