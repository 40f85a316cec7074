// Failure notices over the bootstrap (failure_notices.h).
#include "core/failure_notices.h"

#include <cstdint>

namespace loom {
namespace {

constexpr uint32_t kNoticeTag = 0x464c5201;  // "FLR" 1
constexpr int kNotAsked = -2;
// All notices of a rank that gives up together: a peer on a host that is down costs a
// connect timeout, which must not hold the failed call for long.
constexpr long long kTellBudgetMs = 1000;
// A peer's notice may still be on its way when its link fails.
constexpr long long kNoticeWaitMs = 50;

}  // namespace

FailureNotices::FailureNotices(Bootstrap& bootstrap)
    : bootstrap_(bootstrap), noticed_(static_cast<size_t>(bootstrap.nranks()), kNotAsked) {}

void FailureNotices::tellPeers(int causeRank) {
  if (told_) return;
  told_ = true;
  const Deadline until = Deadline::afterMs(kTellBudgetMs);
  const int32_t cause = causeRank;
  for (int peer = 0; peer < bootstrap_.nranks(); ++peer) {
    if (peer == bootstrap_.rank() || peer == causeRank) continue;
    (void)bootstrap_.send(peer, kNoticeTag, &cause, sizeof cause, until);
  }
}

int FailureNotices::causeFrom(int peer) {
  if (peer < 0 || peer >= static_cast<int>(noticed_.size())) return -1;
  int& noticed = noticed_[static_cast<size_t>(peer)];
  if (noticed == kNotAsked) {
    int32_t cause = -1;
    const Status s = bootstrap_.recv(peer, kNoticeTag, &cause, sizeof cause, Deadline::afterMs(kNoticeWaitMs));
    noticed = s.isOk() && cause != bootstrap_.rank() ? cause : -1;
  }
  return noticed;
}

}  // namespace loom
