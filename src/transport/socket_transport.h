// TCP links between ranks (different hosts, or any pair when nothing faster applies).
// LOOM_SOCKET_NSOCKS connections per pair, made on first use: the lower rank connects to
// the higher rank's listener, which the bootstrap advertised at init, and names the link
// index in its hello.
//
// Failures travel over the listeners too, since a link's bytes cannot carry them: a rank
// that gives up sends every peer a notice naming the rank whose failure caused it before
// closing its links, and a rank waiting for a peer's first link holds a watch
// connection to the peer's listener, which ends (after the cause, when the peer gave up)
// if the peer goes away, on this host or another.
#pragma once

#include <memory>
#include <vector>

#include "base/peer_process.h"
#include "bootstrap/bootstrap.h"
#include "bootstrap/handshake.h"
#include "transport/transport.h"

namespace loom::transport {

class SocketTransport : public Transport {
 public:
  // Listens next to the bootstrap's address and allgathers the listeners through it;
  // `linksPerPeer` TCP connections to each peer (the same on every rank), each with its send
  // buffer capped at `sendBufferBytes` (0: the kernel's autotuning).
  static Status create(Bootstrap& bootstrap, int cancelFd, int linksPerPeer, int sendBufferBytes,
                       std::unique_ptr<SocketTransport>* out);

  ~SocketTransport() override;

  const char* name() const override { return "socket"; }
  Status connectOut(const std::vector<int>& peers, const Deadline& deadline) override;
  Status acceptIn(const std::vector<int>& peers, const Deadline& deadline) override;
  int connectFailureCause() const override { return connectFailureCause_; }
  int linksPerPeer() const override { return linksPerPeer_; }
  Link* link(int peer, int index) override;
  // Tells every peer (and the watchers) why this rank gives up, then closes links and listener.
  void closeAll(int causeRank) override;

 private:
  class SocketLink;
  SocketTransport(Acceptor acceptor, const Bootstrap& bootstrap, int cancelFd, int linksPerPeer, int sendBufferBytes);
  std::unique_ptr<SocketLink>& linkSlot(int peer, int index);
  bool connected(int peer);
  // Takes an authenticated connection: a link, a watcher or a failure notice.
  void admit(Acceptor::Connection conn);
  // loomRemoteError once `peer` has exited (its process, when this rank can see it, or its
  // listener, through the watch connection) or has given up: waiting to connect to it would
  // otherwise last until the deadline. Sets connectFailureCause_ then.
  Status checkAlive(int peer);
  // The rank whose failure made `peer` give up, from its notice (waiting briefly for one
  // that is on its way); -1 when it sent none.
  int causeNoticedFrom(int peer);
  // s, and when it is loomRemoteError from `peer`, the cause that peer noticed; *firstFailure
  // (when given) gets that cause, or `peer` when it named none.
  Status withCause(int peer, Status s, int* firstFailure = nullptr);
  // attempt(slice) until it succeeds, fails otherwise than by its slice running out, or the
  // deadline passes, with checkAlive(peer) between slices; errors say `what` rank peer.
  template <typename Attempt>
  Status watchingPeer(int peer, const Deadline& deadline, const char* what, Attempt attempt);

  Acceptor acceptor_;
  Secret secret_;
  uint64_t commId_;
  int rank_;
  int nranks_;
  int cancelFd_;
  int linksPerPeer_;
  int sendBufferBytes_;
  std::vector<SocketAddress> addresses_;
  std::vector<std::unique_ptr<SocketLink>> links_;
  std::vector<PeerProcess> processes_;  // identified where the peer can be watched
  std::vector<Fd> watching_;            // per peer: this rank's watch connection to it
  std::vector<Fd> watchers_;            // watch connections of peers waiting for this rank
  std::vector<int> noticedCause_;       // per peer: kNoNotice, or the cause its notice named
  int connectFailureCause_ = -1;
};

}  // namespace loom::transport
