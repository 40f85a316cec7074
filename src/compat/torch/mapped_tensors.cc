// A torch CPU allocator over loomMemAlloc (mapped_tensors.h).
#include "compat/torch/mapped_tensors.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <iterator>
#include <mutex>
#include <unordered_map>

#include "loom/loom.h"

namespace loom::torch_backend {
namespace {

void releaseMapped(void* p);

class MappedCpuAllocator final : public c10::Allocator {
 public:
  explicit MappedCpuAllocator(c10::Allocator* fallback) : fallback_(fallback) {}

  void lowerMinBytes(size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    const size_t now = minBytes_.load(std::memory_order_relaxed);  // 0: none yet
    if (now == 0 || bytes < now) minBytes_.store(bytes, std::memory_order_relaxed);
  }

  // torch 2.3 made allocate non-const and added copy_data: both spellings are declared, so
  // that each overrides what the installed torch's Allocator has.
  c10::DataPtr allocate(size_t bytes) const { return take(bytes); }
  c10::DataPtr allocate(size_t bytes) { return take(bytes); }
  void copy_data(void* dest, const void* src, size_t count) const { std::memcpy(dest, src, count); }

  void lock() const { mutex_.lock(); }
  void unlock() const { mutex_.unlock(); }

  void release(void* p) const {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = live_.find(p);
    const size_t bytes = it->second;
    live_.erase(it);
    if (bytes > kMaxCachedBytes) {
      loomMemFree(p);
      return;
    }
    free_.push_back({bytes, p});
    cachedBytes_ += bytes;
    while (cachedBytes_ > kMaxCachedBytes) evictOldest();
  }

 private:
  struct Block {
    size_t bytes;
    void* p;
  };

  // Freed blocks kept for the next allocation of their size: a training step frees and makes
  // the same tensors again, and a fresh memfd costs system calls and a page fault per page
  // where the heap hands back memory it already has. Beyond this the oldest go back, so that
  // sizes a program no longer makes (tensors whose shape changes) do not hold memory forever.
  static constexpr size_t kMaxCachedBytes = size_t{1} << 30;

  c10::DataPtr take(size_t bytes) const {
    const size_t min = minBytes_.load(std::memory_order_relaxed);
    if (min == 0 || bytes < min) return fallback_->allocate(bytes);
    std::lock_guard<std::mutex> lock(mutex_);
    static const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    const size_t rounded = (bytes + page - 1) / page * page;
    void* p = nullptr;
    // The most recently freed block of the size: the likeliest to still be in the cache.
    auto cached = std::find_if(free_.rbegin(), free_.rend(), [rounded](const Block& b) { return b.bytes == rounded; });
    if (cached != free_.rend()) {
      p = cached->p;
      free_.erase(std::next(cached).base());
      cachedBytes_ -= rounded;
    } else if (!roomForAnotherBlock() || loomMemAlloc(&p, rounded) != loomSuccess) {
      return fallback_->allocate(bytes);
    }
    live_.emplace(p, rounded);
    return {p, p, &releaseMapped, c10::Device(c10::DeviceType::CPU)};
  }

  // Each block holds a file descriptor: at most a quarter of the process's limit, so that
  // the program's own files and sockets never find the table full because of tensors.
  // Cached blocks go first, the oldest first.
  bool roomForAnotherBlock() const {
    rlimit limit{};
    const size_t most = ::getrlimit(RLIMIT_NOFILE, &limit) == 0 ? limit.rlim_cur / 4 : 0;
    while (live_.size() + free_.size() >= most && !free_.empty()) evictOldest();
    return live_.size() + free_.size() < most;
  }

  void evictOldest() const {
    cachedBytes_ -= free_.front().bytes;
    loomMemFree(free_.front().p);
    free_.pop_front();
  }

  c10::Allocator* fallback_;
  mutable std::mutex mutex_;
  std::atomic<size_t> minBytes_{0};
  mutable std::unordered_map<void*, size_t> live_;
  mutable std::deque<Block> free_;  // oldest first
  mutable size_t cachedBytes_ = 0;
};

// Made, and put in torch's place, at first use. Never destroyed: torch keeps the pointer, and
// tensors are still freed during exit, after static destructors have run.
MappedCpuAllocator& theAllocator() {
  static MappedCpuAllocator* const allocator = [] {
    auto* made = new MappedCpuAllocator(c10::GetCPUAllocator());
    c10::SetCPUAllocator(made, /*priority=*/1);
    // A child of fork() (a DataLoader worker) must not inherit the lock held by a thread that
    // does not exist there. Registered after libloom's handlers (a communicator exists by now),
    // so this lock is taken first, the order take() takes it and loomMemAlloc's.
    ::pthread_atfork([] { theAllocator().lock(); }, [] { theAllocator().unlock(); }, [] { theAllocator().unlock(); });
    return made;
  }();
  return *allocator;
}

void releaseMapped(void* p) { theAllocator().release(p); }

}  // namespace

void mapCpuTensorsFrom(size_t minBytes) { theAllocator().lowerMinBytes(minBytes); }

bool isMappedCpuMemory(const at::Tensor& t) {
  return t.has_storage() && t.storage().data_ptr().get_deleter() == &releaseMapped;
}

}  // namespace loom::torch_backend
