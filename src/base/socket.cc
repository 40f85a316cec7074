// Descriptors, addresses, interfaces and deadline-bounded TCP I/O (socket.h).
#include "base/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <thread>

#include "base/env.h"
#include "base/log.h"

namespace loom {

void Fd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

CancelSignal::CancelSignal() : fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}

void CancelSignal::fire() {
  uint64_t one = 1;
  ssize_t n = ::write(fd_.get(), &one, sizeof(one));
  (void)n;  // the counter only saturates, which keeps it readable all the same
}

void CancelSignal::clear() {
  uint64_t count = 0;
  ssize_t n = ::read(fd_.get(), &count, sizeof(count));
  (void)n;  // EAGAIN: it was not fired
}

bool CancelSignal::fired() const {
  pollfd p{fd_.get(), POLLIN, 0};
  return ::poll(&p, 1, 0) > 0;
}

int Deadline::remainingMs() const {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(when_ - Clock::now()).count();
  if (left <= 0) return 0;
  return left >= INT_MAX ? INT_MAX : static_cast<int>(left) + 1;
}

SocketAddress::SocketAddress() : length_(0) { std::memset(&storage_, 0, sizeof(storage_)); }

SocketAddress::SocketAddress(const sockaddr* addr, socklen_t len) : SocketAddress() {
  if (len > sizeof(storage_)) len = sizeof(storage_);
  std::memcpy(&storage_, addr, len);
  length_ = len;
}

Status SocketAddress::resolve(const std::string& hostIn, int port, SocketAddress* out) {
  std::string host = hostIn;
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (port < 0 || port > 65535) {
    return error(loomInvalidArgument, "port %d is out of range [0, 65535]", port);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &result);
  if (rc != 0) {
    return error(loomInvalidArgument, "cannot resolve address \"%s\": %s", host.c_str(),
                 gai_strerror(rc));
  }
  // Prefer IPv4 when a name has both, as most clusters route IPv4.
  const addrinfo* chosen = result;
  for (const addrinfo* ai = result; ai != nullptr; ai = ai->ai_next) {
    if (ai->ai_family == AF_INET) {
      chosen = ai;
      break;
    }
  }
  *out = SocketAddress(chosen->ai_addr, chosen->ai_addrlen);
  ::freeaddrinfo(result);
  out->setPort(port);
  return Status::ok();
}

// Wire layout: [0..1] family (4 or 6), [2..3] port big-endian, [4..7] IPv6 scope id
// big-endian, [8..23] address bytes (IPv4 in the first 4), rest zero.
void SocketAddress::toWire(uint8_t out[kWireBytes]) const {
  std::memset(out, 0, kWireBytes);
  int p = port();
  out[2] = static_cast<uint8_t>(p >> 8);
  out[3] = static_cast<uint8_t>(p & 0xff);
  if (family() == AF_INET) {
    out[1] = 4;
    std::memcpy(out + 8, &reinterpret_cast<const sockaddr_in*>(&storage_)->sin_addr, 4);
  } else if (family() == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&storage_);
    out[1] = 6;
    uint32_t scope = in6->sin6_scope_id;
    out[4] = static_cast<uint8_t>(scope >> 24);
    out[5] = static_cast<uint8_t>(scope >> 16);
    out[6] = static_cast<uint8_t>(scope >> 8);
    out[7] = static_cast<uint8_t>(scope);
    std::memcpy(out + 8, &in6->sin6_addr, 16);
  }
}

