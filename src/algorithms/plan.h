// A plan: what one rank does for one call, as a list of primitive steps over pieces of the
// user's buffers. Algorithms (ring, tree, ...) write plans; an executor runs them over
// transport links. A plan knows ranks, channels and byte ranges, never sockets or shared
// memory, which is what lets the CPU tests check every schedule on any transport.
//
// Ordering rules the executor keeps:
// - steps that use the same link in the same direction run one after another, in plan order
//   (peers emit matching steps in the same order, so the byte streams line up);
// - a step starts only when the step named by `after` has finished;
// - a kRecvReduce may receive before `writeAfter` has finished, but writes its destination
//   only after (the destination is a range that an earlier send of this rank may still be
//   reading, e.g. when a peer copies it straight out of this process);
// - local steps (kCopy) run in plan order among themselves.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <memory_resource>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "loom/loom.h"

namespace loom {

class Communicator;

// A premultiplied sum's scalar (loomRedOpCreatePreMulSum): the call sums scalar * input.
struct PreMul {
  bool on = false;
  uint8_t value[8] = {};      // loomScalarHostImmediate: the scalar's bytes, copied at the call
  const void* at = nullptr;   // loomScalarDevice: read through this when the data moves
  const void* scalar() const { return at != nullptr ? at : value; }
};

// What a call is, as peers compare it: the first message of a call on each link carries it,
// so ranks that disagree get an error instead of a corrupted result.
struct CallInfo {
  enum class Kind : uint8_t {
    kSend = 1,  // loomSend / loomRecv (the receiver expects kSend)
    kBarrier,
    kAllReduce,
    kBroadcast,
    kReduce,
    kAllGather,
    kReduceScatter,
    kAllToAll,
  };
  Kind kind = Kind::kSend;
  loomDataType_t type = loomUint8;
  loomRedOp_t op = loomSum;
  int root = -1;
  uint64_t count = 0;  // elements (bytes for point-to-point)
  // The communicator's number for a collective (0: none), for messages; not compared and
  // not sent: ranks number their calls alike only when they agree on them.
  uint64_t seq = 0;
  // In place on this rank (send and receive share one buffer): local to this rank, so not
  // compared and not sent either. Likewise lowLatency below.
  bool inPlace = false;
  // A device communicator's call that the tuner gave the low-latency wire (device/fifo.h).
  bool lowLatency = false;
  // The algorithm of its plan, as the tuner chose it out of place (an Algorithm + 1; 0: none,
  // as for messages and calls not yet planned). Sent, and compared where both ranks name one:
  // ranks on different algorithms would exchange bytes that fit each other's counts and mean
  // something else, so a disagreement of their tuners is an error, not a wrong result.
  uint8_t algorithm = 0;
  // op is loomSum then (what peers see: NCCL lets ranks premultiply by different scalars).
  PreMul preMul;

  bool operator==(const CallInfo& o) const {
    return kind == o.kind && type == o.type && op == o.op && root == o.root && count == o.count;
  }
  // "loomAllReduce(count 10, float32, sum)"
  std::string describe() const;
  // "call #12 loomAllReduce(...)" when numbered (the number says which of the calls it was).
  std::string describeNumbered() const;
};

// Wire form of a CallInfo (24 bytes), and the check of a peer's against this rank's: a
// mismatch is loomInvalidUsage naming both calls; the same call planned with two algorithms
// is loomInternalError (the tuners must agree).
constexpr size_t kCallInfoWireBytes = 24;
void encodeCallInfo(const CallInfo& info, uint8_t* out);
// False when the bytes are not a wire CallInfo.
bool decodeCallInfo(const uint8_t* in, CallInfo* out);
Status checkCallInfo(const uint8_t* in, const CallInfo& expected, int peer);

const char* typeName(loomDataType_t type);
const char* opName(loomRedOp_t op);
// Bytes of one element; 0 for a value that is no loomDataType_t. Inline: every call asks.
inline size_t typeSize(loomDataType_t type) {
  constexpr size_t kSizes[loomNumTypes] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  return type >= 0 && type < loomNumTypes ? kSizes[type] : 0;
}

struct Step {
  enum class Kind : uint8_t {
    kSend,        // src -> peer
    kRecv,        // peer -> dst
    kRecvReduce,  // dst = src op (bytes from peer); src may equal dst
    kCopy,        // dst = src, local
    kOneShot,     // a whole small collective through the one-shot board (local; core/one_shot.h)
    // An allreduce straight between the ranks' buffers where all can reach each other's
    // (core/mapped_allreduce.h); when it does, the call's other steps are not run (local).
    kMapped,
  };
  static constexpr int kNone = -1;
  // Which of a call's plans the step belongs to, where the call has two: an in-place allreduce
  // that the mapped allreduce's first round may find in place on every rank also holds the
  // plan chosen for that (core/mapped_allreduce.h); its kMapped step marks the one that does
  // not run done.
  enum class OnlyIf : uint8_t { kAlways, kNotEveryRankInPlace, kEveryRankInPlace };

