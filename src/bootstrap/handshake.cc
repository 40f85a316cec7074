// The hello every connection sends, and the Acceptor that admits only the job's own (handshake.h).
#include "bootstrap/handshake.h"

#include <poll.h>

#include <cerrno>
#include <cstring>

#include "base/env.h"
#include "base/log.h"

namespace loom {
namespace {
constexpr uint8_t kMagic[4] = {'L', 'M', 'H', 'S'};
constexpr uint16_t kVersion = 1;

void encode(const Secret& secret, const Hello& hello, uint8_t out[kHelloBytes]) {
  std::memset(out, 0, kHelloBytes);
  std::memcpy(out, kMagic, 4);
  std::memcpy(out + 4, &kVersion, 2);
  uint16_t intent = static_cast<uint16_t>(hello.intent);
  std::memcpy(out + 6, &intent, 2);
  std::memcpy(out + 8, secret.bytes.data(), 16);
  uint32_t purpose = static_cast<uint32_t>(hello.purpose);
  std::memcpy(out + 24, &purpose, 4);
  std::memcpy(out + 28, &hello.rank, 4);
  std::memcpy(out + 32, &hello.nranks, 4);
  std::memcpy(out + 36, &hello.link, 4);
  std::memcpy(out + 40, &hello.commId, 8);
}
}  // namespace

const char* parseHello(const uint8_t in[kHelloBytes], const Secret& secret, Purpose purpose, Hello* out) {
  uint16_t version = 0;
  std::memcpy(&version, in + 4, 2);
  uint16_t intent = 0;
  std::memcpy(&intent, in + 6, 2);
  uint32_t got = 0;
  std::memcpy(&got, in + 24, 4);
  if (std::memcmp(in, kMagic, 4) != 0) return "not a Loom handshake";
  if (!secret.matches(in + 8)) return "wrong secret (another job, or a stranger)";
  if (version != kVersion) return "handshake from another Loom version";
  if (got != static_cast<uint32_t>(purpose)) return "handshake meant for another kind of port";
  if (intent > static_cast<uint16_t>(Intent::kNotice) || (intent != 0 && purpose != Purpose::kTransport)) {
    return "handshake with an unknown intent";
  }
  out->purpose = purpose;
  out->intent = static_cast<Intent>(intent);
  std::memcpy(&out->rank, in + 28, 4);
  std::memcpy(&out->nranks, in + 32, 4);
  std::memcpy(&out->link, in + 36, 4);
  std::memcpy(&out->commId, in + 40, 8);
  return nullptr;
}

Status connectAndGreet(const SocketAddress& address, const Secret& secret, const Hello& hello,
                       const Deadline& deadline, int cancelFd, Fd* out, Refused refused) {
  Fd fd;
  LOOM_TRY(connectTo(address, deadline, cancelFd, &fd, refused));
  uint8_t bytes[kHelloBytes];
  encode(secret, hello, bytes);
  LOOM_TRY(sendAll(fd.get(), bytes, sizeof(bytes), deadline, cancelFd)
               .withContext("greeting " + address.toString()));
  *out = std::move(fd);
  return Status::ok();
}

Status Acceptor::listen(const SocketAddress& address, const Secret& secret, Purpose purpose,
                        const char* what, Acceptor* out) {
  long long handshakeMs = 0;
  LOOM_TRY(env::getInt("LOOM_HANDSHAKE_TIMEOUT_MS", 1, 1LL << 31, &handshakeMs));
  Fd fd;
  SocketAddress bound;
  LOOM_TRY(listenOn(address, &fd, &bound).withContext(what));
  *out = Acceptor(std::move(fd), bound, secret, purpose, static_cast<int>(handshakeMs));
  return Status::ok();
}

Acceptor::Acceptor(Fd listenFd, const SocketAddress& address, const Secret& secret,
                   Purpose purpose, int handshakeTimeoutMs)
    : listen_(std::move(listenFd)),
      address_(address),
      secret_(secret),
      purpose_(purpose),
      handshakeTimeoutMs_(handshakeTimeoutMs) {}

void Acceptor::drop(Pending& pending, const char* why) {
  ++rejected_;
  LOOM_WARN("dropped a connection from %s to %s: %s", pending.peer.toString().c_str(),
            address_.toString().c_str(), why);
  pending.fd.reset();
}

bool Acceptor::takeReady(Connection* out) {
  for (;;) {
    Fd fd;
    SocketAddress peer;
    Status s = acceptOne(listen_.get(), &fd, &peer);
    if (!s.isOk()) {
      LOOM_WARN("accept on %s: %s", address_.toString().c_str(), s.message().c_str());
      break;
    }
    if (!fd.valid()) break;
    pending_.push_back(Pending{std::move(fd), peer, {}, 0, Deadline::afterMs(handshakeTimeoutMs_)});
  }
  for (size_t i = 0; i < pending_.size();) {
    bool accepted = false;
    if (advance(pending_[i], out, &accepted)) {
      pending_.erase(pending_.begin() + static_cast<long>(i));
      if (accepted) return true;
    } else {
      ++i;
    }
  }
  return false;
}

void Acceptor::addWaitFds(PollFds* fds) const {
  fds->push_back({listen_.get(), POLLIN, 0});
  for (const Pending& p : pending_) fds->push_back({p.fd.get(), POLLIN, 0});
}

bool Acceptor::advance(Pending& p, Connection* out, bool* accepted) {
  size_t got = 0;
  Status s = recvSome(p.fd.get(), p.bytes + p.received, kHelloBytes - p.received, &got);
  if (!s.isOk()) {
    drop(p, "closed before presenting the secret");
    return true;
  }
  p.received += got;
  if (p.received < kHelloBytes) {
    if (p.deadline.expired()) {
      drop(p, "did not present the secret within LOOM_HANDSHAKE_TIMEOUT_MS");
      return true;
    }
    return false;
  }
  Hello hello;
  if (const char* why = parseHello(p.bytes, secret_, purpose_, &hello)) {
    drop(p, why);
  } else {
    out->fd = std::move(p.fd);
    out->peer = p.peer;
    out->hello = hello;
    *accepted = true;
  }
  return true;
}

Status Acceptor::next(const Deadline& deadline, int cancelFd, Connection* out) {
  for (;;) {
    if (takeReady(out)) return Status::ok();
    // Sleep until something arrives: a new connection, bytes of a pending hello, the
    // earliest handshake deadline, the caller's deadline, or an abort.
    Deadline wake = deadline;
    PollFds fds;
    addWaitFds(&fds);
    for (const Pending& p : pending_) wake = wake.earlier(p.deadline);
    if (cancelFd >= 0) fds.push_back({cancelFd, POLLIN, 0});
    int rc = ::poll(fds.data(), fds.size(), wake.remainingMs());
    if (rc < 0 && errno != EINTR) return systemError("poll", errno);
    if (cancelFd >= 0 && (fds.back().revents & POLLIN)) {
      return error(loomInvalidUsage, "the communicator was aborted (loomCommAbort)");
    }
    if (deadline.expired()) {
      return error(loomTimeout, "no peer connected to %s before the deadline",
                   address_.toString().c_str());
    }
  }
}

}  // namespace loom
