// The bootstrap channel between a communicator's ranks: registration, ring, messages (bootstrap.h).
#include "bootstrap/bootstrap.h"

#include <poll.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/env.h"
#include "base/log.h"
#include "bootstrap/bootstrap_root.h"

#include "base/peer_process.h"

namespace loom {
namespace {

constexpr uint32_t kAllGatherTag = Bootstrap::kFirstInternalTag + 1;
constexpr uint32_t kBarrierTag = Bootstrap::kFirstInternalTag + 2;
// Its own tag: a shrink must not take slices of an allgather that a failure cut short.
constexpr uint32_t kAllGatherAmongTag = Bootstrap::kFirstInternalTag + 3;
// Bootstrap messages are control data; a larger header means a bug or a hostile peer.
constexpr uint64_t kMaxMessageBytes = 1ull << 30;
constexpr size_t kHostNameBytes = 64;
constexpr size_t kPeerInfoBytes = SocketAddress::kWireBytes + 24 + kHostNameBytes;

void encodePeer(const PeerInfo& p, uint8_t* out) {
  std::memset(out, 0, kPeerInfoBytes);
  p.bootstrapAddress.toWire(out);
  std::memcpy(out + SocketAddress::kWireBytes, &p.hostHash, 8);
  std::memcpy(out + SocketAddress::kWireBytes + 8, &p.pid, 4);
  std::memcpy(out + SocketAddress::kWireBytes + 16, &p.pidNamespace, 8);
  std::strncpy(reinterpret_cast<char*>(out + SocketAddress::kWireBytes + 24), p.hostName.c_str(),
               kHostNameBytes - 1);
}

Status decodePeer(const uint8_t* in, PeerInfo* p) {
  LOOM_TRY(SocketAddress::fromWire(in, &p->bootstrapAddress));
  std::memcpy(&p->hostHash, in + SocketAddress::kWireBytes, 8);
  std::memcpy(&p->pid, in + SocketAddress::kWireBytes + 8, 4);
  std::memcpy(&p->pidNamespace, in + SocketAddress::kWireBytes + 16, 8);
  const char* name = reinterpret_cast<const char*>(in + SocketAddress::kWireBytes + 24);
  p->hostName.assign(name, strnlen(name, kHostNameBytes - 1));
  return Status::ok();
}

// The local address this host uses to reach `remote`: peers on the root's network can
// reach us there. (A UDP connect sends nothing; it only asks the routing table.)
bool localAddressTowards(const SocketAddress& remote, SocketAddress* out) {
  Fd fd(::socket(remote.family(), SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!fd.valid() || ::connect(fd.get(), remote.raw(), remote.length()) != 0) return false;
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&ss), &len) != 0) return false;
  *out = SocketAddress(reinterpret_cast<sockaddr*>(&ss), len);
  out->setPort(0);
  return true;
}

}  // namespace

Status Bootstrap::listen(const Secret& secret, const SocketAddress& near, Acceptor* out) {
  SocketAddress address;
  std::string ifname = "(route to " + near.toString() + ")";
  if (env::get("LOOM_SOCKET_IFNAME") || !localAddressTowards(near, &address)) {
    LOOM_TRY(chooseListenAddress(&address, &ifname));
  }
  LOOM_TRY(Acceptor::listen(address, secret, Purpose::kBootstrap, "bootstrap", out));
  LOOM_TRACE("bootstrap listening on %s via %s", out->address().toString().c_str(), ifname.c_str());
  return Status::ok();
}

Bootstrap::Bootstrap(Acceptor acceptor, const Secret& secret, int rank, int nranks, int cancelFd)
    : acceptor_(std::move(acceptor)),
      secret_(secret),
      rank_(rank),
      nranks_(nranks),
      cancelFd_(cancelFd),
      peers_(static_cast<size_t>(nranks)),
      out_(static_cast<size_t>(nranks)),
      in_(static_cast<size_t>(nranks)) {}

