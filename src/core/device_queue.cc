#include "core/device_queue.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <new>
#include <thread>

#include "core/call_check.h"
#include "core/collective.h"
#include "core/communicator.h"
#include "core/cuda_call.h"
#include "core/device_executor.h"
#include "core/log.h"
#include "core/p2p.h"
#include "kernels/cuda/device_reduce.h"
#include "kernels/cuda/stream_flag.h"
#include "topology/affinity.h"

namespace loom {
namespace {

// Flags in pinned host memory, one per job on a stream. A stream waits for its job's flag
// to become 1 and sets it back to 0 itself; a slot is reused once it reads 0 again.
constexpr uint32_t kSlots = 4096;

// Device scratch for plans (partial results of ring and tree steps): blocks kept for the
// communicator's life and handed out again for each job, since freeing device memory while
// another rank's stream waits on this rank's proxy would wait for that stream (cudaFree
// synchronises the device) and never return.
class DeviceArena : public ScratchSource {
 public:
  void reset() { block_ = offset_ = 0; }
  char* get(size_t bytes) override {
    bytes = (bytes + 255) & ~size_t{255};
    while (block_ < blocks_.size() && offset_ + bytes > sizes_[block_]) {
      ++block_;
      offset_ = 0;
    }
    if (block_ == blocks_.size()) {
      size_t size = std::max(bytes, size_t{16} << 20);
      cuda::DevicePtr block;
      if (!cuda::allocDevice(size, &block).isOk()) throw std::bad_alloc();
      blocks_.push_back(std::move(block));
      sizes_.push_back(size);
    }
    char* p = static_cast<char*>(blocks_[block_].get()) + offset_;
    offset_ += bytes;
    return p;
  }

 private:
  std::vector<cuda::DevicePtr> blocks_;
  std::vector<size_t> sizes_;
  size_t block_ = 0, offset_ = 0;
};

// Pinned host buffers for the host-staged path, same policy (grown, never freed early).
class PinnedArena {
 public:
  void reset() { used_ = 0; }
  Status get(size_t bytes, char** out) {
    bytes = (bytes + 63) & ~size_t{63};
    if (used_ + bytes > size_) {
      // Earlier pieces of this job still point into the old block: keep it.
      size_t size = std::max({bytes, size_ * 2, size_t{1} << 20});
      cuda::PinnedPtr block;
      LOOM_TRY(cuda::allocPinned(size, &block));
      retired_.push_back(std::move(current_));
      current_ = std::move(block);
      size_ = size;
      used_ = 0;
    }
    *out = static_cast<char*>(current_.get()) + used_;
    used_ += bytes;
    return Status::ok();
  }

 private:
  cuda::PinnedPtr current_;
  std::vector<cuda::PinnedPtr> retired_;
  size_t size_ = 0, used_ = 0;
};

// A device range a call reads or writes, and where its staged copy sits.
struct StagedRange {
  const char* device;
  size_t bytes;
  char* host = nullptr;
  bool in = false;   // copied to the host before the calls run
  bool out = false;  // copied back after
};

class CudaDeviceQueue final : public DeviceQueue {
 public:
  explicit CudaDeviceQueue(Communicator* comm) : comm_(comm) {}
  ~CudaDeviceQueue() override;
  Status init();

  const char* path() const override { return executor_ ? "cuda_ipc" : "host-staged"; }
  Status checkBuffer(const char* name, const void* ptr, size_t bytes) const override;
  Status enqueue(std::vector<group::Call> calls, void* stream) override;
  Status enqueueBarrier(void* stream) override;

 private:
  struct Job {
    CudaDeviceQueue* queue;
    std::vector<group::Call> calls;
    bool barrier = false;
    uint32_t slot = 0;
    bool captured = false;  // part of a CUDA graph: runs on every replay, kept until destroy
    bool completed = false; // under mutex_: the proxy has run it (the last time)
  };

  static void CUDART_CB trigger(void* job);
  Status put(std::unique_ptr<Job> job, cudaStream_t stream);
  void reclaim();  // under mutex_
  void serve();
  Status run(Job& job);
  Status runStaged(const std::vector<group::Call>& calls);
  Status runDirect(const std::vector<group::Call>& calls);

