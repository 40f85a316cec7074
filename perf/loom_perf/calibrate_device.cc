// Calibrating a device communicator's constants (calibrate_device.h). Each constant is the
// value at which the cost model predicts what a call measured, on device communicators forced
// to the ring (LOOM_ALGO=ring) and to one wire (LOOM_PROTO), solved in this order so that each
// call's time is explained by one unknown:
//   device.copy.gbps           rank 0 alone (a communicator of one rank), an out-of-place
//                              allreduce of kLargeBytes: the plan kernel's local copy
//   device.simple.latency_us   an allreduce of 8 B on the simple wire
//   device.simple.gbps         an allgather of kLargeBytes on the simple wire (no reduction)
//   device.reduce.gbps         an allreduce of kLargeBytes on the simple wire
//   device.ll.latency_us       an allreduce of 8 B on the low-latency wire
//   device.ll.gbps             an allreduce of kLowLatencyBytes on the low-latency wire
// (each latency solved again once its wire's bandwidth is known). A call runs in a loop on the
// rank's stream, timed from the first launch until the stream is done, as nccl-tests times;
// a figure is the slowest rank's mean, the fastest of the rounds, each round measuring every
// figure in turn.
#include "calibrate_device.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "algorithms/cost_model.h"
#include "algorithms/tuning_file.h"
#include "base/env.h"
#include "calibrate_comm.h"
#include "core/communicator.h"
#include "device_buffers.h"
#include "fatal.h"

namespace loomperf {
namespace {

using Clock = std::chrono::steady_clock;
using loom::CallInfo;
using loom::CommProfile;
using loom::Protocol;

// Past the pipeline's fill on an H100 (2 MiB slices, 32 channels); the emulation copies at CPU
// speed and takes a sixteenth.
constexpr size_t kLargeBytes = size_t{64} << 20;
// The low-latency wire stores 8 data bytes with each 8-byte flag; 1 MiB is well past its
// latency at the 2.5 GB/s an H100 gave it.
constexpr size_t kLowLatencyBytes = size_t{1} << 20;
constexpr size_t kEmulationDivisor = 16;
constexpr int kRounds = 5;
constexpr int kEmulatedRounds = 2;
// Timed calls per figure: about this many µs' worth, from 3 to 1000.
constexpr double kTimedUs = 5000;

// A rank's buffers and stream: a CUDA device's, or under the emulation host memory and the
// NULL stream, whose calls have finished when they return.
class Buffers {
 public:
  Buffers(int device, size_t bytes, bool emulated) {
    if (emulated) {
      host_[0].resize(bytes);
      host_[1].resize(bytes);
    } else {
      cuda_ = std::make_unique<DeviceRank>(device, bytes);
    }
  }
  void* send() { return cuda_ ? cuda_->send() : host_[0].data(); }
  void* recv() { return cuda_ ? cuda_->recv() : host_[1].data(); }
  loomStream_t stream() const { return cuda_ ? cuda_->stream() : nullptr; }
  void synchronize() {
    const std::string failed = cuda_ ? cuda_->synchronize() : "";
    if (!failed.empty()) fatal("--calibrate --device cuda: the stream failed: %s", failed.c_str());
  }

