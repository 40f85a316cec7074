// loom-nccl-bench: NCCL itself on this machine's GPUs, for the side-by-side figures of
// docs/RESULTS.md (perf/gpu_suite.sh runs it beside loom-perf on the same calls). One process
// drives N ranks (ncclCommInitAll, rank i on device i % device count, as nccl-tests' -g) in
// groups, and times each size as nccl-tests does: a loop of calls between two events.
//
//   loom-nccl-bench [-n RANKS] [-b MIN] [-e MAX] [-f FACTOR] [-i ITERS] [-G GRAPH_REPLAYS]
//
// NCCL refuses two ranks on one GPU ("Duplicate GPU detected"); then this prints NCCL's
// words and exits with status 3, so a one-GPU machine reports what NCCL refused.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

[[noreturn]] void die(const char* what, const char* why) {
  std::fprintf(stderr, "loom-nccl-bench: %s: %s\n", what, why);
  std::exit(1);
}

void cudaCheck(cudaError_t e, const char* what) {
  if (e != cudaSuccess) die(what, cudaGetErrorString(e));
}

void ncclCheck(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) die(what, ncclGetErrorString(r));
}

size_t parseSize(const char* text) {
  char* end = nullptr;
  double v = std::strtod(text, &end);
  switch (*end) {
    case 'K': v *= 1024; break;
    case 'M': v *= 1024 * 1024; break;
    case 'G': v *= 1024.0 * 1024 * 1024; break;
    default: break;
  }
  return static_cast<size_t>(v);
}

struct Options {
  int ranks = 2;
  size_t minBytes = 8, maxBytes = size_t{1} << 30;
  int factor = 4, iters = 20, graphReplays = 0;
};

struct Rank {
  int device = 0;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  void* send = nullptr;
  void* recv = nullptr;
};

// One call of `coll` on every rank, in one group.
void issue(const std::string& coll, std::vector<Rank>& ranks, size_t count) {
  ncclCheck(ncclGroupStart(), "ncclGroupStart");
  for (Rank& r : ranks) {
    cudaCheck(cudaSetDevice(r.device), "cudaSetDevice");
    if (coll == "allreduce") {
      ncclCheck(ncclAllReduce(r.send, r.recv, count, ncclFloat32, ncclSum, r.comm, r.stream), "ncclAllReduce");
    } else {
      ncclCheck(ncclBroadcast(r.send, r.recv, count, ncclFloat32, 0, r.comm, r.stream), "ncclBroadcast");
    }
  }
  ncclCheck(ncclGroupEnd(), "ncclGroupEnd");
}

void synchronize(std::vector<Rank>& ranks) {
  for (Rank& r : ranks) cudaCheck(cudaStreamSynchronize(r.stream), "cudaStreamSynchronize");
}