Status Bootstrap::connect(const UniqueId& id, int rank, int nranks, const HostIdentity& host,
                          int initTimeoutMs, const Deadline& deadline, int cancelFd,
                          std::unique_ptr<Bootstrap>* out) {
  Acceptor acceptor;
  LOOM_TRY(listen(id.secret, id.root, &acceptor));
  std::unique_ptr<Bootstrap> b(new Bootstrap(std::move(acceptor), id.secret, rank, nranks, cancelFd));
  b->timeoutMs_ = deadline.remainingMs();

  // Register with the root and learn the next rank's address.
  Fd root;
  Hello hello{Purpose::kRegister, rank, nranks, 0};
  std::string where = "bootstrap root at " + id.root.toString();
  LOOM_TRY(connectAndGreet(id.root, id.secret, hello, deadline, cancelFd, &root).withContext(where));
  LOOM_TRY(sendRegistration(root.get(), Registration{b->address(), initTimeoutMs}, deadline, cancelFd)
               .withContext(where));
  // A little longer than the root waits, so its answer (naming missing ranks) comes first.
  RegistrationReply reply;
  LOOM_TRY(recvRegistrationReply(root.get(), &reply, deadline.extendedByMs(2000),
                                 cancelFd)
               .withContext("waiting for the other ranks at the " + where));
  if (!reply.status.isOk()) return reply.status;
  root.reset();
  b->commId_ = reply.commId;
  b->peers_[static_cast<size_t>((rank + 1) % nranks)].bootstrapAddress = reply.next;

  // Ring allgather of everyone's PeerInfo.
  PeerInfo self{b->address(), host.hash, host.name, static_cast<int32_t>(::getpid()),
                transport::PeerProcess::ownPidNamespace()};
  std::vector<uint8_t> table(kPeerInfoBytes * static_cast<size_t>(nranks));
  encodePeer(self, table.data() + kPeerInfoBytes * static_cast<size_t>(rank));
  LOOM_TRY(b->allGather(table.data(), kPeerInfoBytes).withContext("bootstrap allgather"));
  for (int r = 0; r < nranks; ++r) {
    LOOM_TRY(decodePeer(table.data() + kPeerInfoBytes * static_cast<size_t>(r), &b->peers_[static_cast<size_t>(r)]));
  }
  *out = std::move(b);
  return Status::ok();
}

Status Bootstrap::fromPeers(Acceptor listener, const Secret& secret, uint64_t commId, int rank,
                            std::vector<PeerInfo> peers, int cancelFd,
                            std::unique_ptr<Bootstrap>* out) {
  int nranks = static_cast<int>(peers.size());
  std::unique_ptr<Bootstrap> b(new Bootstrap(std::move(listener), secret, rank, nranks, cancelFd));
  b->commId_ = commId;
  b->peers_ = std::move(peers);
  *out = std::move(b);
  return Status::ok();
}

Status Bootstrap::connectionTo(int peer, const Deadline& deadline, int* fd) {
  Fd& conn = out_[static_cast<size_t>(peer)];
  if (!conn.valid()) {
    Hello hello{Purpose::kBootstrap, rank_, nranks_, commId_};
    // Every address in the peer table is of a listener that was up before the peer joined,
    // and stays up until it leaves: a refusal means the peer is gone, not that it is late.
    LOOM_TRY(connectAndGreet(peers_[static_cast<size_t>(peer)].bootstrapAddress, secret_, hello,
                             deadline, cancelFd_, &conn, Refused::kFinal));
  }
  *fd = conn.get();
  return Status::ok();
}

Status Bootstrap::acceptFrom(int peer, const Deadline& deadline) {
  while (!in_[static_cast<size_t>(peer)].fd.valid() && in_[static_cast<size_t>(peer)].broken.isOk()) {
    Acceptor::Connection conn;
    LOOM_TRY(acceptor_.next(deadline, cancelFd_, &conn));
    adopt(conn);
  }
  return Status::ok();
}

bool Bootstrap::adopt(Acceptor::Connection& conn) {
  const Hello& h = conn.hello;
  if (h.commId != commId_ || h.nranks != nranks_ || h.rank < 0 || h.rank >= nranks_ || h.rank == rank_) {
    LOOM_WARN("bootstrap: dropped a connection from %s claiming rank %d of %d, comm %016llx",
              conn.peer.toString().c_str(), h.rank, h.nranks, static_cast<unsigned long long>(h.commId));
    return false;
  }
  Inbox& inbox = in_[static_cast<size_t>(h.rank)];
  if (inbox.fd.valid() || !inbox.broken.isOk()) {
    LOOM_WARN("bootstrap: rank %d connected twice; keeping the first connection", h.rank);
    return false;
  }
  inbox.fd = std::move(conn.fd);
  return true;
}

