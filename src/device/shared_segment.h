// Device-communicator memory that a peer process maps as a shared-memory file named in its
// SharedHandle: the emulation's FIFOs, and a GPU's FIFOs in pinned host memory
// (cuda_runtime.cc registers the mapping with CUDA on both sides).
#pragma once

#include <cstddef>

#include "base/status.h"
#include "device/runtime.h"
#include "transport/shm_segment.h"

namespace loom::device {

// A zeroed file of `bytes` in LOOM_SHM_DIR, its name in handle->data.
Status createSharedSegment(size_t bytes, const char* purpose, transport::ShmSegment* out, SharedHandle* handle);
// Maps the file rank `peer` named in `handle`, and unlinks it: mapped on both sides, a crash
// from then on leaves no file behind.
Status openSharedSegment(const SharedHandle& handle, int peer, transport::ShmSegment* out);

}  // namespace loom::device
