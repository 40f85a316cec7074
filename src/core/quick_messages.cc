// Small messages moved without a plan, the executor taking what does not move at once
// (quick_messages.h).
#include "core/quick_messages.h"

#include <algorithm>
#include <chrono>
#include <memory_resource>

#include "base/call_arena.h"
#include "base/spin_lock.h"
#include "core/communicator.h"
#include "core/executor.h"
#include "core/wait_policy.h"

namespace loom {
namespace {

bool isSend(const P2POp& op) { return op.direction == P2POp::Direction::kSend; }

transport::Link* linkOf(const P2POp& op) { return op.comm->transport().link(op.peer, 0); }

}  // namespace

bool quickMessages(const P2POp* ops, size_t count) {
  if (count == 0 || count > kMostQuickMessages) return false;
  for (const P2POp* op = ops; op != ops + count; ++op) {
    if (op->peer == op->comm->rank()) return false;
    const transport::Link* link = linkOf(*op);
    if (link == nullptr || link->wholeMessageBytes() < kCallInfoWireBytes + op->bytes) return false;
  }
  return true;
}

Status runQuickMessages(const P2POp* ops, size_t count) {
  using Clock = std::chrono::steady_clock;
  Communicator& comm = *ops[0].comm;
  comm.acquire();
  struct Release {
    Communicator& comm;
    ~Release() { comm.release(); }
  } release{comm};
  LOOM_TRY(comm.usable());
  Communicator* const held = &comm;
  RunHold hold(&held, 1);

  bool moved[kMostQuickMessages] = {};
  // A message waits for the earlier ones between the same ranks in its direction.
  auto next = [&](size_t i) {
    for (size_t j = 0; j < i; ++j) {
      if (!moved[j] && ops[j].peer == ops[i].peer && isSend(ops[j]) == isSend(ops[i])) return false;
    }
    return true;
  };
  // Each message's link and header, looked up once for all passes. A header is the same
  // function of the message's size for sender and receiver alike.
  static_assert(kCallInfoWireBytes <= transport::Link::kMostWholeHeaderBytes, "a header the links take whole");
  transport::Link* links[kMostQuickMessages];
  uint8_t headers[kMostQuickMessages][kCallInfoWireBytes];
  for (size_t i = 0; i < count; ++i) {
    links[i] = linkOf(ops[i]);
    encodeCallInfo(messageInfo(ops[i].bytes), headers[i]);
  }
  // The clock is first read after 64 passes, as on the board (one_shot.cc): most groups
  // finish before. Where ranks outnumber cores one pass, and the executor's wait yields.
  Clock::time_point start;
  size_t left = count;
  bool stop = false;
  for (unsigned pass = 0; left > 0 && !stop; ++pass) {
    for (size_t i = 0; i < count && !stop; ++i) {
      if (moved[i] || !next(i)) continue;
      const P2POp& op = ops[i];
      if (isSend(op)) {
        moved[i] = links[i]->sendWhole(headers[i], kCallInfoWireBytes, op.buffer, op.bytes);
        continue;
      }
      // Another header is the executor's to report (checkCallInfo names both calls).
      const transport::Link::Whole got = links[i]->receiveWhole(headers[i], kCallInfoWireBytes, op.buffer, op.bytes);
      moved[i] = got == transport::Link::Whole::kMoved;
      stop = got == transport::Link::Whole::kOther;
    }
    left = static_cast<size_t>(std::count(moved, moved + count, false));
    if (left == 0 || comm.oversubscribed()) break;
    cpuRelax();
    cpuRelax();
    if ((pass & 63) != 63) continue;
    const Clock::time_point now = Clock::now();
    if (pass == 63) start = now;
    stop = stop || now - start > kBusyBeforeYield;
  }
  if (left == 0) return Status::ok();

  CallArena arena;
  Plans plans(&arena);
  Plan& plan = plans.emplace_back(&arena);
  plan.comm = &comm;
  for (size_t i = 0; i < count; ++i) {
    if (!moved[i]) appendP2P(plan, ops[i]);
  }
  return executeHeld(plans);
}

}  // namespace loom