bool Bootstrap::addWaitFds(uint32_t tag, PollFds* fds) const {
  acceptor_.addWaitFds(fds);
  bool here = false;
  for (const Inbox& in : in_) {
    if (in.fd.valid()) fds->push_back({in.fd.get(), POLLIN, 0});
    for (const Message& m : in.unexpected) here = here || m.tag == tag;
  }
  return here;
}

int Bootstrap::arrived(uint32_t tag) {
  Acceptor::Connection conn;
  while (acceptor_.takeReady(&conn)) adopt(conn);
  int first = -1;
  for (int peer = 0; peer < nranks_; ++peer) {
    Inbox& in = in_[static_cast<size_t>(peer)];
    bool complete = in.fd.valid();
    while (complete) {
      Status s = pump(peer, &complete);
      if (!s.isOk()) {
        // Its next receive gives the failure; until then it is no more to watch.
        in.broken = s;
        in.fd.reset();
        break;
      }
      if (complete) {
        in.unexpected.push_back(std::move(in.current));
        in.current = Message{};
      }
    }
    for (const Message& m : in.unexpected) {
      if (m.tag == tag && first < 0) first = peer;
    }
  }
  return first;
}

void Bootstrap::drain(uint32_t tag, const std::function<void(int, const uint8_t*, size_t)>& each) {
  (void)arrived(tag);
  for (int peer = 0; peer < nranks_; ++peer) {
    std::deque<Message>& kept = in_[static_cast<size_t>(peer)].unexpected;
    std::deque<Message> others;
    for (Message& m : kept) {
      if (m.tag == tag) {
        each(peer, m.bytes.data(), m.bytes.size());
      } else {
        others.push_back(std::move(m));
      }
    }
    kept.swap(others);
  }
}

Status Bootstrap::pump(int peer, bool* complete) {
  Inbox& in = in_[static_cast<size_t>(peer)];
  *complete = false;
  if (!in.broken.isOk()) return in.broken;
  for (;;) {
    size_t got = 0;
    if (in.headerReceived < sizeof(in.header)) {
      LOOM_TRY(recvSome(in.fd.get(), in.header + in.headerReceived,
                        sizeof(in.header) - in.headerReceived, &got));
      in.headerReceived += got;
      if (in.headerReceived < sizeof(in.header)) return Status::ok();
      uint64_t bytes = 0;
      std::memcpy(&in.current.tag, in.header, 4);
      std::memcpy(&bytes, in.header + 8, 8);
      if (bytes > kMaxMessageBytes) {
        return error(loomRemoteError, "rank %d sent a malformed bootstrap message (%llu bytes)",
                     peer, static_cast<unsigned long long>(bytes));
      }
      in.current.bytes.assign(bytes, 0);
      in.bodyReceived = 0;
    }
    if (in.bodyReceived < in.current.bytes.size()) {
      LOOM_TRY(recvSome(in.fd.get(), in.current.bytes.data() + in.bodyReceived,
                        in.current.bytes.size() - in.bodyReceived, &got));
      in.bodyReceived += got;
      if (in.bodyReceived < in.current.bytes.size()) return Status::ok();
    }
    in.headerReceived = 0;
    *complete = true;
    return Status::ok();
  }
}

Status Bootstrap::takeMessage(int peer, uint32_t tag, void* data, size_t bytes, bool* found) {
  std::deque<Message>& kept = in_[static_cast<size_t>(peer)].unexpected;
  *found = false;
  for (auto it = kept.begin(); it != kept.end(); ++it) {
    if (it->tag != tag) continue;
    if (it->bytes.size() != bytes) {
      return error(loomInvalidUsage,
                   "bootstrap message from rank %d (tag %#x) has %zu bytes, this rank expected %zu",
                   peer, tag, it->bytes.size(), bytes);
    }
    if (bytes > 0) std::memcpy(data, it->bytes.data(), bytes);
    kept.erase(it);
    *found = true;
    return Status::ok();
  }
  return Status::ok();
}

