// Ring algorithms. Ranks form the ring of positions 0 -> 1 -> ... -> n-1 -> 0 (in rank order,
// or the topology's RingOrder); data moves in chunks, one per position, and every chunk in
// slices, so that a slice travels on while the next one is still being reduced (pipelining). Each channel runs the same ring over its own part of the buffer
// on its own link.
//
//   allreduce, n = 3, position p owns chunk p+1 after the reduce-scatter half:
//
//   step      position 0      position 1      position 2
//   RS 0   send c0 recv c2  send c1 recv c0  send c2 recv c1   (recv = reduce into recvbuff)
//   RS 1   send c2 recv c1  send c0 recv c2  send c1 recv c0   -> chunk r+1 complete on r
//   AG 0   send c1 recv c0  send c2 recv c1  send c0 recv c2   (recv = plain copy)
//   AG 1   send c0 recv c2  send c1 recv c0  send c2 recv c1
//
// Steps are emitted in the order (step, slice, channel) on every rank alike, so when channels
// share a link their bytes still arrive in the order the peer expects; a host allreduce
// takes (slice, step, channel) instead (CollectiveArgs::sliceBySlice).
#include <algorithm>
#include <vector>

#include "algorithms/algorithm.h"
#include "algorithms/partition.h"
#include "algorithms/ring_pass.h"

