#include "transport/socket_transport.h"

#include "core/log.h"

namespace loom::transport {

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

SocketTransport::SocketTransport(Acceptor acceptor, const Bootstrap& bootstrap, int cancelFd)
    : acceptor_(std::move(acceptor)),
      secret_(bootstrap.secret()),
      commId_(bootstrap.commId()),
      rank_(bootstrap.rank()),
      nranks_(bootstrap.nranks()),
      cancelFd_(cancelFd),
      addresses_(static_cast<size_t>(bootstrap.nranks())),
      links_(static_cast<size_t>(bootstrap.nranks())) {}

SocketTransport::~SocketTransport() = default;

Status SocketTransport::create(Bootstrap& bootstrap, int cancelFd,
                               std::unique_ptr<SocketTransport>* out) {
  // Same interface as the bootstrap, which peers already reach.
  SocketAddress address = bootstrap.address();
  address.setPort(0);
  Acceptor acceptor;
  LOOM_TRY(Acceptor::listen(address, bootstrap.secret(), Purpose::kTransport, "socket transport", &acceptor));
  SocketAddress bound = acceptor.address();
  std::unique_ptr<SocketTransport> t(new SocketTransport(std::move(acceptor), bootstrap, cancelFd));

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
    if (peer <= rank_ || links_[static_cast<size_t>(peer)]) continue;
    Fd fd;
    Hello hello{Purpose::kTransport, rank_, nranks_, commId_};
    LOOM_TRY(connectAndGreet(addresses_[static_cast<size_t>(peer)], secret_, hello, deadline, cancelFd_, &fd)
                 .withContext(format("socket transport: connecting to rank %d", peer)));
    links_[static_cast<size_t>(peer)] = std::make_unique<SocketLink>(std::move(fd));
    LOOM_TRACE("socket transport: connected to rank %d at %s", peer,
               addresses_[static_cast<size_t>(peer)].toString().c_str());
  }
  return Status::ok();
}

Status SocketTransport::acceptIn(const std::vector<int>& peers, const Deadline& deadline) {
  for (int peer : peers) {
    while (!links_[static_cast<size_t>(peer)]) {
      Acceptor::Connection conn;
      LOOM_TRY(acceptor_.next(deadline, cancelFd_, &conn)
                   .withContext(format("socket transport: waiting for rank %d to connect", peer)));
      const Hello& h = conn.hello;
      if (h.commId != commId_ || h.nranks != nranks_ || h.rank < 0 || h.rank >= rank_ ||
          links_[static_cast<size_t>(h.rank)]) {
        LOOM_WARN("socket transport: dropped a connection from %s claiming rank %d of %d",
                  conn.peer.toString().c_str(), h.rank, h.nranks);
        continue;
      }
      links_[static_cast<size_t>(h.rank)] = std::make_unique<SocketLink>(std::move(conn.fd));
      LOOM_TRACE("socket transport: accepted rank %d from %s", h.rank, conn.peer.toString().c_str());
    }
  }
  return Status::ok();
}

Link* SocketTransport::link(int peer, int /*index*/) { return links_[static_cast<size_t>(peer)].get(); }

}  // namespace loom::transport
