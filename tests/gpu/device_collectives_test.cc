// Collectives on device communicators, against the host references of the multi-rank suite
// (multirank/collective_reference.h): every collective x type x op, in place and out of
// place, on 1..8 ranks sharing GPU 0, on both wires of the plan kernel (LOOM_PROTO simple and
// ll); calls of 64 Mi elements; stream ordering; CUDA graph capture and replay; bad buffers,
// mismatched calls, a timeout and loomCommAbort while a kernel waits.
//
// The file builds twice: ranks as threads of this process (loomCommInitAll), and ranks as
// forked processes (LOOM_GPU_TEST_PROCESSES). A process that has initialised CUDA cannot
// fork ranks that use it, so the processes build never touches CUDA in the parent: even
// the question "is there a GPU?" is asked by a child.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "gpu/gpu_test.h"
#include "multirank/collective_reference.h"
#include "multirank/harness.h"

namespace loomtest {
namespace {

#ifdef LOOM_GPU_TEST_PROCESSES
constexpr Mode kMode = Mode::kProcesses;
#else
constexpr Mode kMode = Mode::kThreads;
#endif

bool haveDevice() {
  static const bool have = [] {
    std::fflush(nullptr);
    pid_t pid = ::fork();
    if (pid == 0) {
      int count = 0;
      ::_exit(cudaGetDeviceCount(&count) == cudaSuccess && count > 0 ? 0 : 1);
    }
    int status = 0;
    return pid > 0 && ::waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }();
  return have;
}

// Device memory of one rank, allocated once per test: freeing while another rank's call is
// in flight would synchronise the device and wait for that rank's stream, which waits for
// this rank.
struct DeviceBuffer {
  void* ptr = nullptr;
  explicit DeviceBuffer(size_t bytes) { cudaMalloc(&ptr, bytes == 0 ? 1 : bytes); }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

// Pinned host memory: copies between it and the device are asynchronous. A copy to or from
// pageable memory waits in the calling thread for the stream, and with it for the peers'
// kernels that this rank's kernel meets: ranks as threads of one process would then wait on
// each other in the driver.
template <class T>
struct Pinned {
  T* ptr = nullptr;
  explicit Pinned(size_t count) { cudaMallocHost(reinterpret_cast<void**>(&ptr), (count == 0 ? 1 : count) * sizeof(T)); }
  ~Pinned() { cudaFreeHost(ptr); }
  Pinned(const Pinned&) = delete;
  Pinned& operator=(const Pinned&) = delete;
  T& operator[](size_t i) { return ptr[i]; }
};

struct Stream {
  cudaStream_t s = nullptr;
  Stream() { cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking); }
  ~Stream() { cudaStreamDestroy(s); }
};

RankOptions onDevice() {
  RankOptions o;
  o.device = 0;
  o.deadlineMs = 300000;
  return o;
}

// Runs every case on this rank with device buffers (copied in and out on the rank's stream,
// so the copies are ordered with the call by the stream alone); "" or what went wrong.
std::string runOnDevice(const std::vector<CollectiveCase>& cases, loomComm_t comm, int rank, int nranks,
                        AllocatedMeeting& allocated) {
  cudaSetDevice(0);
  size_t sendMax = 1, recvMax = 1;
  for (const CollectiveCase& c : cases) {
    CollectiveRun run(c, rank, nranks);
    sendMax = std::max(sendMax, run.sendBuffer().size());
    recvMax = std::max(recvMax, run.recvBuffer().size());
  }
  DeviceBuffer send(sendMax), recv(recvMax);
  Pinned<unsigned char> pinnedSend(sendMax), pinnedRecv(recvMax);
  Stream stream;
  allocated.arrive();
  if (send.ptr == nullptr || recv.ptr == nullptr || stream.s == nullptr) return "cannot allocate device buffers";
  for (const CollectiveCase& c : cases) {
    CollectiveRun run(c, rank, nranks);
    std::vector<unsigned char>& hs = run.sendBuffer();
    std::vector<unsigned char>& hr = run.recvBuffer();
    std::copy(hs.begin(), hs.end(), pinnedSend.ptr);
    std::copy(hr.begin(), hr.end(), pinnedRecv.ptr);
    cudaMemcpyAsync(send.ptr, pinnedSend.ptr, hs.size(), cudaMemcpyHostToDevice, stream.s);
    cudaMemcpyAsync(recv.ptr, pinnedRecv.ptr, hr.size(), cudaMemcpyHostToDevice, stream.s);
    loomResult_t r = run.launchMirrored(comm, stream.s, send.ptr, recv.ptr);
    if (r != loomSuccess) return c.describe() + ": " + loomGetErrorString(r) + ": " + loomGetLastError(comm);
    cudaMemcpyAsync(pinnedSend.ptr, send.ptr, hs.size(), cudaMemcpyDeviceToHost, stream.s);
    cudaMemcpyAsync(pinnedRecv.ptr, recv.ptr, hr.size(), cudaMemcpyDeviceToHost, stream.s);
    cudaError_t e = cudaStreamSynchronize(stream.s);
    std::copy(pinnedSend.ptr, pinnedSend.ptr + hs.size(), hs.begin());
    std::copy(pinnedRecv.ptr, pinnedRecv.ptr + hr.size(), hr.begin());
    if (e != cudaSuccess) return c.describe() + ": cudaStreamSynchronize: " + cudaGetErrorString(e);
    loomResult_t async = loomSuccess;
    loomCommGetAsyncError(comm, &async);
    if (async != loomSuccess) return c.describe() + ": async error " + loomGetErrorString(async) + ": " + loomGetLastError(comm);
    std::string wrong = run.check();
    if (!wrong.empty()) return c.describe() + ": " + wrong;
  }
  return "";
}

struct Shape {
  int nranks;
  const char* protocol;  // LOOM_PROTO: simple or ll
};

std::string shapeName(const testing::TestParamInfo<Shape>& info) {
  return std::to_string(info.param.nranks) + "ranks_" + info.param.protocol;
}

class DeviceCollectives : public testing::TestWithParam<Shape> {};

// The whole matrix, sliced as the host suite slices it (casesAt the scale LOOM_TEST_FULL or
// LOOM_TEST_QUICK asks for).
TEST_P(DeviceCollectives, MatchReferences) {
  SKIP_WITHOUT_DEVICE();
  const Shape shape = GetParam();
  ScopedEnv protocol("LOOM_PROTO", shape.protocol);
  std::vector<CollectiveCase> cases = loomtest::casesAt(loomtest::matrixScale(), shape.nranks, 0);
  AllocatedMeeting allocated(shape.nranks, kMode == Mode::kThreads);
  runRanks(shape.nranks, kMode, [&](loomComm_t comm, int rank) {
    std::string wrong = runOnDevice(cases, comm, rank, shape.nranks, allocated);
    EXPECT_EQ(wrong, "") << "rank " << rank;
  }, onDevice());
}

#ifdef LOOM_GPU_TEST_PROCESSES
INSTANTIATE_TEST_SUITE_P(Processes, DeviceCollectives,
                         testing::Values(Shape{1, "simple"}, Shape{2, "simple"}, Shape{3, "simple"}, Shape{4, "simple"},
                                         Shape{2, "ll"}, Shape{4, "ll"}),
                         shapeName);
#else
INSTANTIATE_TEST_SUITE_P(Threads, DeviceCollectives,
                         testing::Values(Shape{1, "simple"}, Shape{2, "simple"}, Shape{3, "simple"}, Shape{4, "simple"},
                                         Shape{8, "simple"}, Shape{2, "ll"}, Shape{3, "ll"}, Shape{4, "ll"}),
                         shapeName);
#endif

// 64 Mi elements (256 MiB of float32 per buffer), odd counts beside them, in place and out of
// place, on 2 ranks: many FIFO turns per slice, every channel busy.
TEST(DeviceLargeCalls, AllReduceAndAllGatherOf64MiElements) {
  SKIP_WITHOUT_DEVICE();
  std::vector<CollectiveCase> cases;
  uint64_t seed = 6400;
  for (size_t count : {size_t{64} << 20, (size_t{64} << 20) - 3}) {
    for (bool inPlace : {false, true}) {
      CollectiveCase c;
      c.collective = Collective::kAllReduce;
      c.type = loomFloat32;
      c.op = loomSum;
      c.count = count;
      c.inPlace = inPlace;
      c.seed = ++seed;
      cases.push_back(c);
    }
  }
  CollectiveCase gather;
  gather.collective = Collective::kAllGather;
  gather.type = loomBfloat16;
  gather.count = (size_t{32} << 20) + 1;
  gather.seed = ++seed;
  cases.push_back(gather);
  AllocatedMeeting allocated(2, kMode == Mode::kThreads);
  runRanks(2, kMode, [&](loomComm_t comm, int rank) {
    std::string wrong = runOnDevice(cases, comm, rank, 2, allocated);
    EXPECT_EQ(wrong, "") << "rank " << rank;
  }, onDevice());
}

// Work before the call on the same stream (a slow host function, then the copy that writes
// the input) must finish before the call reads its input, and work after it must see the
// result: a call that read at enqueue time, or let the stream run past it, gets the old data.
TEST(DeviceStreams, CallsFollowStreamOrder) {
  SKIP_WITHOUT_DEVICE();
  constexpr int kRanks = 2;
  constexpr size_t kCount = 1 << 20;
  AllocatedMeeting allocated(kRanks, kMode == Mode::kThreads);
  runRanks(kRanks, kMode, [&](loomComm_t comm, int rank) {
    cudaSetDevice(0);
    DeviceBuffer buf(kCount * sizeof(int32_t));
    Stream stream;
    Pinned<int32_t> host(kCount), out(kCount);
    allocated.arrive();
    for (int round = 1; round <= 3; ++round) {
      for (size_t i = 0; i < kCount; ++i) host[i] = static_cast<int32_t>(i % 1000) * round + rank;
      auto sleep50 = [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(50)); };
      ASSERT_EQ(cudaLaunchHostFunc(stream.s, sleep50, nullptr), cudaSuccess);
      ASSERT_EQ(cudaMemcpyAsync(buf.ptr, host.ptr, kCount * sizeof(int32_t), cudaMemcpyHostToDevice, stream.s),
                cudaSuccess);
      LOOM_ASSERT_OK(loomAllReduce(buf.ptr, buf.ptr, kCount, loomInt32, loomSum, comm, stream.s), comm);
      ASSERT_EQ(cudaMemcpyAsync(out.ptr, buf.ptr, kCount * sizeof(int32_t), cudaMemcpyDeviceToHost, stream.s),
                cudaSuccess);
      ASSERT_EQ(cudaStreamSynchronize(stream.s), cudaSuccess);
      for (size_t i = 0; i < kCount; ++i) {
        int32_t want = static_cast<int32_t>(i % 1000) * round * kRanks + (kRanks * (kRanks - 1)) / 2;
        ASSERT_EQ(out[i], want) << "rank " << rank << " round " << round << " element " << i;
      }
    }
  }, onDevice());
}

// A call captured in a CUDA graph runs again on every replay, on that replay's data.
TEST(DeviceStreams, CapturedInGraphRunsOnEveryReplay) {
  SKIP_WITHOUT_DEVICE();
  constexpr int kRanks = 2;
  constexpr size_t kCount = 4096;
  AllocatedMeeting allocated(kRanks, kMode == Mode::kThreads);
  runRanks(kRanks, kMode, [&](loomComm_t comm, int rank) {
    cudaSetDevice(0);
    DeviceBuffer send(kCount * sizeof(float)), recv(kCount * sizeof(float));
    Stream stream;
    Pinned<float> in(kCount), out(kCount);
    cudaGraph_t graph = nullptr;
    CUDA_ASSERT(cudaStreamBeginCapture(stream.s, cudaStreamCaptureModeThreadLocal));
    loomResult_t r = loomAllReduce(send.ptr, recv.ptr, kCount, loomFloat32, loomSum, comm, stream.s);
    CUDA_ASSERT(cudaStreamEndCapture(stream.s, &graph));
    LOOM_ASSERT_OK(r, comm);
    cudaGraphExec_t exec = nullptr;
    CUDA_ASSERT(cudaGraphInstantiate(&exec, graph, 0));
    allocated.arrive();
    for (int replay = 1; replay <= 4; ++replay) {
      for (size_t i = 0; i < kCount; ++i) in[i] = static_cast<float>(replay * 100 + rank) + static_cast<float>(i % 7);
      CUDA_ASSERT(cudaMemcpyAsync(send.ptr, in.ptr, kCount * sizeof(float), cudaMemcpyHostToDevice, stream.s));
      CUDA_ASSERT(cudaGraphLaunch(exec, stream.s));
      CUDA_ASSERT(cudaMemcpyAsync(out.ptr, recv.ptr, kCount * sizeof(float), cudaMemcpyDeviceToHost, stream.s));
      CUDA_ASSERT(cudaStreamSynchronize(stream.s));
      for (size_t i = 0; i < kCount; ++i) {
        float want = static_cast<float>(replay * 100 * kRanks + 1) + static_cast<float>(kRanks * (i % 7));
        ASSERT_EQ(out[i], want) << "rank " << rank << " replay " << replay << " element " << i;
      }
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  }, onDevice());
}

// Host memory, and a count the ranks disagree on: a clear error, on the call or as the
// communicator's async error, with every stream released (no hang).
TEST(DeviceErrors, HostBufferIsRefused) {
  SKIP_WITHOUT_DEVICE();
  runRanks(1, kMode, [&](loomComm_t comm, int) {
    cudaSetDevice(0);
    std::vector<float> host(16);
    DeviceBuffer dev(16 * sizeof(float));
    Stream stream;
    EXPECT_EQ(loomAllReduce(host.data(), dev.ptr, 16, loomFloat32, loomSum, comm, stream.s), loomInvalidArgument);
    EXPECT_NE(std::string(loomGetLastError(comm)).find("host memory"), std::string::npos) << loomGetLastError(comm);
    EXPECT_EQ(loomAllReduce(dev.ptr, nullptr, 16, loomFloat32, loomSum, comm, stream.s), loomInvalidArgument);
  }, onDevice());
}

TEST(DeviceErrors, MismatchedCountsFailWithoutHanging) {
  SKIP_WITHOUT_DEVICE();
  RankOptions options = onDevice();
  options.timeoutMs = 5000;
  runRanks(2, kMode, [&](loomComm_t comm, int rank) {
    cudaSetDevice(0);
    DeviceBuffer buf(1 << 20);
    Stream stream;
    size_t count = rank == 0 ? 1000 : 2000;
    LOOM_ASSERT_OK(loomAllReduce(buf.ptr, buf.ptr, count, loomFloat32, loomSum, comm, stream.s), comm);
    CUDA_ASSERT(cudaStreamSynchronize(stream.s));
    loomResult_t async = loomSuccess;
    EXPECT_EQ(loomCommGetAsyncError(comm, &async), loomSuccess);
    EXPECT_NE(async, loomSuccess) << "rank " << rank << ": the mismatch went unnoticed";
    std::printf("rank %d: %s: %s\n", rank, loomGetErrorString(async), loomGetLastError(comm));
  }, options);
}

// Rank 1 never makes the call rank 0's kernel waits in: at the communicator's timeout the
// kernel's wait gives up (the device's clock), the stream completes, and the async error
// names the call.
TEST(DeviceStops, AKernelWaitingForAPeerEndsAtTheTimeout) {
  SKIP_WITHOUT_DEVICE();
  RankOptions options = onDevice();
  options.timeoutMs = 2000;
  runRanks(2, kMode, [&](loomComm_t comm, int rank) {
    cudaSetDevice(0);
    DeviceBuffer buf(1 << 20);
    Stream stream;
    // One call together first: the ranks connect on it (a first call waits for its peers on
    // the host, before any kernel starts).
    LOOM_ASSERT_OK(loomAllReduce(buf.ptr, buf.ptr, 1 << 18, loomFloat32, loomSum, comm, stream.s), comm);
    CUDA_ASSERT(cudaStreamSynchronize(stream.s));
    if (rank == 1) {
      // Never makes the second call, but stays alive (a process that exits is a dead peer).
      std::this_thread::sleep_for(std::chrono::seconds(5));
      return;
    }
    const auto start = std::chrono::steady_clock::now();
    LOOM_ASSERT_OK(loomAllReduce(buf.ptr, buf.ptr, 1 << 18, loomFloat32, loomSum, comm, stream.s), comm);
    CUDA_ASSERT(cudaStreamSynchronize(stream.s));
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(seconds, 10.0);
    // The watchdog reports within a few ms of the kernel's end.
    loomResult_t async = loomSuccess;
    for (int i = 0; i < 100 && async == loomSuccess; ++i) {
      loomCommGetAsyncError(comm, &async);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_EQ(async, loomTimeout);
    const std::string text = loomGetLastError(comm);
    EXPECT_NE(text.find("call #2 loomAllReduce"), std::string::npos) << text;
    EXPECT_NE(text.find("timed out"), std::string::npos) << text;
    std::printf("rank 0 after %.2f s: %s\n", seconds, text.c_str());
  }, options);
}

// loomCommAbort while rank 0's kernel waits for rank 1: the kernel exits and the stream
// completes (abort frees the communicator, so the stream is all there is to look at).
TEST(DeviceStops, AbortEndsAWaitingKernel) {
  SKIP_WITHOUT_DEVICE();
#ifdef LOOM_GPU_TEST_PROCESSES
  std::printf("skipped: abort is local to a process; the threads build covers it\n");
  GTEST_SKIP() << "abort is local to a process; the threads build covers it";
#endif
  ::setenv("LOOM_TIMEOUT_MS", "60000", 1);
  std::vector<loomComm_t> comms(2);
  const int devices[2] = {0, 0};
  LOOM_ASSERT_OK(loomCommInitAll(comms.data(), 2, devices), nullptr);
  ::unsetenv("LOOM_TIMEOUT_MS");
  CUDA_ASSERT(cudaSetDevice(0));
  DeviceBuffer a(1 << 20), b(1 << 20);
  Stream s0, s1;
  LOOM_ASSERT_OK(loomGroupStart(), nullptr);
  LOOM_EXPECT_OK(loomAllReduce(a.ptr, a.ptr, 1 << 18, loomFloat32, loomSum, comms[0], s0.s), comms[0]);
  LOOM_EXPECT_OK(loomAllReduce(b.ptr, b.ptr, 1 << 18, loomFloat32, loomSum, comms[1], s1.s), comms[1]);
  LOOM_ASSERT_OK(loomGroupEnd(), nullptr);
  CUDA_ASSERT(cudaStreamSynchronize(s0.s));
  CUDA_ASSERT(cudaStreamSynchronize(s1.s));
  LOOM_ASSERT_OK(loomAllReduce(a.ptr, a.ptr, 1 << 18, loomFloat32, loomSum, comms[0], s0.s), comms[0]);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(cudaStreamQuery(s0.s), cudaErrorNotReady) << "the kernel should still wait for rank 1";
  const auto start = std::chrono::steady_clock::now();
  LOOM_EXPECT_OK(loomCommAbort(comms[0]), nullptr);
  CUDA_ASSERT(cudaStreamSynchronize(s0.s));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 5.0);
  std::printf("abort to a completed stream: %.3f s\n", seconds);
  LOOM_EXPECT_OK(loomCommDestroy(comms[1]), nullptr);
}

}  // namespace
}  // namespace loomtest