namespace loom {

RingOrder::RingOrder(std::vector<int> ranks, std::vector<int> hostStarts)
    : rankAt_(std::move(ranks)), hostStarts_(std::move(hostStarts)) {
  positionOf_.assign(rankAt_.empty() ? 0 : static_cast<size_t>(*std::max_element(rankAt_.begin(), rankAt_.end())) + 1,
                     -1);
  for (size_t p = 0; p < rankAt_.size(); ++p) positionOf_[static_cast<size_t>(rankAt_[p])] = static_cast<int>(p);
}

bool RingOrder::isIdentity() const {
  if (hostStarts_.size() > 1) return false;
  for (size_t p = 0; p < rankAt_.size(); ++p) {
    if (rankAt_[p] != static_cast<int>(p)) return false;
  }
  return true;
}

namespace {

// Channel c's part of block k, in a buffer of one block of `count` elements per rank.
Range blockPart(size_t count, int channels, int c, int k) {
  Range p = part(count, channels, c);
  return {static_cast<size_t>(k) * count + p.begin, static_cast<size_t>(k) * count + p.end};
}

}  // namespace

void ringAllReduce(const CollectiveArgs& a, Plan& plan) {
  const int n = a.nranks, p = a.position();
  const bool avg = a.info.op == loomAvg;
  if (n == 1) return copyAlone(a, plan, a.info.count);
  auto chunk = [&](int c, int k) { return part(part(a.info.count, a.channels, c), n, k); };
  const size_t slices = sliceCount(chunk(0, 0), a.sliceElems());
  LastWrite last(a.channels, n, slices, plan.memory());
  // Reduce-scatter (steps 0 to n-2): send own data at s = 0, else what step s-1 reduced;
  // reduce what arrives into recvbuff. Afterwards chunk p+1 is complete here. Allgather
  // (steps n-1 to 2n-3): pass the complete chunks around. What arrives is the sender's
  // receive buffer, which its next allreduce reduces into: through the FIFO (Step::viaFifo).
  ringPass(
      a, plan, last, slices, p, chunk,
      [&](int s, const Range& out) -> const void* { return s == 0 ? a.sendAt(out.begin) : a.recvAt(out.begin); },
      [&](int s, const Range& in) {
        if (s >= n - 1) return fifoReceiveInto(a, in);
        Step st{Step::Kind::kRecvReduce};
        st.src = a.sendAt(in.begin);
        st.dst = a.recvAt(in.begin);
        st.finalize = avg && s == n - 2;
        return st;
      },
      2 * (n - 1), a.sliceBySlice);
}

// A chain from the root through the ring: root -> root+1 -> ... -> root-1 (in positions).
void ringBroadcast(const CollectiveArgs& a, Plan& plan) {
  const int n = a.nranks, p = a.position(), v = mod(p - a.positionOf(a.info.root), n);
  const int next = a.rankAt(p + 1), prev = a.rankAt(p - 1);
  const size_t es = a.elemSize();
  forEachSlice(a.info.count, a.channels, a.sliceElems(), [&](int c, const Range& s) {
    size_t bytes = s.size() * es;
    if (v == 0) {
      if (a.send != a.recv) plan.add(copyStep(a.sendAt(s.begin), a.recvAt(s.begin), bytes, false));
      if (n > 1) plan.add(linkStep(Step::Kind::kSend, next, c, a.sendAt(s.begin), nullptr, bytes));
      return;
    }
    int got = plan.add(linkStep(Step::Kind::kRecv, prev, c, nullptr, a.recvAt(s.begin), bytes));
    if (v < n - 1) plan.add(linkStep(Step::Kind::kSend, next, c, a.recvAt(s.begin), nullptr, bytes, got));
  });
}

// A chain through the ring that ends at the root: root+1 -> root+2 -> ... -> root. Ranks in
// between keep partial results in scratch: a non-root's recvbuff is not touched.
void ringReduce(const CollectiveArgs& a, Plan& plan) {
  const int n = a.nranks, p = a.position(), v = mod(p - a.positionOf(a.info.root) - 1, n);
  const int next = a.rankAt(p + 1), prev = a.rankAt(p - 1);
  const bool avg = a.info.op == loomAvg;
  if (n == 1) return copyAlone(a, plan, a.info.count);
  const size_t es = a.elemSize();
  char* partial = (v > 0 && v < n - 1) ? plan.scratch(a.info.count * es) : nullptr;
  forEachSlice(a.info.count, a.channels, a.sliceElems(), [&](int c, const Range& s) {
    size_t bytes = s.size() * es;
    // Every send goes to a rank that reduces it as it arrives (Step::viaFifo).
    auto sendOn = [&](const void* from, int after) {
      Step st = linkStep(Step::Kind::kSend, next, c, from, nullptr, bytes, after);
      st.viaFifo = true;
      plan.add(st);
    };
    if (v == 0) {
      sendOn(a.sendAt(s.begin), Step::kNone);
    } else if (v < n - 1) {
      char* at = partial + s.begin * es;
      sendOn(at, plan.add(linkStep(Step::Kind::kRecvReduce, prev, c, a.sendAt(s.begin), at, bytes)));
    } else {
      Step st = linkStep(Step::Kind::kRecvReduce, prev, c, a.sendAt(s.begin), a.recvAt(s.begin), bytes);
      st.finalize = avg;
      plan.add(st);
    }
  });
}

// recvbuff holds n blocks of `count`; block k comes from rank k. Chunk q of the ring is the
// block of the rank at position q. At step s a rank forwards chunk p-s (its own at s = 0,
// straight from sendbuff) and receives chunk p-s-1.
void ringAllGather(const CollectiveArgs& a, Plan& plan) {
  const int n = a.nranks, r = a.rank;
  const size_t count = a.info.count, se = a.sliceElems(), es = a.elemSize();
  auto range = [&](int c, int q) { return blockPart(count, a.channels, c, a.rankAt(q)); };
  const size_t slices = sliceCount(range(0, 0), se);
  // Own block into place (nothing to do in place: the copy skips dst == src).
  for (size_t j = 0; j < slices; ++j) {
    for (int c = 0; c < a.channels; ++c) {
      Range own = slice(blockPart(count, a.channels, c, r), se, j);
      if (own.size() == 0) continue;
      plan.add(copyStep(a.sendAt(own.begin - r * count), a.recvAt(own.begin), own.size() * es, false));
    }
  }
  LastWrite last(a.channels, n, slices, plan.memory());
  ringPass(a, plan, last, slices, a.position(), range,
           [&](int s, const Range& out) -> const void* {
             return s == 0 ? a.sendAt(out.begin - r * count) : a.recvAt(out.begin);
           },
           [&](int, const Range& in) {
             Step st{Step::Kind::kRecv};
             st.dst = a.recvAt(in.begin);
             return st;
           });
}

// sendbuff holds n blocks of `count`; rank r ends with block r reduced. Chunk q is the block
// of the rank at position q. At step s a rank sends chunk p-s-1 (own data at s = 0, else the
// partial it reduced at step s-1) and reduces chunk p-s-2 arriving from prev; the last
// step's chunk is p itself, reduced into recvbuff.
void ringReduceScatter(const CollectiveArgs& a, Plan& plan) {
  const int n = a.nranks, r = a.rank;
  const bool avg = a.info.op == loomAvg;
  const size_t count = a.info.count, se = a.sliceElems(), es = a.elemSize();
  if (n == 1) return copyAlone(a, plan, count);
  char* partial = n > 2 ? plan.scratch(static_cast<size_t>(n) * count * es) : nullptr;
  auto range = [&](int c, int q) { return blockPart(count, a.channels, c, a.rankAt(q)); };
  const size_t slices = sliceCount(range(0, 0), se);
  LastWrite last(a.channels, n, slices, plan.memory());
  ringPass(a, plan, last, slices, a.position() - 1, range,
           [&](int s, const Range& out) -> const void* {
             return s == 0 ? a.sendAt(out.begin) : partial + out.begin * es;
           },
           [&](int s, const Range& in) {
             bool final = s == n - 2;
             Step st{Step::Kind::kRecvReduce};
             st.src = a.sendAt(in.begin);
             st.dst = final ? a.recvAt(in.begin - r * count) : partial + in.begin * es;
             st.finalize = avg && final;
             return st;
           });
}

}  // namespace loom
