// Announcements of waiting calls over the bootstrap (remote_announcements.h).
#include "core/remote_announcements.h"

#include <cstring>

namespace loom {
namespace {

constexpr uint32_t kAnnounceTag = 0x414e4e01;  // "ANN" 1
// Making the connection to a peer that has not been reached before: its listener is up (see
// Bootstrap::connectionTo), so this is a round trip, on another host too.
constexpr long long kConnectBudgetMs = 100;

struct AnnouncementWire {
  uint64_t seq;
  uint8_t header[kCallInfoWireBytes];
};

}  // namespace

RemoteAnnouncements::RemoteAnnouncements(Bootstrap& bootstrap)
    : bootstrap_(bootstrap),
      told_(static_cast<size_t>(bootstrap.nranks()), 0),
      heard_(static_cast<size_t>(bootstrap.nranks())) {}

void RemoteAnnouncements::tell(int peer, uint64_t seq, const CallInfo& call) {
  uint64_t& told = told_[static_cast<size_t>(peer)];
  if (seq <= told) return;
  AnnouncementWire wire{seq, {}};
  encodeCallInfo(call, wire.header);
  // Once, taken or not: a connection that does not take it now has unread ones before it, or
  // leads to a peer that is gone, and trying again at every pass would only cost the waiter.
  told = seq;
  (void)bootstrap_.offer(peer, kAnnounceTag, &wire, sizeof wire, Deadline::afterMs(kConnectBudgetMs));
}

void RemoteAnnouncements::listen() {
  bootstrap_.drain(kAnnounceTag, [this](int peer, const uint8_t* data, size_t bytes) {
    AnnouncementWire wire{};
    if (bytes != sizeof wire) return;
    std::memcpy(&wire, data, sizeof wire);
    Heard& heard = heard_[static_cast<size_t>(peer)];
    if (wire.seq < heard.seq) return;
    heard.seq = wire.seq;
    std::memcpy(heard.header, wire.header, sizeof heard.header);
  });
}

Status RemoteAnnouncements::check(int peer, uint64_t seq, const CallInfo& call) const {
  const Heard& heard = heard_[static_cast<size_t>(peer)];
  return heard.seq == seq && seq != 0 ? checkCallInfo(heard.header, call, peer) : Status::ok();
}

}  // namespace loom
