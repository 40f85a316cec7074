// Host allreduce latency and bandwidth of Loom, one row per size, in the same loop and
// output as perf/peers/mpi_allreduce.c and perf/peers/gloo_allreduce.py, so that
// perf/compare_host.sh can put them side by side. (loom-perf, with nccl-tests' flags and
// columns, is a later tool; this one stays small.)
//
//   loomrun -n 2 build/perf/loom-host-allreduce [-b 8] [-e 128M] [-f 2] [-T 0.2] [--pin]
//   loom-host-allreduce --memcpy [-b ...] [-e ...]       one thread, no communicator
//
// float32 sum, out-of-place, NULL stream (each call completes before it returns). For each
// size: a calibration that doubles the number of calls until a batch lasts 20 ms on the
// slowest rank (it is also the warm-up), then 5 timed batches of the same number of calls,
// about -T seconds in all (at least one call each). A batch's time is its mean per call on
// the slowest rank; time_us is the median batch, fastest_us and slowest_us the extremes (a
// wide gap means something else ran on the machine). busbw = algbw * 2(n-1)/n (nccl-tests'
// allreduce factor); GB = 1e9. Rank r holds (i + 3r) % 61 in element i, so every float sum
// is exact and the result is compared bit for bit, after the calibration and after the timed
// batches; a wrong element is reported and the exit status is 1.
//
// --pin pins each rank to one cpu (LOOM_LOCAL_RANK-th of those allowed) before the
// communicator exists, so every thread Loom starts inherits it.
//
// --memcpy times std::memcpy between two buffers of each size instead (one thread, the same
// calibration): the memory system's limit for one core. GB/s counts the bytes copied; the
// memory traffic is twice that (read + write).
#include <getopt.h>
#include <loom/loom.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  size_t minBytes = 8;
  size_t maxBytes = size_t{128} << 20;
  double factor = 2.0;
  double targetSeconds = 0.2;
  bool pin = false;
  bool memcpyOnly = false;
};

double secondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// "8", "64K", "1M", "2G" -> bytes (nccl-tests' suffixes, powers of two).
size_t parseBytes(const char* text) {
  char* end = nullptr;
  double value = std::strtod(text, &end);
  switch (*end) {
    case 'k':
    case 'K':
      value *= 1024.0;
      break;
    case 'm':
    case 'M':
      value *= 1024.0 * 1024.0;
      break;
    case 'g':
    case 'G':
      value *= 1024.0 * 1024.0 * 1024.0;
      break;
    default:
      break;
  }
  return static_cast<size_t>(value);
}

std::vector<size_t> sizes(const Options& o) {
  std::vector<size_t> out;
  for (size_t bytes = o.minBytes;;) {
    out.push_back(bytes);
    if (bytes >= o.maxBytes) break;
    const size_t next =
        std::max(bytes + 1, static_cast<size_t>(static_cast<double>(bytes) * o.factor));
    bytes = std::min(next, o.maxBytes);
  }
  return out;
}

std::string allowedCpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return "?";
  std::string out;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) out += (out.empty() ? "" : ",") + std::to_string(c);
  return out;
}

// Pins this process to the k-th cpu it may run on, k = local rank modulo their number.
bool pinToLocalRank() {
  const char* local = std::getenv("LOOM_LOCAL_RANK");
  if (!local) local = std::getenv("LOOM_RANK");
  const int k = local ? std::atoi(local) : 0;
  cpu_set_t allowed, one;
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return false;
  const int ncpu = CPU_COUNT(&allowed);
  int seen = 0;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (!CPU_ISSET(c, &allowed)) continue;
    if (seen++ == k % ncpu) {
      CPU_ZERO(&one);
      CPU_SET(c, &one);
      return sched_setaffinity(0, sizeof one, &one) == 0;
    }
  }
  return false;
}

float pattern(size_t i, int rank) {
  return static_cast<float>((i + 3u * static_cast<size_t>(rank)) % 61u);
}

// Index of the first wrong element, or -1.
long firstWrong(const float* recv, size_t count, int nranks) {
  for (size_t i = 0; i < count; ++i) {
    float want = 0.0f;
    for (int r = 0; r < nranks; ++r) want += pattern(i, r);
    if (recv[i] != want) return static_cast<long>(i);
  }
  return -1;
}

