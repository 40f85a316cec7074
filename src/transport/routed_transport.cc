// Each peer routed to shared memory or the network (routed_transport.h).
#include "transport/routed_transport.h"

#include <string_view>

namespace loom::transport {

RoutedTransport::RoutedTransport(std::unique_ptr<Transport> shm, std::unique_ptr<Transport> network,
                                 std::vector<bool> viaShm)
    : shm_(std::move(shm)), network_(std::move(network)), viaShm_(std::move(viaShm)) {}

const char* RoutedTransport::name() const {
  if (!network_) return "shm";
  if (!shm_) return network_->name();
  return std::string_view(network_->name()) == "ucx" ? "shm+ucx" : "shm+socket";
}

Status RoutedTransport::onEachRoute(const std::vector<int>& peers, const Deadline& deadline, Phase phase) {
  std::vector<int> shm, network;
  for (int p : peers) (viaShm_[static_cast<size_t>(p)] ? shm : network).push_back(p);
  for (auto [route, routed] : {std::pair{shm_.get(), &shm}, std::pair{network_.get(), &network}}) {
    if (routed->empty()) continue;
    Status s = (route->*phase)(*routed, deadline);
    if (!s.isOk()) {
      failed_ = route;
      return s;
    }
  }
  return Status::ok();
}

Status RoutedTransport::connectOut(const std::vector<int>& peers, const Deadline& deadline) {
  return onEachRoute(peers, deadline, &Transport::connectOut);
}

Status RoutedTransport::acceptIn(const std::vector<int>& peers, const Deadline& deadline) {
  return onEachRoute(peers, deadline, &Transport::acceptIn);
}

Link* RoutedTransport::link(int peer, int index) {
  return viaShm_[static_cast<size_t>(peer)] ? shm_->link(peer, 0) : network_->link(peer, index);
}

void RoutedTransport::closeAll(int causeRank) {
  if (shm_) shm_->closeAll(causeRank);
  if (network_) network_->closeAll(causeRank);
}

bool RoutedTransport::flushSome() {
  const bool shmFlushed = !shm_ || shm_->flushSome();
  return (!network_ || network_->flushSome()) && shmFlushed;
}

void RoutedTransport::beginRun() {
  if (shm_) shm_->beginRun();
  if (network_) network_->beginRun();
}

void RoutedTransport::endRun() {
  if (shm_) shm_->endRun();
  if (network_) network_->endRun();
}

Status RoutedTransport::registerMemory(void* base, size_t bytes, std::unique_ptr<MemoryRegistration>* out) {
  return network_ ? network_->registerMemory(base, bytes, out) : Transport::registerMemory(base, bytes, out);
}

}  // namespace loom::transport