Status Bootstrap::exchange(int sendPeer, const void* sendData, size_t sendBytes, int recvPeer,
                           void* recvData, size_t recvBytes, uint32_t tag) {
  return exchangeUntil(sendPeer, sendData, sendBytes, recvPeer, recvData, recvBytes, tag, deadline());
}

Status Bootstrap::exchangeUntil(int sendPeer, const void* sendData, size_t sendBytes, int recvPeer, void* recvData,
                                size_t recvBytes, uint32_t tag, const Deadline& until) {
  for (int peer : {sendPeer, recvPeer}) {
    if (peer != -1 && (peer < 0 || peer >= nranks_ || peer == rank_)) {
      return error(loomInternalError, "bootstrap peer %d is not another rank of %d", peer, nranks_);
    }
  }
  // Connect out first: it completes through the peer's listen backlog, so every rank
  // reaches its accept below and no rank waits for another to accept.
  int sendFd = -1;
  if (sendPeer >= 0) {
    LOOM_TRY(connectionTo(sendPeer, until, &sendFd).withContext(format("bootstrap connect to rank %d", sendPeer)));
  }
  uint8_t header[16] = {};
  std::memcpy(header, &tag, 4);
  uint64_t length = sendBytes;
  std::memcpy(header + 8, &length, 8);
  size_t sent = 0, total = sendPeer >= 0 ? sizeof(header) + sendBytes : 0;

  bool received = recvPeer < 0;
  if (!received) {
    LOOM_TRY(takeMessage(recvPeer, tag, recvData, recvBytes, &received));
    if (!received) {
      LOOM_TRY(acceptFrom(recvPeer, until).withContext(format("bootstrap waiting for rank %d to connect", recvPeer)));
    }
  }
  while (sent < total || !received) {
    bool progressed = false;
    if (sent < total) {
      size_t done = 0;
      Status s = sent < sizeof(header)
                     ? sendSome(sendFd, header + sent, sizeof(header) - sent, &done)
                     : sendSome(sendFd, static_cast<const char*>(sendData) + (sent - sizeof(header)),
                                total - sent, &done);
      LOOM_TRY(s.withContext(format("bootstrap send to rank %d", sendPeer)));
      sent += done;
      progressed |= done > 0;
    }
    if (!received) {
      bool complete = false;
      LOOM_TRY(pump(recvPeer, &complete).withContext(format("bootstrap receive from rank %d", recvPeer)));
      if (complete) {
        Inbox& in = in_[static_cast<size_t>(recvPeer)];
        in.unexpected.push_back(std::move(in.current));
        in.current = Message{};
        LOOM_TRY(takeMessage(recvPeer, tag, recvData, recvBytes, &received));
        progressed = true;
      }
    }
    if (progressed) continue;
    pollfd fds[3];
    nfds_t n = 0;
    if (sent < total) fds[n++] = {sendFd, POLLOUT, 0};
    if (!received) fds[n++] = {in_[static_cast<size_t>(recvPeer)].fd.get(), POLLIN, 0};
    if (cancelFd_ >= 0) fds[n++] = {cancelFd_, POLLIN, 0};
    int rc = ::poll(fds, n, until.remainingMs());
    if (rc < 0 && errno != EINTR) return systemError("poll", errno);
    if (cancelFd_ >= 0 && (fds[n - 1].revents & POLLIN)) {
      return error(loomInvalidUsage, "the communicator was aborted (loomCommAbort)");
    }
    if (rc == 0 && until.expired()) {
      return error(loomTimeout,
                   "bootstrap exchange timed out after %lld ms (sending to rank %d: %zu of %zu "
                   "bytes; receiving from rank %d: %s)",
                   timeoutMs_, sendPeer, sent, total, recvPeer, received ? "done" : "not arrived");
    }
  }
  return Status::ok();
}

Status Bootstrap::send(int peer, uint32_t tag, const void* data, size_t bytes) {
  return send(peer, tag, data, bytes, deadline());
}