void printHeader(const char* what, const std::string& detail, const char* columns) {
  std::printf("# %s, %s; rank 0 cpus %s\n", what, detail.c_str(), allowedCpus().c_str());
  std::printf("# %s; GB = 1e9\n", columns);
  std::printf("#%14s %12s %9s %12s %9s %9s %12s %12s\n", "bytes", "count", "iters", "time_us",
              "algbw", "busbw", "fastest_us", "slowest_us");
  std::fflush(stdout);
}

// Calibration, then kBatches timed batches, as described at the top; `afterCalibration` runs
// between the two (outside the timing). `maxOverRanks` makes every decision the same on all
// ranks. *ok turns false on a failed call. A template, not std::function, so that the timed
// loop calls `call` directly.
constexpr int kBatches = 5;
struct Timing {
  long iters = 0;             // calls in all timed batches together
  double secondsPerCall = 0;  // median over batches of (mean per call, slowest rank)
  double fastestBatch = 0;    // the same, fastest and slowest batch
  double slowestBatch = 0;
};
template <typename Call, typename MaxOverRanks, typename Barrier, typename AfterCalibration>
Timing timeCalls(const Call& call, const MaxOverRanks& maxOverRanks, const Barrier& barrier,
                 const AfterCalibration& afterCalibration, double targetSeconds, bool* ok) {
  long calls = 1;
  double batch = 0;
  for (;;) {
    *ok = *ok && barrier();
    const auto t0 = Clock::now();
    for (long k = 0; k < calls && *ok; ++k) *ok = call();
    batch = secondsSince(t0);
    *ok = *ok && maxOverRanks(&batch);
    if (!*ok) return {};
    if (batch >= 0.02 || calls >= (1L << 24)) break;
    calls *= 2;
  }
  afterCalibration();
  const long perBatch =
      std::max(1L, static_cast<long>(std::ceil(targetSeconds / kBatches * calls / batch)));
  std::vector<double> perCall;
  for (int b = 0; b < kBatches && *ok; ++b) {
    *ok = *ok && barrier();
    const auto t0 = Clock::now();
    for (long k = 0; k < perBatch && *ok; ++k) *ok = call();
    double seconds = secondsSince(t0) / static_cast<double>(perBatch);
    *ok = *ok && maxOverRanks(&seconds);
    perCall.push_back(seconds);
  }
  if (!*ok) return {};
  std::sort(perCall.begin(), perCall.end());
  return {perBatch * kBatches, perCall[kBatches / 2], perCall.front(), perCall.back()};
}

void printRow(size_t bytes, const Timing& t, int nranks) {
  const double algbw = static_cast<double>(bytes) / t.secondsPerCall / 1e9;
  const double busbw = algbw * 2.0 * (nranks - 1) / nranks;
  std::printf("%15zu %12zu %9ld %12.2f %9.3f %9.3f %12.2f %12.2f\n", bytes, bytes / sizeof(float),
              t.iters, t.secondsPerCall * 1e6, algbw, busbw, t.fastestBatch * 1e6,
              t.slowestBatch * 1e6);
  std::fflush(stdout);
}

int runMemcpy(const Options& o) {
  printHeader("memcpy", "one thread, std::memcpy",
              "time = median of 5 batches of the mean per call; algbw = busbw = bytes copied per "
              "second (memory traffic is twice that)");
  std::vector<char> src(o.maxBytes, 1), dst(o.maxBytes, 0);
  for (size_t bytes : sizes(o)) {
    bool ok = true;
    const Timing t = timeCalls(
        [&] {
          std::memcpy(dst.data(), src.data(), bytes);
          return true;
        },
        [](double*) { return true; }, [] { return true; }, [] {}, o.targetSeconds, &ok);
    // With one "rank" the busbw factor 2(n-1)/n would be 0; pass 2 so busbw = algbw.
    printRow(bytes, t, 2);
  }
  return 0;
}

int fail(loomComm_t comm, const char* what, loomResult_t r) {
  std::fprintf(stderr, "loom-host-allreduce: %s: %s: %s\n", what, loomGetErrorString(r),
               loomGetLastError(comm));
  return 1;
}

