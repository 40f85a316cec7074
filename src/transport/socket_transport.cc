// TCP links: connection on first use, framing, non-blocking moves (socket_transport.h).
#include "transport/socket_transport.h"

#include <algorithm>

#include "base/log.h"

namespace loom::transport {
namespace {
// Connecting waits in slices of this long, checking between them that the peer still lives.
constexpr long long kLivenessSliceMs = 100;
// A peer that closed a link may have sent a notice just before; wait this long for it. A
// notice from this host is in the listener's queue by the time the link closes; one from
// another host may still be on its way.
constexpr long long kNoticeWaitMs = 50;
constexpr long long kLocalNoticeWaitMs = 2;
// Giving up spends at most this long telling peers why.
constexpr long long kNoticeBudgetMs = 1000;
// noticedCause_ of a peer that sent no notice.
constexpr int kNoNotice = -2;
}  // namespace

template <typename Attempt>
Status SocketTransport::watchingPeer(int peer, const Deadline& deadline, const char* what, Attempt attempt) {
  for (;;) {
    Status s = attempt(deadline.earlier(Deadline::afterMs(kLivenessSliceMs)));
    if (s.isOk()) return s;
    // The last slice looks too: a caller may wait in calls shorter than a slice (the executor
    // looks at the peers' announcements between them).
    if (s.code() == loomTimeout) LOOM_TRY(checkAlive(peer));
    if (s.code() != loomTimeout || deadline.expired()) {
      if (s.code() == loomRemoteError) s = withCause(peer, s, &connectFailureCause_);
      return s.withContext(format("socket transport: %s rank %d", what, peer));
    }
  }
}

class SocketTransport::SocketLink : public Link {
 public:
  SocketLink(Fd fd, SocketTransport& transport, int peer) : fd_(std::move(fd)), transport_(transport), peer_(peer) {
    setSendBuffer(fd_.get(), transport_.sendBufferBytes_);
  }
  Status sendSome(const void* data, size_t bytes, size_t* done) override {
    return transport_.withCause(peer_, loom::sendSome(fd_.get(), data, bytes, done));
  }
  Status recvSome(void* data, size_t bytes, size_t* done) override {
    return transport_.withCause(peer_, loom::recvSome(fd_.get(), data, bytes, done));
  }
  Status sendWithHeader(const void* header, size_t headerBytes, const void* body, size_t bodyBytes,
                        size_t* done) override {
    const iovec pieces[2] = {{const_cast<void*>(header), headerBytes}, {const_cast<void*>(body), bodyBytes}};
    return transport_.withCause(peer_, sendSomeOf(fd_.get(), pieces, 2, done));
  }
  Status recvWithHeader(void* header, size_t headerBytes, void* body, size_t bodyBytes, size_t* done) override {
    const iovec pieces[2] = {{header, headerBytes}, {body, bodyBytes}};
    return transport_.withCause(peer_, recvSomeOf(fd_.get(), pieces, 2, done));
  }
  int waitFd() const override { return fd_.get(); }
  int closedBecauseOf() const override { return transport_.causeNoticedFrom(peer_); }

