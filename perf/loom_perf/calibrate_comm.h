// What the calibration measures with (calibrate.cc, calibrate_sizes.cc): rank 0's value on
// every rank, the slowest rank's time, a timed allreduce, a communicator made under settings.
#pragma once

#include <loom/loom.h>

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace loomperf {

// Rank 0's value everywhere.
double fromRankZero(double value, loomComm_t comm);

// The largest of the ranks' values, everywhere.
double slowest(double value, loomComm_t comm);

// µs of one float32 sum allreduce of `bytes` on `comm`, the slowest rank's mean over `iters`
// calls after two untimed ones.
double allReduceUs(loomComm_t comm, size_t bytes, int iters);

// Environment variables and their values, which Loom reads when a communicator is created.
using Settings = std::vector<std::pair<std::string, std::string>>;

// A communicator of the same ranks as `parent`, created under `settings` (the variables are
// set for its creation only, then restored). Collective over `parent`.
class ScopedComm {
 public:
  ScopedComm(loomComm_t parent, int rank, int nranks, const Settings& settings);
  ~ScopedComm();
  ScopedComm(const ScopedComm&) = delete;
  ScopedComm& operator=(const ScopedComm&) = delete;
  loomComm_t get() const { return comm_; }

 private:
  loomComm_t comm_ = nullptr;
};

}  // namespace loomperf