int runAllReduce(const Options& o) {
  if (o.pin && !pinToLocalRank()) std::fprintf(stderr, "loom-host-allreduce: --pin failed\n");
  loomComm_t comm = nullptr;
  loomResult_t r = loomCommInitFromEnv(&comm, nullptr);
  if (r != loomSuccess) return fail(nullptr, "loomCommInitFromEnv", r);
  int rank = 0, nranks = 0;
  loomCommUserRank(comm, &rank);
  loomCommCount(comm, &nranks);

  const size_t maxCount = o.maxBytes / sizeof(float);
  std::vector<float> send(maxCount), recv(maxCount);
  for (size_t i = 0; i < maxCount; ++i) send[i] = pattern(i, rank);

  if (rank == 0) {
    const char* transports = std::getenv("LOOM_TRANSPORTS");
    printHeader(
        "loom-host-allreduce",
        "Loom " + std::to_string(LOOM_MAJOR) + "." + std::to_string(LOOM_MINOR) + "." +
            std::to_string(LOOM_PATCH) + ", " + std::to_string(nranks) +
            " ranks, float32 sum, out-of-place, LOOM_TRANSPORTS=" +
            (transports ? transports : "(default)"),
        "time = median of 5 batches of the mean per call on the slowest rank; busbw = algbw * "
        "2(n-1)/n");
  }

  loomResult_t last = loomSuccess;
  const char* lastCall = "";
  auto check = [&](const char* call, loomResult_t result) {
    if (result != loomSuccess && last == loomSuccess) {
      last = result;
      lastCall = call;
    }
    return result == loomSuccess;
  };
  auto maxOverRanks = [&](double* v) {
    return check("loomAllReduce(max)", loomAllReduce(v, v, 1, loomFloat64, loomMax, comm, nullptr));
  };
  auto barrier = [&] { return check("loomBarrier", loomBarrier(comm, nullptr)); };

  bool wrongAnywhere = false;
  for (size_t bytes : sizes(o)) {
    const size_t count = bytes / sizeof(float);
    const size_t used = count * sizeof(float);
    std::memset(recv.data(), 0xff, used);  // NaN: a call that writes nothing cannot pass
    bool ok = true;
    auto call = [&] {
      return check("loomAllReduce", loomAllReduce(send.data(), recv.data(), count, loomFloat32,
                                                  loomSum, comm, nullptr));
    };
    // Checked after the calibration (recv held NaN before it) and after the timed batch.
    bool reported = false;
    auto verify = [&] {
      const long wrong = reported ? -1 : firstWrong(recv.data(), count, nranks);
      if (wrong < 0) return;
      reported = true;
      std::fprintf(stderr, "loom-host-allreduce: rank %d, %zu bytes: element %ld is %g\n", rank,
                   used, wrong, static_cast<double>(recv[wrong]));
      wrongAnywhere = true;
    };
    const Timing t = timeCalls(call, maxOverRanks, barrier, verify, o.targetSeconds, &ok);
    if (!ok) return fail(comm, lastCall, last);
    verify();
    if (rank == 0) printRow(used, t, nranks);
    if (!barrier()) return fail(comm, lastCall, last);
  }

  double anyWrong = wrongAnywhere ? 1.0 : 0.0;
  if (!maxOverRanks(&anyWrong)) return fail(comm, lastCall, last);
  loomCommDestroy(comm);
  return anyWrong > 0 ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  static const option longOptions[] = {{"pin", no_argument, nullptr, 'p'},
                                       {"memcpy", no_argument, nullptr, 'm'},
                                       {"help", no_argument, nullptr, 'h'},
                                       {nullptr, 0, nullptr, 0}};
  int opt;
  while ((opt = getopt_long(argc, argv, "b:e:f:T:h", longOptions, nullptr)) != -1) {
    switch (opt) {
      case 'b':
        o.minBytes = parseBytes(optarg);
        break;
      case 'e':
        o.maxBytes = parseBytes(optarg);
        break;
      case 'f':
        o.factor = std::atof(optarg);
        break;
      case 'T':
        o.targetSeconds = std::atof(optarg);
        break;
      case 'p':
        o.pin = true;
        break;
      case 'm':
        o.memcpyOnly = true;
        break;
      default:
        std::fprintf(stderr,
                     "usage: loomrun -n N %s [-b minbytes] [-e maxbytes] [-f factor] [-T seconds] "
                     "[--pin]\n       %s --memcpy [-b minbytes] [-e maxbytes] [-f factor]\n",
                     argv[0], argv[0]);
        return 2;
    }
  }
  if (o.factor <= 1.0 || o.minBytes < 4 || o.maxBytes < o.minBytes) {
    std::fprintf(stderr, "loom-host-allreduce: need -f > 1 and 4 <= -b <= -e\n");
    return 2;
  }
  return o.memcpyOnly ? runMemcpy(o) : runAllReduce(o);
}