 private:
  Fd fd_;
  SocketTransport& transport_;
  int peer_;
};

SocketTransport::SocketTransport(Acceptor acceptor, const Bootstrap& bootstrap, int cancelFd, int linksPerPeer,
                                 int sendBufferBytes)
    : acceptor_(std::move(acceptor)),
      secret_(bootstrap.secret()),
      commId_(bootstrap.commId()),
      rank_(bootstrap.rank()),
      nranks_(bootstrap.nranks()),
      cancelFd_(cancelFd),
      linksPerPeer_(linksPerPeer),
      sendBufferBytes_(sendBufferBytes),
      addresses_(static_cast<size_t>(bootstrap.nranks())),
      links_(static_cast<size_t>(bootstrap.nranks() * linksPerPeer)),
      processes_(static_cast<size_t>(bootstrap.nranks())),
      watching_(static_cast<size_t>(bootstrap.nranks())),
      noticedCause_(static_cast<size_t>(bootstrap.nranks()), kNoNotice) {
  const PeerInfo& self = bootstrap.peers()[static_cast<size_t>(rank_)];
  for (int r = 0; r < nranks_; ++r) {
    const PeerInfo& p = bootstrap.peers()[static_cast<size_t>(r)];
    if (r != rank_ && p.hostHash == self.hostHash && p.pidNamespace != 0 && p.pidNamespace == self.pidNamespace) {
      processes_[static_cast<size_t>(r)].identify(p.pid, p.pidNamespace);
    }
  }
}

SocketTransport::~SocketTransport() = default;

Status SocketTransport::create(Bootstrap& bootstrap, int cancelFd, int linksPerPeer, int sendBufferBytes,
                               std::unique_ptr<SocketTransport>* out) {
  // Same interface as the bootstrap, which peers already reach.
  SocketAddress address = bootstrap.address();
  address.setPort(0);
  Acceptor acceptor;
  LOOM_TRY(Acceptor::listen(address, bootstrap.secret(), Purpose::kTransport, "socket transport", &acceptor));
  SocketAddress bound = acceptor.address();
  std::unique_ptr<SocketTransport> t(
      new SocketTransport(std::move(acceptor), bootstrap, cancelFd, linksPerPeer, sendBufferBytes));

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
        // The peer listened before the addresses were exchanged: a refusal means it has gone.
        return connectAndGreet(addresses_[static_cast<size_t>(peer)], secret_, hello, slice, cancelFd_, &fd,
                               Refused::kFinal);
      }));
      linkSlot(peer, index) = std::make_unique<SocketLink>(std::move(fd), *this, peer);
    }
    watching_[static_cast<size_t>(peer)].reset();
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
      admit(std::move(conn));
      // A notice from the awaited peer means it will not connect.
      if (!connected(peer) && noticedCause_[static_cast<size_t>(peer)] != kNoNotice) LOOM_TRY(checkAlive(peer));
    }
    watching_[static_cast<size_t>(peer)].reset();
  }
  return Status::ok();
}