Status SocketAddress::fromWire(const uint8_t in[kWireBytes], SocketAddress* out) {
  int port = (in[2] << 8) | in[3];
  if (in[0] == 0 && in[1] == 4) {
    sockaddr_in sin{};
    sin.sin_family = AF_INET;
    sin.sin_port = htons(static_cast<uint16_t>(port));
    std::memcpy(&sin.sin_addr, in + 8, 4);
    *out = SocketAddress(reinterpret_cast<sockaddr*>(&sin), sizeof(sin));
    return Status::ok();
  }
  if (in[0] == 0 && in[1] == 6) {
    sockaddr_in6 sin6{};
    sin6.sin6_family = AF_INET6;
    sin6.sin6_port = htons(static_cast<uint16_t>(port));
    sin6.sin6_scope_id = (uint32_t(in[4]) << 24) | (uint32_t(in[5]) << 16) |
                         (uint32_t(in[6]) << 8) | uint32_t(in[7]);
    std::memcpy(&sin6.sin6_addr, in + 8, 16);
    *out = SocketAddress(reinterpret_cast<sockaddr*>(&sin6), sizeof(sin6));
    return Status::ok();
  }
  return error(loomInvalidArgument, "malformed socket address (family tag %d.%d)", in[0], in[1]);
}

bool SocketAddress::isLoopback() const {
  if (family() == AF_INET) {
    const auto* sin = reinterpret_cast<const sockaddr_in*>(&storage_);
    return (ntohl(sin->sin_addr.s_addr) >> 24) == 127;
  }
  if (family() == AF_INET6) {
    return IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6*>(&storage_)->sin6_addr);
  }
  return false;
}

int SocketAddress::port() const {
  if (family() == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&storage_)->sin_port);
  if (family() == AF_INET6) {
    return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage_)->sin6_port);
  }
  return 0;
}

void SocketAddress::setPort(int port) {
  if (family() == AF_INET) {
    reinterpret_cast<sockaddr_in*>(&storage_)->sin_port = htons(static_cast<uint16_t>(port));
  } else if (family() == AF_INET6) {
    reinterpret_cast<sockaddr_in6*>(&storage_)->sin6_port = htons(static_cast<uint16_t>(port));
  }
}

std::string SocketAddress::toString() const {
  char host[NI_MAXHOST] = "?";
  if (!valid()) return "<no address>";
  ::getnameinfo(raw(), length_, host, sizeof(host), nullptr, 0, NI_NUMERICHOST);
  if (family() == AF_INET6) return format("[%s]:%d", host, port());
  return format("%s:%d", host, port());
}

std::vector<std::pair<std::string, SocketAddress>> matchInterfaces(const std::string& specIn) {
  std::string spec = specIn;
  bool exclude = !spec.empty() && spec[0] == '^';
  if (exclude) spec.erase(0, 1);
  bool exact = !spec.empty() && spec[0] == '=';
  if (exact) spec.erase(0, 1);
  std::vector<std::string> patterns = env::splitList(spec);
  auto matches = [&](const char* name) {
    for (const std::string& p : patterns) {
      if (exact ? p == name : std::strncmp(name, p.c_str(), p.size()) == 0) return true;
    }
    return false;
  };

  std::vector<std::pair<std::string, SocketAddress>> found;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return found;
  for (ifaddrs* ifa = list; ifa != nullptr; ifa = ifa->ifa_next) {
    if (ifa->ifa_addr == nullptr || !(ifa->ifa_flags & IFF_UP)) continue;
    int family = ifa->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    if (matches(ifa->ifa_name) == exclude) continue;
    socklen_t len = family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    found.emplace_back(ifa->ifa_name, SocketAddress(ifa->ifa_addr, len));
  }
  ::freeifaddrs(list);
  // IPv4 first, then IPv6, keeping the kernel's interface order within each.
  std::stable_partition(found.begin(), found.end(),
                        [](const auto& e) { return e.second.family() == AF_INET; });
  return found;
}

