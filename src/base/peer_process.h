// Another process on this host, as this process sees it: whether it is still alive, and its
// memory read directly (cross-memory attach) when the kernel allows it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/socket.h"

namespace loom::transport {

class PeerProcess {
 public:
  // The inode of this process's pid namespace: two processes can use each other's pids only
  // when they share it.
  static uint64_t ownPidNamespace();

  // Watches `pid` of pid namespace `pidNamespace` (as the peer reported them).
  void identify(int pid, uint64_t pidNamespace);
  bool identified() const { return identified_; }
  int pid() const { return pid_; }
  bool sameProcess() const { return sameProcess_; }
  // Its pid means nothing here (another container), so its memory cannot be read.
  bool foreign() const { return !sameNamespace_; }

  // False once it has exited. Threads of one process cannot die separately, and a process
  // in another pid namespace cannot be watched. A system call: callers ask only when they
  // have been waiting a while.
  bool alive() const;

  // Copies up to `bytes` at `address` in the peer into dst; returns 0 (with *got set) or an
  // errno.
  int read(void* dst, uint64_t address, size_t bytes, size_t* got) const;

 private:
  bool identified_ = false;
  int pid_ = 0;
  bool sameNamespace_ = false;
  bool sameProcess_ = false;
  Fd pidfd_;
};

}  // namespace loom::transport