void SocketTransport::admit(Acceptor::Connection conn) {
  const Hello& h = conn.hello;
  const bool ours = h.commId == commId_ && h.nranks == nranks_ && h.rank >= 0 && h.rank < nranks_ && h.rank != rank_;
  if (ours && h.intent == Intent::kNotice && h.link >= -1 && h.link < nranks_) {
    noticedCause_[static_cast<size_t>(h.rank)] = h.link;
    LOOM_INFO("socket transport: rank %d gave up (cause: %s)", h.rank,
              h.link >= 0 ? format("rank %d failed", h.link).c_str() : "not known");
    return;
  }
  if (ours && h.intent == Intent::kWatch) {
    watchers_.push_back(std::move(conn.fd));
    return;
  }
  if (ours && h.intent == Intent::kLink && h.rank < rank_ && h.link >= 0 && h.link < linksPerPeer_ &&
      !linkSlot(h.rank, h.link)) {
    linkSlot(h.rank, h.link) = std::make_unique<SocketLink>(std::move(conn.fd), *this, h.rank);
    LOOM_TRACE("socket transport: accepted rank %d link %d from %s", h.rank, h.link, conn.peer.toString().c_str());
    return;
  }
  LOOM_WARN("socket transport: dropped a connection from %s claiming rank %d of %d (intent %u, link %d)",
            conn.peer.toString().c_str(), h.rank, h.nranks, static_cast<unsigned>(h.intent), h.link);
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

Status SocketTransport::checkAlive(int peer) {
  const PeerProcess& p = processes_[static_cast<size_t>(peer)];
  if (p.identified() && !p.alive()) {
    connectFailureCause_ = peer;
    return error(loomRemoteError, "socket transport: rank %d (pid %d) exited before its connection to this rank was made",
                 peer, p.pid());
  }
  const int noticed = noticedCause_[static_cast<size_t>(peer)];
  int cause = kNoNotice;
  const std::string where = addresses_[static_cast<size_t>(peer)].toString();
  Fd& watch = watching_[static_cast<size_t>(peer)];
  if (noticed != kNoNotice) {
    cause = noticed;
  } else if (!watch.valid()) {
    Hello hello{Purpose::kTransport, rank_, nranks_, commId_, 0, Intent::kWatch};
    Status s = connectAndGreet(addresses_[static_cast<size_t>(peer)], secret_, hello,
                               Deadline::afterMs(kLivenessSliceMs), cancelFd_, &watch, Refused::kFinal);
    // A timeout says nothing (a slow network): look again after the next slice.
    if (s.isOk() || s.code() == loomTimeout) return Status::ok();
    if (s.code() != loomRemoteError) return s;
    connectFailureCause_ = peer;
    return error(loomRemoteError, "socket transport: rank %d no longer listens at %s: it exited or gave up before "
                 "connecting to this rank", peer, where.c_str());
  } else {
    int32_t sent = 0;
    size_t got = 0;
    Status s = recvSome(watch.get(), &sent, sizeof sent, &got);
    if (s.isOk() && got == 0) return Status::ok();  // still there
    if (s.isOk() && got == sizeof sent && sent >= -1 && sent < nranks_) cause = sent;
  }
  connectFailureCause_ = cause >= 0 ? cause : peer;
  if (cause == kNoNotice) {
    return error(loomRemoteError, "socket transport: rank %d at %s went away (its process exited) before connecting "
                 "to this rank", peer, where.c_str());
  }
  if (cause < 0) {
    return error(loomRemoteError, "socket transport: rank %d gave up before connecting to this rank", peer);
  }
  return error(loomRemoteError, "socket transport: rank %d gave up because rank %d failed, before connecting to this "
               "rank", peer, cause);
}

Status SocketTransport::withCause(int peer, Status s, int* firstFailure) {
  if (s.code() != loomRemoteError) return s;
  const int cause = causeNoticedFrom(peer);
  const bool named = cause >= 0 && cause != peer;
  if (firstFailure != nullptr) *firstFailure = named ? cause : peer;
  if (!named) return s;
  return error(loomRemoteError, "%s (rank %d gave up because rank %d failed)", s.message().c_str(), peer, cause);
}

int SocketTransport::causeNoticedFrom(int peer) {
  const PeerProcess& process = processes_[static_cast<size_t>(peer)];
  // A dead process sent nothing more.
  const long long waitMs = !process.identified() ? kNoticeWaitMs : process.alive() ? kLocalNoticeWaitMs : 0;
  const Deadline until = Deadline::afterMs(waitMs);
  while (noticedCause_[static_cast<size_t>(peer)] == kNoNotice && acceptor_.listening()) {
    Acceptor::Connection conn;
    if (!acceptor_.next(until, cancelFd_, &conn).isOk()) break;
    admit(std::move(conn));
  }
  int& cause = noticedCause_[static_cast<size_t>(peer)];
  if (cause == kNoNotice) cause = -1;  // none came: do not wait again
  return cause == rank_ ? -1 : cause;
}

void SocketTransport::closeAll(int causeRank) {
  // Peers blocked on a link learn why before they see it close: the notice is sent first.
  // Peers without a link hear it too: one may be waiting for this rank's first connection
  // without a watch connection yet.
  const Deadline budget = Deadline::afterMs(kNoticeBudgetMs);
  for (int peer = 0; peer < nranks_; ++peer) {
    if (peer == rank_ || peer == causeRank || budget.expired()) continue;
    Fd fd;
    Hello notice{Purpose::kTransport, rank_, nranks_, commId_, causeRank, Intent::kNotice};
    Status s = connectAndGreet(addresses_[static_cast<size_t>(peer)], secret_, notice,
                               budget.earlier(Deadline::afterMs(kNoticeWaitMs)), -1, &fd, Refused::kFinal);
    if (!s.isOk()) LOOM_TRACE("socket transport: no failure notice to rank %d: %s", peer, s.message().c_str());
  }
  // Peers waiting for a first link from this rank hold watch connections; the ones whose
  // hellos are already here hear the cause, the rest see the listener close.
  for (Acceptor::Connection conn; acceptor_.listening() && acceptor_.next(Deadline::afterMs(0), -1, &conn).isOk();) {
    admit(std::move(conn));
  }
  const int32_t cause = causeRank;
  for (Fd& watcher : watchers_) {
    size_t done = 0;
    (void)sendSome(watcher.get(), &cause, sizeof cause, &done);
  }
  watchers_.clear();
  for (Fd& watch : watching_) watch.reset();
  for (auto& link : links_) link.reset();
  acceptor_ = Acceptor();
}

}  // namespace loom::transport
