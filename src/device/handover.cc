// Memory handed to a thread rank of the same process (handover.h).
#include "device/handover.h"

#include <utility>

namespace loom::device {

void Handover::give(uint64_t address, std::shared_ptr<void> memory) {
  std::lock_guard<std::mutex> lock(mutex_);
  given_[address] = std::move(memory);
}

Status Handover::take(uint64_t address, int peer, std::vector<std::shared_ptr<void>>* holders, void** out) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = given_.find(address);
  if (it == given_.end()) {
    return error(loomInternalError, "rank %d's device memory at 0x%llx was not handed over to this rank", peer,
                 static_cast<unsigned long long>(address));
  }
  *out = it->second.get();
  holders->push_back(std::move(it->second));
  given_.erase(it);
  return Status::ok();
}

}  // namespace loom::device
