// What the calibration measures with (calibrate.cc, calibrate_sizes.cc, calibrate_device.cc):
// rank 0's value on every rank, the slowest rank's time, the ranks' hosts, a timed allreduce,
// a communicator made under settings.
#pragma once

#include <loom/loom.h>

#include "algorithms/tuning_file.h"

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

// Whether a candidate whose calls took `ratio` of the built-in choice's time replaces it: only
// when 3 % faster, since on the shared machines we measure on the best of a few rounds still
// moves by a few percent.
inline bool clearlyFaster(double ratio) { return ratio < 0.97; }

// This host's name (gethostname).
std::string hostName();

// Every rank's hostName(), by rank (collective over `comm`).
std::vector<std::string> hostNames(loomComm_t comm, int rank, int nranks);

// Whether a tuning file can be written at `path`: its directory takes new files, and the
// file, if there is one, may be overwritten.
bool canWrite(const std::string& path);

// Writes `keys` of `profile` (every key for it when empty) and `sizes` to the tuning file
// `path` (saveTuningFile, this host's name as the machine) and prints them; 0, or 1 with
// the error printed.
int writeTuningFile(const std::string& path, const loom::CommProfile& profile, const std::vector<std::string>& keys,
                    const std::string& comment, const loom::DataPathSizes& sizes = {});

// Environment variables and their values, which Loom reads when a communicator is created.
using Settings = std::vector<std::pair<std::string, std::string>>;

// A communicator of the same ranks as `parent`, created under `settings` (the variables are
// set for its creation only, then restored); a device communicator on `device` when it is 0
// or more. Collective over `parent`.
class ScopedComm {
 public:
  ScopedComm(loomComm_t parent, int rank, int nranks, const Settings& settings, int device = -1);
  ~ScopedComm();
  ScopedComm(const ScopedComm&) = delete;
  ScopedComm& operator=(const ScopedComm&) = delete;
  loomComm_t get() const { return comm_; }

 private:
  loomComm_t comm_ = nullptr;
};

}  // namespace loomperf
