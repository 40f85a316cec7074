// The bootstrap channel: out-of-band messages between the ranks of one communicator, for
// init, split and transports exchanging connection info. Small, blocking, every call with
// a deadline.
//
// Each rank listens on its own socket; a connection to a peer is made the first time a
// message goes there and kept. Messages are framed {tag, bytes}; a receive for (peer, tag)
// keeps messages with other tags aside until asked for, so independent exchanges cannot
// steal each other's data.
#pragma once

#include <poll.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/host_identity.h"
#include "base/socket.h"
#include "base/status.h"
#include "bootstrap/handshake.h"
#include "bootstrap/unique_id.h"

namespace loom {

// What every rank knows about every other after init.
struct PeerInfo {
  SocketAddress bootstrapAddress;
  uint64_t hostHash = 0;
  std::string hostName;
  int32_t pid = 0;
  uint64_t pidNamespace = 0;  // inode of its /proc/self/ns/pid (0: unknown)
};

// Whether two ranks are threads of one process (one host, one pid in one pid namespace).
inline bool sameProcess(const PeerInfo& a, const PeerInfo& b) {
  return a.hostHash == b.hostHash && a.pid == b.pid && a.pidNamespace == b.pidNamespace;
}

class Bootstrap {
 public:
  // Tags below kFirstInternalTag are for users of the channel (transports); the rest are
  // the channel's own.
  static constexpr uint32_t kFirstInternalTag = 0xffff0000u;

  // Registers with the root of `id`, then runs the ring allgather of PeerInfo. Every wait
  // ends at `deadline` or when cancelFd becomes readable.
  static Status connect(const UniqueId& id, int rank, int nranks, const HostIdentity& host,
                        int initTimeoutMs, const Deadline& deadline, int cancelFd,
                        std::unique_ptr<Bootstrap>* out);

  // A channel among ranks that already agree on each other's addresses (loomCommSplit):
  // the caller made `listener` and exchanged its address through another channel.
  static Status fromPeers(Acceptor listener, const Secret& secret, uint64_t commId, int rank,
                          std::vector<PeerInfo> peers, int cancelFd,
                          std::unique_ptr<Bootstrap>* out);

  // A listening socket on the chosen interface for a new channel.
  static Status listen(const Secret& secret, const SocketAddress& near, Acceptor* out);

  int rank() const { return rank_; }
  int nranks() const { return nranks_; }
  uint64_t commId() const { return commId_; }
  const Secret& secret() const { return secret_; }
  const std::vector<PeerInfo>& peers() const { return peers_; }
  const SocketAddress& address() const { return acceptor_.address(); }

  // Each later call waits at most this long.
  void setTimeoutMs(long long ms) { timeoutMs_ = ms; }

  Status send(int peer, uint32_t tag, const void* data, size_t bytes);
  Status recv(int peer, uint32_t tag, void* data, size_t bytes);
  // The same, ending at `until` (loomTimeout) rather than after the channel's timeout. A
  // receiver that waits in slices, watching the peer in between, calls again: what arrived of
  // a message meanwhile is kept. A send cut off leaves the channel to that peer unusable (for
  // a last word before giving up).
  Status send(int peer, uint32_t tag, const void* data, size_t bytes, const Deadline& until);
  Status recv(int peer, uint32_t tag, void* data, size_t bytes, const Deadline& until);
  // For word that may go unread (core/remote_announcements.h): sends a small message (a few
  // hundred bytes at most) only if the peer's connection, made by `until`, takes all of it now;
  // false, nothing sent, where it would wait (the peer has not read what came before).
  bool offer(int peer, uint32_t tag, const void* data, size_t bytes, const Deadline& until);
  // Sends to one peer while receiving from another, so a ring step cannot deadlock on
  // full socket buffers.
  Status exchange(int sendPeer, const void* sendData, size_t sendBytes, int recvPeer,
                  void* recvData, size_t recvBytes, uint32_t tag);
  // In place: this rank's bytesPerRank bytes at data + rank * bytesPerRank.
  Status allGather(void* data, size_t bytesPerRank);
  // The same among `ranks` alone (this rank one of them; loomCommShrink), slot i of data
  // being ranks[i]'s: the others are never contacted, so they may be dead.
  Status allGatherAmong(const std::vector<int>& ranks, void* data, size_t bytesPerRank);
  Status barrier();

  // For a wait elsewhere that must also hear messages nobody has asked for yet (failure
  // notices): adds what to poll (the listener, connections in their handshake, every peer's
  // incoming connection) and says whether a whole message with `tag` is already here.
  bool addWaitFds(uint32_t tag, PollFds* fds) const;
  // After that poll, without waiting: takes new connections and the bytes that came, and names
  // the first peer whose whole message with `tag` waits (-1: none) for recv to take.
  int arrived(uint32_t tag);
  // The same, handing every whole message with `tag` to each(peer, bytes, size), a peer's in the
  // order sent, and dropping it: one pass, however many came (word offered that may pile up).
  void drain(uint32_t tag, const std::function<void(int, const uint8_t*, size_t)>& each);

 private:
  struct Message {
    uint32_t tag;
    std::vector<uint8_t> bytes;
  };
  // The incoming side of one peer: a partly read message and the ones kept aside.
  struct Inbox {
    Fd fd;
    uint8_t header[16];
    size_t headerReceived = 0;
    Message current;
    size_t bodyReceived = 0;
    std::deque<Message> unexpected;
    Status broken;  // why the connection failed while nobody waited on it (then closed)
  };
  struct Outgoing;

  Bootstrap(Acceptor acceptor, const Secret& secret, int rank, int nranks, int cancelFd);

  Deadline deadline() const { return Deadline::afterMs(timeoutMs_); }
  // Ring allgather over `ranks`, slot i of data being ranks[i]'s.
  Status ringAllGather(const std::vector<int>& ranks, void* data, size_t bytesPerRank, uint32_t tag);
  Status exchangeUntil(int sendPeer, const void* sendData, size_t sendBytes, int recvPeer, void* recvData,
                       size_t recvBytes, uint32_t tag, const Deadline& until);
  Status connectionTo(int peer, const Deadline& deadline, int* fd);
  Status acceptFrom(int peer, const Deadline& deadline);
  // Keeps an authenticated connection as its rank's incoming one; false (dropped, logged) when
  // it claims to be no other rank of this channel or that rank is connected already.
  bool adopt(Acceptor::Connection& conn);
  // Reads what is available from peer's inbox; true in *complete when a message is whole.
  Status pump(int peer, bool* complete);
  Status takeMessage(int peer, uint32_t tag, void* data, size_t bytes, bool* found);

  Acceptor acceptor_;
  Secret secret_;
  uint64_t commId_ = 0;
  int rank_;
  int nranks_;
  int cancelFd_;
  long long timeoutMs_ = 0;
  std::vector<PeerInfo> peers_;
  std::vector<Fd> out_;
  std::vector<Inbox> in_;
};

}  // namespace loom
