// The host executor's loop over a plan's steps (executor.h).
#include "core/executor.h"

#include <poll.h>
#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory_resource>
#include <set>

#include "base/call_arena.h"
#include "base/log.h"
#include "base/spin_lock.h"
#include "core/communicator.h"
#include "core/mapped_allreduce.h"
#include "core/one_shot.h"
#include "core/wait_policy.h"
#include "kernels/reduce.h"

namespace loom {
namespace {

using Clock = std::chrono::steady_clock;
using transport::StoreChooser;

// A sampled reduction that has just ended, for its communicator's chooser; a change of
// stores at TRACE.
void reductionEnded(Communicator& comm, const StoreChooser::Choice& c, size_t bytes) {
  StoreChooser& chooser = comm.reductionStores();
  if (!chooser.ended(c, bytes)) return;
  LOOM_TRACE("comm %016llx: reductions of streaming calls use %s stores from now on (plain %.1f GB/s, "
             "non-temporal %.1f)",
             static_cast<unsigned long long>(comm.commId()), chooser.streaming() ? "non-temporal" : "plain",
             chooser.recentGbps(false), chooser.recentGbps(true));
}

constexpr size_t kHeaderBytes = kCallInfoWireBytes;
// How long a wait goes on without progress before a peer's failure notice ends it: a failed
// link names the failure first-hand, and where there is one it comes sooner.
constexpr std::chrono::milliseconds kNoticeGrace(250);
// A rank waiting for a peer to make a link looks at the peers' announcements this often.
constexpr long long kAcceptSliceMs = 10;

// A plan whose calls go to peers over the bootstrap: where no board carries announcements.
bool announcesRemotely(const Plan& p) { return p.announceSeq != 0 && p.comm->board() == nullptr; }


// The rank whose failure a loomRemoteError while making links comes from: the peer the
// transport found gone or, where that peer gave up itself, the cause it recorded on the
// board or told in its notice (-1: unknown). *gone: the peer.
int connectFailureCause(Communicator& comm, const Status& s, int* gone) {
  *gone = s.code() == loomRemoteError ? comm.transport().connectFailureCause() : -1;
  if (*gone < 0) return -1;
  const int recorded = comm.board() != nullptr ? comm.board()->recordedCause(*gone) : -1;
  if (recorded >= 0) return recorded;
  const int noticed = comm.failureNotices().causeFrom(*gone);
  return noticed >= 0 ? noticed : *gone;
}

// A failure to make a plan's links, named after the call that needed them and, when the
// peer that went away gave up for another rank, after that rank.
Status connectError(const Plan& plan, const Status& s, int gone, int cause) {
  Status named = cause >= 0 && cause != gone
                     ? Status(s.code(), format("%s (rank %d gave up because rank %d failed)", s.message().c_str(),
                                               gone, cause))
                     : s;
  if (plan.calls.empty()) return named;
  const std::string more = plan.calls.size() > 1 ? format(" (and %zu more calls)", plan.calls.size() - 1) : "";
  return named.withContext(plan.calls.front().describeNumbered() + more + ": making its links");
}

// Progress of one step.
struct StepState {
  size_t headerMoved = 0;
  size_t moved = 0;    // payload bytes sent or received
  size_t reduced = 0;  // kRecvReduce: payload bytes reduced into dst
  bool done = false;
  // kRecvReduce: the send that forwards its dst (Run::forwardPiece), and that send's queue.
  int forward = Step::kNone;
  size_t forwardQueue = 0;
  uint8_t header[kHeaderBytes];
  // kMapped: how far it got, and what it found (which of its call's other steps run).
  MappedPhase mappedPhase = MappedPhase::kStart;
  MappedVerdict verdict;
};

// Steps that share a link and direction (or a plan's local steps), in plan order.
struct Queue {
  Queue(size_t planIndex, transport::Link* l, bool isSend, std::pmr::memory_resource* memory)
      : plan(planIndex), link(l), send(isSend), steps(memory) {}

  size_t plan;
  transport::Link* link;  // nullptr: local steps
  bool send;
  std::pmr::vector<int> steps;
  size_t head = 0;
  std::vector<char>* staging = nullptr;  // kRecvReduce landing area
  // Plain sends (receives) that continue the head's bytes and are ready move with it as one
  // range, up to this index of `steps` (see advanceSpan).
  size_t spanEnd = 0;
  // The head waits for another step, not for its link: polling the link would wake at once
  // (a socket is nearly always writable) and burn the CPU a peer on this host needs.
  bool waitsForStep = false;
};

struct PlanState {
  PlanState(Plan* p, std::pmr::memory_resource* memory)
      : plan(p), steps(p->steps.size(), memory), progressed(true), announced(p->announceSeq) {}

  Plan* plan;
  std::pmr::vector<StepState> steps;
  // When it last moved, as Run::look dates it: a step that moves sets `progressed`, and the
  // next look at the clock takes its time. A call that never waits reads no clock.
  Clock::time_point lastProgress;
  bool progressed;
  uint64_t announced;  // the number of the last of its calls it announced on the board (0: none)
};

class Run {
 public:
  // The run's bookkeeping comes from `memory`, which outlives it.
  Run(Plans& plans, std::pmr::memory_resource* memory)
      : plans_(plans), memory_(memory), state_(memory), queues_(memory), waitFds_(memory) {}
  Status go();

