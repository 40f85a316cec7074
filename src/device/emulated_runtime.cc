// The CPU emulation of the device runtime (runtime.h): the plan interpreter runs on host
// threads, one per worker, exactly as the kernel runs it on thread blocks. Memory is host
// memory: shared memory files (LOOM_SHM_DIR) where a peer is another process, the heap where
// it is a thread of this process.
//
// Launches of one communicator run one after another, as they do on a GPU: a launch waits for
// the one before it to finish. The NULL stream completes a launch before the call returns
// (finishLaunches); a Loom host stream runs it in turn with the stream's other work.
#include <unistd.h>

#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "base/env.h"
#include "base/host_stream.h"
#include "base/slot_pool.h"
#include "device/handover.h"
#include "device/host_worker.h"
#include "device/interpreter.h"
#include "device/runtime.h"
#include "device/shared_segment.h"

namespace loom::device {
namespace {

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

class EmulatedRuntime final : public DeviceRuntime {
 public:
  EmulatedRuntime(SlotPool& blocks, Handover& handover) : blocks_(blocks), handover_(handover) {}
  ~EmulatedRuntime() override;

  const char* name() const override { return "emulated"; }
  std::string describe() const override {
    const int blocks = blocks_.capacity();
    return "emulated device (LOOM_DEVICE_EMULATION=1): the plan kernel runs on CPU threads over host memory" +
           (blocks > 0 ? format(", %d resident blocks", blocks) : std::string());
  }
  int residentBlocks() const override { return blocks_.capacity(); }
  Status checkReduction(loomDataType_t) const override { return Status::ok(); }
  std::string deviceKey() const override { return "emulated"; }
  bool reachedFrom(const std::string&) const override { return true; }
  // Host memory already: `hostMemory` only travels in the handle.
  Status allocShared(size_t bytes, int peerPid, bool hostMemory, void** out, SharedHandle* handle) override;
  Status openShared(const SharedHandle& handle, int peer, void** out) override;
  Status allocHostMapped(size_t bytes, void** host, void** device) override {
    LOOM_TRY(allocHeap(bytes, host));
    *device = *host;
    return Status::ok();
  }
  Status allocDevice(size_t bytes, void** out) override { return allocHeap(bytes, out); }
  Status copyToDevice(void* dst, const void* src, size_t bytes) override {
    std::memcpy(dst, src, bytes);
    return Status::ok();
  }
  Status copyToHost(void* dst, const void* src, size_t bytes) override {
    std::memcpy(dst, src, bytes);
    return Status::ok();
  }
  Status writeWord(uint32_t* word, uint32_t value) override {
    __atomic_store_n(word, value, __ATOMIC_RELEASE);
    return Status::ok();
  }
  Status checkBuffer(const char*, const void*, size_t) const override { return Status::ok(); }
  Status launch(const LaunchArgs& args, const LaunchStream& stream, bool* captured) override;
  Status finishLaunches(const LaunchStream& stream) override;

 private:
  // One launch: its arguments (a copy, as a kernel's parameter is) and its workers' progress.
  struct Launch {
    LaunchArgs args;
    uint32_t unfinished = 0;
    bool done = false;
  };

  Status allocHeap(size_t bytes, void** out);
  // Queues the launch; pool threads take its workers once the launch before it is done.
  std::shared_ptr<Launch> start(const LaunchArgs& args);
  void wait(const std::shared_ptr<Launch>& launch);
  void serve(uint32_t index);

