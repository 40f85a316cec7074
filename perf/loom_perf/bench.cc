#include "bench.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>

#include "collectives.h"
#include "datatypes.h"
#include "device_buffers.h"
#include "fatal.h"

namespace loomperf {
namespace {

using Clock = std::chrono::steady_clock;

// --min-time never lengthens a timed loop past this many iterations.
constexpr long kMaxIters = 1L << 24;

// Frees what allocateTouched returned: loomMemAlloc's (-R 2) or the heap's.
struct HostFree {
  bool loomMemory = false;
  void operator()(unsigned char* p) const {
    if (loomMemory) {
      loomMemFree(p);
    } else {
      std::free(p);
    }
  }
};
using HostBuffer = std::unique_ptr<unsigned char[], HostFree>;

// Page-aligned, and written once here so that its pages belong to the NUMA node of the
// thread that uses them.
HostBuffer allocateTouched(size_t bytes, bool loomMemory) {
  const size_t rounded = std::max<size_t>(4096, (bytes + 4095) / 4096 * 4096);
  void* p = nullptr;
  if (loomMemory) {
    if (loomMemAlloc(&p, rounded) != loomSuccess) fatal("loomMemAlloc of %zu bytes failed", rounded);
  } else {
    p = std::aligned_alloc(4096, rounded);
    if (p == nullptr) fatal("cannot allocate %zu bytes of host memory", rounded);
  }
  std::memset(p, 0, rounded);
  return HostBuffer(static_cast<unsigned char*>(p), HostFree{loomMemory});
}

struct StreamDeleter {
  void operator()(void* s) const { loomStreamDestroy(s); }
};
using OwnedStream = std::unique_ptr<void, StreamDeleter>;

// -R 1: a buffer registered with a communicator until the sweep ends.
class Registration {
 public:
  Registration(loomComm_t comm, void* buffer, size_t bytes) : comm_(comm) {
    require(loomCommRegister(comm, buffer, bytes, &handle_), comm, "loomCommRegister");
  }
  ~Registration() { loomCommDeregister(comm_, handle_); }
  Registration(const Registration&) = delete;
  Registration& operator=(const Registration&) = delete;

 private:
  loomComm_t comm_;
  void* handle_ = nullptr;
};

struct RankState {
  loomComm_t comm;
  loomComm_t control;  // loom-perf's own calls (ThreadRanks::control)
  int rank;
  OwnedStream stream;  // host: null with -y 1, each call completes before it returns
  HostBuffer send;     // host: the buffers; --device cuda: their images, where checks are
  HostBuffer recv;     // written and read
  std::unique_ptr<DeviceRank> device;  // --device cuda: the buffers and the stream
  std::vector<std::unique_ptr<Registration>> registrations;  // -R 1: the buffers the calls use

  loomStream_t callStream() const { return device ? device->stream() : stream.get(); }
};

// Each row's out-of-place and in-place modes.
struct Point {
  loomDataType_t type;
  loomRedOp_t op;
  int root;
  Layout layout;
};

class Sweep {
 public:
  Sweep(const Options& o, const ThreadRanks& t, Report* report);
  long long run(const std::string& algorithm);

 private:
  // The calls on the ranks' buffers; with `images`, on their host images instead (the same
  // on host memory).
  std::vector<Call> callsFor(const Point& p, bool inPlace, bool images = false) const;
  // Issues `repeat` calls on each rank, as one group where there is more than one call.
  void start(const std::vector<Call>& calls, int repeat);
  void complete();
  // --device cuda: a failed stream, or an error Loom met after a call returned, is fatal.
  [[noreturn]] void deviceFailed(const RankState& r, const std::string& what);
  void checkAsyncErrors();
  // One value per rank of this thread, reduced over every rank of the job.
  double acrossRanks(const std::vector<double>& values, loomRedOp_t op);
  double acrossRanks(double value, loomRedOp_t op) {
    return acrossRanks(std::vector<double>(ranks_.size(), value), op);
  }
  void barrier() { acrossRanks(0.0, loomSum); }
  double combineTimes(double seconds);  // -a
  void warmUp(loomDataType_t type, loomRedOp_t op, int root);
  ModeResult measure(const Point& p, bool inPlace, int* iters);
  // Seconds of one timed loop of n iterations: issued one by one, or (-G) captured in a CUDA
  // graph per rank and launched -G times.
  double timeCalls(const std::vector<Call>& calls, long n);
  double timeGraphs(const std::vector<Call>& calls, long n);
  long long checkOnce(const Point& p, bool inPlace, const std::vector<Call>& calls);

