// The slot pool's waiting and counting (interface in slot_pool.h).
#include "base/slot_pool.h"

namespace loom {

void SlotPool::setCapacity(int capacity) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (capacity_ == 0) capacity_ = capacity;
}

int SlotPool::capacity() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return capacity_;
}

void SlotPool::take() {
  std::unique_lock<std::mutex> lock(mutex_);
  freed_.wait(lock, [this] { return capacity_ == 0 || taken_ < capacity_; });
  ++taken_;
}

void SlotPool::give() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    --taken_;
  }
  freed_.notify_one();
}

}  // namespace loom
