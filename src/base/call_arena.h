// Memory for one call's short-lived bookkeeping (its plans, the executor's queues and step
// states): a buffer inside the arena first, then the heap, all of it given back when the
// arena goes. On the heap a small call's vectors were 15-19 allocations and frees, a fifth of a
// 2-rank 8-byte exchange's time (docs/RESULTS.md, "A call's bookkeeping in an arena").
#pragma once

#include <cstddef>
#include <memory_resource>

namespace loom {

class CallArena : public std::pmr::monotonic_buffer_resource {
 public:
  // Enough for the plans and run of a group of a few messages or a small collective.
  static constexpr size_t kInlineBytes = 4096;

  CallArena() : std::pmr::monotonic_buffer_resource(buffer_, kInlineBytes, std::pmr::new_delete_resource()) {}
  CallArena(const CallArena&) = delete;
  CallArena& operator=(const CallArena&) = delete;

 private:
  // Handed to the base before it is constructed: only its address is taken there.
  alignas(std::max_align_t) std::byte buffer_[kInlineBytes];
};

}  // namespace loom
