// The device FIFO protocol (src/device/fifo.h) on host threads: the code the plan kernel runs,
// with the CPU emulation's memory-ordering policy (host_worker.h). A sender and a receiver,
// each a worker of one or several threads, move steps of every size through a FIFO of few
// slots on both wires, and meet the failures the protocol must name: a size or header that
// differs, an abort, a failed peer.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "device/fifo.h"
#include "device/host_worker.h"

namespace loom::device {
namespace {

// Memory both ends of one direction share, laid out by hand (the communicator uses
// ChannelLayout; the protocol only needs the pointers).
struct Pipe {
  FifoShape shape;
  std::vector<uint64_t> words = std::vector<uint64_t>(64, 0);  // tail, head, llHead
  std::vector<SlotInfo> info;
  std::vector<uint8_t> data;
  std::vector<LLLine> ll;
  uint64_t sendCounters[2] = {0, 0}, recvCounters[2] = {0, 0};
  uint32_t senderStatus = 0, receiverStatus = 0;

  explicit Pipe(FifoShape s)
      : shape(s), info(s.slots), data(static_cast<size_t>(s.slots) * s.slotBytes), ll(static_cast<size_t>(s.llSlots) * s.llLines) {}

  Connection end(bool sender) {
    Connection c{};
    c.tail = &words[0];
    c.head = &words[8];
    c.llHead = &words[16];
    c.info = info.data();
    c.data = data.data();
    c.ll = ll.data();
    c.counters = sender ? sendCounters : recvCounters;
    c.peerStatus = sender ? &receiverStatus : &senderStatus;
    c.ownStatus = sender ? &senderStatus : &receiverStatus;
    c.peer = sender ? 1 : 0;
    c.ready = 1;
    c.shape = shape;
    return c;
  }
};

// One side's kernel state: what a Ctx needs to record a failure.
struct Side {
  LaunchArgs args{};
  LaunchState state{};
  Control control{};
  Connection conn{};
  explicit Side(int rank) {
    args.rank = rank;
    args.state = &state;
    args.control = &control;
    args.conns = &conn;
    args.connCount = 1;
  }
};

// Runs body(worker) on `threads` threads forming one worker.
void runWorker(int threads, const std::function<void(HostWorker&)>& body) {
  HostWorkerGroup group(threads);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      HostWorker w(threads > 1 ? &group : nullptr, t);
      body(w);
    });
  }
  for (std::thread& t : pool) t.join();
}

// range() is called by every thread of the worker together, each taking its share;
// word() by the thread that polled the word.
struct CopyInto {
  HostWorker& w;
  uint8_t* dst;
  void range(uint64_t at, const uint8_t* fifo, uint64_t n) { copyBytes<true>(w, dst + at, fifo, n); }
  void word(uint64_t at, uint64_t v, uint64_t n) { std::memcpy(dst + at, &v, n); }
};

const uint8_t kHeader[24] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24};

// Sends every size in `sizes` as one step each, in order, over `wire`; the receiver copies
// them out. Returns what arrived, step by step; both sides' results in *sent / *received.
struct Transfer {
  bool sent = true, received = true;
  std::vector<std::vector<uint8_t>> out;
};