bool Bootstrap::offer(int peer, uint32_t tag, const void* data, size_t bytes, const Deadline& until) {
  int fd = -1;
  if (peer < 0 || peer >= nranks_ || peer == rank_ || !connectionTo(peer, until, &fd).isOk()) return false;
  pollfd writable{fd, POLLOUT, 0};
  if (::poll(&writable, 1, 0) != 1 || (writable.revents & POLLOUT) == 0) return false;
  uint8_t header[16] = {};
  std::memcpy(header, &tag, 4);
  const uint64_t length = bytes;
  std::memcpy(header + 8, &length, 8);
  const iovec pieces[2] = {{header, sizeof header}, {const_cast<void*>(data), bytes}};
  size_t done = 0;
  if (!sendSomeOf(fd, pieces, 2, &done).isOk()) return false;
  if (done == 0) return false;
  // A writable socket takes a small message whole; should it not, the rest follows (a part
  // alone would leave the peer reading the next message's bytes as this one's).
  const size_t total = sizeof header + bytes;
  if (done < sizeof header) {
    if (!sendAll(fd, header + done, sizeof header - done, until, cancelFd_).isOk()) return false;
    done = sizeof header;
  }
  const auto* rest = static_cast<const uint8_t*>(data) + (done - sizeof header);
  return done == total || sendAll(fd, rest, total - done, until, cancelFd_).isOk();
}

Status Bootstrap::recv(int peer, uint32_t tag, void* data, size_t bytes) {
  return recv(peer, tag, data, bytes, deadline());
}

Status Bootstrap::send(int peer, uint32_t tag, const void* data, size_t bytes, const Deadline& until) {
  return exchangeUntil(peer, data, bytes, -1, nullptr, 0, tag, until);
}

Status Bootstrap::recv(int peer, uint32_t tag, void* data, size_t bytes, const Deadline& until) {
  return exchangeUntil(-1, nullptr, 0, peer, data, bytes, tag, until);
}

Status Bootstrap::allGather(void* data, size_t bytesPerRank) {
  std::vector<int> all(static_cast<size_t>(nranks_));
  for (int r = 0; r < nranks_; ++r) all[static_cast<size_t>(r)] = r;
  return ringAllGather(all, data, bytesPerRank, kAllGatherTag);
}

Status Bootstrap::allGatherAmong(const std::vector<int>& ranks, void* data, size_t bytesPerRank) {
  return ringAllGather(ranks, data, bytesPerRank, kAllGatherAmongTag);
}

Status Bootstrap::ringAllGather(const std::vector<int>& ranks, void* data, size_t bytesPerRank, uint32_t tag) {
  const int n = static_cast<int>(ranks.size());
  int me = -1;
  for (int i = 0; i < n; ++i) {
    if (ranks[static_cast<size_t>(i)] == rank_) me = i;
  }
  if (me < 0) return error(loomInternalError, "bootstrap allgather without rank %d", rank_);
  auto* bytes = static_cast<uint8_t*>(data);
  const int next = ranks[static_cast<size_t>((me + 1) % n)], prev = ranks[static_cast<size_t>((me + n - 1) % n)];
  // Step s forwards the slice that arrived in step s - 1 (this rank's own at s = 0).
  for (int s = 0; s < n - 1; ++s) {
    size_t sendSlice = static_cast<size_t>((me - s + n) % n);
    size_t recvSlice = static_cast<size_t>((me - s - 1 + n) % n);
    LOOM_TRY(exchange(next, bytes + sendSlice * bytesPerRank, bytesPerRank, prev, bytes + recvSlice * bytesPerRank,
                      bytesPerRank, tag));
  }
  return Status::ok();
}

Status Bootstrap::barrier() {
  // Dissemination: after round k every rank has heard, directly or not, from 2^(k+1) ranks.
  for (int step = 1; step < nranks_; step <<= 1) {
    LOOM_TRY(exchange((rank_ + step) % nranks_, nullptr, 0, (rank_ - step + nranks_) % nranks_,
                      nullptr, 0, kBarrierTag));
  }
  return Status::ok();
}

}  // namespace loom