  Communicator* comm_;
  std::unique_ptr<DeviceExecutor> executor_;  // null: host-staged
  cuda::StreamPtr stagingStream_;
  DeviceArena deviceScratch_;
  PinnedArena staging_;
  cuda::PinnedPtr flagMemory_;
  volatile uint32_t* flags_ = nullptr;
  uint32_t* flagsDevice_ = nullptr;

  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<uint32_t> freeSlots_;
  std::vector<std::unique_ptr<Job>> jobs_;  // every job not yet reclaimed
  std::deque<Job*> ready_;                  // triggered, not yet run
  size_t uncompleted_ = 0;                  // uncaptured jobs on streams, not yet run
  bool stopping_ = false;
  std::thread proxy_;
};

// Sets the communicator's device as current for this scope, and puts the caller's back.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    if (previous_ != device) cudaSetDevice(device);
  }
  ~DeviceScope() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }

 private:
  int previous_ = -1;
};

Status CudaDeviceQueue::init() {
  DeviceScope scope(comm_->device());
  int count = 0;
  LOOM_CUDA_TRY(cudaGetDeviceCount(&count));
  if (comm_->device() >= count) {
    return error(loomInvalidArgument, "config.device=%d: this process sees %d CUDA device(s)", comm_->device(), count);
  }
  LOOM_CUDA_TRY(cudaSetDevice(comm_->device()));
  // Now, before any stream waits on this communicator's jobs (kernels/cuda/device_reduce.h).
  LOOM_CUDA_TRY(static_cast<cudaError_t>(cuda::loadFlagKernel()));
  LOOM_CUDA_TRY(static_cast<cudaError_t>(cuda::loadKernels()));
  LOOM_TRY(cuda::allocPinned(kSlots * sizeof(uint32_t), &flagMemory_));
  flags_ = static_cast<volatile uint32_t*>(flagMemory_.get());
  void* dev = nullptr;
  LOOM_CUDA_TRY(cudaHostGetDevicePointer(&dev, flagMemory_.get(), 0));
  flagsDevice_ = static_cast<uint32_t*>(dev);
  for (uint32_t i = 0; i < kSlots; ++i) {
    flags_[i] = 0;
    freeSlots_.push_back(kSlots - 1 - i);
  }
  LOOM_TRY(cuda::makeStream(&stagingStream_));
  if (comm_->hosts() == 1 && comm_->config().cudaIpc) LOOM_TRY(DeviceExecutor::create(comm_, &executor_));
  LOOM_INFO("comm %016llx rank %d: device %d, %s data path", static_cast<unsigned long long>(comm_->commId()),
            comm_->rank(), comm_->device(),
            executor_ ? "cuda_ipc (GPU buffers read directly by peers on this host)"
                      : (comm_->hosts() > 1 ? "host-staged (ranks on several hosts)" : "host-staged (LOOM_CUDA_IPC is 0)"));
  proxy_ = std::thread([this] {
    std::string note;
    topo::bindCurrentThread(comm_->deviceCpus(), &note);
    LOOM_INFO("rank %d: device %d proxy thread: %s", comm_->rank(), comm_->device(), note.c_str());
    serve();
  });
  return Status::ok();
}

CudaDeviceQueue::~CudaDeviceQueue() {
  std::unique_lock<std::mutex> lock(mutex_);
  const auto limit = std::chrono::milliseconds(comm_->config().timeoutMs);
  if (!changed_.wait_for(lock, limit, [this] { return uncompleted_ == 0; })) {
    LOOM_WARN("rank %d: destroying a device communicator with %zu call(s) its streams have not reached after %lld ms; "
              "those streams will not be released",
              comm_->rank(), uncompleted_, static_cast<long long>(comm_->config().timeoutMs));
  }
  stopping_ = true;
  lock.unlock();
  changed_.notify_all();
  if (proxy_.joinable()) proxy_.join();
}

Status CudaDeviceQueue::checkBuffer(const char* name, const void* ptr, size_t bytes) const {
  if (bytes == 0) return Status::ok();
  cudaPointerAttributes attr{};
  cudaError_t err = cudaPointerGetAttributes(&attr, ptr);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return error(loomInvalidArgument, "%s %p: not memory CUDA knows (%s)", name, ptr, cudaGetErrorString(err));
  }
  if (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged) {
    return error(loomInvalidArgument, "%s %p is %s memory; a communicator on device %d takes device buffers", name, ptr,
                 attr.type == cudaMemoryTypeHost ? "pinned host" : "pageable host", comm_->device());
  }
  if (attr.type == cudaMemoryTypeDevice && attr.device != comm_->device()) {
    return error(loomInvalidArgument, "%s %p is memory of device %d; this communicator's device is %d", name, ptr,
                 attr.device, comm_->device());
  }
  return Status::ok();
}

