// Links over UCX (LOOM_TRANSPORTS=ucx): one UCP context and worker per communicator, the
// workers' addresses allgathered through the bootstrap, an endpoint per peer made when the
// executor first connects to it. UCX picks the wire per pair (RDMA verbs, shared memory, TCP:
// UCX_TLS narrows it), and its rendezvous moves large messages without a copy.
//
// Each peer gets LOOM_UCX_LINKS links over its one endpoint, told apart by the tag, so that
// the channels spread over them have a message each in flight at once (one link carries one
// message at a time each way).
//
// A link is a byte stream built on UCX's tagged messages: each sendSome posts the caller's
// whole range as one message (the Link contract keeps the range untouched until it is done,
// so UCX reads it in place), tagged with the sender's rank and the link index; UCX delivers
// messages of one tag from one sender in order. recvSome probes the next message: one that
// fits the caller's range lands there directly, a larger one (the sender joined ranges the
// receiver splits) lands in a staging buffer that the next receives drain. Progress is made
// inside sendSome and recvSome (ucp_worker_progress); an executor that found nothing to move
// for a while sleeps on the worker's event descriptor, armed first (prepareWait). UCX may report a send done while
// its bytes still wait in the worker (TCP writes what a full socket did not take on a later
// progress call): flushSome flushes the worker after sends, so that an executor that no
// longer drives a link still delivers them, and between runs a thread of the transport's own
// progresses the worker (it never runs beside the executor), so that a rank that has
// finished its call, or waits in another communicator's, still delivers them and answers
// what its peers' sends and flushes wait for.
//
// Memory registered through loomCommRegister is mapped once (ucp_mem_map), and a message
// from or into it carries that handle, so UCX need not look the pages up in its own
// registration cache (or register them: RDMA adapters reach registered memory only) on
// every call. Other memory goes through UCX's cache.
//
// A peer that dies is found by UCX's peer error handling (the endpoint's error callback, or a
// request that completes with an error) and is loomRemoteError naming the rank; why a peer
// that gave up did so comes from its failure notice over the bootstrap (the executor's).
#pragma once

#include <memory>
#include <vector>

#include "bootstrap/bootstrap.h"
#include "transport/transport.h"

namespace loom::transport {

class UcxTransport : public Transport {
 public:
  // Makes the context and worker and allgathers the workers' addresses through `bootstrap`
  // (every rank of the communicator calls it, whichever peers it will reach over UCX);
  // `linksPerPeer` links to each peer (the same on every rank).
  static Status create(Bootstrap& bootstrap, int linksPerPeer, std::unique_ptr<UcxTransport>* out);
  ~UcxTransport() override;

  const char* name() const override { return "ucx"; }
  Status connectOut(const std::vector<int>& peers, const Deadline& deadline) override;
  Status acceptIn(const std::vector<int>& peers, const Deadline& deadline) override;
  int connectFailureCause() const override { return connectFailureCause_; }
  int linksPerPeer() const override { return linksPerPeer_; }
  Link* link(int peer, int index) override;
  void closeAll(int causeRank) override;
  bool flushSome() override;
  // Between runs the transport's own thread progresses the worker (see State).
  void beginRun() override;
  void endRun() override;
  // ucp_mem_map once; the links pass the handle for every message inside the region.
  Status registerMemory(void* base, size_t bytes, std::unique_ptr<MemoryRegistration>* out) override;

  struct State;  // the UCP objects (ucx_transport.cc)

 private:
  class UcxLink;
  class UcxRegistration;
  UcxTransport(std::unique_ptr<State> state, int linksPerPeer);

  std::unique_ptr<State> state_;
  int linksPerPeer_;
  std::vector<std::unique_ptr<UcxLink>> links_;  // peer * linksPerPeer_ + index
  int connectFailureCause_ = -1;  // the peer an endpoint could not be made to
};

}  // namespace loom::transport