  const Options& o_;
  const int nranks_;
  Report* report_;
  std::vector<RankState> ranks_;
  int rep_ = 0;
};

Sweep::Sweep(const Options& o, const ThreadRanks& t, Report* report)
    : o_(o), nranks_(t.nranks), report_(report) {
  // Both buffers hold the larger side: in place, reducescatter's input fills the receive one.
  size_t bytes = 0;
  for (loomDataType_t type : o.types) {
    const size_t ts = typeSize(type);
    const Layout l = layoutFor(o.collective, o.maxBytes / ts, ts, nranks_);
    bytes = std::max({bytes, l.sendCount * ts, l.recvCount * ts});
  }
  // Device memory and streams are made here, before the first collective (run() starts with
  // a barrier): cudaMalloc must not meet another rank's call in flight.
  for (size_t k = 0; k < t.comms.size(); ++k) {
    loomStream_t stream = nullptr;
    if (!o.cuda && !o.nullStream) require(loomStreamCreate(&stream), t.comms[k], "loomStreamCreate");
    std::unique_ptr<DeviceRank> device;
    if (o.cuda) device = std::make_unique<DeviceRank>(t.devices[k], bytes);
    // Device buffers' host images stay on the heap: only their bytes are copied.
    const bool loomMemory = o.loomMemory && !o.cuda;
    ranks_.push_back({t.comms[k], t.control[k], t.ranks[k], OwnedStream(stream),
                      allocateTouched(bytes, loomMemory), allocateTouched(bytes, loomMemory), std::move(device), {}});
    if (!o.registerBuffers || bytes == 0) continue;
    RankState& r = ranks_.back();
    unsigned char* send = r.device ? r.device->send() : r.send.get();
    unsigned char* recv = r.device ? r.device->recv() : r.recv.get();
    for (unsigned char* buffer : {send, recv}) {
      r.registrations.push_back(std::make_unique<Registration>(r.comm, buffer, bytes));
    }
  }
}

std::vector<Call> Sweep::callsFor(const Point& p, bool inPlace, bool images) const {
  const size_t ts = typeSize(p.type);
  std::vector<Call> calls;
  for (const RankState& r : ranks_) {
    const size_t rank = static_cast<size_t>(r.rank);
    unsigned char* send = r.device && !images ? r.device->send() : r.send.get();
    unsigned char* recv = r.device && !images ? r.device->recv() : r.recv.get();
    Call c{o_.collective, p.type, p.op, p.root, p.layout.paramCount, send, recv};
    if (inPlace) {
      c.send = recv + p.layout.sendInPlaceOffset * rank * ts;
      c.recv = recv + p.layout.recvInPlaceOffset * rank * ts;
    }
    calls.push_back(c);
  }
  return calls;
}

void Sweep::start(const std::vector<Call>& calls, int repeat) {
  const bool grouped = calls.size() > 1 || repeat > 1;
  if (grouped) loomGroupStart();
  for (size_t k = 0; k < calls.size(); ++k)
    for (int a = 0; a < repeat; ++a)
      require(launch(calls[k], ranks_[k].comm, ranks_[k].callStream()), ranks_[k].comm,
              collectiveName(o_.collective));
  if (grouped) require(loomGroupEnd(), ranks_[0].comm, "loomGroupEnd");
}

void Sweep::complete() {
  for (RankState& r : ranks_) {
    if (r.device) {
      const std::string error = r.device->synchronize();
      if (!error.empty()) deviceFailed(r, error);
    } else if (r.stream) {
      require(loomStreamSynchronize(r.stream.get()), r.comm, "loomStreamSynchronize");
    }
  }
}

void Sweep::deviceFailed(const RankState& r, const std::string& what) {
  loomResult_t async = loomSuccess;
  loomCommGetAsyncError(r.comm, &async);
  fatal("%s: %s on rank %d (device %d); loomCommGetAsyncError: %s%s%s", collectiveName(o_.collective), what.c_str(),
        r.rank, r.device->device(), loomGetErrorString(async), async == loomSuccess ? "" : ": ",
        async == loomSuccess ? "" : loomGetLastError(r.comm));
}

// Calls on a device communicator return before they run; what goes wrong later is kept as the
// communicator's asynchronous error.
void Sweep::checkAsyncErrors() {
  for (const RankState& r : ranks_) {
    loomResult_t async = loomSuccess;
    require(loomCommGetAsyncError(r.comm, &async), r.comm, "loomCommGetAsyncError");
    if (async != loomSuccess) deviceFailed(r, "asynchronous error");
  }
}

double Sweep::acrossRanks(const std::vector<double>& values, loomRedOp_t op) {
  std::vector<double> v = values;
  loomGroupStart();
  for (size_t k = 0; k < ranks_.size(); ++k)
    require(loomAllReduce(&v[k], &v[k], 1, loomFloat64, op, ranks_[k].control, nullptr),
            ranks_[k].control, "loomAllReduce (loom-perf's own)");
  require(loomGroupEnd(), ranks_[0].control, "loomGroupEnd");
  return v[0];
}

double Sweep::combineTimes(double seconds) {
  switch (o_.average) {
    case Average::kRank0: {
      std::vector<double> v;
      for (const RankState& r : ranks_) v.push_back(r.rank == 0 ? seconds : 0.0);
      return acrossRanks(v, loomSum);
    }
    case Average::kMin: return acrossRanks(seconds, loomMin);
    case Average::kMax: return acrossRanks(seconds, loomMax);
    default: return acrossRanks(seconds, loomSum) / nranks_;
  }
}

// nccl-tests' warm-up: -w calls of every power-of-two size up to -e, out of place.
void Sweep::warmUp(loomDataType_t type, loomRedOp_t op, int root) {
  if (o_.warmupIters <= 0) return;
  const size_t ts = typeSize(type);
  for (size_t bytes = std::max<size_t>(o_.minBytes, 1); bytes <= o_.maxBytes; bytes *= 2) {
    const std::vector<Call> calls =
        callsFor({type, op, root, layoutFor(o_.collective, bytes / ts, ts, nranks_)}, false);
    for (int i = 0; i < o_.warmupIters; ++i) start(calls, o_.aggIters);
    complete();
  }
}

ModeResult Sweep::measure(const Point& p, bool inPlace, int* iters) {
  ModeResult m;
  m.measured = true;
  const std::vector<Call> calls = callsFor(p, inPlace);
  // One call, finished, then every rank in step: the timed loop starts together.
  start(calls, o_.aggIters);
  complete();
  barrier();
  long n = std::max(o_.iters, 1);
  const bool graphs = o_.cuda && o_.graphLaunches > 0;
  const long passes = graphs ? o_.graphLaunches : 1;  // each pass runs n iterations
  double seconds = 0;
  for (;;) {
    seconds = graphs ? timeGraphs(calls, n) : timeCalls(calls, n);
    if (o_.minTime <= 0) break;
    const double slowest = acrossRanks(seconds, loomMax);
    if (slowest >= o_.minTime || n >= kMaxIters) break;
    n = std::min(kMaxIters, static_cast<long>(std::ceil(n * 1.2 * o_.minTime / std::max(slowest, 1e-9))));
    barrier();
  }
  *iters = static_cast<int>(n);
  const double perCall = combineTimes(seconds / static_cast<double>(n * o_.aggIters * passes));
  const size_t ts = typeSize(p.type);
  m.timeUs = perCall * 1e6;
  m.algBw = perCall > 0 ? algorithmBytes(o_.collective, p.layout, ts, nranks_) / perCall / 1e9 : 0;
  m.busBw = m.algBw * busBandwidthFactor(o_.collective, nranks_);
  m.checked = o_.check > 0;
  for (int c = 0; c < o_.check && m.wrong == 0; ++c) m.wrong = checkOnce(p, inPlace, calls);
  return m;
}

// nccl-tests' timed loop: calls back to back on every rank's stream (each waited for with -z),
// then every stream synchronised; wall-clock time, as nccl-tests measures (no CUDA events).
double Sweep::timeCalls(const std::vector<Call>& calls, long n) {
  const auto t0 = Clock::now();
  for (long i = 0; i < n; ++i) {
    start(calls, o_.aggIters);
    if (o_.blocking) complete();
  }
  complete();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// nccl-tests' -G: each rank's n iterations captured into one graph, launched -G times. A
// barrier on either side of the launches: no rank instantiates or frees a graph while another
// rank's calls may be running.
double Sweep::timeGraphs(const std::vector<Call>& calls, long n) {
  for (RankState& r : ranks_) r.device->beginCapture();
  for (long i = 0; i < n; ++i) start(calls, o_.aggIters);
  for (RankState& r : ranks_) r.device->endCapture();
  barrier();
  const auto t0 = Clock::now();
  for (int l = 0; l < o_.graphLaunches; ++l) {
    for (RankState& r : ranks_) r.device->launchGraph();
    if (o_.blocking) complete();
  }
  complete();
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  barrier();
  for (RankState& r : ranks_) r.device->dropGraph();
  return seconds;
}

long long Sweep::checkOnce(const Point& p, bool inPlace, const std::vector<Call>& calls) {
  ++rep_;
  // The data is written and read on the host images; with --device cuda it is copied to the
  // device before the call and the result back after it.
  const std::vector<Call> images = o_.cuda ? callsFor(p, inPlace, true) : calls;
  const size_t ts = typeSize(p.type);
  std::vector<CheckCase> cases;
  for (size_t k = 0; k < calls.size(); ++k) {
    cases.push_back({images[k], p.layout, ranks_[k].rank, nranks_, rep_});
    poisonOutput(cases.back());
    fillInput(cases.back());
    const RankState& r = ranks_[k];
    if (DeviceRank* d = r.device.get()) {
      if (inPlace) {  // both sides lie in the receive buffer
        const size_t rank = static_cast<size_t>(r.rank);
        const size_t end = std::max(p.layout.sendInPlaceOffset * rank + p.layout.sendCount,
                                    p.layout.recvInPlaceOffset * rank + p.layout.recvCount);
        d->copyIn(d->recv(), r.recv.get(), end * ts);
      } else {
        d->copyIn(d->send(), r.send.get(), p.layout.sendCount * ts);
        d->copyIn(d->recv(), r.recv.get(), p.layout.recvCount * ts);
      }
    }
  }
  start(calls, 1);  // the checked call runs alone: -m does not apply to it
  complete();
  for (size_t k = 0; k < calls.size(); ++k) {
    const RankState& r = ranks_[k];
    if (DeviceRank* d = r.device.get()) {
      const size_t at = static_cast<size_t>(static_cast<unsigned char*>(images[k].recv) - r.recv.get());
      d->copyOut(r.recv.get() + at, d->recv() + at, p.layout.recvCount * ts);
    }
  }
  // The fault switch changes the result of one rank whose result is checked.
  const int corruptRank = o_.collective == Collective::kReduce ? p.root : 0;
  double wrong = 0;
  for (const CheckCase& c : cases) {
    if (o_.testCorrupt && c.rank == corruptRank) corruptOutput(c);
    wrong += static_cast<double>(countWrong(c));
  }
  return static_cast<long long>(acrossRanks(wrong, loomSum));
}

long long Sweep::run(const std::string& algorithm) {
  const std::vector<size_t> sizes = sweepSizes(o_);
  const std::vector<loomRedOp_t> noOp{loomSum};  // a placeholder: the call takes no op
  std::vector<int> roots{-1};
  if (takesRoot(o_.collective)) {
    roots = {o_.root};
    if (o_.root == -1) {
      roots.clear();
      for (int r = 0; r < nranks_; ++r) roots.push_back(r);
    }
  }
  long long wrong = 0;
  for (int cycle = 0; o_.runCycles == 0 || cycle < o_.runCycles; ++cycle) {
    for (loomDataType_t type : o_.types) {
      for (loomRedOp_t op : takesOp(o_.collective) ? o_.ops : noOp) {
        for (int root : roots) {
          barrier();
          warmUp(type, op, root);
          for (size_t bytes : sizes) {
            const size_t ts = typeSize(type);
            const Point p{type, op, root, layoutFor(o_.collective, bytes / ts, ts, nranks_)};
            Row row;
            row.algorithm = algorithm;
            row.bytes = std::max(p.layout.sendCount, p.layout.recvCount) * ts;
            row.count = p.layout.paramCount;
            row.type = typeName(type);
            row.op = takesOp(o_.collective) ? opName(op) : "none";
            row.root = root;
            if (report_) report_->progress(row.type + " " + row.op, row.bytes);
            row.outOfPlace = measure(p, false, &row.iters);
            int inPlaceIters = 0;
            if (hasInPlace(o_.collective)) row.inPlace = measure(p, true, &inPlaceIters);
            wrong += row.outOfPlace.wrong + row.inPlace.wrong;
            if (o_.cuda) checkAsyncErrors();
            if (report_) report_->addRow(row);
          }
        }
      }
    }
  }
  // Every rank's calls have finished before any rank frees its device memory.
  barrier();
  return wrong;
}

std::string cpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  }
  return "cpu";
}

std::string cpusOfThisThread() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return "?";
  std::string out;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (!CPU_ISSET(c, &set)) continue;
    int last = c;
    while (last + 1 < CPU_SETSIZE && CPU_ISSET(last + 1, &set)) ++last;
    out += (out.empty() ? "" : ",") + std::to_string(c) + (last > c ? "-" + std::to_string(last) : "");
    c = last;
  }
  return out;
}

}  // namespace