void CUDART_CB CudaDeviceQueue::trigger(void* data) {
  // On CUDA's callback thread: no CUDA calls here, and nothing that waits.
  Job* job = static_cast<Job*>(data);
  CudaDeviceQueue* q = job->queue;
  {
    std::lock_guard<std::mutex> lock(q->mutex_);
    q->ready_.push_back(job);
  }
  q->changed_.notify_all();
}

void CudaDeviceQueue::reclaim() {
  auto done = [this](const std::unique_ptr<Job>& j) {
    if (j->captured || !j->completed || flags_[j->slot] != 0) return false;
    freeSlots_.push_back(j->slot);
    return true;
  };
  jobs_.erase(std::remove_if(jobs_.begin(), jobs_.end(), done), jobs_.end());
}

Status CudaDeviceQueue::put(std::unique_ptr<Job> job, cudaStream_t stream) {
  DeviceScope scope(comm_->device());
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  LOOM_CUDA_TRY(cudaStreamIsCapturing(stream, &capture));
  job->captured = capture == cudaStreamCaptureStatusActive;
  job->queue = this;
  std::unique_lock<std::mutex> lock(mutex_);
  reclaim();
  if (freeSlots_.empty()) {
    // Every slot is a call some stream has not finished yet: let the streams catch up.
    Deadline deadline = Deadline::afterMs(comm_->config().timeoutMs);
    while (freeSlots_.empty() && !deadline.expired()) {
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::microseconds(100));
      lock.lock();
      reclaim();
    }
    if (freeSlots_.empty()) {
      return error(loomInvalidUsage, "%u calls of this device communicator are on streams that have not run them",
                   kSlots);
    }
  }
  job->slot = freeSlots_.back();
  freeSlots_.pop_back();
  flags_[job->slot] = 0;
  Job* raw = job.get();
  jobs_.push_back(std::move(job));
  if (!raw->captured) ++uncompleted_;
  lock.unlock();
  uint32_t* flag = flagsDevice_ + raw->slot;
  LOOM_CUDA_TRY(cudaLaunchHostFunc(stream, &CudaDeviceQueue::trigger, raw));
  LOOM_CUDA_TRY(static_cast<cudaError_t>(cuda::waitAndResetFlag(flag, stream)));
  return Status::ok();
}

Status CudaDeviceQueue::enqueue(std::vector<group::Call> calls, void* stream) {
  auto job = std::make_unique<Job>();
  job->calls = std::move(calls);
  return put(std::move(job), static_cast<cudaStream_t>(stream));
}

Status CudaDeviceQueue::enqueueBarrier(void* stream) {
  auto job = std::make_unique<Job>();
  job->barrier = true;
  return put(std::move(job), static_cast<cudaStream_t>(stream));
}

void CudaDeviceQueue::serve() {
  cudaSetDevice(comm_->device());
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    changed_.wait(lock, [this] { return stopping_ || !ready_.empty(); });
    if (ready_.empty()) return;
    Job* job = ready_.front();
    ready_.pop_front();
    lock.unlock();
    Status s = run(*job);
    if (!s.isOk()) {
      LOOM_WARN("rank %d: a call on device %d failed: %s", comm_->rank(), comm_->device(), s.message().c_str());
      comm_->fail(s);
      comm_->setLastError(s.message());
    }
    // Releases the stream (the job's device work is complete by now).
    std::atomic_thread_fence(std::memory_order_seq_cst);
    flags_[job->slot] = 1;
    lock.lock();
    if (!job->captured && !job->completed) --uncompleted_;
    job->completed = true;
    changed_.notify_all();
  }
}

Status CudaDeviceQueue::run(Job& job) {
  // A failed communicator fails every later call at once; the stream is still released.
  LOOM_TRY(comm_->usable());
  if (job.barrier) return runBarrier(*comm_);
  try {
    return executor_ ? runDirect(job.calls) : runStaged(job.calls);
  } catch (const std::bad_alloc&) {
    return error(loomSystemError, "out of memory for a call's scratch or staging buffers on device %d", comm_->device());
  }
}

