// loom-kernel-latency: where a plan kernel's fixed cost goes on this GPU. An 8-byte allreduce
// costs Loom several microseconds a kernel inside a CUDA graph where NCCL's costs one; this
// times, per kernel, the probes of probes.h (each a piece of what the plan kernel does around
// its steps) and the plan kernel itself on a plan of no steps, in a replayed CUDA graph (the
// device's cost alone) and in a loop of launches (with the host's launch path).
//
//   loom-kernel-latency [--graph-kernels N] [--replays N] [--loop N]
//
// Prints one row per kernel: µs a kernel in the graph and in the loop, the median of 5
// timings. Then the host's side of a loop: the CPU µs of each CUDA runtime call a device
// communicator's launch path makes (device_launch.cc, cuda_runtime.cc), and of a launch from one
// thread and from two threads at once on streams of their own (thread ranks share a context
// and its launch path). Last, two kernels on streams of their own meeting through device
// words (exchange.h), as two thread ranks' kernels meet in an 8-byte allreduce: µs per
// exchange with the launches from one host thread and from two, in loops, in a graph per
// thread and in one graph holding both. Without a CUDA device it says so and exits 0.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "device/plan_format.h"
#include "device/plan_kernel.h"
#include "exchange.h"
#include "probes.h"

namespace {

[[noreturn]] void die(const char* what, cudaError_t e) {
  std::fprintf(stderr, "loom-kernel-latency: %s: %s\n", what, cudaGetErrorString(e));
  std::exit(1);
}

void check(const char* what, cudaError_t e) {
  if (e != cudaSuccess) die(what, e);
}

struct Options {
  int graphKernels = 20;
  int replays = 100;
  int loop = 2000;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "loom-kernel-latency: %s needs a value\n", a.c_str());
      std::exit(2);
    }
    const int v = std::atoi(argv[++i]);
    if (v <= 0) {
      std::fprintf(stderr, "loom-kernel-latency: %s takes a positive count\n", a.c_str());
      std::exit(2);
    }
    if (a == "--graph-kernels") {
      o.graphKernels = v;
    } else if (a == "--replays") {
      o.replays = v;
    } else if (a == "--loop") {
      o.loop = v;
    } else {
      std::fprintf(stderr, "usage: loom-kernel-latency [--graph-kernels N] [--replays N] [--loop N]\n");
      std::exit(2);
    }
  }
  return o;
}

// Median over 5 timings of µs per kernel: `kernels` launches of `launch` between two events.
double timeKernels(const std::function<void()>& enqueue, int kernels, cudaStream_t s) {
  cudaEvent_t start, stop;
  check("cudaEventCreate", cudaEventCreate(&start));
  check("cudaEventCreate", cudaEventCreate(&stop));
  enqueue();  // warm up
  check("warm-up", cudaStreamSynchronize(s));
  std::vector<double> samples;
  for (int rep = 0; rep < 5; ++rep) {
    check("cudaEventRecord", cudaEventRecord(start, s));
    enqueue();
    check("cudaEventRecord", cudaEventRecord(stop, s));
    check("cudaEventSynchronize", cudaEventSynchronize(stop));
    float ms = 0;
    check("cudaEventElapsedTime", cudaEventElapsedTime(&ms, start, stop));
    samples.push_back(ms * 1e3 / kernels);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

// µs a kernel in a graph of `graphKernels` launches replayed `replays` times, and in a loop.
void measure(const char* name, const std::function<cudaError_t(cudaStream_t)>& launch, const Options& o,
             cudaStream_t s) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  check("cudaStreamBeginCapture", cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < o.graphKernels; ++i) check(name, launch(s));
  check("cudaStreamEndCapture", cudaStreamEndCapture(s, &graph));
  check("cudaGraphInstantiate", cudaGraphInstantiate(&exec, graph, 0));
  const double inGraph = timeKernels(
      [&] {
        for (int r = 0; r < o.replays; ++r) check("cudaGraphLaunch", cudaGraphLaunch(exec, s));
      },
      o.graphKernels * o.replays, s);
  const double inLoop = timeKernels(
      [&] {
        for (int i = 0; i < o.loop; ++i) check(name, launch(s));
      },
      o.loop, s);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  std::printf("%-58s %10.2f %10.2f\n", name, inGraph, inLoop);
}

// Median over 5 runs of the CPU µs one call of `call` takes, over `calls` calls.
double hostMicros(const std::function<void()>& call, int calls) {
  std::vector<double> samples;
  for (int rep = 0; rep < 5; ++rep) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) call();
    const std::chrono::duration<double, std::micro> took = std::chrono::steady_clock::now() - start;
    samples.push_back(took.count() / calls);
  }
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

