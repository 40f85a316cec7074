// Page-aligned host memory: what ncclMemAlloc gives where there is no device.
#include <cstdint>
#include <cstdlib>

#include "compat/nccl/cuda_memory.h"

namespace loom::nccl {

Status allocateHost(void** ptr, size_t size) {
  constexpr size_t kPage = 4096;
  if (size > SIZE_MAX - kPage) return error(loomInvalidArgument, "size %zu is too large", size);
  *ptr = std::aligned_alloc(kPage, (size + kPage - 1) / kPage * kPage);
  if (*ptr == nullptr) return error(loomSystemError, "no host memory for %zu bytes", size);
  return Status::ok();
}

}  // namespace loom::nccl