// µs per call: `iters` calls (captured in a graph replayed `replays` times when replays > 0),
// between events on rank 0's stream after every rank's stream was idle.
double timeCalls(const std::string& coll, std::vector<Rank>& ranks, size_t count, int iters, int replays) {
  std::vector<cudaGraphExec_t> graphs;
  if (replays > 0) {
    for (Rank& r : ranks) cudaCheck(cudaStreamBeginCapture(r.stream, cudaStreamCaptureModeThreadLocal), "capture");
    for (int i = 0; i < iters; ++i) issue(coll, ranks, count);
    for (Rank& r : ranks) {
      cudaGraph_t graph = nullptr;
      cudaCheck(cudaStreamEndCapture(r.stream, &graph), "cudaStreamEndCapture");
      cudaGraphExec_t exec = nullptr;
      cudaCheck(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
      cudaGraphDestroy(graph);
      graphs.push_back(exec);
    }
  }
  cudaEvent_t start, stop;
  cudaCheck(cudaSetDevice(ranks[0].device), "cudaSetDevice");
  cudaCheck(cudaEventCreate(&start), "cudaEventCreate");
  cudaCheck(cudaEventCreate(&stop), "cudaEventCreate");
  synchronize(ranks);
  cudaCheck(cudaEventRecord(start, ranks[0].stream), "cudaEventRecord");
  if (replays > 0) {
    for (int k = 0; k < replays; ++k) {
      for (size_t i = 0; i < ranks.size(); ++i) cudaCheck(cudaGraphLaunch(graphs[i], ranks[i].stream), "cudaGraphLaunch");
    }
  } else {
    for (int i = 0; i < iters; ++i) issue(coll, ranks, count);
  }
  cudaCheck(cudaEventRecord(stop, ranks[0].stream), "cudaEventRecord");
  synchronize(ranks);
  float ms = 0;
  cudaCheck(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  for (cudaGraphExec_t g : graphs) cudaGraphExecDestroy(g);
  return ms * 1000.0 / (static_cast<double>(iters) * (replays > 0 ? replays : 1));
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "-n") o.ranks = std::atoi(argv[i + 1]);
    else if (flag == "-b") o.minBytes = parseSize(argv[i + 1]);
    else if (flag == "-e") o.maxBytes = parseSize(argv[i + 1]);
    else if (flag == "-f") o.factor = std::atoi(argv[i + 1]);
    else if (flag == "-i") o.iters = std::atoi(argv[i + 1]);
    else if (flag == "-G") o.graphReplays = std::atoi(argv[i + 1]);
    else die("unknown flag", argv[i]);
  }
  if (o.ranks < 1 || o.factor < 2 || o.iters < 1 || o.minBytes < 4 || o.maxBytes < o.minBytes) {
    die("arguments", "need -n >= 1, -f >= 2, -i >= 1, 4 <= -b <= -e");
  }
  int devices = 0;
  cudaCheck(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
  int version = 0;
  ncclGetVersion(&version);
  std::vector<int> devlist(static_cast<size_t>(o.ranks));
  for (int i = 0; i < o.ranks; ++i) devlist[static_cast<size_t>(i)] = i % devices;
  std::vector<ncclComm_t> comms(static_cast<size_t>(o.ranks));
  const ncclResult_t init = ncclCommInitAll(comms.data(), o.ranks, devlist.data());
  std::printf("# NCCL %d, %d rank(s) on %d GPU(s)\n", version, o.ranks, devices);
  if (init != ncclSuccess) {
    std::printf("# NCCL refused %d rank(s) on %d GPU(s): %s: %s\n", o.ranks, devices, ncclGetErrorString(init),
                ncclGetLastError(nullptr));
    return 3;
  }
  std::vector<Rank> ranks(static_cast<size_t>(o.ranks));
  for (int i = 0; i < o.ranks; ++i) {
    Rank& r = ranks[static_cast<size_t>(i)];
    r.device = devlist[static_cast<size_t>(i)];
    r.comm = comms[static_cast<size_t>(i)];
    cudaCheck(cudaSetDevice(r.device), "cudaSetDevice");
    cudaCheck(cudaStreamCreateWithFlags(&r.stream, cudaStreamNonBlocking), "cudaStreamCreate");
    cudaCheck(cudaMalloc(&r.send, o.maxBytes), "cudaMalloc");
    cudaCheck(cudaMalloc(&r.recv, o.maxBytes), "cudaMalloc");
    cudaCheck(cudaMemset(r.send, 0, o.maxBytes), "cudaMemset");
  }
  const double n = o.ranks;
  for (const std::string coll : {"allreduce", "broadcast"}) {
    // nccl-tests' bus bandwidth factors: allreduce 2(n-1)/n, broadcast 1.
    const double busFactor = coll == "allreduce" ? 2 * (n - 1) / n : 1.0;
    std::printf("# %s, float32 sum, out of place%s\n#%12s %12s %10s %10s\n", coll.c_str(),
                o.graphReplays > 0 ? ", in CUDA graphs" : "", "bytes", "time(us)", "algbw", "busbw");
    for (size_t bytes = o.minBytes; bytes <= o.maxBytes; bytes *= static_cast<size_t>(o.factor)) {
      const size_t count = bytes / sizeof(float);
      for (int w = 0; w < 3; ++w) issue(coll, ranks, count);
      const double us = timeCalls(coll, ranks, count, o.iters, o.graphReplays);
      const double algbw = static_cast<double>(bytes) / (us * 1e3);
      std::printf(" %12zu %12.2f %10.2f %10.2f\n", bytes, us, algbw, algbw * busFactor);
      std::fflush(stdout);
    }
  }
  for (Rank& r : ranks) {
    cudaFree(r.send);
    cudaFree(r.recv);
    cudaStreamDestroy(r.stream);
    ncclCommDestroy(r.comm);
  }
  return 0;
}