Transfer transfer(Pipe& pipe, Side& sender, Side& receiver, Wire wire, const std::vector<std::vector<uint8_t>>& steps,
                  int threads, const uint8_t* senderHeader, const uint8_t* receiverHeader,
                  const std::vector<uint64_t>* expectedBytes = nullptr,
                  std::chrono::milliseconds pauseBeforeStep = std::chrono::milliseconds(0)) {
  Transfer t;
  t.out.resize(steps.size());
  sender.conn = pipe.end(true);
  receiver.conn = pipe.end(false);
  std::thread send([&] {
    runWorker(threads, [&](HostWorker& w) {
      Ctx<HostWorker> ctx{w, sender.args, 1, 0};
      for (const std::vector<uint8_t>& step : steps) {
        if (w.thread() == 0) std::this_thread::sleep_for(pauseBeforeStep);
        w.sync();
        uint64_t done = sender.conn.counters[wire == Wire::kSimple ? 0 : 1];
        const bool ok = wire == Wire::kSimple
                            ? sendSimple(ctx, sender.conn, step.data(), step.size(), senderHeader, &done)
                            : sendLowLatency(ctx, sender.conn, step.data(), step.size(), senderHeader, &done);
        w.sync();
        if (w.thread() == 0) sender.conn.counters[wire == Wire::kSimple ? 0 : 1] = done;
        if (!ok) {
          if (w.thread() == 0) t.sent = false;
          return;
        }
        w.sync();
      }
    });
  });
  runWorker(threads, [&](HostWorker& w) {
    Ctx<HostWorker> ctx{w, receiver.args, 1, 0};
    for (size_t i = 0; i < steps.size(); ++i) {
      const uint64_t bytes = expectedBytes != nullptr ? (*expectedBytes)[i] : steps[i].size();
      if (w.thread() == 0) t.out[i].assign(bytes, 0xee);
      w.sync();
      CopyInto into{w, t.out[i].data()};
      uint64_t done = receiver.conn.counters[wire == Wire::kSimple ? 0 : 1];
      const bool ok = wire == Wire::kSimple ? recvSimple(ctx, receiver.conn, bytes, receiverHeader, into, &done)
                                            : recvLowLatency(ctx, receiver.conn, bytes, receiverHeader, into, &done);
      w.sync();
      if (w.thread() == 0) receiver.conn.counters[wire == Wire::kSimple ? 0 : 1] = done;
      if (!ok) {
        if (w.thread() == 0) t.received = false;
        return;
      }
      w.sync();
    }
  });
  // A receiver that gave up leaves the sender waiting for room: its status word stops it.
  send.join();
  return t;
}

// A worker of `threads` threads receiving 4 KiB over `receiver`'s connection, whose sender
// sends nothing: whether it got them (never, unless the test's stopper fails to stop it).
bool receiveAlone(Side& receiver, Wire wire, int threads) {
  std::vector<uint8_t> out(4096);
  bool ok = true;
  runWorker(threads, [&](HostWorker& w) {
    Ctx<HostWorker> ctx{w, receiver.args, 1, 0};
    CopyInto into{w, out.data()};
    uint64_t done = 0;
    const bool got = wire == Wire::kSimple ? recvSimple(ctx, receiver.conn, out.size(), nullptr, into, &done)
                                           : recvLowLatency(ctx, receiver.conn, out.size(), nullptr, into, &done);
    if (w.thread() == 0) ok = got;
  });
  return ok;
}

