// TCP plumbing shared by the bootstrap and the socket transport: an owned descriptor, an
// IPv4/IPv6 address with a fixed-size wire form, interface selection, and connect / send /
// receive that honour a deadline and a cancel descriptor (a communicator's abort).
#pragma once

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory_resource>
#include <string>
#include <vector>

#include "base/status.h"

namespace loom {

// Owns a file descriptor; closes it on destruction. Move-only.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& other) noexcept : fd_(other.release()) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// The descriptors a wait polls: in the call's arena where a call waits (base/call_arena.h),
// since a call that naps builds the set at every nap.
using PollFds = std::pmr::vector<pollfd>;

// An eventfd that, once fired, stays readable: every wait that includes it in its poll set
// ends. Used for loomCommAbort and for stopping background threads.
class CancelSignal {
 public:
  CancelSignal();
  void fire();
  bool fired() const;
  // Un-fires it; only once nothing waits on it any more.
  void clear();
  int fd() const { return fd_.get(); }

 private:
  Fd fd_;
};

// A point in time after which a wait gives up.
class Deadline {
 public:
  using Clock = std::chrono::steady_clock;
  static Deadline afterMs(long long ms) { return Deadline(Clock::now() + std::chrono::milliseconds(ms)); }
  bool expired() const { return Clock::now() >= when_; }
  // Milliseconds left, rounded up, clamped to [0, INT_MAX]: a poll() timeout.
  int remainingMs() const;
  Deadline earlier(const Deadline& other) const { return other.when_ < when_ ? other : *this; }
  Deadline extendedByMs(long long ms) const { return Deadline(when_ + std::chrono::milliseconds(ms)); }

 private:
  explicit Deadline(Clock::time_point when) : when_(when) {}
  Clock::time_point when_;
};

// An IPv4 or IPv6 endpoint.
class SocketAddress {
 public:
  static constexpr size_t kWireBytes = 32;

  SocketAddress();
  SocketAddress(const sockaddr* addr, socklen_t len);

  // host: a name, an IPv4 literal or an IPv6 literal (with or without brackets).
  static Status resolve(const std::string& host, int port, SocketAddress* out);
  // Fixed-size, byte-order independent form carried in unique ids and handshakes.
  void toWire(uint8_t out[kWireBytes]) const;
  static Status fromWire(const uint8_t in[kWireBytes], SocketAddress* out);

  const sockaddr* raw() const { return reinterpret_cast<const sockaddr*>(&storage_); }
  socklen_t length() const { return length_; }
  int family() const { return storage_.ss_family; }
  bool valid() const { return family() == AF_INET || family() == AF_INET6; }
  bool isLoopback() const;
  int port() const;
  void setPort(int port);
  std::string toString() const;  // "10.0.0.1:5000" or "[fe80::1%eth0]:5000"

 private:
  sockaddr_storage storage_;
  socklen_t length_;
};

// The address to listen on: LOOM_SOCKET_IFNAME's first match when set, otherwise the
// first interface that is up and not loopback (IPv4 preferred), else loopback.
Status chooseListenAddress(SocketAddress* out, std::string* ifname);

// All up interfaces matching an NCCL-style spec ("eth,ib", "=eth0", "^docker,lo").
std::vector<std::pair<std::string, SocketAddress>> matchInterfaces(const std::string& spec);

// A non-blocking listening socket bound to `address` (port 0: any); `bound` receives the
// actual address.
Status listenOn(const SocketAddress& address, Fd* out, SocketAddress* bound);

// What a refused connection means: the peer may not listen yet (retry until the deadline),
// or it listened before and has stopped (loomRemoteError at once).
enum class Refused { kRetry, kFinal };

// Connects; the returned socket is non-blocking with TCP_NODELAY.
Status connectTo(const SocketAddress& address, const Deadline& deadline, int cancelFd, Fd* out,
                 Refused refused = Refused::kRetry);

// Caps the kernel's send buffer of a connected socket at `bytes` (the kernel doubles it and
// stops at net.core.wmem_max); 0 leaves the kernel's autotuning.
void setSendBuffer(int fd, int bytes);

// Accepts one pending connection if there is one (out stays invalid otherwise).
Status acceptOne(int listenFd, Fd* out, SocketAddress* peer);

// Blocking-style transfer of exactly `bytes` over a non-blocking socket. A closed peer is
// loomRemoteError, the deadline loomTimeout, a readable cancelFd loomInvalidUsage.
Status sendAll(int fd, const void* data, size_t bytes, const Deadline& deadline, int cancelFd);
Status recvAll(int fd, void* data, size_t bytes, const Deadline& deadline, int cancelFd);

// One non-blocking attempt; *done gets the bytes moved (0 when the socket would block).
Status sendSome(int fd, const void* data, size_t bytes, size_t* done);
Status recvSome(int fd, void* data, size_t bytes, size_t* done);
// The same over `count` pieces, in order, in one system call.
Status sendSomeOf(int fd, const iovec* pieces, int count, size_t* done);
Status recvSomeOf(int fd, const iovec* pieces, int count, size_t* done);

// Waits until fd is ready for `events` (POLLIN/POLLOUT), the deadline passes (loomTimeout)
// or cancelFd becomes readable (loomInvalidUsage: aborted).
Status waitFor(int fd, short events, const Deadline& deadline, int cancelFd);

}  // namespace loom
