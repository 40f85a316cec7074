// What each rank of a multi-rank test came to (a call's result, its time and message), in
// memory shared with ranks forked as processes, for the parent to judge all ranks together.
#pragma once

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "loom/loom.h"

namespace loomtest {

struct RankRecord {
  int result;  // -1: never returned
  double seconds;
  int asyncError;
  int at;  // where the rank ended, for tests that number their calls (-1: not said)
  char message[400];
};

class SharedRecords {
 public:
  explicit SharedRecords(int nranks) : n_(nranks) {
    bytes_ = sizeof(RankRecord) * static_cast<size_t>(nranks);
    void* p = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    records_ = p == MAP_FAILED ? nullptr : static_cast<RankRecord*>(p);
    for (int r = 0; r < n_ && records_ != nullptr; ++r) {
      records_[r].result = -1;
      records_[r].seconds = 0;
      records_[r].asyncError = -1;
      records_[r].at = -1;
      records_[r].message[0] = '\0';
    }
  }
  ~SharedRecords() {
    if (records_ != nullptr) ::munmap(records_, bytes_);
  }
  bool ok() const { return records_ != nullptr; }
  RankRecord& operator[](int r) { return records_[r]; }
  std::string summary() const {
    std::string text;
    for (int r = 0; r < n_; ++r) {
      const RankRecord& rec = records_[r];
      text += "\n  rank " + std::to_string(r) + ": " +
              (rec.result < 0 ? std::string("did not return")
                              : std::string(loomGetErrorString(static_cast<loomResult_t>(rec.result)))) +
              (rec.at >= 0 ? " at " + std::to_string(rec.at) : std::string()) + " after " +
              std::to_string(rec.seconds) + " s: " + rec.message;
    }
    return text;
  }

 private:
  int n_;
  size_t bytes_;
  RankRecord* records_;
};

// Times one call and records its result, message and the communicator's async error.
template <typename Call>
void record(RankRecord& rec, loomComm_t comm, Call call) {
  auto start = std::chrono::steady_clock::now();
  loomResult_t r = call();
  rec.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::snprintf(rec.message, sizeof rec.message, "%s", r == loomSuccess ? "" : loomGetLastError(comm));
  loomResult_t async = loomSuccess;
  if (loomCommGetAsyncError(comm, &async) == loomSuccess) rec.asyncError = async;
  rec.result = r;
}

// Ranks whose calls differ: every rank returned within `seconds`, with loomInvalidUsage or
// loomRemoteError, and at least one named the mismatch.
inline void expectMismatchFoundWithin(SharedRecords& records, int nranks, double seconds) {
  const std::string summary = records.summary();
  int named = 0;
  for (int r = 0; r < nranks; ++r) {
    ASSERT_GE(records[r].result, 0) << "rank " << r << " never returned" << summary;
    const auto result = static_cast<loomResult_t>(records[r].result);
    EXPECT_TRUE(result == loomInvalidUsage || result == loomRemoteError) << "rank " << r << summary;
    EXPECT_LT(records[r].seconds, seconds) << "rank " << r << summary;
    if (result != loomInvalidUsage) continue;
    ++named;
    EXPECT_NE(std::string(records[r].message).find("mismatched calls"), std::string::npos) << records[r].message;
  }
  EXPECT_GE(named, 1) << summary;
}

}  // namespace loomtest
