// Shared-memory files behind device-communicator memory (shared_segment.h).
#include "device/shared_segment.h"

#include <cstring>

#include "base/env.h"

namespace loom::device {

Status createSharedSegment(size_t bytes, const char* purpose, transport::ShmSegment* out, SharedHandle* handle) {
  LOOM_TRY(transport::ShmSegment::create(env::getOrDefault("LOOM_SHM_DIR"), bytes, purpose, out));
  if (out->name().size() >= sizeof handle->data) {
    return error(loomInvalidArgument, "LOOM_SHM_DIR is too long for a device communicator's handle (%s)",
                 out->name().c_str());
  }
  std::memcpy(handle->data, out->name().c_str(), out->name().size() + 1);
  return Status::ok();
}

Status openSharedSegment(const SharedHandle& handle, int peer, transport::ShmSegment* out) {
  char name[sizeof handle.data + 1] = {};
  std::memcpy(name, handle.data, sizeof handle.data);
  LOOM_TRY(transport::ShmSegment::open(name, handle.bytes, out).withContext(
      format("mapping rank %d's device-communicator memory", peer)));
  out->unlink();
  return Status::ok();
}

}  // namespace loom::device
