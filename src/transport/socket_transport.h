// TCP links between ranks (different hosts, or any pair when nothing faster applies).
// LOOM_SOCKET_NSOCKS connections per pair, made on first use: the lower rank connects to
// the higher rank's listener, which the bootstrap advertised at init, and names the link
// index in its hello.
#pragma once

#include <memory>
#include <vector>

#include "core/bootstrap.h"
#include "core/handshake.h"
#include "transport/peer_process.h"
#include "transport/transport.h"

namespace loom::transport {

class SocketTransport : public Transport {
 public:
  // Listens next to the bootstrap's address and allgathers the listeners through it.
  static Status create(Bootstrap& bootstrap, int cancelFd, std::unique_ptr<SocketTransport>* out);

  ~SocketTransport() override;

  const char* name() const override { return "socket"; }
  Status connectOut(const std::vector<int>& peers, const Deadline& deadline) override;
  Status acceptIn(const std::vector<int>& peers, const Deadline& deadline) override;
  int linksPerPeer() const override { return linksPerPeer_; }
  Link* link(int peer, int index) override;

 private:
  class SocketLink;
  SocketTransport(Acceptor acceptor, const Bootstrap& bootstrap, int cancelFd, int linksPerPeer);
  std::unique_ptr<SocketLink>& linkSlot(int peer, int index);
  bool connected(int peer);
  // loomRemoteError once a peer this rank can watch (same host and pid namespace) has
  // exited: waiting to connect to it would otherwise last until the deadline.
  Status checkAlive(int peer) const;
  // attempt(slice) until it succeeds, fails otherwise than by its slice running out, or the
  // deadline passes, with checkAlive(peer) between slices; errors say `what` rank peer.
  template <typename Attempt>
  Status watchingPeer(int peer, const Deadline& deadline, const char* what, Attempt attempt) const;

  Acceptor acceptor_;
  Secret secret_;
  uint64_t commId_;
  int rank_;
  int nranks_;
  int cancelFd_;
  int linksPerPeer_;
  std::vector<SocketAddress> addresses_;
  std::vector<std::unique_ptr<SocketLink>> links_;
  std::vector<PeerProcess> processes_;  // identified where the peer can be watched
};

}  // namespace loom::transport
