// A communicator's record of its last calls, and its lines in a failure's log (call_log.h).
#include "core/call_log.h"

#include <algorithm>

#include "base/status.h"

namespace loom {

uint64_t CallLog::recordCollective(const CallInfo& info) {
  std::lock_guard<SpinLock> lock(lock_);
  const uint64_t seq = ++collectives_;
  addLocked(info, seq, nullptr, -1);
  return seq;
}

void CallLog::recordBarrier() {
  CallInfo info;
  info.kind = CallInfo::Kind::kBarrier;
  std::lock_guard<SpinLock> lock(lock_);
  addLocked(info, 0, nullptr, -1);
}

void CallLog::recordPointToPoint(const char* call, int peer, uint64_t bytes) {
  CallInfo info;
  info.count = bytes;
  std::lock_guard<SpinLock> lock(lock_);
  addLocked(info, 0, call, peer);
}

// Field by field: a small call records the CallInfo it has just filled in, and copying it
// whole would wait for those narrow stores to reach the cache (a visible share of a call on
// the board).
void CallLog::addLocked(const CallInfo& info, uint64_t seq, const char* call, int peer) {
  Entry& e = entries_[recorded_ % kEntries];
  e.info.kind = info.kind;
  e.info.type = info.type;
  e.info.op = info.op;
  e.info.root = info.root;
  e.info.count = info.count;
  e.seq = seq;
  e.call = call;
  e.peer = peer;
  ++recorded_;
}

void CallLog::forget(uint64_t calls, uint64_t collectives) {
  std::lock_guard<SpinLock> lock(lock_);
  calls = std::min(calls, recorded_);
  // The forgotten records' slots held the records kEntries before them.
  oldest_ = std::max(oldest_, recorded_ > kEntries ? recorded_ - kEntries : 0);
  recorded_ -= calls;
  collectives_ -= std::min(collectives, collectives_);
}

std::vector<std::string> CallLog::lines() const {
  // Copied under the lock, formatted outside it (recorders spin while it is held).
  std::array<Entry, kEntries> entries;
  uint64_t recorded, oldest;
  {
    std::lock_guard<SpinLock> lock(lock_);
    entries = entries_;
    recorded = recorded_;
    oldest = oldest_;
  }
  std::vector<std::string> out;
  for (uint64_t i = std::max(oldest, recorded > kEntries ? recorded - kEntries : 0); i < recorded; ++i) {
    const Entry& e = entries[i % kEntries];
    const auto count = static_cast<unsigned long long>(e.info.count);
    out.push_back(e.call ? format("    %s of %llu bytes with rank %d", e.call, count, e.peer)
                 : e.seq ? format("#%llu %s", static_cast<unsigned long long>(e.seq), e.info.describe().c_str())
                         : "    " + e.info.describe());
  }
  return out;
}

}  // namespace loom
