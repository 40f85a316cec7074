// StreamOps for host communicators: the host kernels, run at once or queued on a host stream.
#include <algorithm>
#include <cstring>
#include <functional>

#include "base/host_stream.h"
#include "core/communicator.h"
#include "core/device_comm.h"
#include "core/registry.h"
#include "ddp/stream_ops.h"
#include "kernels/reduce.h"

namespace loom::ddp {
namespace {

// A bucket is freed once, by its owner: release() cannot fail here.
void freeMapped(void* p) { (void)Registry::instance().mappedAllocations().release(p); }

class HostStreamOps : public StreamOps {
 public:
  HostStreamOps(loomStream_t handle, HostStream* stream) : handle_(handle), stream_(stream) {}

  loomStream_t stream() const override { return handle_; }

  Status allocate(size_t bytes, Memory* out) override {
    // loomMemAlloc's memory: ranks that are processes of one host then allreduce the buckets
    // straight between their buffers (core/mapped_allreduce.h). Never zero bytes (a null
    // pointer would read as "no buffer" to the collectives).
    void* p = nullptr;
    LOOM_TRY(Registry::instance().mappedAllocations().allocate(std::max<size_t>(bytes, 1), &p));
    *out = Memory(p, &freeMapped);
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

  loomStream_t handle_;
  HostStream* stream_;
};

}  // namespace

Status makeHostOps(loomStream_t stream, std::unique_ptr<StreamOps>* out) {
  if (stream != nullptr && !Registry::instance().streams().contains(stream)) {
    return error(loomInvalidUsage,
                 "stream %p is not a live host stream (from loomStreamCreate), and the "
                 "communicator is a host one",
                 stream);
  }
  *out = std::make_unique<HostStreamOps>(stream, static_cast<HostStream*>(stream));
  return Status::ok();
}

Status makeOpsFor(loomComm_t comm, loomStream_t stream, std::unique_ptr<StreamOps>* out) {
  int device = -1;
  if (loomCommDevice(comm, &device) != loomSuccess) {
    return error(loomInvalidArgument, "comm: %s", loomGetLastError(nullptr));
  }
  // An emulated device communicator (LOOM_DEVICE_EMULATION=1) works on host memory and Loom's
  // host streams, as a host one does.
  const bool hostMemory = device < 0 || static_cast<Communicator*>(static_cast<void*>(comm))->deviceComm().hostStreams();
  return hostMemory ? makeHostOps(stream, out) : makeCudaOps(device, stream, out);
}

}  // namespace loom::ddp
