// Allocations peers can map (mapped_memory.h).
#include "base/mapped_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace loom {

Mapping::Mapping(Mapping&& other) noexcept : data_(other.data_), bytes_(other.bytes_) {
  other.data_ = nullptr;
  other.bytes_ = 0;
}

Mapping& Mapping::operator=(Mapping&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) ::munmap(data_, bytes_);
    data_ = other.data_;
    bytes_ = other.bytes_;
    other.data_ = nullptr;
    other.bytes_ = 0;
  }
  return *this;
}

Mapping::~Mapping() {
  if (data_ != nullptr) ::munmap(data_, bytes_);
}

Status Mapping::of(int fd, size_t bytes, Mapping* out) {
  void* data = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (data == MAP_FAILED) return error(loomSystemError, "mmap of %zu bytes failed: %s", bytes, std::strerror(errno));
  Mapping m;
  m.data_ = data;
  m.bytes_ = bytes;
  *out = std::move(m);
  return Status::ok();
}

Status MappedAllocations::allocate(size_t bytes, void** out) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  if (bytes > SIZE_MAX - page) return error(loomInvalidArgument, "%zu bytes is more than memory can hold", bytes);
  const size_t rounded = (bytes + page - 1) / page * page;
  Fd fd(::memfd_create("loom-mem", MFD_CLOEXEC));
  if (!fd.valid()) return error(loomSystemError, "memfd_create failed: %s", std::strerror(errno));
  if (::ftruncate(fd.get(), static_cast<off_t>(rounded)) != 0) {
    return error(loomSystemError, "sizing a memfd to %zu bytes failed: %s", rounded, std::strerror(errno));
  }
  Mapping mapping;
  LOOM_TRY(Mapping::of(fd.get(), rounded, &mapping));
  std::lock_guard<std::mutex> lock(mutex_);
  const uintptr_t start = reinterpret_cast<uintptr_t>(mapping.data());
  *out = mapping.data();
  byStart_.emplace(start, Allocation{std::move(fd), std::move(mapping), nextSerial_++});
  return Status::ok();
}

Status MappedAllocations::release(void* ptr) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = byStart_.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == byStart_.end()) return error(loomInvalidArgument, "%p was not returned by loomMemAlloc", ptr);
  byStart_.erase(it);
  return Status::ok();
}

bool MappedAllocations::find(const void* p, size_t bytes, MappedRange* out) const {
  const uintptr_t at = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = byStart_.upper_bound(at);
  if (it == byStart_.begin()) return false;
  --it;
  const Allocation& a = it->second;
  const size_t offset = at - it->first;
  if (offset >= a.mapping.size() || bytes > a.mapping.size() - offset) return false;
  *out = MappedRange{a.fd.get(), a.serial, a.mapping.size(), offset};
  return true;
}

void MappedAllocations::beforeFork() { mutex_.lock(); }

void MappedAllocations::afterForkInParent() { mutex_.unlock(); }

void MappedAllocations::afterForkInChild() {
  for (auto& [start, a] : byStart_) {
    // In place, so every pointer into it stays good; should the system refuse, the child keeps
    // the shared mapping rather than lose the memory.
    (void)::mmap(reinterpret_cast<void*>(start), a.mapping.size(), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED,
                 a.fd.get(), 0);
  }
  mutex_.unlock();
}

namespace {
std::string descriptorPath(int pid, int fd) { return "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd); }
}  // namespace

Status mapPeerAllocation(int pid, const MappedRange& range, PeerAllocation* out) {
  const std::string path = descriptorPath(pid, range.fd);
  Fd fd(::open(path.c_str(), O_RDWR | O_CLOEXEC));
  if (!fd.valid()) return error(loomSystemError, "opening %s failed: %s", path.c_str(), std::strerror(errno));
  struct stat st {};
  // The descriptor may have been closed and reused since the peer posted it (it cannot be
  // while the peer is inside the call that posted it, but a caller may be late): a file of
  // another size is not the allocation.
  if (::fstat(fd.get(), &st) != 0 || static_cast<size_t>(st.st_size) != range.segmentBytes) {
    return error(loomSystemError, "%s is not the %zu-byte allocation the peer posted", path.c_str(),
                 range.segmentBytes);
  }
  LOOM_TRY(Mapping::of(fd.get(), range.segmentBytes, &out->mapping));
  out->fd = range.fd;
  out->device = static_cast<uint64_t>(st.st_dev);
  out->inode = static_cast<uint64_t>(st.st_ino);
  return Status::ok();
}

bool peerStillHolds(int pid, const PeerAllocation& a) {
  struct stat st {};
  return ::stat(descriptorPath(pid, a.fd).c_str(), &st) == 0 && static_cast<uint64_t>(st.st_dev) == a.device &&
         static_cast<uint64_t>(st.st_ino) == a.inode;
}

}  // namespace loom
