// Runs a test body on N ranks, either as threads of this process (loomCommInitAll) or as
// forked processes (loomCommInitRank, with rank 0's unique id handed over pipes), so every
// collective test runs both ways with the same code.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/free_port.h"
#include "loom/loom.h"

namespace loomtest {

enum class Mode { kThreads, kProcesses };

// Sets (or, with "", unsets) environment variables until the end of the scope; forked
// ranks inherit them.
class ScopedEnv {
 public:
  ScopedEnv() = default;
  ScopedEnv(const char* name, const std::string& value) { set(name, value); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  ~ScopedEnv();
  ScopedEnv& set(const char* name, const std::string& value);

 private:
  std::vector<std::pair<const char*, std::optional<std::string>>> saved_;
};

// A file of `contents` in a fresh directory under /tmp, both removed at the end of the scope
// (a LOOM_TUNING_FILE, say). A failure to write it fails the test.
class ScopedFile {
 public:
  explicit ScopedFile(const std::string& contents);
  ~ScopedFile();
  ScopedFile(const ScopedFile&) = delete;
  ScopedFile& operator=(const ScopedFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string dir_, path_;
};

std::string modeName(Mode mode);

// The log file this process writes: LOOM_DEBUG_FILE with %p expanded ("" where it is unset).
std::string debugLogPath();

struct RankOptions {
  int timeoutMs = 20000;      // communicator config.timeoutMs
  int initTimeoutMs = 20000;  // config.initTimeoutMs
  int deadlineMs = 60000;     // the harness kills ranks that run longer
  int device = -1;            // config.device of every rank (-1: host memory)
  // Processes only: runs in each rank's process before it makes its communicator (to give
  // ranks their own environment, e.g. LOOM_HOSTID).
  std::function<void(int rank)> beforeInit;
};

// body(comm, rank) runs on every rank concurrently; gtest failures inside it fail the
// test (in processes, through the child's exit status, with its output on stdout).
void runRanks(int nranks, Mode mode, const std::function<void(loomComm_t, int)>& body,
              const RankOptions& options = RankOptions());

// Runs body(rank) in nranks forked processes without making a communicator (for tests of
// init itself); a child's failures or death fail the test.
void runProcesses(int nranks, const std::function<void(int)>& body, int deadlineMs = 60000);

}  // namespace loomtest

// Fails the test with the result's name and loomGetLastError when `call` does not succeed.
#define LOOM_EXPECT_OK(call, comm)                                                         \
  do {                                                                                     \
    loomResult_t r_ = (call);                                                              \
    EXPECT_EQ(r_, loomSuccess) << #call << ": " << loomGetErrorString(r_) << ": "          \
                               << loomGetLastError(comm);                                  \
  } while (0)
#define LOOM_ASSERT_OK(call, comm)                                                         \
  do {                                                                                     \
    loomResult_t r_ = (call);                                                              \
    ASSERT_EQ(r_, loomSuccess) << #call << ": " << loomGetErrorString(r_) << ": "          \
                               << loomGetLastError(comm);                                  \
  } while (0)