 private:
  std::unique_ptr<DeviceRank> cuda_;
  std::vector<unsigned char> host_[2];
};

// One float32 call of `kind` moving `bytes` as the model counts them (CallShape::bytes).
void issue(loomComm_t comm, Buffers& b, CallInfo::Kind kind, size_t bytes, int nranks) {
  const size_t count = bytes / sizeof(float);
  if (kind == CallInfo::Kind::kAllGather) {
    require(loomAllGather(b.send(), b.recv(), count / static_cast<size_t>(nranks), loomFloat32, comm, b.stream()),
            comm, "loomAllGather");
  } else {
    require(loomAllReduce(b.send(), b.recv(), count, loomFloat32, loomSum, comm, b.stream()), comm, "loomAllReduce");
  }
}

double elapsedUs(Clock::time_point start) {
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
}

// µs per call, stream to stream, of `calls` on `comm`'s ranks; `control` (the host
// communicator) agrees the loop's length and returns the slowest rank's figure. With `alone`,
// only this rank runs (a communicator of its own) and its figure is returned as it is.
double timedUs(loomComm_t control, bool alone, Buffers& b, const std::function<void()>& call) {
  for (int i = 0; i < 2; ++i) call();
  b.synchronize();
  if (!alone) require(loomBarrier(control, nullptr), control, "loomBarrier");
  Clock::time_point start = Clock::now();
  call();
  b.synchronize();
  double iters = std::clamp(kTimedUs / std::max(elapsedUs(start), 1.0), 3.0, 1000.0);
  if (!alone) {
    iters = fromRankZero(iters, control);
    require(loomBarrier(control, nullptr), control, "loomBarrier");
  }
  start = Clock::now();
  for (int i = 0; i < static_cast<int>(iters); ++i) call();
  b.synchronize();
  const double us = elapsedUs(start) / static_cast<int>(iters);
  return alone ? us : slowest(us, control);
}

enum class Unit { kLatencyUs, kGbps };

// The value of one constant at which predictedWith(value), the model's µs, equals
// `measuredUs`: bisection (in log scale for a bandwidth), since a prediction grows with a
// latency and falls as a bandwidth rises. Where no value explains the time, the end of the
// range nearest to doing so.
double solve(Unit unit, double measuredUs, const std::function<double(double)>& predictedWith) {
  const bool latency = unit == Unit::kLatencyUs;
  double lo = latency ? 0 : 1e-3, hi = latency ? 1e6 : 1e7;
  for (int i = 0; i < 200; ++i) {
    const double mid = latency ? (lo + hi) / 2 : std::sqrt(lo * hi);
    const bool predictsMore = predictedWith(mid) > measuredUs;
    (predictsMore == latency ? hi : lo) = mid;
  }
  return latency ? (lo + hi) / 2 : std::sqrt(lo * hi);
}

double ringUs(CallInfo::Kind kind, Protocol protocol, size_t bytes, const CommProfile& p) {
  return loom::predictUs(kind, loom::Algorithm::kRing, protocol, bytes, p);
}

// The figures one round adds to: the fastest time of each call so far.
struct Figures {
  double copyUs = HUGE_VAL;
  double simpleSmallUs = HUGE_VAL;
  double simpleGatherUs = HUGE_VAL;
  double simpleLargeUs = HUGE_VAL;
  double llSmallUs = HUGE_VAL;
  double llLargeUs = HUGE_VAL;
};

}  // namespace

int calibrateDevice(loomComm_t comm, int device, bool emulated, const std::string& path) {
  int rank = 0, nranks = 0;
  require(loomCommUserRank(comm, &rank), comm, "loomCommUserRank");
  require(loomCommCount(comm, &nranks), comm, "loomCommCount");
  const std::vector<std::string> hosts = hostNames(comm, rank, nranks);
  if (std::count(hosts.begin(), hosts.end(), hosts[0]) != nranks) {
    fatal("%s", "--calibrate --device cuda measures the device path within one host: run every rank on one host");
  }
  if (fromRankZero(rank == 0 && !canWrite(path) ? 1.0 : 0.0, comm) != 0) {
    if (rank == 0) std::fprintf(stderr, "loom-perf: --calibrate: cannot write %s\n", path.c_str());
    return 1;
  }
  const size_t large = emulated ? kLargeBytes / kEmulationDivisor : kLargeBytes;
  const size_t llBytes = emulated ? kLowLatencyBytes / kEmulationDivisor : kLowLatencyBytes;
  const std::string where = emulated ? "the CPU emulation (LOOM_DEVICE_EMULATION=1), not a GPU" : deviceDescription(device);
  if (rank == 0) std::printf("# loom-perf --calibrate --device cuda: %d ranks on %s\n", nranks, where.c_str());

  Buffers buffers(device, large, emulated);
  ScopedComm simple(comm, rank, nranks, {{"LOOM_ALGO", "ring"}, {"LOOM_PROTO", "simple"}}, device);
  ScopedComm lowLatency(comm, rank, nranks, {{"LOOM_ALGO", "ring"}, {"LOOM_PROTO", "ll"}}, device);
  loomComm_t alone = nullptr;
  if (rank == 0) {
    loomUniqueId id{};
    require(loomGetUniqueId(&id), nullptr, "loomGetUniqueId");
    loomConfig_t config = LOOM_CONFIG_INITIALIZER;
    config.device = device;
    require(loomCommInitRankConfig(&alone, 1, id, 0, &config), nullptr, "loomCommInitRankConfig (one rank)");
  }
  // The model's view of these communicators (channels, slices), whose constants are solved.
  CommProfile p = static_cast<loom::Communicator*>(static_cast<void*>(simple.get()))->profile();

  using Kind = CallInfo::Kind;
  auto on = [&](loomComm_t c, Kind kind, size_t bytes, int ranks) {
    return [&buffers, c, kind, bytes, ranks] { issue(c, buffers, kind, bytes, ranks); };
  };
  Figures f;
  const int rounds = emulated ? kEmulatedRounds : kRounds;
  for (int round = 0; round < rounds; ++round) {
    double copyUs = rank == 0 ? timedUs(comm, true, buffers, on(alone, Kind::kAllReduce, large, 1)) : 0;
    f.copyUs = std::min(f.copyUs, fromRankZero(copyUs, comm));
    f.simpleSmallUs = std::min(f.simpleSmallUs, timedUs(comm, false, buffers, on(simple.get(), Kind::kAllReduce, 8, nranks)));
    f.simpleGatherUs = std::min(f.simpleGatherUs, timedUs(comm, false, buffers, on(simple.get(), Kind::kAllGather, large, nranks)));
    f.simpleLargeUs = std::min(f.simpleLargeUs, timedUs(comm, false, buffers, on(simple.get(), Kind::kAllReduce, large, nranks)));
    f.llSmallUs = std::min(f.llSmallUs, timedUs(comm, false, buffers, on(lowLatency.get(), Kind::kAllReduce, 8, nranks)));
    f.llLargeUs = std::min(f.llLargeUs, timedUs(comm, false, buffers, on(lowLatency.get(), Kind::kAllReduce, llBytes, nranks)));
  }
  if (alone != nullptr) loomCommDestroy(alone);

  CommProfile lone = p;
  lone.nranks = 1;
  p.copyGbps = solve(Unit::kGbps, f.copyUs, [&](double g) {
    lone.copyGbps = g;
    return ringUs(Kind::kAllReduce, Protocol::kSimple, large, lone);
  });
  // A wire's latency from its 8 B call, its bandwidth from a large one, the latency again
  // with that bandwidth.
  auto fitWire = [&](loom::LinkCost& wire, Protocol protocol, Kind kind, size_t bytes, double smallUs, double largeUs) {
    for (int pass = 0; pass < 2; ++pass) {
      wire.latencyUs = solve(Unit::kLatencyUs, smallUs, [&](double us) {
        wire.latencyUs = us;
        return ringUs(Kind::kAllReduce, protocol, 8, p);
      });
      if (pass == 1) break;
      wire.gbps = solve(Unit::kGbps, largeUs, [&](double g) {
        wire.gbps = g;
        return ringUs(kind, protocol, bytes, p);
      });
    }
  };
  fitWire(p.intra, Protocol::kSimple, Kind::kAllGather, large, f.simpleSmallUs, f.simpleGatherUs);
  // A reduction adds to the copy only what it costs beyond it (cost_model.cc): no faster than
  // the copy can explain a time.
  p.reduceGbps = std::min(p.copyGbps, solve(Unit::kGbps, f.simpleLargeUs, [&](double g) {
                            p.reduceGbps = g;
                            return ringUs(Kind::kAllReduce, Protocol::kSimple, large, p);
                          }));
  fitWire(p.lowLatency, Protocol::kLowLatency, Kind::kAllReduce, llBytes, f.llSmallUs, f.llLargeUs);

  int status = 0;
  if (rank == 0) {
    auto size = [](size_t bytes) { return std::to_string(bytes >> 10) + " KiB"; };
    std::printf("#   one rank, allreduce %s out of place: %.2f us\n", size(large).c_str(), f.copyUs);
    std::printf("#   ring allreduce 8 B, simple: %.2f us; ll: %.2f us\n", f.simpleSmallUs, f.llSmallUs);
    std::printf("#   ring allgather %s, simple: %.2f us\n", size(large).c_str(), f.simpleGatherUs);
    std::printf("#   ring allreduce %s, simple: %.2f us\n", size(large).c_str(), f.simpleLargeUs);
    std::printf("#   ring allreduce %s, ll: %.2f us\n", size(llBytes).c_str(), f.llLargeUs);
    std::vector<std::string> keys;
    for (const std::string& key : loom::tuningKeys(p)) {
      if (key.rfind("device.", 0) == 0) keys.push_back(key);
    }
    status = writeTuningFile(path, p, keys, "device constants of " + std::to_string(nranks) + " ranks on " + where);
  }
  require(loomBarrier(comm, nullptr), comm, "loomBarrier at exit");
  return status;
}

}  // namespace loomperf
