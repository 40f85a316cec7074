// Shared-memory files behind device-communicator memory (shared_segment.h).
#include "device/shared_segment.h"

#include <sys/stat.h>

#include <cerrno>
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
  const Status s = transport::ShmSegment::open(name, handle.bytes, out);
  struct stat st;
  if (!s.isOk() && ::stat(name, &st) != 0 && errno == ENOENT) {
    // The name existed when the peer sent it, and only the peer removes it before this rank
    // says it has mapped it: when its communicator goes.
    return error(loomRemoteError,
                 "rank %d removed its device-communicator memory before this rank mapped it: it left the call "
                 "(it failed, or destroyed its communicator)",
                 peer);
  }
  LOOM_TRY(s.withContext(format("mapping rank %d's device-communicator memory", peer)));
  out->unlink();
  return Status::ok();
}

}  // namespace loom::device