Status CudaDeviceQueue::runDirect(const std::vector<group::Call>& calls) {
  deviceScratch_.reset();
  std::vector<Plan> plans;
  LOOM_TRY(group::buildPlans(calls, &plans, &deviceScratch_));
  LOOM_TRY(checkCalls(plans));
  Status s;
  for (Plan& p : plans) {
    s = executor_->run(p);
    if (!s.isOk()) comm_->transport().closeAll(-1);  // peers stop reading this rank's memory
    LOOM_TRY(s);
  }
  return Status::ok();
}

// The device ranges a call reads (in) and writes (out): an in-place call's buffers are one
// range, so that its staged copy is in place too.
void stagedRanges(const group::Call& call, std::vector<StagedRange>* out) {
  if (const P2POp* op = std::get_if<P2POp>(&call)) {
    bool send = op->direction == P2POp::Direction::kSend;
    out->push_back({static_cast<const char*>(op->buffer), op->bytes, nullptr, send, !send});
    return;
  }
  const CollectiveCall& c = std::get<CollectiveCall>(call);
  size_t sendBytes = 0, recvBytes = 0;
  bufferBytes(c.info, c.comm->rank(), c.comm->nranks(), &sendBytes, &recvBytes);
  const char* send = static_cast<const char*>(c.send);
  const char* recv = static_cast<const char*>(c.recv);
  if (c.info.inPlace) {
    const char* lo = std::min(send, recv);
    const char* hi = std::max(send + sendBytes, recv + recvBytes);
    out->push_back({lo, static_cast<size_t>(hi - lo), nullptr, true, true});
    return;
  }
  if (sendBytes > 0) out->push_back({send, sendBytes, nullptr, true, false});
  if (recvBytes > 0) out->push_back({recv, recvBytes, nullptr, false, true});
}

// Where a device pointer of the call went in its staged copy.
template <typename T>
T* staged(T* device, const std::vector<StagedRange>& ranges) {
  const char* p = reinterpret_cast<const char*>(device);
  for (const StagedRange& r : ranges) {
    if (p >= r.device && p < r.device + r.bytes) return reinterpret_cast<T*>(r.host + (p - r.device));
  }
  return device;  // unused by this rank (0 bytes here)
}

Status CudaDeviceQueue::runStaged(const std::vector<group::Call>& calls) {
  staging_.reset();
  cudaStream_t stream = stagingStream_.get();
  std::vector<std::vector<StagedRange>> ranges(calls.size());
  for (size_t i = 0; i < calls.size(); ++i) {
    stagedRanges(calls[i], &ranges[i]);
    for (StagedRange& r : ranges[i]) {
      LOOM_TRY(staging_.get(r.bytes, &r.host));
      if (r.in && r.bytes > 0) LOOM_CUDA_TRY(cudaMemcpyAsync(r.host, r.device, r.bytes, cudaMemcpyDeviceToHost, stream));
    }
  }
  LOOM_CUDA_TRY(cudaStreamSynchronize(stream));
  std::vector<group::Call> host = calls;
  for (size_t i = 0; i < host.size(); ++i) {
    if (P2POp* op = std::get_if<P2POp>(&host[i])) {
      op->buffer = staged(op->buffer, ranges[i]);
    } else {
      CollectiveCall& c = std::get<CollectiveCall>(host[i]);
      c.send = staged(c.send, ranges[i]);
      c.recv = staged(c.recv, ranges[i]);
    }
  }
  LOOM_TRY(group::runNow(host));
  for (const std::vector<StagedRange>& list : ranges) {
    for (const StagedRange& r : list) {
      if (r.out && r.bytes > 0) {
        LOOM_CUDA_TRY(cudaMemcpyAsync(const_cast<char*>(r.device), r.host, r.bytes, cudaMemcpyHostToDevice, stream));
      }
    }
  }
  LOOM_CUDA_TRY(cudaStreamSynchronize(stream));
  return Status::ok();
}

}  // namespace

Status DeviceQueue::create(Communicator* comm, std::unique_ptr<DeviceQueue>* out) {
  auto queue = std::make_unique<CudaDeviceQueue>(comm);
  LOOM_TRY(queue->init());
  *out = std::move(queue);
  return Status::ok();
}

}  // namespace loom