std::vector<std::string> describeRanks(const ThreadRanks& t) {
  constexpr size_t kLine = 256;
  char host[64] = "?";
  gethostname(host, sizeof host - 1);
  const std::string cpus = cpusOfThisThread(), model = cpuModel();
  std::vector<std::vector<char>> lines(t.comms.size(), std::vector<char>(kLine * t.nranks));
  std::vector<std::vector<char>> mine(t.comms.size(), std::vector<char>(kLine));
  for (size_t k = 0; k < t.comms.size(); ++k) {
    const std::string where = t.devices.empty() ? "device host [cpus " + cpus + "] " + model
                                                : deviceDescription(t.devices[k]);
    std::snprintf(mine[k].data(), kLine, "#  Rank %2d Group %2d Pid %6d on %10s %s", t.ranks[k], 0,
                  static_cast<int>(getpid()), host, where.c_str());
  }
  loomGroupStart();
  for (size_t k = 0; k < t.comms.size(); ++k) {
    require(loomAllGather(mine[k].data(), lines[k].data(), kLine, loomInt8, t.control[k], nullptr),
            t.control[k], "loomAllGather (loom-perf's own)");
  }
  require(loomGroupEnd(), t.control[0], "loomGroupEnd");
  std::vector<std::string> out;
  for (size_t k = 0; k < t.comms.size(); ++k) {
    if (t.ranks[k] != 0) continue;
    for (int r = 0; r < t.nranks; ++r) out.emplace_back(lines[k].data() + kLine * r);
  }
  return out;
}

long long runSweep(const Options& o, const ThreadRanks& t, const std::string& algorithm,
                   Report* report) {
  Sweep sweep(o, t, report);
  return sweep.run(algorithm);
}

}  // namespace loomperf
