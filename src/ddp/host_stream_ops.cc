// StreamOps for host communicators: the host kernels, run at once or queued on a host stream.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>

#include "base/host_stream.h"
#include "core/communicator.h"
#include "core/device_comm.h"
#include "core/mapped_allreduce.h"
#include "core/registry.h"
#include "ddp/stream_ops.h"
#include "kernels/reduce.h"

namespace loom::ddp {
namespace {

// A bucket is freed once, by its owner: release() cannot fail here.
void freeMapped(void* p) { (void)Registry::instance().mappedAllocations().release(p); }
void freeHeap(void* p) { std::free(p); }

class HostStreamOps : public StreamOps {
 public:
  HostStreamOps(size_t mappedFrom, loomStream_t handle, HostStream* stream)
      : mappedFrom_(mappedFrom), handle_(handle), stream_(stream) {}

  loomStream_t stream() const override { return handle_; }

  // Never zero bytes: a null pointer would read as "no buffer" to the collectives.
  Status allocate(size_t bytes, Memory* out) override {
    bytes = std::max<size_t>(bytes, 1);
    void* p = nullptr;
    if (mappedFrom_ > 0 && bytes >= mappedFrom_) {
      LOOM_TRY(Registry::instance().mappedAllocations().allocate(bytes, &p));
      *out = Memory(p, &freeMapped);
      return Status::ok();
    }
    p = std::aligned_alloc(kAlignment, (bytes + kAlignment - 1) / kAlignment * kAlignment);
    if (p == nullptr) return error(loomSystemError, "out of memory for a %zu-byte bucket", bytes);
    *out = Memory(p, &freeHeap);
    return Status::ok();
  }

  Status divide(void* dst, const void* src, size_t count, loomDataType_t type, int divisor) override {
    return run([=] { kernels::scale(dst, src, count, type, divisor); });
  }
  Status copy(void* dst, const void* src, size_t bytes) override {
    return run([=] { kernels::copy(dst, src, bytes); });
  }
  Status zero(void* dst, size_t bytes) override {
    return run([=] { std::memset(dst, 0, bytes); });
  }
  Status convert(void* dst, loomDataType_t dstType, const void* src, loomDataType_t srcType,
                 size_t count) override {
    return run([=] { kernels::convert(dst, dstType, src, srcType, count); });
  }

  Status synchronize() override { return stream_ ? stream_->synchronize() : Status::ok(); }

 private:
  Status run(std::function<void()> work) {
    if (stream_ == nullptr) {
      work();
      return Status::ok();
    }
    stream_->enqueue([work = std::move(work)] {
      work();
      return Status::ok();
    });
    return Status::ok();
  }

  static constexpr size_t kAlignment = 64;  // a cache line: the kernels' widest vectors
  // Buckets from this size come from loomMemAlloc (0: none do): ranks that are processes of
  // one host then allreduce them straight between their buffers (core/mapped_allreduce.h).
  size_t mappedFrom_;
  loomStream_t handle_;
  HostStream* stream_;
};

}  // namespace

Status makeHostOps(size_t mappedFrom, loomStream_t stream, std::unique_ptr<StreamOps>* out) {
  if (stream != nullptr && !Registry::instance().streams().contains(stream)) {
    return error(loomInvalidUsage,
                 "stream %p is not a live host stream (from loomStreamCreate), and the "
                 "communicator is a host one",
                 stream);
  }
  *out = std::make_unique<HostStreamOps>(mappedFrom, stream, static_cast<HostStream*>(stream));
  return Status::ok();
}

Status makeOpsFor(loomComm_t comm, loomStream_t stream, std::unique_ptr<StreamOps>* out) {
  int device = -1;
  if (loomCommDevice(comm, &device) != loomSuccess) {
    return error(loomInvalidArgument, "comm: %s", loomGetLastError(nullptr));
  }
  // An emulated device communicator (LOOM_DEVICE_EMULATION=1) works on host memory and Loom's
  // host streams, as a host one does.
  Communicator& c = *static_cast<Communicator*>(static_cast<void*>(comm));
  if (device >= 0 && !c.deviceComm().hostStreams()) return makeCudaOps(device, stream, out);
  // Threads of one process reach each other's buffers wherever they are; an emulated device
  // communicator's calls never run mapped.
  const bool needsMapped = device < 0 && c.board() != nullptr && !c.board()->oneProcess();
  return makeHostOps(needsMapped ? mappedMinBytes(c) : 0, stream, out);
}

}  // namespace loom::ddp
