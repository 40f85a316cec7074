#include "transport/socket_transport.h"

#include "core/env.h"
#include "core/log.h"

namespace loom::transport {
namespace {
// Connecting waits in slices of this long, checking between them that the peer still lives.
constexpr long long kLivenessSliceMs = 100;
}  // namespace

template <typename Attempt>
Status SocketTransport::watchingPeer(int peer, const Deadline& deadline, const char* what, Attempt attempt) const {
  for (;;) {
    Status s = attempt(deadline.earlier(Deadline::afterMs(kLivenessSliceMs)));
    if (s.isOk()) return s;
    if (s.code() != loomTimeout || deadline.expired()) {
      return s.withContext(format("socket transport: %s rank %d", what, peer));
    }
    LOOM_TRY(checkAlive(peer));
  }
}

class SocketTransport::SocketLink : public Link {
 public:
  explicit SocketLink(Fd fd) : fd_(std::move(fd)) {}
  Status sendSome(const void* data, size_t bytes, size_t* done) override {
    return loom::sendSome(fd_.get(), data, bytes, done);
  }
  Status recvSome(void* data, size_t bytes, size_t* done) override {
    return loom::recvSome(fd_.get(), data, bytes, done);
  }
  int waitFd() const override { return fd_.get(); }

 private:
  Fd fd_;
};

SocketTransport::SocketTransport(Acceptor acceptor, const Bootstrap& bootstrap, int cancelFd, int linksPerPeer)
    : acceptor_(std::move(acceptor)),
      secret_(bootstrap.secret()),
      commId_(bootstrap.commId()),
      rank_(bootstrap.rank()),
      nranks_(bootstrap.nranks()),
      cancelFd_(cancelFd),
      linksPerPeer_(linksPerPeer),
      addresses_(static_cast<size_t>(bootstrap.nranks())),
      links_(static_cast<size_t>(bootstrap.nranks() * linksPerPeer)),
      processes_(static_cast<size_t>(bootstrap.nranks())) {
  const PeerInfo& self = bootstrap.peers()[static_cast<size_t>(rank_)];
  for (int r = 0; r < nranks_; ++r) {
    const PeerInfo& p = bootstrap.peers()[static_cast<size_t>(r)];
    if (r != rank_ && p.hostHash == self.hostHash && p.pidNamespace != 0 && p.pidNamespace == self.pidNamespace) {
      processes_[static_cast<size_t>(r)].identify(p.pid, p.pidNamespace);
    }
  }
}

SocketTransport::~SocketTransport() = default;

Status SocketTransport::create(Bootstrap& bootstrap, int cancelFd, std::unique_ptr<SocketTransport>* out) {
  long long linksPerPeer = 0;
  LOOM_TRY(env::getInt("LOOM_SOCKET_NSOCKS", 1, 16, &linksPerPeer));
  // Same interface as the bootstrap, which peers already reach.
  SocketAddress address = bootstrap.address();
  address.setPort(0);
  Acceptor acceptor;
  LOOM_TRY(Acceptor::listen(address, bootstrap.secret(), Purpose::kTransport, "socket transport", &acceptor));
  SocketAddress bound = acceptor.address();
  std::unique_ptr<SocketTransport> t(new SocketTransport(std::move(acceptor), bootstrap, cancelFd, static_cast<int>(linksPerPeer)));

  std::vector<uint8_t> table(SocketAddress::kWireBytes * static_cast<size_t>(t->nranks_));
  bound.toWire(table.data() + SocketAddress::kWireBytes * static_cast<size_t>(t->rank_));
  LOOM_TRY(bootstrap.allGather(table.data(), SocketAddress::kWireBytes)
               .withContext("socket transport address exchange"));
  for (int r = 0; r < t->nranks_; ++r) {
    LOOM_TRY(SocketAddress::fromWire(table.data() + SocketAddress::kWireBytes * static_cast<size_t>(r),
                                     &t->addresses_[static_cast<size_t>(r)]));
  }
  *out = std::move(t);
  return Status::ok();
}

Status SocketTransport::connectOut(const std::vector<int>& peers, const Deadline& deadline) {
  for (int peer : peers) {
    if (peer <= rank_ || connected(peer)) continue;
    for (int index = 0; index < linksPerPeer_; ++index) {
      Fd fd;
      Hello hello{Purpose::kTransport, rank_, nranks_, commId_, index};
      LOOM_TRY(watchingPeer(peer, deadline, "connecting to", [&](const Deadline& slice) {
        return connectAndGreet(addresses_[static_cast<size_t>(peer)], secret_, hello, slice, cancelFd_, &fd);
      }));
      linkSlot(peer, index) = std::make_unique<SocketLink>(std::move(fd));
    }
    LOOM_TRACE("socket transport: %d connection(s) to rank %d at %s", linksPerPeer_, peer,
               addresses_[static_cast<size_t>(peer)].toString().c_str());
  }
  return Status::ok();
}

Status SocketTransport::acceptIn(const std::vector<int>& peers, const Deadline& deadline) {
  for (int peer : peers) {
    while (!connected(peer)) {
      Acceptor::Connection conn;
      LOOM_TRY(watchingPeer(peer, deadline, "waiting for a connection from", [&](const Deadline& slice) {
        return acceptor_.next(slice, cancelFd_, &conn);
      }));
      const Hello& h = conn.hello;
      if (h.commId != commId_ || h.nranks != nranks_ || h.rank < 0 || h.rank >= rank_ || h.link < 0 ||
          h.link >= linksPerPeer_ || linkSlot(h.rank, h.link)) {
        LOOM_WARN("socket transport: dropped a connection from %s claiming rank %d of %d (link %d)",
                  conn.peer.toString().c_str(), h.rank, h.nranks, h.link);
        continue;
      }
      linkSlot(h.rank, h.link) = std::make_unique<SocketLink>(std::move(conn.fd));
      LOOM_TRACE("socket transport: accepted rank %d link %d from %s", h.rank, h.link, conn.peer.toString().c_str());
    }
  }
  return Status::ok();
}

std::unique_ptr<SocketTransport::SocketLink>& SocketTransport::linkSlot(int peer, int index) {
  return links_[static_cast<size_t>(peer) * static_cast<size_t>(linksPerPeer_) + static_cast<size_t>(index)];
}

bool SocketTransport::connected(int peer) {
  for (int i = 0; i < linksPerPeer_; ++i) {
    if (!linkSlot(peer, i)) return false;
  }
  return true;
}

Link* SocketTransport::link(int peer, int index) { return linkSlot(peer, index).get(); }

Status SocketTransport::checkAlive(int peer) const {
  const PeerProcess& p = processes_[static_cast<size_t>(peer)];
  if (!p.identified() || p.alive()) return Status::ok();
  return error(loomRemoteError, "socket transport: rank %d (pid %d) exited before its connection to this rank was made",
               peer, p.pid());
}

}  // namespace loom::transport
