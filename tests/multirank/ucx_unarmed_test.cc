// A UCX worker that never arms its wakeup descriptor (ucp_worker_arm answers "busy" every
// time, as while events keep coming in) must not hide from a waiting call what it heeds
// besides its links (a revoke or abort, the peers' failure notices), nor keep the next call
// from beginning. This binary defines ucp_worker_arm itself, so Loom's calls to it (linked in
// statically) come here.
#include <gtest/gtest.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "multirank/harness.h"

extern "C" ucs_status_t ucp_worker_arm(ucp_worker_h) { return UCS_ERR_BUSY; }

namespace {

using Clock = std::chrono::steady_clock;

// Rank 0 revokes from a second thread while an allreduce waits for rank 1, which has not
// called. The waiting call's link never arms, so its wait never blocks in poll; it must still
// look at the revoke's descriptor and end long before the 30 s timeout. The calls before it
// (links set up, then a barrier) end too: the thread that progresses the worker between runs
// lets each run begin.
TEST(UcxUnarmed, ARevokeEndsAWaitingCall) {
  loomtest::ScopedEnv env;
  env.set("LOOM_TRANSPORTS", "ucx");
  loomtest::RankOptions options;
  options.timeoutMs = 30000;
  loomtest::runRanks(2, loomtest::Mode::kProcesses, [](loomComm_t comm, int rank) {
    std::vector<float> values(1000, 1.0f);
    LOOM_ASSERT_OK(loomAllReduce(values.data(), values.data(), values.size(), loomFloat32, loomSum, comm, nullptr),
                   comm);
    EXPECT_EQ(values.front(), 2.0f);
    LOOM_ASSERT_OK(loomBarrier(comm, nullptr), comm);
    if (rank == 0) {
      loomResult_t result = loomSuccess;
      double seconds = 0;
      std::thread caller([&] {
        const auto start = Clock::now();
        result = loomAllReduce(values.data(), values.data(), values.size(), loomFloat32, loomSum, comm, nullptr);
        seconds = std::chrono::duration<double>(Clock::now() - start).count();
      });
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      LOOM_EXPECT_OK(loomCommRevoke(comm, LOOM_REVOKE_DEFAULT), comm);
      caller.join();
      EXPECT_NE(result, loomSuccess);
      EXPECT_LT(seconds, 10.0);
      const std::string error = loomGetLastError(comm);
      EXPECT_NE(error.find("loomCommRevoke"), std::string::npos) << error;
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(1000));  // silent meanwhile
      LOOM_EXPECT_OK(loomCommRevoke(comm, LOOM_REVOKE_DEFAULT), comm);
    }
  }, options);
}

}  // namespace