Status chooseListenAddress(SocketAddress* out, std::string* ifname) {
  if (std::optional<std::string> spec = env::get("LOOM_SOCKET_IFNAME")) {
    auto found = matchInterfaces(*spec);
    if (found.empty()) {
      return error(loomInvalidArgument,
                   "LOOM_SOCKET_IFNAME=\"%s\" matches no interface that is up", spec->c_str());
    }
    *ifname = found.front().first;
    *out = found.front().second;
  } else {
    auto found = matchInterfaces("^lo");
    // Link-local IPv6 addresses are unusable without a scope, which peers do not share.
    for (auto& [name, address] : found) {
      const auto* in6 = reinterpret_cast<const sockaddr_in6*>(address.raw());
      if (address.family() == AF_INET6 && IN6_IS_ADDR_LINKLOCAL(&in6->sin6_addr)) continue;
      *ifname = name;
      *out = address;
      return Status::ok();
    }
    auto loopback = matchInterfaces("lo");
    if (loopback.empty()) return error(loomSystemError, "no network interface is up");
    *ifname = loopback.front().first;
    *out = loopback.front().second;
  }
  out->setPort(0);
  return Status::ok();
}

namespace {

Status makeNonBlocking(int fd) {
  int flags = ::fcntl(fd, F_GETFL, 0);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
    return systemError("fcntl(O_NONBLOCK)", errno);
  }
  return Status::ok();
}

void setNoDelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

bool cancelled(int cancelFd) {
  if (cancelFd < 0) return false;
  pollfd p{cancelFd, POLLIN, 0};
  return ::poll(&p, 1, 0) > 0;
}

Status abortedError() {
  return error(loomInvalidUsage, "the communicator was aborted (loomCommAbort)");
}

}  // namespace

void setSendBuffer(int fd, int bytes) {
  if (bytes > 0) ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes));
}

Status listenOn(const SocketAddress& address, Fd* out, SocketAddress* bound) {
  Fd fd(::socket(address.family(), SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return systemError("socket", errno);
  int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd.get(), address.raw(), address.length()) != 0) {
    int err = errno;
    return error(loomSystemError, "cannot listen on %s: %s", address.toString().c_str(),
                 std::strerror(err));
  }
  if (::listen(fd.get(), SOMAXCONN) != 0) return systemError("listen", errno);
  LOOM_TRY(makeNonBlocking(fd.get()));
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
    return systemError("getsockname", errno);
  }
  *bound = SocketAddress(reinterpret_cast<sockaddr*>(&ss), len);
  *out = std::move(fd);
  return Status::ok();
}

Status connectTo(const SocketAddress& address, const Deadline& deadline, int cancelFd, Fd* out, Refused refused) {
  int backoffMs = 1;
  for (;;) {
    Fd fd(::socket(address.family(), SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd.valid()) return systemError("socket", errno);
    LOOM_TRY(makeNonBlocking(fd.get()));
    int rc = ::connect(fd.get(), address.raw(), address.length());
    int err = rc == 0 ? 0 : errno;
    if (err == EINPROGRESS) {
      LOOM_TRY(waitFor(fd.get(), POLLOUT, deadline, cancelFd)
                   .withContext("connecting to " + address.toString()));
      socklen_t len = sizeof(err);
      ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    }
    if (err == 0) {
      setNoDelay(fd.get());
      *out = std::move(fd);
      return Status::ok();
    }
    if (err == ECONNREFUSED && refused == Refused::kFinal) {
      return error(loomRemoteError, "nothing listens at %s any more (connection refused)", address.toString().c_str());
    }
    bool retry = err == ECONNREFUSED || err == ECONNRESET || err == ETIMEDOUT || err == EAGAIN;
    if (!retry) {
      return error(loomSystemError, "cannot connect to %s: %s", address.toString().c_str(),
                   std::strerror(err));
    }
    if (cancelled(cancelFd)) return abortedError();
    if (deadline.expired()) {
      return error(loomTimeout, "nobody accepted connections at %s before the deadline (%s)",
                   address.toString().c_str(), std::strerror(err));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(backoffMs, deadline.remainingMs())));
    backoffMs = std::min(backoffMs * 2, 100);
  }
}

Status acceptOne(int listenFd, Fd* out, SocketAddress* peer) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  int fd = ::accept4(listenFd, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ECONNABORTED || errno == EINTR) {
      return Status::ok();
    }
    return systemError("accept", errno);
  }
  setNoDelay(fd);
  out->reset(fd);
  *peer = SocketAddress(reinterpret_cast<sockaddr*>(&ss), len);
  return Status::ok();
}