// The host's side of a loop of launches (see the top of this file).
void measureHost(const loom::probe::ProbeMemory& memory, void* deviceBuffer, cudaStream_t s, const Options& o) {
  std::printf("\n%-58s %10s\n", "# host call", "CPU µs");
  auto row = [&](const char* name, const std::function<void()>& call) {
    check("warm-up", cudaStreamSynchronize(s));
    std::printf("%-58s %10.2f\n", name, hostMicros(call, o.loop));
  };
  int device = 0;
  row("cudaGetDevice", [&] { check("cudaGetDevice", cudaGetDevice(&device)); });
  cudaStreamCaptureStatus capture;
  row("cudaStreamIsCapturing", [&] { check("cudaStreamIsCapturing", cudaStreamIsCapturing(s, &capture)); });
  cudaPointerAttributes attributes;
  row("cudaPointerGetAttributes (a device buffer)",
      [&] { check("cudaPointerGetAttributes", cudaPointerGetAttributes(&attributes, deviceBuffer)); });
  cudaEvent_t event;
  check("cudaEventCreate", cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  row("cudaEventRecord", [&] { check("cudaEventRecord", cudaEventRecord(event, s)); });
  row("cudaStreamWaitEvent", [&] { check("cudaStreamWaitEvent", cudaStreamWaitEvent(s, event, 0)); });
  cudaEventDestroy(event);
  const auto empty = loom::probe::Probe::kEmptyPlanShape;
  row("launch of a kernel with the plan kernel's parameter, 1 thread", [&] {
    check("launch", static_cast<cudaError_t>(loom::probe::launchProbe(empty, memory, s)));
  });
  // Two threads launching at once, each on a stream of its own: CPU µs per launch per thread.
  double perThread[2] = {0, 0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      cudaStream_t own;
      check("cudaStreamCreateWithFlags", cudaStreamCreateWithFlags(&own, cudaStreamNonBlocking));
      perThread[t] = hostMicros(
          [&] { check("launch", static_cast<cudaError_t>(loom::probe::launchProbe(empty, memory, own))); }, o.loop);
      check("cudaStreamSynchronize", cudaStreamSynchronize(own));
      cudaStreamDestroy(own);
    });
  }
  for (std::thread& t : threads) t.join();
  std::printf("%-58s %10.2f\n", "the same, 2 threads at once (each thread's)", std::max(perThread[0], perThread[1]));
}

