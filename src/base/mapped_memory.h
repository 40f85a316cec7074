// Host memory the other processes of this host can map: what loomMemAlloc hands out, so that a
// collective can read and write a peer's buffers straight (core/mapped_allreduce.h). Each
// allocation is a memfd of its own, mapped shared here; a peer process maps it by opening
// /proc/<pid>/fd/<fd>, which needs the same user and a shared pid namespace but no ptrace
// rights (Yama restricts attaching to a process, not reading its /proc entries).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>

#include "base/socket.h"
#include "base/status.h"

namespace loom {

// Owns one shared mapping of a file's first bytes. Move-only.
class Mapping {
 public:
  Mapping() = default;
  Mapping(Mapping&& other) noexcept;
  Mapping& operator=(Mapping&& other) noexcept;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping();

  // Maps the first `bytes` of fd, readable and writable.
  static Status of(int fd, size_t bytes, Mapping* out);

  char* data() const { return static_cast<char*>(data_); }
  size_t size() const { return bytes_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// Where a range of a loomMemAlloc allocation lies, for a peer process to map it.
struct MappedRange {
  int fd = -1;             // the allocation's memfd in the owning process
  uint64_t serial = 0;     // which allocation: fds are reused after a free, serials never
  size_t segmentBytes = 0;
  size_t offset = 0;       // of the range's first byte in the allocation
};

// The process's loomMemAlloc allocations (one instance, in the Registry). Thread-safe.
class MappedAllocations {
 public:
  // `bytes` (rounded up to whole pages) of zeroed memory, or loomSystemError naming what the
  // system refused.
  Status allocate(size_t bytes, void** out);
  // Ends an allocation; loomInvalidArgument for a pointer allocate() did not return.
  Status release(void* ptr);
  // Whether [p, p + bytes) lies in one allocation, and where (bytes >= 1).
  bool find(const void* p, size_t bytes, MappedRange* out) const;

  // fork()'s handlers (the registry's): no allocation changes across the fork, and the
  // child's copies of the allocations become private mappings of the same files.
  void beforeFork();
  void afterForkInParent();
  void afterForkInChild();

 private:
  struct Allocation {
    Fd fd;
    Mapping mapping;
    uint64_t serial;
  };
  mutable std::mutex mutex_;
  std::map<uintptr_t, Allocation> byStart_;
  uint64_t nextSerial_ = 1;
};

// Another process's allocation as this one maps it, and which file it is, so that one the
// owner has since freed (its descriptor closed, or reused for another file) can be told.
struct PeerAllocation {
  Mapping mapping;
  int fd = -1;  // in the owner
  uint64_t device = 0;
  uint64_t inode = 0;
};

// Maps all of process `pid`'s allocation `range` (a shared pid namespace is the caller's check).
Status mapPeerAllocation(int pid, const MappedRange& range, PeerAllocation* out);
// Whether process `pid` still holds the allocation `a` maps.
bool peerStillHolds(int pid, const PeerAllocation& a);

}  // namespace loom
