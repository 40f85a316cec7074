#include "options.h"

#include <getopt.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "base/env.h"
#include "datatypes.h"

namespace loomperf {
namespace {

struct CollectiveName {
  Collective collective;
  const char* name;
  const char* ncclTests;  // nccl-tests' binary, accepted as the name and as argv[0]
};

constexpr CollectiveName kCollectives[] = {
    {Collective::kAllReduce, "allreduce", "all_reduce_perf"},
    {Collective::kBroadcast, "broadcast", "broadcast_perf"},
    {Collective::kReduce, "reduce", "reduce_perf"},
    {Collective::kAllGather, "allgather", "all_gather_perf"},
    {Collective::kReduceScatter, "reducescatter", "reduce_scatter_perf"},
    {Collective::kAllToAll, "alltoall", "alltoall_perf"},
    {Collective::kSendRecv, "sendrecv", "sendrecv_perf"},
};

const char kUsage[] =
    "usage: loom-perf COLLECTIVE [options]     (or run as all_reduce_perf, broadcast_perf, ...)\n"
    "  COLLECTIVE: allreduce broadcast reduce allgather reducescatter alltoall sendrecv\n"
    "              (nccl-tests' names all_reduce_perf ... are accepted too)\n"
    "nccl-tests' options:\n"
    "  -b,--minbytes N      smallest message (K, M, G suffixes: powers of 1024; default 32M)\n"
    "  -e,--maxbytes N      largest message (default 32M)\n"
    "  -i,--stepbytes N     step when -f is 1 (default 1M)\n"
    "  -f,--stepfactor N    multiply the size by N each step\n"
    "  -n,--iters N         timed calls per size and mode (default 20)\n"
    "  -w,--warmup_iters N  warm-up calls per size (default 1)\n"
    "  -m,--agg_iters N     calls per iteration, issued in one group (default 1)\n"
    "  -N,--run_cycles N    repeat the sweep N times, 0 for ever (default 1)\n"
    "  -c,--check N         check the result of N calls per size and mode (default 1; 0 off)\n"
    "  -o,--op OP           sum prod max min avg, or all (default sum)\n"
    "  -d,--datatype T      int8 uint8 int32 uint32 int64 uint64 half float double bfloat16\n"
    "                       f8e4m3 f8e5m2, or all (default float)\n"
    "  -r,--root R          root of broadcast and reduce, -1 for each rank in turn (default 0)\n"
    "  -a,--average A       time reported: 0 rank 0's, 1 mean over ranks, 2 min, 3 max (default 1)\n"
    "  -z,--blocking 0|1    wait for each call before issuing the next (default 0)\n"
    "  -y,--stream_null 0|1 1 (default on host): NULL stream, each call runs in the calling\n"
    "                       thread; 0: a host stream per rank (a progress thread, as a CUDA stream);\n"
    "                       --device cuda always gives each rank a non-blocking CUDA stream\n"
    "  -t,--nthreads N      threads per process, each driving -g ranks (default 1)\n"
    "  -g,--ngpus N         ranks per thread (GPUs with --device cuda; default 1)\n"
    "  -T,--timeout S       deadline of every wait inside Loom, in seconds (default Loom's)\n"
    "  -G,--cudagraph N     --device cuda: capture the -n timed calls in a CUDA graph and\n"
    "                       launch it N times (default 0: no graph)\n"
    "  -J,--json FILE       write the results as JSON\n"
    "  -R,--local_register 0|1|2  1: register the send and receive buffers with each\n"
    "                       communicator (loomCommRegister; UCX then maps them once); 2: also\n"
    "                       take host buffers from loomMemAlloc, which peer processes on the\n"
    "                       host map (the mapped allreduce; default 0)\n"
    "Loom's own:\n"
    "  --device host|cuda   where the buffers live (default host); cuda: rank k of a process\n"
    "                       uses device (local rank * t * g + k) % device count, as nccl-tests\n"
    "  --algo A[,B...]      force each algorithm in turn (ring tree rd oneshot pairwise\n"
    "                       hierarchical; tuned:\n"
    "                       Loom's own choice), one sweep each, all in the same tables and plot\n"
    "  --min-time S         lengthen each timed loop until it lasts S seconds on the slowest rank\n"
    "  --pin                run each rank's thread on its own cpu\n"
    "  --csv FILE           write the results as CSV\n"
    "  --plot FILE.svg      plot busbw against size, one line per algorithm, type and op\n"
    "  --test-corrupt       change one element of a checked result (tests that #wrong can fail)\n"
    "  --calibrate FILE     measure the tuner's constants on these ranks (2 or more processes)\n"
    "                       and write them to FILE for LOOM_TUNING_FILE (docs/TUNING.md);\n"
    "                       with --device cuda a device communicator's (one host's ranks;\n"
    "                       under LOOM_DEVICE_EMULATION=1 the CPU emulation's)\n"
    "Ranks: processes from the launcher (loomrun, mpirun, srun, torchrun) x -t x -g.\n";

// nccl-tests' size syntax: an integer with an optional K, M or G (powers of 1024).
bool parseSize(const char* text, size_t* out) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(text, &end, 10);
  if (errno != 0 || end == text || text[0] == '-') return false;
  unsigned long long scale = 1;
  switch (*end) {
    case '\0': break;
    case 'k': case 'K': scale = 1ull << 10; ++end; break;
    case 'm': case 'M': scale = 1ull << 20; ++end; break;
    case 'g': case 'G': scale = 1ull << 30; ++end; break;
    default: return false;
  }
  if (*end != '\0' || v > (~0ull) / scale) return false;
  *out = static_cast<size_t>(v * scale);
  return true;
}

bool parseInt(const char* text, long min, long max, int* out) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || v < min || v > max) return false;
  *out = static_cast<int>(v);
  return true;
}