 private:
  Status connect();
  void buildQueues();
  Status advance(Queue& q, bool* progressed);
  Status advanceStep(Queue& q, int index, bool* progressed);
  Status advanceOneShot(Queue& q, int index, bool* progressed);
  Status advanceMapped(Queue& q, int index, bool* progressed);
  // A board step (kOneShot, kMapped) as the board's calls take it.
  OneShot boardCall(size_t plan, int index);
  Status advanceSpan(Queue& q, bool* progressed);
  Status advanceRecvReduce(Queue& q, int index, bool* progressed);
  // Pairs each kRecvReduce with the send of the plan that forwards its dst (waits for it,
  // sends exactly its bytes) over a link that copies sends (Link::copiesSends).
  void findForwards();
  // After a kRecvReduce wrote the piece of its dst at `offset`, whose bytes are at `bytes`
  // (dst itself, or the streaming protocol's scratch) and still in this core's cache:
  // sends them on as its forwarding send's next bytes, when that send is next on its link
  // and has sent everything before `offset`, instead of reading dst again later (past the
  // cache by then, for a large call).
  void forwardPiece(StepState& reduce, size_t plan, size_t offset, const char* bytes, size_t size);
  // Whether the step writes past the cache: a large call (LOOM_STREAMING_MIN_BYTES), not an
  // in-place reduction. A reduction's stores are then its communicator's choice
  // (LOOM_REDUCTION_STORES); copies out of a link store non-temporally.
  bool streams(const Plan& plan, size_t step) const;
  Status idle(bool spin);
  // Reads the clock (now_) and dates the progress made since the last look.
  Clock::time_point look();
  // Lets each transport move bytes it holds after reporting them sent (Transport::flushSome);
  // whether none are left.
  bool flushSome();
  // Records s in the communicators left out of step: origin's (SIZE_MAX: all) and those of
  // plans with unfinished steps, and closes their links, telling peers `causeRank`: the rank
  // whose failure this is (-1: none, or not a peer's failure).
  Status fail(const Status& s, size_t origin, int causeRank = -1);
  // fail() for a plan whose links could not be made, naming the rank behind it.
  Status failToConnect(size_t plan, const Status& s);
  // s, a failure of queue q's link, and *cause: the rank behind it (see Transport::closeAll).
  // That is the rank the peer named when it closed (its transport's notice, else its notice
  // over the bootstrap, which s then names too), else the peer itself (it died, closed or
  // went silent); -1 for a failure that is not a peer's.
  Status withCause(const Queue& q, const Status& s, int* cause);
  bool pending(size_t plan) const;
  // loomInvalidUsage when plan's announced call received nothing here (a broadcast's root) and
  // a peer it sent to announced a different call under its number (see the definition).
  Status checkUnheardCall(size_t plan) const;
  // Whether no pending plan before `plan` belongs to its communicator (one watch of each).
  bool firstPendingOfItsComm(size_t plan) const;
  // The first peer (-1: none) whose failure notice concerns a pending plan (*plan), and the
  // rank it named (*cause).
  int noticeConcerning(size_t* plan, int* cause) const;
  // Where no board carries announcements, after RemoteAnnouncements::kTellAfter without
  // progress: tells the peers a plan waits on which call it is in, and fails the plan where a
  // peer told that it waits under that call's number in another call.
  Status announceRemotely();
  // The plan's oldest collective with a step left to finish (nullptr: none, or messages only):
  // the call it waits in, as peers compare it.
  const CallInfo* waitingCall(size_t plan) const;
  // Where the plan waits in its oldest unfinished collective: announces that call (on the board,
  // or over the bootstrap to `waitedOn`) and is loomInvalidUsage where a peer announced another
  // call under its number (core/one_shot.h, core/remote_announcements.h).
  Status compareWaitingCall(size_t plan, const std::vector<int>& waitedOn);
  // How long until announceRemotely first tells for a pending plan (nanoseconds::max(): none
  // will), so that a sleep on sockets wakes for it.
  std::chrono::nanoseconds untilRemoteAnnouncement(Clock::time_point now) const;
  std::string describe(const Queue& q, int index) const;

