// A counting pool of slots that threads take and give back, at most `capacity` taken at
// once: the emulated device's resident thread blocks (device/emulated_runtime.cc).
#pragma once

#include <condition_variable>
#include <mutex>

namespace loom {

// Thread-safe.
class SlotPool {
 public:
  // The first non-zero capacity set is kept (0: no limit): one device, one size.
  void setCapacity(int capacity);
  int capacity() const;
  void take();  // waits for a free slot
  void give();

 private:
  mutable std::mutex mutex_;
  std::condition_variable freed_;
  int capacity_ = 0;
  int taken_ = 0;
};

}  // namespace loom
