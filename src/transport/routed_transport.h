// Routes each peer to the transport that serves it: shared memory to ranks on this host
// (when LOOM_TRANSPORTS allows it), the network transport (TCP sockets, or UCX) to the
// others. The executor sees one transport.
#pragma once

#include <memory>
#include <vector>

#include "transport/transport.h"

namespace loom::transport {

class RoutedTransport : public Transport {
 public:
  // viaShm[peer]: whether peer goes to `shm` (else to `network`: sockets or UCX). Either
  // transport may be null when no peer uses it.
  RoutedTransport(std::unique_ptr<Transport> shm, std::unique_ptr<Transport> network, std::vector<bool> viaShm);

  const char* name() const override;
  Status connectOut(const std::vector<int>& peers, const Deadline& deadline) override;
  Status acceptIn(const std::vector<int>& peers, const Deadline& deadline) override;
  int connectFailureCause() const override { return failed_ ? failed_->connectFailureCause() : -1; }
  // The network transport's count; a shared-memory peer has one link, which every index maps to.
  int linksPerPeer() const override { return network_ ? network_->linksPerPeer() : 1; }
  Link* link(int peer, int index) override;
  void closeAll(int causeRank) override;
  bool flushSome() override;
  void beginRun() override;
  void endRun() override;
  // Shared memory needs no registration: the network transport's.
  Status registerMemory(void* base, size_t bytes, std::unique_ptr<MemoryRegistration>* out) override;

 private:
  using Phase = Status (Transport::*)(const std::vector<int>&, const Deadline&);
  // Runs connectOut or acceptIn on each transport for the peers it serves.
  Status onEachRoute(const std::vector<int>& peers, const Deadline& deadline, Phase phase);

  std::unique_ptr<Transport> shm_;
  std::unique_ptr<Transport> network_;
  std::vector<bool> viaShm_;
  Transport* failed_ = nullptr;  // the route whose connectOut or acceptIn failed last
};

}  // namespace loom::transport