std::vector<uint8_t> randomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (uint8_t& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

// 4 simple slots of 2 KiB; 4 LL slots of 4 control lines + 60 data lines (480 bytes).
constexpr FifoShape kSmall{4, 2048, 4, 64};

struct Params {
  Wire wire;
  int threads;
};

class FifoTransfer : public testing::TestWithParam<Params> {};

// Steps of every size around the slot boundaries, many more slots in all than the FIFO has,
// some carrying the call's header: each arrives whole and in order.
TEST_P(FifoTransfer, EverySizeArrivesWholeAndInOrder) {
  const Params p = GetParam();
  const uint64_t slot = p.wire == Wire::kSimple ? kSmall.slotBytes : kSmall.llPayload();
  std::vector<std::vector<uint8_t>> steps;
  uint32_t seed = 1;
  for (uint64_t n : {uint64_t{0}, uint64_t{1}, uint64_t{7}, uint64_t{8}, uint64_t{9}, slot - 1, slot, slot + 1,
                     3 * slot + 5, 4 * slot, 9 * slot + 17, uint64_t{100003}}) {
    steps.push_back(randomBytes(n, seed++));
  }
  Pipe pipe(kSmall);
  Side sender(0), receiver(1);
  for (const uint8_t* header : {static_cast<const uint8_t*>(nullptr), kHeader}) {
    Transfer t = transfer(pipe, sender, receiver, p.wire, steps, p.threads, header, header);
    ASSERT_TRUE(t.sent);
    ASSERT_TRUE(t.received) << "failure kind " << receiver.control.error.kind;
    for (size_t i = 0; i < steps.size(); ++i) EXPECT_EQ(t.out[i], steps[i]) << "step " << i << " of " << steps[i].size() << " bytes";
  }
  EXPECT_EQ(receiver.control.error.complete, 0u);
  // Both ends count the same slots: the next launch starts where this one stopped.
  EXPECT_EQ(pipe.sendCounters[0], pipe.recvCounters[0]);
  EXPECT_EQ(pipe.sendCounters[1], pipe.recvCounters[1]);
  EXPECT_GT(pipe.sendCounters[p.wire == Wire::kSimple ? 0 : 1], 2u * kSmall.slots);
}

INSTANTIATE_TEST_SUITE_P(Wires, FifoTransfer,
                         testing::Values(Params{Wire::kSimple, 1}, Params{Wire::kSimple, 4},
                                         Params{Wire::kLowLatency, 1}, Params{Wire::kLowLatency, 4}),
                         [](const auto& info) {
                           return std::string(info.param.wire == Wire::kSimple ? "simple" : "ll") + "_" +
                                  std::to_string(info.param.threads) + "threads";
                         });

class FifoFailures : public testing::TestWithParam<Wire> {};

// The receiver expects 100 bytes, the sender sends 96: the receiver names both sizes, and
// its status word stops the sender too.
TEST_P(FifoFailures, ADifferentSizeIsNamed) {
  Pipe pipe(kSmall);
  Side sender(0), receiver(1);
  const std::vector<uint64_t> expected = {100};
  Transfer t = transfer(pipe, sender, receiver, GetParam(), {randomBytes(96, 3)}, 2, nullptr, nullptr, &expected);
  EXPECT_FALSE(t.received);
  const ErrorRecord& e = receiver.control.error;
  ASSERT_EQ(e.complete, 1u);
  EXPECT_EQ(e.kind, kWrongBytes);
  EXPECT_EQ(e.expected, 100u);
  EXPECT_EQ(e.got, 96u);
  EXPECT_EQ(pipe.receiverStatus, 2u) << "the receiver (rank 1) tells its peer it failed: rank + 1";
}

TEST_P(FifoFailures, ADifferentHeaderIsNamed) {
  Pipe pipe(kSmall);
  Side sender(0), receiver(1);
  uint8_t other[24];
  std::memcpy(other, kHeader, sizeof other);
  other[5] ^= 0x40;
  Transfer t = transfer(pipe, sender, receiver, GetParam(), {randomBytes(5000, 4)}, 2, other, kHeader);
  EXPECT_FALSE(t.received);
  const ErrorRecord& e = receiver.control.error;
  ASSERT_EQ(e.complete, 1u);
  EXPECT_EQ(e.kind, kWrongHeader);
  EXPECT_EQ(std::memcmp(e.header, other, sizeof other), 0) << "the record holds the peer's header";
}

TEST_P(FifoFailures, AHeaderWhereNoneIsExpectedIsOutOfStep) {
  Pipe pipe(kSmall);
  Side sender(0), receiver(1);
  Transfer t = transfer(pipe, sender, receiver, GetParam(), {randomBytes(64, 5)}, 1, kHeader, nullptr);
  EXPECT_FALSE(t.received);
  EXPECT_EQ(receiver.control.error.kind, kOutOfStep);
}

// A receiver waiting for bytes that never come gives up once its rank is aborted, or once
// its peer's status says the peer failed, naming which.
TEST_P(FifoFailures, AWaitEndsOnAbortAndOnAFailedPeer) {
  for (bool byAbort : {true, false}) {
    Pipe pipe(kSmall);
    Side receiver(1);
    receiver.conn = pipe.end(false);
    std::thread stopper([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      if (byAbort) {
        __atomic_store_n(&receiver.control.abort, static_cast<uint32_t>(kAbortedByUser), __ATOMIC_RELEASE);
      } else {
        __atomic_store_n(&pipe.senderStatus, 1u, __ATOMIC_RELEASE);  // rank 0 failed
      }
    });
    const bool ok = receiveAlone(receiver, GetParam(), 3);
    stopper.join();
    EXPECT_FALSE(ok);
    const ErrorRecord& e = receiver.control.error;
    ASSERT_EQ(e.complete, 1u);
    EXPECT_EQ(e.kind, byAbort ? kStopped : kPeerFailed);
    if (!byAbort) {
      EXPECT_EQ(e.got, 1u);
    }
    EXPECT_EQ(e.peer, -1) << "a bare Ctx names no peer";
  }
}

// timeoutMs bounds each wait (LaunchArgs::waitTimeoutNs), not a launch: a receiver whose
// sender never sends times out, naming what it waited for, and tells its peer; steps that
// come 40 ms apart, 0.5 s in all, arrive under a 150 ms deadline.
TEST_P(FifoFailures, AWaitTimesOutWhenNothingMovesButASlowTransferDoesNot) {
  constexpr uint64_t kDeadlineNs = 150'000'000;
  {
    Pipe pipe(kSmall);
    Side receiver(1);
    receiver.args.waitTimeoutNs = kDeadlineNs;
    receiver.conn = pipe.end(false);
    const auto start = std::chrono::steady_clock::now();
    const bool ok = receiveAlone(receiver, GetParam(), 2);
    const auto waited = std::chrono::steady_clock::now() - start;
    EXPECT_FALSE(ok);
    EXPECT_GE(waited, std::chrono::nanoseconds(kDeadlineNs));
    EXPECT_LT(waited, std::chrono::seconds(10));
    const ErrorRecord& e = receiver.control.error;
    ASSERT_EQ(e.complete, 1u);
    EXPECT_EQ(e.kind, kTimedOut);
    EXPECT_EQ(e.waitKind, GetParam() == Wire::kSimple ? kWaitPiece : kWaitLine);
    EXPECT_EQ(pipe.receiverStatus, 2u) << "the receiver (rank 1) tells its peer it failed: rank + 1";
  }
  Pipe pipe(kSmall);
  Side sender(0), receiver(1);
  sender.args.waitTimeoutNs = receiver.args.waitTimeoutNs = kDeadlineNs;
  std::vector<std::vector<uint8_t>> steps;
  for (uint32_t i = 0; i < 12; ++i) steps.push_back(randomBytes(3000, 40 + i));
  const auto start = std::chrono::steady_clock::now();
  Transfer t = transfer(pipe, sender, receiver, GetParam(), steps, 2, nullptr, nullptr, nullptr,
                        std::chrono::milliseconds(40));
  ASSERT_GT(std::chrono::steady_clock::now() - start, std::chrono::nanoseconds(3 * kDeadlineNs));
  EXPECT_TRUE(t.sent);
  EXPECT_TRUE(t.received) << "failure kind " << receiver.control.error.kind;
  EXPECT_EQ(receiver.control.error.complete, 0u);
  EXPECT_EQ(t.out, steps);
}

INSTANTIATE_TEST_SUITE_P(Wires, FifoFailures, testing::Values(Wire::kSimple, Wire::kLowLatency),
                         [](const auto& info) { return std::string(info.param == Wire::kSimple ? "simple" : "ll"); });

// A wait for this rank's own step is left to the worker running that step while every worker
// of the launch runs (that one times out itself if stuck); when some never started, the step
// may be theirs, and the wait times out.
TEST(FifoDeadlines, AStepWaitTimesOutOnlyWhileWorkersAreMissing) {
  for (uint32_t started : {2u, 1u}) {
    Side side(0);
    side.args.waitTimeoutNs = 50'000'000;
    side.args.workers = 2;
    side.state.workersStarted = started;
    uint64_t flag = 0;
    std::thread finisher([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      __atomic_store_n(&flag, uint64_t{1}, __ATOMIC_RELEASE);
    });
    bool ok = false;
    runWorker(1, [&](HostWorker& w) {
      Ctx<HostWorker> ctx{w, side.args, 1, 0};
      ok = waitAtLeast(ctx, &flag, 1, nullptr, Wait{kWaitStep, 3});
    });
    finisher.join();
    if (started == 2) {
      EXPECT_TRUE(ok) << "all workers run: the step's own worker keeps the deadline";
      EXPECT_EQ(side.control.error.complete, 0u);
    } else {
      EXPECT_FALSE(ok);
      ASSERT_EQ(side.control.error.complete, 1u);
      EXPECT_EQ(side.control.error.kind, kTimedOut);
      EXPECT_EQ(side.control.error.waitKind, kWaitStep);
      EXPECT_EQ(side.control.error.waitStep, 3u);
      EXPECT_EQ(side.control.error.workersStarted, 1u);
    }
  }
}

}  // namespace
}  // namespace loom::device
