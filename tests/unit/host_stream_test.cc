// The host stream's queue (base/host_stream.h): work runs one item at a time in order, on the
// progress thread or on a caller that synchronizes while work waits, and errors reach the
// next synchronize.
#include "base/host_stream.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace loom {
namespace {

TEST(HostStream, WorkRunsInOrderOneItemAtATime) {
  HostStream stream;
  std::vector<int> order;
  std::atomic<int> inside{0};
  bool overlapped = false;
  for (int i = 0; i < 200; ++i) {
    stream.enqueue([&, i] {
      overlapped = overlapped || inside.fetch_add(1) != 0;
      order.push_back(i);
      if (i % 7 == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
      inside.fetch_sub(1);
      return Status::ok();
    });
    // Synchronizing now and then, so that some items run on this thread and some on the
    // progress thread, beside items enqueued while another runs.
    if (i % 10 == 9) {
      ASSERT_TRUE(stream.synchronize().isOk());
    }
  }
  ASSERT_TRUE(stream.synchronize().isOk());
  EXPECT_FALSE(overlapped);
  ASSERT_EQ(order.size(), 200u);
  for (int i = 0; i < 200; ++i) EXPECT_EQ(order[static_cast<size_t>(i)], i);
}

TEST(HostStream, SynchronizeReturnsTheFirstErrorOnce) {
  HostStream stream;
  stream.enqueue([] { return Status::ok(); });
  stream.enqueue([] { return error(loomRemoteError, "first"); });
  stream.enqueue([] { return error(loomSystemError, "second"); });
  Status s = stream.synchronize();
  EXPECT_EQ(s.code(), loomRemoteError);
  EXPECT_EQ(s.message(), "first");
  EXPECT_TRUE(stream.synchronize().isOk());
}

// A caller that synchronizes right after enqueueing finds the progress thread asleep, and
// runs the work itself rather than waking it and waiting for it: no hand-off. In 100 tries
// (the progress thread parked each time) at least one must run on the caller: the progress
// thread winning every race to a mutex the caller takes a microsecond after enqueueing
// would mean synchronize never runs work.
TEST(HostStream, SynchronizeRunsQueuedWorkOnTheCallersThread) {
  HostStream stream;
  int onCaller = 0;
  for (int trial = 0; trial < 100; ++trial) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));  // the progress thread parks
    std::thread::id ranOn;
    stream.enqueue([&] {
      ranOn = std::this_thread::get_id();
      return Status::ok();
    });
    ASSERT_TRUE(stream.synchronize().isOk());
    onCaller += ranOn == std::this_thread::get_id();
  }
  std::printf("%d of 100 items ran on the synchronizing thread\n", onCaller);
  EXPECT_GT(onCaller, 0);
}

}  // namespace
}  // namespace loom