  Kind kind;
  int peer = kNone;  // kNone for local steps
  int channel = 0;   // which of the peer's links (channel % links per peer)
  const void* src = nullptr;
  void* dst = nullptr;
  size_t bytes = 0;
  int after = kNone;       // index of a step of the same plan
  int writeAfter = kNone;  // kRecvReduce only, see above
  bool finalize = false;   // after this step, dst holds a final loomAvg sum: divide by nranks
  bool preMultiply = false;  // kCopy: dst = the call's PreMul scalar * src (its first step)
  bool header = false;     // a CallInfo header goes before the payload (set by markHeaders)
  // kRecv: take the bytes through a shared-memory FIFO even where the sender's buffer could be
  // read directly. The sender writes that range again (the next allreduce reduces into it):
  // lines the peer read stay shared between the two cores' caches, and every one of them
  // then costs the sender's read-modify-write an invalidation (docs/RESULTS.md).
  // kSend: the bytes are written into the FIFO at once, never offered for a direct read,
  // where the peer takes them through the FIFO (takesThroughFifo below: an offer it declines
  // holds back the link's later sends, and with them the forwarding of reduced pieces from the
  // cache), or where a reduction of this rank rewrites the range as soon as it is sent
  // (recursive doubling: read directly, its lines would still be shared with the peer's cache
  // then, as for a kRecv marked so).
  bool viaFifo = false;
  // The tuner chose the streaming protocol for the plan this step is of: this rank's stores
  // (non-temporal ones past the cache), not seen by peers.
  bool streaming = false;
  OnlyIf onlyIf = OnlyIf::kAlways;
  uint64_t round = 0;      // kOneShot, kMapped: the (first) board round, taken when the plan starts running
};

// Whether a receive surely reads its bytes out of a shared-memory FIFO: one marked so, or a
// reduction free to write its destination from the start (it reads the FIFO in place). The
// send it matches on the peer is then marked viaFifo.
inline bool takesThroughFifo(const Step& recv) {
  return recv.viaFifo || (recv.kind == Step::Kind::kRecvReduce && recv.writeAfter == Step::kNone);
}

// A step over the link to `peer` (channel picks among the peer's links).
inline Step linkStep(Step::Kind kind, int peer, int channel, const void* src, void* dst, size_t bytes,
                     int after = Step::kNone) {
  Step s{kind};
  s.peer = peer;
  s.channel = channel;
  s.src = src;
  s.dst = dst;
  s.bytes = bytes;
  s.after = after;
  return s;
}

// A local copy; `finalize` as in Step.
inline Step copyStep(const void* src, void* dst, size_t bytes, bool finalize) {
  Step s{Step::Kind::kCopy};
  s.src = src;
  s.dst = dst;
  s.bytes = bytes;
  s.finalize = finalize;
  return s;
}

// Where a plan's scratch memory comes from when it is not host memory (a device
// communicator's plans need device memory). What get() returns stays valid until the
// source is reset by its owner; it throws std::bad_alloc when it has none.
class ScratchSource {
 public:
  virtual ~ScratchSource() = default;
  virtual char* get(size_t bytes) = 0;
};

// One call, or several calls on one communicator launched together (a group): their steps
// are concatenated in call order, each call's steps with that call's header info.
struct Plan {
  Plan() = default;
  // Steps and calls in `memory` (a call's arena, base/call_arena.h) instead of the heap.
  explicit Plan(std::pmr::memory_resource* memory) : steps(memory), callOf(memory), calls(memory) {}

  Communicator* comm = nullptr;
  std::pmr::vector<Step> steps;
  // For each step, the call it belongs to (index into calls).
  std::pmr::vector<uint32_t> callOf;
  std::pmr::vector<CallInfo> calls;
  // The first collective call in the plan (seq 0: none), announced on the board when the
  // plan starts (see ShmBoard::announce).
  uint64_t announceSeq = 0;
  size_t announceCall = 0;

  // Appends a step of the current (last) call; returns its index.
  int add(const Step& step);
  // Starts a new call: later add()s belong to it.
  void beginCall(const CallInfo& info);
  const CallInfo& callOfStep(size_t step) const { return calls[callOf[step]]; }
  // Where its steps live, for what is built beside them.
  std::pmr::memory_resource* memory() const { return steps.get_allocator().resource(); }
  // The numbers of its first and last collectives (0: it has none).
  std::pair<uint64_t, uint64_t> collectiveSeqs() const;

  // Scratch memory the steps point into (partial results a rank must not keep in the
  // user's buffers); host memory that lives as long as the plan, or from scratchSource.
  char* scratch(size_t bytes);
  ScratchSource* scratchSource = nullptr;
  // The buffers are device memory (a device communicator's direct path): no one-shot board
  // steps, whose board is host memory, and the device slice size.
  bool deviceMemory = false;

 private:
  struct Free {
    void operator()(char* p) const;
  };
  std::vector<std::unique_ptr<char, Free>> scratch_;
};

// The plans of one launch, one per communicator; in a call's arena where the launch runs
// at once.
using Plans = std::pmr::vector<Plan>;

// Marks, for the steps of the current call from index `first` on, the first step on each
// (peer, link, direction) as carrying the call's header; every step when `everyStep` (point-
// to-point, where each message stands alone).
void markHeaders(Plan& plan, size_t first, int linksPerPeer, bool everyStep);

}  // namespace loom
