// A file of shared memory mapped into this process: created by one rank, opened by name by
// another. The name is a random path in LOOM_SHM_DIR (a tmpfs such as /dev/shm) that
// nobody can guess or pre-create; it is unlinked as soon as every peer has mapped the
// segment, so a crash later leaves nothing behind in the directory.
#pragma once

#include <cstddef>
#include <string>

#include "base/status.h"

namespace loom::transport {

// Owns one mapping (and, for the creator, the name until it is unlinked). Move-only; not
// thread-safe (one owner at a time).
class ShmSegment {
 public:
  ShmSegment() = default;  // maps nothing
  ShmSegment(ShmSegment&& other) noexcept;
  ShmSegment& operator=(ShmSegment&& other) noexcept;
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;
  // Unmaps; unlinks the name when this object created it and has not unlinked it yet.
  ~ShmSegment();

  // Creates `bytes` of zeroed shared memory as a new file "loom-<32 random hex digits>" in
  // `dir`, mode 0600. The space is reserved now (posix_fallocate), so a full tmpfs is a
  // loomSystemError here, with the sizes and the fix, instead of a SIGBUS later.
  // `purpose` names the segment in messages.
  static Status create(const std::string& dir, size_t bytes, const char* purpose, ShmSegment* out);
  // Maps a segment another rank created (`name` is what name() returned there); it must be
  // exactly `bytes` long.
  static Status open(const std::string& name, size_t bytes, ShmSegment* out);

  // Removes the name; the mappings stay valid. Idempotent; a name already gone is fine.
  void unlink();

  void* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& name() const { return name_; }  // the file's path

 private:
  void release();

  void* data_ = nullptr;
  size_t size_ = 0;
  std::string name_;
  bool creator_ = false;  // created here: the destructor unlinks what is still linked
  bool linked_ = false;   // unlink() not called yet
};

}  // namespace loom::transport