  Plans& plans_;
  std::pmr::memory_resource* memory_;
  std::pmr::vector<PlanState> state_;
  std::pmr::vector<Queue> queues_;
  unsigned idlePasses_ = 0;
  Clock::time_point now_;  // the last look at the clock
  // idle() spins, pausing, where a pass shortly after progress finds nothing: most such passes
  // skip the clock, which was a seventh of a small exchange's time (idle).
  bool spinning_ = false;
  unsigned spinPasses_ = 0;
  // Where a reduction writes before its non-temporal copy out (cache-sized).
  std::vector<char> streamScratch_;
  // What a sleep polls (idle), kept for the next one: a call may nap many times.
  PollFds waitFds_;
};

std::string Run::describe(const Queue& q, int index) const {
  const Plan& plan = *state_[q.plan].plan;
  const Step& s = plan.steps[static_cast<size_t>(index)];
  const StepState& st = state_[q.plan].steps[static_cast<size_t>(index)];
  const CallInfo& call = plan.callOfStep(static_cast<size_t>(index));
  bool send = s.kind == Step::Kind::kSend;
  const std::string what = call.describeNumbered();
  if (s.kind == Step::Kind::kOneShot) {
    return format("%s: waiting for every rank's part on the shared-memory board", what.c_str());
  }
  if (s.kind == Step::Kind::kMapped) {
    return format("%s: waiting on the shared-memory board for %s (mapped allreduce, round %d of %d)", what.c_str(),
                  MappedPeers::missingRanks(*plan.comm, s.round, st.mappedPhase).c_str(),
                  st.mappedPhase == MappedPhase::kJudged ? 2 : st.mappedPhase == MappedPhase::kWritten ? 3 : 1,
                  static_cast<int>(kMappedRounds));
  }
  if (call.kind == CallInfo::Kind::kSend) {
    return format("%s %s rank %d (%zu of %zu bytes %s)", send ? "loomSend" : "loomRecv", send ? "to" : "from", s.peer,
                  st.moved, s.bytes, send ? "sent" : "received");
  }
  return format("%s: %s rank %d (%zu of %zu bytes of this step %s)", what.c_str(),
                send ? "sending to" : "receiving from", s.peer, st.moved, s.bytes, send ? "sent" : "received");
}

Status Run::go() {
  state_.reserve(plans_.size());
  size_t steps = 0;
  for (const Plan& p : plans_) steps += p.steps.size();
  // At most a queue a step; a few for a small call, which would otherwise grow the vector.
  queues_.reserve(std::min<size_t>(steps, 8));
  for (Plan& p : plans_) {
    state_.emplace_back(&p, memory_);
    // Board rounds are taken when a plan runs, not when it is built: a plan that never runs
    // (LOOM_CHECK stopped it) must not shift this rank's rounds against the others'.
    for (Step& s : p.steps) {
      if (s.kind == Step::Kind::kOneShot) s.round = p.comm->board()->nextRound();
      if (s.kind != Step::Kind::kMapped) continue;
      s.round = p.comm->board()->nextRound();
      for (uint64_t more = 1; more < kMappedRounds; ++more) p.comm->board()->nextRound();
    }
    if (p.announceSeq != 0) announceCall(*p.comm, p.announceSeq, p.calls[p.announceCall]);
  }
  LOOM_TRY(connect());
  buildQueues();
  findForwards();
  for (;;) {
    bool progressed = false, pending = false, spin = false;
    for (Queue& q : queues_) {
      if (q.head == q.steps.size()) continue;
      Status s = advance(q, &progressed);
      if (!s.isOk()) {
        int cause = -1;
        const Status named = withCause(q, s, &cause);
        return fail(named, q.plan, cause);
      }
      if (q.head < q.steps.size()) {
        pending = true;
        spin = spin || (!q.waitsForStep && (q.link == nullptr || q.link->waitFd() < 0));
      }
    }
    if (!pending) {
      for (size_t i = 0; i < state_.size(); ++i) {
        const Status s = checkUnheardCall(i);
        if (!s.isOk()) return fail(s, i);
      }
      // What a transport still holds goes out once the run has ended (Transport::endRun).
      flushSome();
      return Status::ok();
    }
    if (!progressed) {
      flushSome();
      LOOM_TRY(idle(spin));
    }
  }
}

// A rank compares its call with a peer's where the peer's bytes arrive with their header, or
// where it waits (the announcements, Run::idle). A call in which it received nothing and
// waited for no one compared nothing: two ranks that both think they are a broadcast's root
// each send and return, and the bytes left in the link surface only at a later call that
// reads it (a small allreduce on the board never does). So such a rank looks once at what the
// peers it sent to announced for the call: one of two such roots, the later to finish, finds
// the other's. Best effort (a peer not there yet is not waited for), a line or two per peer.
Status Run::checkUnheardCall(size_t plan) const {
  const Plan& p = *state_[plan].plan;
  if (p.announceSeq == 0 || p.comm->board() == nullptr) return Status::ok();
  constexpr size_t kMostPeers = 4;  // a broadcast root's children: one or two
  int peers[kMostPeers];
  size_t count = 0;
  for (size_t k = 0; k < p.steps.size(); ++k) {
    if (p.callOf[k] != p.announceCall) continue;
    const Step& s = p.steps[k];
    if (s.kind == Step::Kind::kCopy) continue;
    if (s.kind != Step::Kind::kSend) return Status::ok();  // it received, or waited on the board
    if (count < kMostPeers && std::find(peers, peers + count, s.peer) == peers + count) peers[count++] = s.peer;
  }
  for (size_t i = 0; i < count; ++i) {
    LOOM_TRY(checkAnnouncement(*p.comm, p.announceSeq, p.calls[p.announceCall], peers[i]));
  }
  return Status::ok();
}

bool Run::flushSome() {
  bool flushed = true;
  for (Plan& p : plans_) flushed = p.comm->transport().flushSome() && flushed;
  return flushed;
}

// Whether every link the plan's steps use exists already (made by an earlier call): the
// common case, checked without allocating.
bool linksExist(Plan& plan) {
  transport::Transport& transport = plan.comm->transport();
  const int links = transport.linksPerPeer();
  for (const Step& s : plan.steps) {
    if (s.peer != Step::kNone && transport.link(s.peer, s.channel % links) == nullptr) return false;
  }
  return true;
}

Status Run::connect() {
  bool ready = true;
  for (Plan& plan : plans_) ready = ready && linksExist(plan);
  if (ready) return Status::ok();
  // All connects first, then all accepts (see Transport): one thread may drive several
  // communicators whose ranks wait on each other.
  std::vector<std::vector<int>> peers(plans_.size());
  for (size_t i = 0; i < plans_.size(); ++i) {
    std::set<int> set;
    for (const Step& s : plans_[i].steps) {
      if (s.peer != Step::kNone) set.insert(s.peer);
    }
    peers[i].assign(set.begin(), set.end());
  }
  for (size_t i = 0; i < plans_.size(); ++i) {
    if (peers[i].empty()) continue;
    Communicator* comm = plans_[i].comm;
    Status s = comm->transport().connectOut(peers[i], Deadline::afterMs(comm->config().timeoutMs));
    if (!s.isOk()) return failToConnect(i, s);
  }
  for (size_t i = 0; i < plans_.size(); ++i) {
    if (peers[i].empty()) continue;
    Plan& plan = plans_[i];
    const Deadline deadline = Deadline::afterMs(plan.comm->config().timeoutMs);
    for (;;) {
      Status s = plan.comm->transport().acceptIn(peers[i], deadline.earlier(Deadline::afterMs(kAcceptSliceMs)));
      if (s.isOk()) break;
      if (s.code() != loomTimeout || deadline.expired()) return failToConnect(i, s);
      // A peer that never connects may be in another call, one that needs no link to this
      // rank (a broadcast from another root): its announcement says so, as in idle(). A slice
      // is RemoteAnnouncements::kTellAfter.
      s = compareWaitingCall(i, peers[i]);
      if (!s.isOk()) return fail(s, i);
    }
  }
  return Status::ok();
}

void Run::buildQueues() {
  for (size_t i = 0; i < plans_.size(); ++i) {
    Plan& plan = plans_[i];
    transport::Transport& transport = plan.comm->transport();
    int links = transport.linksPerPeer();
    const size_t first = queues_.size();  // this plan's queues start here
    for (size_t k = 0; k < plan.steps.size(); ++k) {
      const Step& s = plan.steps[k];
      transport::Link* link = s.peer != Step::kNone ? transport.link(s.peer, s.channel % links) : nullptr;
      bool send = s.kind == Step::Kind::kSend;
      // A plan has a few queues (two per link, one local): a scan finds its own without
      // the allocations of a map, which a small call would notice.
      size_t slot = first;
      while (slot < queues_.size() && (queues_[slot].link != link || (link != nullptr && queues_[slot].send != send))) {
        ++slot;
      }
      if (slot == queues_.size()) queues_.emplace_back(i, link, send, memory_);
      Queue& q = queues_[slot];
      q.steps.push_back(static_cast<int>(k));
      if (s.kind == Step::Kind::kRecvReduce) {
        q.staging = &plan.comm->stagingFor(link);
        if (q.staging->size() < s.bytes) q.staging->resize(s.bytes);
      }
    }
  }
}

void Run::findForwards() {
  for (size_t qi = 0; qi < queues_.size(); ++qi) {
    const Queue& q = queues_[qi];
    if (!q.send || q.link == nullptr || !q.link->copiesSends()) continue;
    PlanState& ps = state_[q.plan];
    for (int k : q.steps) {
      const Step& send = ps.plan->steps[static_cast<size_t>(k)];
      if (send.after == Step::kNone) continue;
      const Step& from = ps.plan->steps[static_cast<size_t>(send.after)];
      if (from.kind != Step::Kind::kRecvReduce || from.dst != send.src || from.bytes != send.bytes) continue;
      StepState& reduce = ps.steps[static_cast<size_t>(send.after)];
      reduce.forward = k;
      reduce.forwardQueue = qi;
    }
  }
}

void Run::forwardPiece(StepState& reduce, size_t plan, size_t offset, const char* bytes, size_t size) {
  Queue& q = queues_[reduce.forwardQueue];
  StepState& send = state_[plan].steps[static_cast<size_t>(reduce.forward)];
  // Next on its link: every earlier send done, and no range of it in flight (a span).
  if (q.head >= q.steps.size() || q.steps[q.head] != reduce.forward || q.spanEnd > q.head) return;
  const Step& step = state_[plan].plan->steps[static_cast<size_t>(reduce.forward)];
  if (send.moved != offset || (step.header && send.headerMoved < kHeaderBytes)) return;
  const size_t sent = q.link->sendCopy(bytes, size);
  send.moved += sent;
  send.done = send.moved == step.bytes;
  state_[plan].plan->comm->addForwardedBytes(sent);
}

Status Run::advance(Queue& q, bool* progressed) {
  PlanState& ps = state_[q.plan];
  while (q.head < q.steps.size()) {
    int index = q.steps[q.head];
    if (ps.steps[static_cast<size_t>(index)].done) {  // finished inside an earlier span
      ++q.head;
      continue;
    }
    const Step& s = ps.plan->steps[static_cast<size_t>(index)];
    q.waitsForStep = s.after != Step::kNone && !ps.steps[static_cast<size_t>(s.after)].done;
    if (q.waitsForStep) return Status::ok();
    bool moved = false;
    Status st = advanceStep(q, index, &moved);
    if (!st.isOk()) return st.withContext(describe(q, index));
    if (moved) {
      *progressed = true;
      ps.progressed = true;
    }
    if (!ps.steps[static_cast<size_t>(index)].done) return Status::ok();
    ++q.head;
  }
  return Status::ok();
}

Status Run::advanceStep(Queue& q, int index, bool* moved) {
  Plan& plan = *state_[q.plan].plan;
  const Step& s = plan.steps[static_cast<size_t>(index)];
  StepState& st = state_[q.plan].steps[static_cast<size_t>(index)];
  const CallInfo& call = plan.callOfStep(static_cast<size_t>(index));
  auto finish = [&] {
    // A reduction divides each piece as it goes (advanceRecvReduce).
    if (s.finalize && call.op == loomAvg && s.bytes > 0 && s.kind != Step::Kind::kRecvReduce) {
      kernels::scale(s.dst, s.dst, s.bytes / typeSize(call.type), call.type, plan.comm->nranks());
    }
    st.done = true;
    *moved = true;
  };

  if (s.kind == Step::Kind::kCopy) {
    if (s.preMultiply) {
      kernels::multiply(s.dst, s.src, s.bytes / typeSize(call.type), call.type, call.preMul.scalar());
    } else {
      kernels::copy(s.dst, s.src, s.bytes);
    }
    finish();
    return Status::ok();
  }
  if (s.kind == Step::Kind::kOneShot) return advanceOneShot(q, index, moved);
  if (s.kind == Step::Kind::kMapped) return advanceMapped(q, index, moved);
  transport::Link& link = *q.link;
  size_t done = 0;
  if (s.header && st.headerMoved < kHeaderBytes) {
    if (st.headerMoved == 0 && q.send) encodeCallInfo(call, st.header);
    // The payload may travel with the header (one system call on a socket), except into the
    // caller's buffer before the header is checked: a receive that reduces lands in staging.
    const size_t headerLeft = kHeaderBytes - st.headerMoved;
    if (q.send) {
      LOOM_TRY(link.sendWithHeader(st.header + st.headerMoved, headerLeft, static_cast<const char*>(s.src) + st.moved,
                                   s.bytes - st.moved, &done));
    } else if (s.kind == Step::Kind::kRecvReduce) {
      LOOM_TRY(link.recvWithHeader(st.header + st.headerMoved, headerLeft, q.staging->data() + st.moved,
                                   s.bytes - st.moved, &done));
    } else {
      LOOM_TRY(link.recvSome(st.header + st.headerMoved, headerLeft, &done));
    }
    const size_t header = std::min(done, headerLeft);
    st.headerMoved += header;
    st.moved += done - header;
    *moved = *moved || done > 0;
    if (st.headerMoved < kHeaderBytes) return Status::ok();
    if (!q.send) LOOM_TRY(checkCallInfo(st.header, call, s.peer));
  }
  switch (s.kind) {
    case Step::Kind::kSend:
    case Step::Kind::kRecv:
      return advanceSpan(q, moved);
    case Step::Kind::kRecvReduce:
      LOOM_TRY(advanceRecvReduce(q, index, moved));
      if (st.reduced < s.bytes) return Status::ok();
      break;
    case Step::Kind::kCopy:
    case Step::Kind::kOneShot:
    case Step::Kind::kMapped:
      break;  // handled above
  }
  if (st.moved == s.bytes) finish();
  return Status::ok();
}

bool Run::streams(const Plan& plan, size_t step) const {
  // A reduction in place has just read each destination line into the cache: storing past
  // the cache would throw that away (measured 30% slower).
  const Step& s = plan.steps[step];
  if (s.kind == Step::Kind::kRecvReduce && s.dst == s.src) return false;
  return s.streaming;
}

// dst = src op incoming, whole elements at a time as they arrive. Once dst may be written,
// bytes the link holds in mapped memory are reduced in place (no copy); others land in
// staging first (sockets, a posted shared-memory send, a piece of an element at the FIFO's
// wrap, or bytes that arrive before writeAfter allows the write).
Status Run::advanceRecvReduce(Queue& q, int index, bool* moved) {
  Plan& plan = *state_[q.plan].plan;
  const Step& s = plan.steps[static_cast<size_t>(index)];
  StepState& st = state_[q.plan].steps[static_cast<size_t>(index)];
  const CallInfo& call = plan.callOfStep(static_cast<size_t>(index));
  const size_t es = typeSize(call.type);
  char* staging = q.staging->data();
  const bool stream = streams(plan, static_cast<size_t>(index));
  const bool divide = s.finalize && call.op == loomAvg;
  // Reduce a cache-sized piece at a time where the result goes on from the cache: stored
  // past it (streaming) or forwarded (forwardPiece).
  const bool pieces = stream || st.forward != Step::kNone;
  auto reduce = [&](const char* incoming, size_t bytes) {
    constexpr size_t kPiece = 32 << 10;
    const size_t piece = pieces ? kPiece - kPiece % es : bytes;
    if (stream && streamScratch_.size() < kPiece) streamScratch_.resize(kPiece);
    for (size_t done = 0; done < bytes;) {
      const size_t n = std::min(piece, bytes - done), off = st.reduced + done;
      char* dst = static_cast<char*>(s.dst) + off;
      const StoreChooser::Choice stores = stream ? plan.comm->reductionStores().next(n) : StoreChooser::Choice{};
      char* out = stores.streaming ? streamScratch_.data() : dst;
      kernels::reduce(out, static_cast<const char*>(s.src) + off, incoming + done, n / es, call.type, call.op);
      if (divide) kernels::scale(out, out, n / es, call.type, plan.comm->nranks());
      if (stores.streaming) kernels::copyStreaming(dst, out, n);
      if (stores.timed) reductionEnded(*plan.comm, stores, n);
      if (st.forward != Step::kNone) forwardPiece(st, q.plan, off, out, n);
      done += n;
    }
    st.reduced += bytes;
    *moved = true;
  };
  const bool writable = s.writeAfter == Step::kNone || state_[q.plan].steps[static_cast<size_t>(s.writeAfter)].done;
  while (st.reduced < s.bytes) {
    size_t staged = st.moved - st.moved % es;
    if (writable && staged > st.reduced) {
      reduce(staging + st.reduced, staged - st.reduced);
      continue;
    }
    if (writable && st.moved == st.reduced) {
      const void* data = nullptr;
      size_t available = 0;
      q.link->preferMapped();
      q.link->peek(&data, s.bytes - st.moved, &available);
      available -= available % es;
      if (available > 0) {
        reduce(static_cast<const char*>(data), available);
        q.link->consume(available);
        st.moved += available;
        continue;
      }
    }
    if (st.moved == s.bytes) break;
    size_t done = 0;
    LOOM_TRY(q.link->recvSome(staging + st.moved, s.bytes - st.moved, &done));
    if (done == 0) break;
    st.moved += done;
    *moved = true;
  }
  q.waitsForStep = !writable && st.moved == s.bytes;
  return Status::ok();
}

// Moves the head plain send (receive) together with the steps after it in its queue that
// continue its bytes and are ready now, as one range: the link sees one large transfer
// instead of slices (one shared-memory posting the peer reads at its pace, fewer system
// calls). Each step is done once the bytes up to its end have moved. The span is fixed when
// it starts, so a link that moved part of it is always handed the same remaining range.
Status Run::advanceSpan(Queue& q, bool* moved) {
  PlanState& ps = state_[q.plan];
  const std::pmr::vector<Step>& steps = ps.plan->steps;
  auto step = [&](size_t i) -> const Step& { return steps[static_cast<size_t>(q.steps[i])]; };
  auto state = [&](size_t i) -> StepState& { return ps.steps[static_cast<size_t>(q.steps[i])]; };
  auto bytesOf = [&](const Step& s) { return static_cast<char*>(const_cast<void*>(q.send ? s.src : s.dst)); };
  if (q.spanEnd <= q.head) {
    size_t end = q.head + 1;
    char* next = bytesOf(step(q.head)) + step(q.head).bytes;
    while (end < q.steps.size()) {
      const Step& s = step(end);
      bool ready = s.after == Step::kNone || ps.steps[static_cast<size_t>(s.after)].done;
      if (s.kind != step(q.head).kind || s.viaFifo != step(q.head).viaFifo || s.header || s.bytes == 0 ||
          bytesOf(s) != next || !ready) {
        break;
      }
      next += s.bytes;
      ++end;
    }
    q.spanEnd = end;
  }
  char* from = bytesOf(step(q.head)) + state(q.head).moved;
  char* to = bytesOf(step(q.spanEnd - 1)) + step(q.spanEnd - 1).bytes;
  const bool stream = !q.send && streams(*ps.plan, static_cast<size_t>(q.steps[q.head]));
  // Past the cache, the FIFO copied out with non-temporal stores beats a direct copy.
  const bool viaFifo = !q.send && (stream || step(q.head).viaFifo);
  while (from < to) {
    size_t done = 0;
    const void* data = nullptr;
    if (viaFifo) {
      q.link->preferMapped();
      q.link->peek(&data, static_cast<size_t>(to - from), &done);
    }
    if (done > 0) {
      if (stream) {
        kernels::copyStreaming(from, data, done);
      } else {
        kernels::copy(from, data, done);
      }
      q.link->consume(done);
    } else if (q.send && step(q.head).viaFifo) {
      LOOM_TRY(q.link->sendBuffered(from, static_cast<size_t>(to - from), &done));
    } else {
      LOOM_TRY(q.send ? q.link->sendSome(from, static_cast<size_t>(to - from), &done)
                      : q.link->recvSome(from, static_cast<size_t>(to - from), &done));
    }
    if (done == 0) break;
    *moved = true;
    from += done;
    for (size_t i = q.head; done > 0 && i < q.spanEnd; ++i) {
      StepState& st = state(i);
      size_t take = std::min(done, step(i).bytes - st.moved);
      st.moved += take;
      done -= take;
      st.done = st.moved == step(i).bytes;
    }
  }
  // A head whose bytes all went with its header (sendWithHeader), or that has none.
  if (state(q.head).moved == step(q.head).bytes) state(q.head).done = true;
  return Status::ok();
}

// Post this rank's part on the board once, then finish when every rank's part is there.
OneShot Run::boardCall(size_t plan, int index) {
  PlanState& ps = state_[plan];
  const Step& s = ps.plan->steps[static_cast<size_t>(index)];
  return {&ps.plan->callOfStep(static_cast<size_t>(index)), s.src, s.dst, s.bytes, s.round,
          ps.steps[static_cast<size_t>(index)].header};
}

Status Run::advanceOneShot(Queue& q, int index, bool* moved) {
  PlanState& ps = state_[q.plan];
  Plan& plan = *ps.plan;
  StepState& st = ps.steps[static_cast<size_t>(index)];
  const OneShot op = boardCall(q.plan, index);
  // A peer that died will never post: ask once this plan has waited a millisecond (as of the
  // last look at the clock, a pass ago).
  bool checkPeers = !ps.progressed && now_ - ps.lastProgress > std::chrono::milliseconds(1);
  if (st.headerMoved == 0) {
    bool ready = false;
    LOOM_TRY(readyToPost(*plan.comm, checkPeers, &ready));
    if (!ready) return Status::ok();
    postOneShot(*plan.comm, op, 0);  // the plan announced its first call when it started
    st.headerMoved = kHeaderBytes;
    *moved = true;
  }
  LOOM_TRY(finishOneShot(*plan.comm, op, checkPeers, &st.done));
  *moved = *moved || st.done;
  return Status::ok();
}

// The mapped allreduce's rounds; once every rank's buffers were mapped, the steps of its call
// that would have moved the bytes otherwise are done.
Status Run::advanceMapped(Queue& q, int index, bool* moved) {
  PlanState& ps = state_[q.plan];
  Plan& plan = *ps.plan;
  StepState& st = ps.steps[static_cast<size_t>(index)];
  const MappedPhase before = st.mappedPhase;
  bool checkPeers = !ps.progressed && now_ - ps.lastProgress > std::chrono::milliseconds(1);
  LOOM_TRY(plan.comm->mappedPeers().advance(*plan.comm, boardCall(q.plan, index), checkPeers, &st.mappedPhase,
                                            &st.verdict));
  *moved = st.mappedPhase != before;
  if (st.mappedPhase != MappedPhase::kFinished) return Status::ok();
  st.done = true;
  // Mapped, the call's other steps all count as done; else those of the plan that does not run.
  const Step::OnlyIf notRun =
      st.verdict.everyRankInPlace ? Step::OnlyIf::kNotEveryRankInPlace : Step::OnlyIf::kEveryRankInPlace;
  bool heldInPlacePlan = false;
  for (size_t k = 0; k < plan.steps.size(); ++k) {
    if (plan.callOf[k] != plan.callOf[static_cast<size_t>(index)]) continue;
    if (st.verdict.mapped || plan.steps[k].onlyIf == notRun) ps.steps[k].done = true;
    heldInPlacePlan = heldInPlacePlan || plan.steps[k].onlyIf == Step::OnlyIf::kEveryRankInPlace;
  }
  if (heldInPlacePlan && st.verdict.everyRankInPlace && !st.verdict.mapped) {
    plan.comm->mappedPeers().ranEveryRankInPlacePlan(*plan.comm, plan.callOfStep(index));
  }
  return Status::ok();
}

// Nothing moved in a whole pass. Links with a descriptor are waited on with poll, after
// kSpinBeforeSleep of looking again. Shared-memory links have none: the thread looks again
// (pausing, later yielding), then naps (core/wait_policy.h), woken early by any descriptor a
// pending link has. Either way abort and the no-progress deadline are checked.
Clock::time_point Run::look() {
  now_ = Clock::now();
  for (PlanState& ps : state_) {
    if (!ps.progressed) continue;
    ps.lastProgress = now_;
    ps.progressed = false;
  }
  return now_;
}

// Passes of the pausing spin between two looks at the clock: a pass is a fraction of a
// microsecond, the spin's window (kBusyBeforeYield) tens.
constexpr unsigned kSpinPassesPerLook = 8;

Status Run::idle(bool spin) {
  if (spin && spinning_ && ++spinPasses_ % kSpinPassesPerLook != 0) {
    cpuRelax();
    cpuRelax();
    return Status::ok();
  }
  const Clock::time_point now = look();
  Clock::time_point wake = Clock::time_point::max();
  Clock::time_point lastProgress = Clock::time_point::min();
  bool oversubscribed = false;  // the peer a rank waits for may need its core
  for (size_t i = 0; i < state_.size(); ++i) {
    if (!pending(i)) continue;
    const PlanState& ps = state_[i];
    lastProgress = std::max(lastProgress, ps.lastProgress);
    oversubscribed = oversubscribed || ps.plan->comm->oversubscribed();
    long long limitMs = ps.plan->comm->config().timeoutMs;
    Clock::time_point expiry = ps.lastProgress + std::chrono::milliseconds(limitMs);
    wake = std::min(wake, expiry);
    // Waiting a while: a peer may be in another call that sends nothing here.
    if (ps.plan->comm->board() != nullptr && now - ps.lastProgress > std::chrono::milliseconds(1)) {
      Status s = compareWaitingCall(i, {});
      if (!s.isOk()) return fail(s, i);
    }
    if (now < expiry) continue;
    for (const Queue& q : queues_) {
      if (q.plan != i || q.head == q.steps.size()) continue;
      return fail(error(loomTimeout, "%s timed out after %lld ms", describe(q, q.steps[q.head]).c_str(), limitMs), i,
                  q.link ? state_[i].plan->steps[static_cast<size_t>(q.steps[q.head])].peer : -1);
    }
  }
  // A socket reply usually arrives within microseconds, and going to sleep in poll costs a
  // wakeup that takes tens of microseconds on a virtual machine: look again for a while first.
  // (No plan pending: the end-of-call flush, which waits on the transport alone.) Shortly
  // after progress neither kind of link yields (wait_policy.h): a peer on shared memory is
  // about to write, and a yield is a system call longer than a small message's whole trip
  // (a 2-rank exchange of 8 bytes: 0.9 -> 0.75 us on the Intel Xeon VM).
  const bool pendingPlans = lastProgress != Clock::time_point::min();
  const bool recent = !pendingPlans || now - lastProgress < kSpinBeforeSleep;
  const bool busy = recent && pendingPlans && !oversubscribed && now - lastProgress < kBusyBeforeYield;
  spinning_ = spin && busy;
  if (spinning_) {
    // Two pauses between looks, as on the board (one_shot.cc).
    cpuRelax();
    cpuRelax();
    return Status::ok();
  }
  if (!spin && recent) {
    if (busy) {
      for (int i = 0; i < 64; ++i) cpuRelax();
    } else {
      sched_yield();
    }
    return Status::ok();
  }
  const bool sleeping = !(spin && recent);
  if (!sleeping) {
    sched_yield();
    // A spinning pass checks for abort only every so often: poll is a system call.
    if ((++idlePasses_ & 255) != 0) return Status::ok();
  }
  // A sleep also wakes for the links that have a descriptor, so a rank napping on shared
  // memory notices at once what arrives on its sockets (a plan across hosts waits on both).
  // A link that cannot be armed (its bytes may be ready) turns the sleep into a yield and a
  // look that does not block, which still hears cancels and notices: a UCX worker that never
  // armed once hid the peers' failure notices from a survivor until the link timed out.
  PollFds& fds = waitFds_;
  fds.clear();
  bool armed = true;
  if (sleeping) {
    for (const Queue& q : queues_) {
      if (q.head == q.steps.size() || q.waitsForStep || q.link == nullptr || q.link->waitFd() < 0) continue;
      pollfd fd{};
      if (q.link->prepareWait(q.send, &fd)) {
        fds.push_back(fd);
      } else {
        armed = false;
      }
    }
    if (!armed) sched_yield();
  }
  size_t firstCancel = fds.size();
  for (const PlanState& ps : state_) fds.push_back({ps.plan->comm->cancelFd(), POLLIN, 0});
  // A sleep hears failure notices too: the peer that gave up may be one no link of this call
  // reaches, or one whose link here has not failed (or never will: see failure_notices.h).
  const size_t firstNotice = fds.size();
  if (sleeping) {
    for (size_t i = 0; i < state_.size(); ++i) {
      if (pending(i) && firstPendingOfItsComm(i)) state_[i].plan->comm->failureNotices().addWaitFds(&fds);
    }
  }
  std::chrono::nanoseconds waitFor{0};
  size_t plan = 0;
  int cause = -1;
  int from = -1;  // the rank whose failure notice concerns a pending plan (-1: none)
  if (sleeping) {
    waitFor = spin ? napAfter(now - lastProgress)
                   : std::max<std::chrono::nanoseconds>(std::chrono::milliseconds(1), wake - now);
    from = noticeConcerning(&plan, &cause);
    LOOM_TRY(announceRemotely());  // what is due goes out before the sleep, however late it began
    waitFor = std::min(waitFor, untilRemoteAnnouncement(now));
    if (from >= 0) {
      waitFor = std::clamp<std::chrono::nanoseconds>(lastProgress + kNoticeGrace - now, std::chrono::nanoseconds(0),
                                                     waitFor);
    }
    if (!armed) waitFor = std::chrono::nanoseconds(0);
  }
  int rc = pollFor(fds.data(), fds.size(), waitFor);
  if (rc < 0 && errno != EINTR) return fail(systemError("ppoll", errno), SIZE_MAX);
  for (size_t i = firstCancel; i < firstNotice; ++i) {
    if (fds[i].revents & POLLIN) {
      return fail(state_[i - firstCancel].plan->comm->cancelReason(), i - firstCancel);
    }
  }
  if (!sleeping) return Status::ok();
  bool stirred = false;
  for (size_t i = firstNotice; i < fds.size(); ++i) stirred = stirred || fds[i].revents != 0;
  if (stirred) {
    for (size_t i = 0; i < state_.size(); ++i) {
      if (pending(i) && firstPendingOfItsComm(i)) state_[i].plan->comm->failureNotices().listen();
    }
    from = noticeConcerning(&plan, &cause);  // what was heard may concern a pending plan
    LOOM_TRY(announceRemotely());
  }
  if (from < 0 || Clock::now() - lastProgress < kNoticeGrace) return Status::ok();
  const Plan& p = *state_[plan].plan;
  const std::string what = p.calls.empty() ? std::string("a barrier") : p.calls.front().describeNumbered();
  Status s = cause >= 0 && cause != from
                 ? error(loomRemoteError, "%s: rank %d gave up because rank %d failed (its failure notice)",
                         what.c_str(), from, cause)
                 : error(loomRemoteError, "%s: rank %d gave up (its failure notice)", what.c_str(), from);
  return fail(s, plan, cause >= 0 ? cause : from);
}

int Run::noticeConcerning(size_t* plan, int* cause) const {
  for (size_t i = 0; i < state_.size(); ++i) {
    if (!pending(i)) continue;
    const Plan& p = *state_[i].plan;
    const uint64_t last = p.collectiveSeqs().second;
    auto talksTo = [&p](int rank) {
      return std::any_of(p.steps.begin(), p.steps.end(), [rank](const Step& s) { return s.peer == rank; });
    };
    const int from = p.comm->failureNotices().first(
        [&](int peer, int named, uint64_t seq) {
          // Every rank takes part in a collective: one that gave up in it, or before, or in calls
          // without a number, will not finish it; one that gave up later finished it, and its data
          // may be on its way. Sends and receives wait on their own peers alone.
          if (p.calls.empty()) return true;  // a barrier
          if (last != 0) return seq == 0 || seq <= last;
          return talksTo(peer) || (named >= 0 && talksTo(named));
        },
        cause);
    if (from < 0) continue;
    *plan = i;
    return from;
  }
  return -1;
}

std::chrono::nanoseconds Run::untilRemoteAnnouncement(Clock::time_point now) const {
  std::chrono::nanoseconds until = std::chrono::nanoseconds::max();
  for (size_t i = 0; i < state_.size(); ++i) {
    const Clock::time_point tell = state_[i].lastProgress + RemoteAnnouncements::kTellAfter;
    if (pending(i) && announcesRemotely(*state_[i].plan) && tell > now) until = std::min(until, tell - now);
  }
  return until;
}

Status Run::announceRemotely() {
  const Clock::time_point now = Clock::now();
  for (size_t i = 0; i < state_.size(); ++i) {
    if (!pending(i)) continue;
    const Plan& p = *state_[i].plan;
    if (!announcesRemotely(p) || now - state_[i].lastProgress < RemoteAnnouncements::kTellAfter) continue;
    std::vector<int> waitedOn;
    for (const Queue& q : queues_) {
      if (q.plan != i || q.head == q.steps.size() || q.waitsForStep || q.link == nullptr) continue;
      waitedOn.push_back(p.steps[static_cast<size_t>(q.steps[q.head])].peer);
    }
    const Status s = compareWaitingCall(i, waitedOn);
    if (!s.isOk()) return fail(s, i);
  }
  return Status::ok();
}

const CallInfo* Run::waitingCall(size_t plan) const {
  const PlanState& ps = state_[plan];
  const Plan& p = *ps.plan;
  const CallInfo* oldest = nullptr;
  for (size_t k = 0; k < p.steps.size(); ++k) {
    if (ps.steps[k].done) continue;
    const CallInfo& call = p.calls[p.callOf[k]];
    if (call.seq != 0 && (oldest == nullptr || call.seq < oldest->seq)) oldest = &call;
  }
  return oldest;
}

Status Run::compareWaitingCall(size_t plan, const std::vector<int>& waitedOn) {
  const CallInfo* call = waitingCall(plan);
  if (call == nullptr) return Status::ok();
  Communicator& comm = *state_[plan].plan->comm;
  if (comm.board() == nullptr) {
    RemoteAnnouncements& announcements = comm.remoteAnnouncements();
    for (int peer : waitedOn) announcements.tell(peer, call->seq, *call);
    announcements.listen();
    for (int peer = 0; peer < comm.nranks(); ++peer) LOOM_TRY(announcements.check(peer, call->seq, *call));
    return Status::ok();
  }
  // A group's later call: the plan announced its first one when it started.
  if (state_[plan].announced != call->seq) {
    announceCall(comm, call->seq, *call);
    state_[plan].announced = call->seq;
  }
  return checkAnnouncements(comm, call->seq, *call);
}

bool Run::firstPendingOfItsComm(size_t plan) const {
  for (size_t i = 0; i < plan; ++i) {
    if (pending(i) && state_[i].plan->comm == state_[plan].plan->comm) return false;
  }
  return true;
}

Status Run::failToConnect(size_t plan, const Status& s) {
  Communicator& comm = *plans_[plan].comm;
  // The transports' waits know only that the cancel signal fired, not what fired it.
  if (comm.cancelled()) return fail(connectError(plans_[plan], comm.cancelReason(), -1, -1), plan);
  int gone = -1;
  const int cause = connectFailureCause(comm, s, &gone);
  return fail(connectError(plans_[plan], s, gone, cause), plan, cause);
}

Status Run::fail(const Status& s, size_t origin, int causeRank) {
  for (size_t i = 0; i < state_.size(); ++i) {
    if (i != origin && !pending(i)) continue;
    bool own = origin >= plans_.size() || plans_[i].comm == plans_[origin].comm;
    plans_[i].comm->fail(own ? s : s.withContext("another communicator of this group failed"));
    // Another communicator's peer is no rank of this one.
    // The board first: a peer that finds this rank's links gone looks there for the cause.
    if (plans_[i].comm->board() != nullptr) plans_[i].comm->board()->markFailed(own ? causeRank : -1);
    plans_[i].comm->failureNotices().tellPeers(own ? causeRank : -1, plans_[i].collectiveSeqs().first);
    plans_[i].comm->transport().closeAll(own ? causeRank : -1);
  }
  return s;
}

Status Run::withCause(const Queue& q, const Status& s, int* cause) {
  *cause = -1;
  if (s.code() != loomRemoteError || q.link == nullptr || q.head == q.steps.size()) return s;
  *cause = q.link->closedBecauseOf();
  if (*cause >= 0) return s;
  const int peer = state_[q.plan].plan->steps[static_cast<size_t>(q.steps[q.head])].peer;
  *cause = plans_[q.plan].comm->failureNotices().causeFrom(peer);
  if (*cause < 0 || *cause == peer) {
    *cause = peer;
    return s;
  }
  return Status(s.code(), format("%s (rank %d gave up because rank %d failed)", s.message().c_str(), peer, *cause));
}

bool Run::pending(size_t plan) const {
  for (const Queue& q : queues_) {
    if (q.plan == plan && q.head < q.steps.size()) return true;
  }
  return false;
}

}  // namespace

RunHold::RunHold(Communicator* const* comms, size_t count) : comms_(comms), count_(count) {
  for (size_t i = 0; i < count_; ++i) comms_[i]->executionLock().lock();
  // The transports are this run's until it ends, whichever way it ends.
  for (size_t i = 0; i < count_; ++i) comms_[i]->transport().beginRun();
}

RunHold::~RunHold() {
  for (size_t i = 0; i < count_; ++i) comms_[i]->transport().endRun();
  for (size_t i = count_; i-- > 0;) comms_[i]->executionLock().unlock();
}

Status executeHeld(Plans& plans) {
  CallArena arena;
  return Run(plans, &arena).go();
}

Status execute(Plans& plans) {
  CallArena arena;
  std::pmr::vector<Communicator*> comms(&arena);
  comms.reserve(plans.size());
  for (const Plan& p : plans) comms.push_back(p.comm);
  std::sort(comms.begin(), comms.end());
  comms.erase(std::unique(comms.begin(), comms.end()), comms.end());
  RunHold hold(comms.data(), comms.size());
  return Run(plans, &arena).go();
}

}  // namespace loom