bool findCollective(const char* name, Collective* out) {
  for (const CollectiveName& c : kCollectives) {
    if (std::strcmp(name, c.name) == 0 || std::strcmp(name, c.ncclTests) == 0) {
      *out = c.collective;
      return true;
    }
  }
  return false;
}

int bad(const char* format, const char* value) {
  std::fputs("loom-perf: ", stderr);
  std::fprintf(stderr, format, value);
  std::fputs(" (loom-perf --help lists the options)\n", stderr);
  return 2;
}

enum LongOnly { kDevice = 256, kAlgo, kMinTime, kPin, kCsv, kPlot, kTestCorrupt, kCalibrate };

}  // namespace

const char* collectiveName(Collective c) {
  for (const CollectiveName& n : kCollectives)
    if (n.collective == c) return n.name;
  return "?";
}

int parseOptions(int argc, char** argv, Options* out) {
  Options o;
  // Run as all_reduce_perf (a link to loom-perf), the name says the collective.
  const char* base = std::strrchr(argv[0], '/');
  base = base ? base + 1 : argv[0];
  bool named = findCollective(base, &o.collective);
  if (named) o.program = base;

  static const option kLong[] = {
      {"nthreads", required_argument, nullptr, 't'},  {"ngpus", required_argument, nullptr, 'g'},
      {"minbytes", required_argument, nullptr, 'b'},  {"maxbytes", required_argument, nullptr, 'e'},
      {"stepbytes", required_argument, nullptr, 'i'}, {"stepfactor", required_argument, nullptr, 'f'},
      {"iters", required_argument, nullptr, 'n'},     {"agg_iters", required_argument, nullptr, 'm'},
      {"warmup_iters", required_argument, nullptr, 'w'},
      {"run_cycles", required_argument, nullptr, 'N'}, {"check", required_argument, nullptr, 'c'},
      {"op", required_argument, nullptr, 'o'},        {"datatype", required_argument, nullptr, 'd'},
      {"root", required_argument, nullptr, 'r'},      {"blocking", required_argument, nullptr, 'z'},
      {"stream_null", required_argument, nullptr, 'y'},
      {"timeout", required_argument, nullptr, 'T'},   {"average", required_argument, nullptr, 'a'},
      {"output_file", required_argument, nullptr, 'J'}, {"json", required_argument, nullptr, 'J'},
      {"parallel_init", required_argument, nullptr, 'p'},
      {"cudagraph", required_argument, nullptr, 'G'},  {"local_register", required_argument, nullptr, 'R'},
      {"device", required_argument, nullptr, kDevice}, {"algo", required_argument, nullptr, kAlgo},
      {"min-time", required_argument, nullptr, kMinTime}, {"pin", no_argument, nullptr, kPin},
      {"csv", required_argument, nullptr, kCsv},      {"plot", required_argument, nullptr, kPlot},
      {"test-corrupt", no_argument, nullptr, kTestCorrupt}, {"calibrate", required_argument, nullptr, kCalibrate},
      {"help", no_argument, nullptr, 'h'},            {nullptr, 0, nullptr, 0}};
  int flag = 0;
  bool nullStreamAsked = false;   // -y 1 given
  const char* graphArg = nullptr;  // -G's value
  int opt;
  optind = 1;
  while ((opt = getopt_long(argc, argv, "t:g:b:e:i:f:n:m:w:N:c:o:d:r:z:y:T:a:J:p:G:R:h", kLong,
                            nullptr)) != -1) {
    switch (opt) {
      case 't':
        if (!parseInt(optarg, 1, 1024, &o.threads)) return bad("-t %s: need 1..1024 threads", optarg);
        break;
      case 'g':
        if (!parseInt(optarg, 1, 1024, &o.ranksPerThread)) return bad("-g %s: need 1..1024", optarg);
        break;
      case 'b':
        if (!parseSize(optarg, &o.minBytes)) return bad("-b %s: not a size", optarg);
        break;
      case 'e':
        if (!parseSize(optarg, &o.maxBytes)) return bad("-e %s: not a size", optarg);
        break;
      case 'i':
        if (!parseSize(optarg, &o.stepBytes) || o.stepBytes == 0) return bad("-i %s: need a size > 0", optarg);
        break;
      case 'f': {
        int f = 0;
        if (!parseInt(optarg, 1, 1 << 20, &f)) return bad("-f %s: need an integer >= 1", optarg);
        o.stepFactor = static_cast<size_t>(f);
        break;
      }
      case 'n':
        if (!parseInt(optarg, 1, 1 << 30, &o.iters)) return bad("-n %s: need >= 1", optarg);
        break;
      case 'm':
        if (!parseInt(optarg, 1, 1 << 20, &o.aggIters)) return bad("-m %s: need >= 1", optarg);
        break;
      case 'w':
        if (!parseInt(optarg, 0, 1 << 30, &o.warmupIters)) return bad("-w %s: need >= 0", optarg);
        break;
      case 'N':
        if (!parseInt(optarg, 0, 1 << 30, &o.runCycles)) return bad("-N %s: need >= 0", optarg);
        break;
      case 'c':
        if (!parseInt(optarg, 0, 1 << 20, &o.check)) return bad("-c %s: need >= 0", optarg);
        break;
      case 'o':
        o.ops.clear();
        if (std::strcmp(optarg, "all") == 0) {
          for (int op = 0; op < loomNumOps; ++op) o.ops.push_back(static_cast<loomRedOp_t>(op));
        } else {
          o.ops.emplace_back();
          if (!parseOp(optarg, &o.ops.back())) return bad("-o %s: not sum, prod, max, min, avg or all", optarg);
        }
        break;
      case 'd':
        o.types.clear();
        if (std::strcmp(optarg, "all") == 0) {
          for (int t = 0; t < loomNumTypes; ++t) o.types.push_back(static_cast<loomDataType_t>(t));
        } else {
          o.types.emplace_back();
          if (!parseType(optarg, &o.types.back())) return bad("-d %s: not a type", optarg);
        }
        break;
      case 'r':
        if (!parseInt(optarg, -1, 1 << 24, &o.root)) return bad("-r %s: need a rank, or -1", optarg);
        break;
      case 'a': {
        int a = 0;
        if (!parseInt(optarg, 0, 3, &a)) return bad("-a %s: need 0, 1, 2 or 3", optarg);
        o.average = static_cast<Average>(a);
        break;
      }
      case 'z':
        if (!parseInt(optarg, 0, 1, &flag)) return bad("-z %s: need 0 or 1", optarg);
        o.blocking = flag != 0;
        break;
      case 'y':
        if (!parseInt(optarg, 0, 1, &flag)) return bad("-y %s: need 0 or 1", optarg);
        o.nullStream = flag != 0;
        nullStreamAsked = o.nullStream;
        break;
      case 'T':
        if (!parseInt(optarg, 0, 1 << 20, &o.timeoutSeconds)) return bad("-T %s: need seconds >= 0", optarg);
        break;
      case 'J':
        o.jsonPath = optarg;
        break;
      case 'R':
        if (!parseInt(optarg, 0, 2, &flag)) return bad("-R %s: need 0, 1 or 2", optarg);
        o.registerBuffers = flag != 0;
        o.loomMemory = flag == 2;
        break;
      case 'p':  // ranks of one process are always created in parallel
        break;
      case 'G':
        if (!parseInt(optarg, 0, 1 << 20, &o.graphLaunches)) return bad("-G %s: need launches >= 0", optarg);
        graphArg = optarg;
        break;
      case kDevice:
        if (std::strcmp(optarg, "cuda") == 0) {
          o.cuda = true;
        } else if (std::strcmp(optarg, "host") != 0) {
          return bad("--device %s: need host or cuda", optarg);
        }
        break;
      case kAlgo:
        o.algorithms = loom::env::splitList(optarg);
        if (o.algorithms.empty()) return bad("--algo '%s': name at least one algorithm", optarg);
        break;
      case kMinTime: {
        char* end = nullptr;
        o.minTime = std::strtod(optarg, &end);
        if (end == optarg || *end != '\0' || !(o.minTime >= 0 && o.minTime <= 3600))
          return bad("--min-time %s: need seconds in [0, 3600]", optarg);
        break;
      }
      case kPin:
        o.pin = true;
        break;
      case kCsv:
        o.csvPath = optarg;
        break;
      case kPlot:
        o.plotPath = optarg;
        if (o.plotPath.size() < 4 || o.plotPath.compare(o.plotPath.size() - 4, 4, ".svg") != 0)
          return bad("--plot %s: loom-perf writes SVG; name the file *.svg", optarg);
        break;
      case kTestCorrupt:
        o.testCorrupt = true;
        break;
      case kCalibrate:
        o.calibratePath = optarg;
        break;
      case 'h':
        std::fputs(kUsage, stdout);
        return 0;
      default:
        std::fputs(kUsage, stderr);
        return 2;
    }
  }
  for (int i = optind; i < argc; ++i) {
    if (named) return bad("unexpected argument '%s'", argv[i]);
    if (!findCollective(argv[i], &o.collective)) return bad("'%s' is not a collective", argv[i]);
    o.program = std::string("loom-perf ") + argv[i];
    named = true;
  }
  if (!o.calibratePath.empty()) {
    if (named) return bad("--calibrate measures the tuner's constants; it runs no collective sweep (drop '%s')",
                          collectiveName(o.collective));
    if (o.threads != 1 || o.ranksPerThread != 1) return bad("%s", "--calibrate runs one rank per process (no -t, -g)");
    *out = o;
    return -1;
  }
  if (!named) return bad("%s", "name a collective: loom-perf allreduce|broadcast|reduce|allgather|reducescatter|alltoall|sendrecv");
  if (o.maxBytes < o.minBytes) return bad("%s", "-e must be at least -b");
  if (o.graphLaunches > 0 && !o.cuda)
    return bad("-G %s: CUDA graphs need --device cuda (host memory has no graph to capture)", graphArg);
  if (o.cuda && nullStreamAsked)
    return bad("%s", "-y 1 --device cuda: loom-perf never uses the legacy NULL stream on a device (a "
                     "device-wide synchronisation can deadlock with Loom's proxy); each rank has a "
                     "non-blocking stream");
  if (o.collective == Collective::kSendRecv && !o.algorithms.empty())
    return bad("%s", "--algo: sendrecv has no algorithm to choose");
  *out = o;
  return -1;
}

std::vector<size_t> sweepSizes(const Options& o) {
  std::vector<size_t> sizes;
  for (size_t s = o.minBytes; s <= o.maxBytes;) {
    sizes.push_back(s);
    const size_t next = o.stepFactor > 1 ? s * o.stepFactor : s + o.stepBytes;
    if (next <= s) break;  // a size of 0 with a factor, or overflow
    s = next;
  }
  return sizes;
}

}  // namespace loomperf
