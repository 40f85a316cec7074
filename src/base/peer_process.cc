// Liveness and cross-memory reads of another process on this host (peer_process.h).
#include "base/peer_process.h"

#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace loom::transport {

uint64_t PeerProcess::ownPidNamespace() {
  struct stat st;
  return ::stat("/proc/self/ns/pid", &st) == 0 ? st.st_ino : 0;
}

void PeerProcess::identify(int pid, uint64_t pidNamespace) {
  pid_ = pid;
  sameNamespace_ = pidNamespace == ownPidNamespace();
  sameProcess_ = sameNamespace_ && pid_ == ::getpid();
#ifdef SYS_pidfd_open
  // Immune to pid reuse; readable once the process has exited.
  if (sameNamespace_ && !sameProcess_) pidfd_.reset(static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0)));
#endif
  identified_ = true;
}

bool PeerProcess::alive() const {
  if (!identified_ || sameProcess_ || !sameNamespace_) return true;
  if (pidfd_.valid()) {
    pollfd p{pidfd_.get(), POLLIN, 0};
    return ::poll(&p, 1, 0) <= 0;
  }
  return ::kill(pid_, 0) == 0 || errno != ESRCH;
}

int PeerProcess::read(void* dst, uint64_t address, size_t bytes, size_t* got) const {
  if (sameProcess_) {
    std::memcpy(dst, reinterpret_cast<const void*>(address), bytes);
    *got = bytes;
    return 0;
  }
  iovec local{dst, bytes};
  iovec remote{reinterpret_cast<void*>(address), bytes};
  ssize_t n = ::process_vm_readv(pid_, &local, 1, &remote, 1, 0);
  if (n < 0) return errno;
  if (n == 0) return EFAULT;  // nothing readable at the start of the range
  *got = static_cast<size_t>(n);
  return 0;
}

}  // namespace loom::transport