// Median over 5 rounds of µs per exchange: a round enqueues `kernels` of each side's kernels,
// kernel(side, i) the i-th, both sides from this thread in turn or each from a thread of its
// own started together; each side is timed on its stream and the slower counts.
double timeExchange(cudaStream_t streams[2], bool twoThreads, int kernels,
                    const std::function<void(int side, int i)>& kernel) {
  cudaEvent_t start[2], stop[2];
  for (int side = 0; side < 2; ++side) {
    check("cudaEventCreate", cudaEventCreate(&start[side]));
    check("cudaEventCreate", cudaEventCreate(&stop[side]));
  }
  auto enqueueSide = [&](int side) {
    check("cudaEventRecord", cudaEventRecord(start[side], streams[side]));
    for (int i = 0; i < kernels; ++i) kernel(side, i);
    check("cudaEventRecord", cudaEventRecord(stop[side], streams[side]));
  };
  std::vector<double> samples;
  for (int rep = 0; rep < 6; ++rep) {  // the first a warm-up
    if (twoThreads) {
      std::atomic<int> ready{0};
      std::vector<std::thread> threads;
      for (int side = 0; side < 2; ++side) {
        threads.emplace_back([&, side] {
          ready.fetch_add(1);
          while (ready.load() < 2) {
          }
          enqueueSide(side);
        });
      }
      for (std::thread& t : threads) t.join();
    } else {
      for (int side = 0; side < 2; ++side) {
        check("cudaEventRecord", cudaEventRecord(start[side], streams[side]));
      }
      for (int i = 0; i < kernels; ++i) {
        kernel(0, i);
        kernel(1, i);
      }
      for (int side = 0; side < 2; ++side) check("cudaEventRecord", cudaEventRecord(stop[side], streams[side]));
    }
    double slower = 0;
    for (int side = 0; side < 2; ++side) {
      check("cudaEventSynchronize", cudaEventSynchronize(stop[side]));
      float ms = 0;
      check("cudaEventElapsedTime", cudaEventElapsedTime(&ms, start[side], stop[side]));
      slower = std::max(slower, static_cast<double>(ms));
    }
    if (rep > 0) samples.push_back(slower * 1e3 / kernels);
  }
  for (int side = 0; side < 2; ++side) {
    cudaEventDestroy(start[side]);
    cudaEventDestroy(stop[side]);
  }
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

// Two kernels meeting on this GPU (exchange.h), launched each way; "stalled" where a kernel
// waited kExchangeGiveUpSeconds for the other (the two did not run side by side).
void measureExchange(const Options& o) {
  std::printf("\n%-58s %10s\n", "# two kernels meeting (exchange.h)", "µs");
  void* wordMemory = nullptr;
  check("cudaMalloc", cudaMalloc(&wordMemory, 256));
  auto* words = static_cast<uint64_t*>(wordMemory);
  void* stalledMemory = nullptr;
  check("cudaHostAlloc", cudaHostAlloc(&stalledMemory, 64, cudaHostAllocMapped));
  auto* stalledHost = static_cast<uint32_t*>(stalledMemory);
  void* stalledOnDevice = nullptr;
  check("cudaHostGetDevicePointer", cudaHostGetDevicePointer(&stalledOnDevice, stalledHost, 0));
  const loom::probe::ExchangeMemory memory{words, static_cast<uint32_t*>(stalledOnDevice)};
  cudaStream_t streams[2];
  for (cudaStream_t& s : streams) {
    check("cudaStreamCreateWithFlags", cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  }
  auto launch = [&](int side, cudaStream_t s) {
    check("launch", static_cast<cudaError_t>(loom::probe::launchExchange(memory, side, s)));
  };
  auto row = [&](const char* name, double us) {
    check("cudaDeviceSynchronize", cudaDeviceSynchronize());
    if (*static_cast<volatile uint32_t*>(stalledHost) != 0) {
      std::printf("%-58s %10s\n", name, "stalled");
    } else {
      std::printf("%-58s %10.2f\n", name, us);
    }
    check("cudaMemset", cudaMemset(words, 0, 256));
    check("cudaDeviceSynchronize", cudaDeviceSynchronize());
    *static_cast<volatile uint32_t*>(stalledHost) = 0;
  };
  auto loopKernel = [&](int side, int) { launch(side, streams[side]); };
  row("loop, both streams from 1 thread", timeExchange(streams, false, o.loop, loopKernel));
  row("loop, a thread per stream", timeExchange(streams, true, o.loop, loopKernel));

  // A graph of graphKernels kernels per side, captured on its own stream, replayed by a thread
  // per side: how thread ranks replay theirs.
  cudaGraphExec_t own[2];
  for (int side = 0; side < 2; ++side) {
    cudaGraph_t graph;
    check("cudaStreamBeginCapture", cudaStreamBeginCapture(streams[side], cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < o.graphKernels; ++i) launch(side, streams[side]);
    check("cudaStreamEndCapture", cudaStreamEndCapture(streams[side], &graph));
    check("cudaGraphInstantiate", cudaGraphInstantiate(&own[side], graph, 0));
    cudaGraphDestroy(graph);
  }
  auto replayOwn = [&](int side, int) { check("cudaGraphLaunch", cudaGraphLaunch(own[side], streams[side])); };
  row("a graph per stream, replayed by a thread each",
      timeExchange(streams, true, o.replays, replayOwn) / o.graphKernels);
  row("a graph per stream, both replayed by 1 thread",
      timeExchange(streams, false, o.replays, replayOwn) / o.graphKernels);
  for (cudaGraphExec_t e : own) cudaGraphExecDestroy(e);

  // One graph holding both sides (the second stream forked from the first and joined back):
  // no host between the two at all.
  cudaEvent_t fork, join;
  check("cudaEventCreate", cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  check("cudaEventCreate", cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
  cudaGraph_t graph;
  check("cudaStreamBeginCapture", cudaStreamBeginCapture(streams[0], cudaStreamCaptureModeThreadLocal));
  check("cudaEventRecord", cudaEventRecord(fork, streams[0]));
  check("cudaStreamWaitEvent", cudaStreamWaitEvent(streams[1], fork, 0));
  for (int i = 0; i < o.graphKernels; ++i) {
    launch(0, streams[0]);
    launch(1, streams[1]);
  }
  check("cudaEventRecord", cudaEventRecord(join, streams[1]));
  check("cudaStreamWaitEvent", cudaStreamWaitEvent(streams[0], join, 0));
  check("cudaStreamEndCapture", cudaStreamEndCapture(streams[0], &graph));
  cudaGraphExec_t both;
  check("cudaGraphInstantiate", cudaGraphInstantiate(&both, graph, 0));
  cudaGraphDestroy(graph);
  row("one graph holding both streams",
      timeKernels([&] {
        for (int r = 0; r < o.replays; ++r) check("cudaGraphLaunch", cudaGraphLaunch(both, streams[0]));
      }, o.graphKernels * o.replays, streams[0]));
  cudaGraphExecDestroy(both);
  cudaEventDestroy(fork);
  cudaEventDestroy(join);
  for (cudaStream_t s : streams) cudaStreamDestroy(s);
  cudaFreeHost(stalledHost);
  cudaFree(words);
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("skipped: no CUDA device\n");
    return 0;
  }
  cudaDeviceProp prop{};
  check("cudaGetDeviceProperties", cudaGetDeviceProperties(&prop, 0));
  std::printf("# device 0: %s, %d SMs; graph of %d kernels replayed %d times; loop of %d launches\n", prop.name,
              prop.multiProcessorCount, o.graphKernels, o.replays, o.loop);
  int blocksPerSm = 0, architecture = 0;
  check("loading the plan kernel",
        static_cast<cudaError_t>(loom::device::loadPlanKernel(&blocksPerSm, &architecture)));
  std::printf("# plan kernel: its sm_%d build, %d blocks per SM\n", architecture, blocksPerSm);

  cudaStream_t s;
  check("cudaStreamCreateWithFlags", cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  // The probes' memory and the plan kernel's: device memory for what only the kernel uses,
  // pinned mapped host memory for what the host watches (as device_comm.cc makes them).
  void* device = nullptr;
  check("cudaMalloc", cudaMalloc(&device, 4096));
  check("cudaMemset", cudaMemset(device, 0, 4096));
  void* host = nullptr;
  check("cudaHostAlloc", cudaHostAlloc(&host, 8192, cudaHostAllocMapped));
  std::memset(host, 0, 8192);
  void* hostOnDevice = nullptr;
  check("cudaHostGetDevicePointer", cudaHostGetDevicePointer(&hostOnDevice, host, 0));
  auto* deviceBytes = static_cast<uint8_t*>(device);
  auto* hostBytes = static_cast<uint8_t*>(hostOnDevice);

  loom::probe::ProbeMemory memory;
  memory.deviceCounter = reinterpret_cast<uint32_t*>(deviceBytes);
  memory.deviceWord = reinterpret_cast<uint64_t*>(deviceBytes + 64);
  memory.hostWords = reinterpret_cast<uint64_t*>(hostBytes);
  memory.hostAbort = reinterpret_cast<const uint32_t*>(hostBytes + 64);

  std::printf("%-58s %10s %10s\n", "# kernel", "graph µs", "loop µs");
  for (int p = 0; p < loom::probe::kProbes; ++p) {
    const auto probe = static_cast<loom::probe::Probe>(p);
    measure(loom::probe::probeName(probe),
            [&](cudaStream_t stream) {
              return static_cast<cudaError_t>(loom::probe::launchProbe(probe, memory, stream));
            },
            o, s);
  }

  // The plan kernel on a plan of no steps and one worker: its start and end alone, beside the
  // probes (the same Control, LaunchState and step-flag memory kinds as a communicator's).
  using loom::device::LaunchArgs;
  using loom::device::PlanHeader;
  using loom::device::WorkerRange;
  auto args = std::make_unique<LaunchArgs>();
  std::memset(args.get(), 0, sizeof(LaunchArgs));
  PlanHeader header{};
  header.id = 1;
  header.workers = 1;
  header.callsAt = header.stepsAt = header.workersAt = sizeof(PlanHeader);
  header.orderAt = header.workersAt + sizeof(WorkerRange);
  header.bytes = header.orderAt;
  const WorkerRange none{0, 0, 0, 1};
  std::memcpy(args->inlinePlan, &header, sizeof header);
  std::memcpy(args->inlinePlan + header.workersAt, &none, sizeof none);
  args->workers = 1;
  args->countsForHost = 0;
  args->state = reinterpret_cast<loom::device::LaunchState*>(deviceBytes + 1024);
  args->stepFlags = reinterpret_cast<uint64_t*>(deviceBytes + 2048);
  args->localArrivals = reinterpret_cast<uint32_t*>(deviceBytes + 3072);
  args->control = reinterpret_cast<loom::device::Control*>(hostBytes + 4096);
  measure("plan kernel, a plan of no steps (1 worker)",
          [&](cudaStream_t stream) {
            return static_cast<cudaError_t>(loom::device::launchPlanKernel(*args, stream));
          },
          o, s);

  measureHost(memory, device, s, o);
  measureExchange(o);

  check("final synchronize", cudaStreamSynchronize(s));
  cudaStreamDestroy(s);
  cudaFreeHost(host);
  cudaFree(device);
  return 0;
}
