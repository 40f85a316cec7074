// Failure notices over the bootstrap (failure_notices.h).
#include "core/failure_notices.h"

#include <cstdint>

namespace loom {
namespace {

constexpr uint32_t kNoticeTag = 0x464c5202;  // "FLR" 2
// All notices of a rank that gives up together: a peer on a host that is down costs a
// connect timeout, which must not hold the failed call for long.
constexpr long long kTellBudgetMs = 1000;
// A peer's notice may still be on its way when its link fails.
constexpr long long kNoticeWaitMs = 50;

struct NoticeWire {
  int32_t cause;
  uint32_t unused;
  uint64_t seq;
};

}  // namespace

FailureNotices::FailureNotices(Bootstrap& bootstrap)
    : bootstrap_(bootstrap), heard_(static_cast<size_t>(bootstrap.nranks())) {}

void FailureNotices::tellPeers(int causeRank, uint64_t seq) {
  if (told_) return;
  told_ = true;
  const Deadline until = Deadline::afterMs(kTellBudgetMs);
  const NoticeWire notice{causeRank, 0, seq};
  for (int peer = 0; peer < bootstrap_.nranks(); ++peer) {
    if (peer == bootstrap_.rank() || peer == causeRank) continue;
    (void)bootstrap_.send(peer, kNoticeTag, &notice, sizeof notice, until);
  }
}

void FailureNotices::take(int peer, const Deadline& until) {
  Heard& heard = heard_[static_cast<size_t>(peer)];
  NoticeWire notice{};
  if (heard.came || !bootstrap_.recv(peer, kNoticeTag, &notice, sizeof notice, until).isOk()) return;
  heard.came = true;
  heard.cause = notice.cause != bootstrap_.rank() ? notice.cause : -1;
  heard.seq = notice.seq;
}

int FailureNotices::causeFrom(int peer) {
  if (peer < 0 || peer >= static_cast<int>(heard_.size())) return -1;
  Heard& heard = heard_[static_cast<size_t>(peer)];
  if (!heard.asked) {
    heard.asked = true;
    take(peer, Deadline::afterMs(kNoticeWaitMs));
  }
  return heard.came ? heard.cause : -1;
}

void FailureNotices::addWaitFds(PollFds* fds) {
  if (bootstrap_.addWaitFds(kNoticeTag, fds)) listen();
}

void FailureNotices::listen() {
  // Each one is whole and here: taking it does not wait.
  for (int peer = bootstrap_.arrived(kNoticeTag); peer >= 0; peer = bootstrap_.arrived(kNoticeTag)) {
    if (heard_[static_cast<size_t>(peer)].came) break;  // a second notice from one rank: never sent
    take(peer, Deadline::afterMs(0));
  }
}

}  // namespace loom