  SlotPool& blocks_;  // the device's resident blocks, shared by the process's emulated runtimes
  Handover& handover_;
  std::vector<std::shared_ptr<void>> heap_;  // shared: a thread rank may keep its block (handover.h)
  std::vector<std::shared_ptr<void>> takenOver_;
  std::vector<transport::ShmSegment> segments_;

  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::shared_ptr<Launch>> queue_;  // front: the running launch
  uint64_t generation_ = 0;                    // counts launches that reached the front
  std::vector<std::thread> pool_;
  bool stopping_ = false;
};

EmulatedRuntime::~EmulatedRuntime() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  for (std::thread& t : pool_) t.join();
}

Status EmulatedRuntime::allocHeap(size_t bytes, void** out) {
  const size_t size = (bytes + 4095) / 4096 * 4096;
  void* p = std::aligned_alloc(4096, size == 0 ? 4096 : size);
  if (p == nullptr) return error(loomSystemError, "out of memory for %zu bytes of emulated device memory", bytes);
  std::memset(p, 0, size == 0 ? 4096 : size);
  heap_.emplace_back(p, FreeDeleter());
  *out = p;
  return Status::ok();
}

Status EmulatedRuntime::allocShared(size_t bytes, int peerPid, bool hostMemory, void** out, SharedHandle* handle) {
  *handle = ownSharedHandle(bytes, 0, hostMemory);
  if (peerPid == ::getpid()) {
    LOOM_TRY(allocHeap(bytes, out));
    handover_.give(reinterpret_cast<uint64_t>(*out), heap_.back());
  } else {
    transport::ShmSegment segment;
    LOOM_TRY(createSharedSegment(bytes, "emulated device FIFO", &segment, handle));
    *out = segment.data();
    segments_.push_back(std::move(segment));
  }
  handle->address = reinterpret_cast<uint64_t>(*out);
  return Status::ok();
}

Status EmulatedRuntime::openShared(const SharedHandle& handle, int peer, void** out) {
  if (handle.pid == ::getpid()) return handover_.take(handle.address, peer, &takenOver_, out);
  transport::ShmSegment segment;
  LOOM_TRY(openSharedSegment(handle, peer, &segment));
  *out = segment.data();
  segments_.push_back(std::move(segment));
  return Status::ok();
}

std::shared_ptr<EmulatedRuntime::Launch> EmulatedRuntime::start(const LaunchArgs& args) {
  auto launch = std::make_shared<Launch>();
  launch->args = args;
  launch->args.countsForHost = 1;  // nothing is captured here
  launch->unfinished = args.workers;
  std::lock_guard<std::mutex> lock(mutex_);
  while (pool_.size() < args.workers) {
    const uint32_t index = static_cast<uint32_t>(pool_.size());
    pool_.emplace_back([this, index] { serve(index); });
  }
  queue_.push_back(launch);
  if (queue_.size() == 1) ++generation_;
  changed_.notify_all();
  return launch;
}

void EmulatedRuntime::wait(const std::shared_ptr<Launch>& launch) {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return launch->done; });
}

void EmulatedRuntime::serve(uint32_t index) {
  uint64_t ran = 0;  // the generation this thread last worked on
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    changed_.wait(lock, [&] {
      return stopping_ || (!queue_.empty() && generation_ != ran && index < queue_.front()->args.workers);
    });
    if (stopping_) return;
    ran = generation_;
    std::shared_ptr<Launch> launch = queue_.front();
    lock.unlock();
    // A worker holds one of the device's resident blocks from its start to its end, as a
    // thread block does on a GPU.
    blocks_.take();
    HostWorker worker(nullptr, 0);
    runWorker(launch->args, index, worker);
    blocks_.give();
    lock.lock();
    if (--launch->unfinished == 0) {
      launch->done = true;
      queue_.pop_front();
      if (!queue_.empty()) ++generation_;
      changed_.notify_all();
    }
  }
}

Status EmulatedRuntime::launch(const LaunchArgs& args, const LaunchStream& stream, bool* captured) {
  *captured = false;
  if (args.workers == 0) return Status::ok();
  if (stream.host == nullptr) {
    start(args);
    return Status::ok();
  }
  // In the stream's order: started when the stream reaches it, finished before its next work.
  stream.host->enqueue([this, args] {
    wait(start(args));
    return Status::ok();
  });
  return Status::ok();
}

Status EmulatedRuntime::finishLaunches(const LaunchStream& stream) {
  if (stream.host != nullptr) return Status::ok();
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return queue_.empty(); });
  return Status::ok();
}

}  // namespace

Status makeEmulatedRuntime(SlotPool& pool, Handover& handover, std::unique_ptr<DeviceRuntime>* out) {
  long long blocks = 0;
  LOOM_TRY(env::getInt("LOOM_DEVICE_EMULATION_BLOCKS", 0, 1 << 20, &blocks));
  pool.setCapacity(static_cast<int>(blocks));
  *out = std::make_unique<EmulatedRuntime>(pool, handover);
  return Status::ok();
}

}  // namespace loom::device