Status waitFor(int fd, short events, const Deadline& deadline, int cancelFd) {
  for (;;) {
    pollfd fds[2] = {{fd, events, 0}, {cancelFd, POLLIN, 0}};
    int rc = ::poll(fds, cancelFd >= 0 ? 2 : 1, deadline.remainingMs());
    if (rc < 0) {
      if (errno == EINTR) continue;
      return systemError("poll", errno);
    }
    if (cancelFd >= 0 && (fds[1].revents & POLLIN)) return abortedError();
    if (fds[0].revents != 0) return Status::ok();
    if (deadline.expired()) return error(loomTimeout, "timed out");
  }
}

Status sendSome(int fd, const void* data, size_t bytes, size_t* done) {
  iovec piece{const_cast<void*>(data), bytes};
  return sendSomeOf(fd, &piece, 1, done);
}

Status recvSome(int fd, void* data, size_t bytes, size_t* done) {
  iovec piece{data, bytes};
  return recvSomeOf(fd, &piece, 1, done);
}

Status sendSomeOf(int fd, const iovec* pieces, int count, size_t* done) {
  *done = 0;
  msghdr message{};
  message.msg_iov = const_cast<iovec*>(pieces);
  message.msg_iovlen = static_cast<size_t>(count);
  for (;;) {
    ssize_t n = ::sendmsg(fd, &message, MSG_NOSIGNAL);
    if (n >= 0) {
      *done = static_cast<size_t>(n);
      return Status::ok();
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return Status::ok();
    if (errno == EPIPE || errno == ECONNRESET) {
      return error(loomRemoteError, "the peer closed the connection (%s)", std::strerror(errno));
    }
    return systemError("sendmsg", errno);
  }
}

Status recvSomeOf(int fd, const iovec* pieces, int count, size_t* done) {
  *done = 0;
  size_t bytes = 0;
  for (int i = 0; i < count; ++i) bytes += pieces[i].iov_len;
  if (bytes == 0) return Status::ok();
  msghdr message{};
  message.msg_iov = const_cast<iovec*>(pieces);
  message.msg_iovlen = static_cast<size_t>(count);
  for (;;) {
    ssize_t n = ::recvmsg(fd, &message, 0);
    if (n > 0) {
      *done = static_cast<size_t>(n);
      return Status::ok();
    }
    if (n == 0) return error(loomRemoteError, "the peer closed the connection");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return Status::ok();
    if (errno == ECONNRESET) return error(loomRemoteError, "the peer reset the connection");
    return systemError("recvmsg", errno);
  }
}

namespace {
template <typename Buffer, typename Step>
Status transferAll(int fd, Buffer data, size_t bytes, short events, const Deadline& deadline,
                   int cancelFd, Step step, const char* verb) {
  size_t moved = 0;
  while (moved < bytes) {
    size_t done = 0;
    LOOM_TRY(step(fd, data + moved, bytes - moved, &done));
    moved += done;
    if (moved == bytes) break;
    if (done == 0) {
      Status waited = waitFor(fd, events, deadline, cancelFd);
      if (!waited.isOk()) {
        return waited.withContext(format("%s %zu of %zu bytes", verb, moved, bytes));
      }
    }
  }
  return Status::ok();
}
}  // namespace

Status sendAll(int fd, const void* data, size_t bytes, const Deadline& deadline, int cancelFd) {
  return transferAll(fd, static_cast<const char*>(data), bytes, POLLOUT, deadline, cancelFd,
                     sendSome, "sent");
}

Status recvAll(int fd, void* data, size_t bytes, const Deadline& deadline, int cancelFd) {
  return transferAll(fd, static_cast<char*>(data), bytes, POLLIN, deadline, cancelFd, recvSome,
                     "received");
}

}  // namespace loom
