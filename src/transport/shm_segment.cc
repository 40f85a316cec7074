// Creating, opening and unlinking shared-memory files (shm_segment.h).
#include "transport/shm_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <utility>

#include "base/log.h"
#include "base/socket.h"
#include "bootstrap/unique_id.h"

namespace loom::transport {
namespace {

// dir + "/loom-" + 128 random bits in hex: unguessable, so nobody can pre-create it.
Status randomName(const std::string& dir, std::string* out) {
  uint8_t bytes[16];
  LOOM_TRY(randomBytes(bytes, sizeof(bytes)));
  static const char kHex[] = "0123456789abcdef";
  std::string name = dir + "/loom-";
  for (uint8_t b : bytes) {
    name += kHex[b >> 4];
    name += kHex[b & 15];
  }
  *out = std::move(name);
  return Status::ok();
}

unsigned long long freeBytes(const std::string& dir) {
  struct statvfs s;
  if (::statvfs(dir.c_str(), &s) != 0) return 0;
  return static_cast<unsigned long long>(s.f_bavail) * s.f_frsize;
}

Status noSpace(const std::string& dir, size_t bytes, const char* purpose) {
  return error(loomSystemError,
               "no room for shared memory: the %s needs %zu bytes in %s, which has %llu bytes "
               "free; enlarge that tmpfs (docker run --shm-size=1g ..., or mount -o "
               "remount,size=2g %s), point LOOM_SHM_DIR at a larger one, lower "
               "LOOM_SHM_FIFO_BYTES, or set LOOM_TRANSPORTS=socket",
               purpose, bytes, dir.c_str(), freeBytes(dir), dir.c_str());
}

// Populated at once: a page first touched mid-call costs that call a fault (docs/ARCHITECTURE.md,
// "Shared-memory transport").
Status mapShared(int fd, size_t bytes, const std::string& name, void** out) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (p == MAP_FAILED) {
    int err = errno;
    return systemError(format("mmap of shared memory %s", name.c_str()).c_str(), err);
  }
  *out = p;
  return Status::ok();
}

}  // namespace

ShmSegment::ShmSegment(ShmSegment&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      name_(std::exchange(other.name_, std::string())),
      creator_(std::exchange(other.creator_, false)),
      linked_(std::exchange(other.linked_, false)) {}

ShmSegment& ShmSegment::operator=(ShmSegment&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    name_ = std::exchange(other.name_, std::string());
    creator_ = std::exchange(other.creator_, false);
    linked_ = std::exchange(other.linked_, false);
  }
  return *this;
}

ShmSegment::~ShmSegment() { release(); }

void ShmSegment::release() {
  if (creator_) unlink();
  if (data_ != nullptr) ::munmap(data_, size_);
  data_ = nullptr;
  size_ = 0;
  name_.clear();
  creator_ = false;
}

Status ShmSegment::create(const std::string& dir, size_t bytes, const char* purpose, ShmSegment* out) {
  std::string name;
  LOOM_TRY(randomName(dir, &name));
  Fd fd(::open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd.valid()) {
    int err = errno;
    return systemError(format("creating the %s %s", purpose, name.c_str()).c_str(), err);
  }
  ShmSegment segment;  // from here on its destructor removes the file if a step fails
  segment.name_ = name;
  segment.creator_ = true;
  segment.linked_ = true;
  int err = ::posix_fallocate(fd.get(), 0, static_cast<off_t>(bytes));
  if (err == ENOSPC) return noSpace(dir, bytes, purpose);
  if (err != 0) {
    return systemError(format("reserving %zu bytes for the %s %s (posix_fallocate)", bytes, purpose,
                              name.c_str()).c_str(), err);
  }
  LOOM_TRY(mapShared(fd.get(), bytes, name, &segment.data_));
  segment.size_ = bytes;
  *out = std::move(segment);
  return Status::ok();
}

Status ShmSegment::open(const std::string& name, size_t bytes, ShmSegment* out) {
  Fd fd(::open(name.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW));
  if (!fd.valid()) {
    int err = errno;
    return systemError(format("opening shared memory %s", name.c_str()).c_str(), err);
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) {
    int err = errno;
    return systemError(format("fstat of shared memory %s", name.c_str()).c_str(), err);
  }
  if (!S_ISREG(st.st_mode) || static_cast<unsigned long long>(st.st_size) != bytes) {
    return error(loomInternalError, "shared memory %s is %lld bytes, expected %zu", name.c_str(),
                 static_cast<long long>(st.st_size), bytes);
  }
  ShmSegment segment;
  segment.name_ = name;
  segment.linked_ = true;
  LOOM_TRY(mapShared(fd.get(), bytes, name, &segment.data_));
  segment.size_ = bytes;
  *out = std::move(segment);
  return Status::ok();
}

void ShmSegment::unlink() {
  if (!linked_) return;
  linked_ = false;
  if (::unlink(name_.c_str()) != 0 && errno != ENOENT) {
    LOOM_WARN("could not remove shared memory %s: %s", name_.c_str(), std::strerror(errno));
  }
}

}  // namespace loom::transport
