// One pass around a ring, the building block of the ring algorithms (ring.cc) and of the
// hierarchical allreduce's rings within and across hosts (hierarchical.cc).
#pragma once

#include <memory_resource>
#include <vector>

#include "algorithms/algorithm.h"
#include "algorithms/partition.h"

namespace loom {

// The step that last wrote slice j of chunk k on channel c (kNone before any).
class LastWrite {
 public:
  // In `memory`: the plan's own (Plan::memory()), given back with it.
  LastWrite(int channels, int chunks, size_t slices, std::pmr::memory_resource* memory)
      : chunks_(chunks),
        slices_(slices),
        index_(static_cast<size_t>(channels * chunks) * slices, Step::kNone, memory) {}
  int& at(int c, int k, size_t j) { return index_[(static_cast<size_t>(c * chunks_ + k)) * slices_ + j]; }

 private:
  int chunks_;
  size_t slices_;
  std::pmr::vector<int> index_;
};

// A plain receive into the receive buffer through the FIFO (Step::viaFifo): an allreduce's
// allgather pass, whose sender reduces into that range again in its next allreduce.
inline Step fifoReceiveInto(const CollectiveArgs& a, const Range& in) {
  Step st{Step::Kind::kRecv};
  st.dst = a.recvAt(in.begin);
  st.viaFifo = true;
  return st;
}

// Passes around the ring: `steps` steps (n-1 per pass; 0: one pass) in which every rank
// forwards what it received the step before. At step s this rank sends chunk firstSend - s,
// taken from source(s, slice), and receives chunk firstSend - s - 1 with the step
// incoming(s, slice) makes (peer, channel and bytes filled in here); `last` tracks what
// each slice waits for.
//
// Steps go step by step (every slice of step s, then step s+1) unless `sliceBySlice`: then
// each slice goes through every step before the next slice starts, so the bytes a rank
// reduces are forwarded while still in its cache (the host executor writes them into the
// outgoing FIFO as it reduces them: Run::forwardPiece in executor.cc).
// Both orders are the same on every rank, so each link's byte stream lines up.
template <class RangeOf, class Source, class Incoming>
void ringPass(const CollectiveArgs& a, Plan& plan, LastWrite& last, size_t slices, int firstSend, RangeOf range,
              Source source, Incoming incoming, int steps = 0, bool sliceBySlice = false) {
  const int n = a.nranks, next = a.rankAt(a.position() + 1), prev = a.rankAt(a.position() - 1);
  const size_t se = a.sliceElems(), es = a.elemSize();
  if (steps == 0) steps = n - 1;
  auto emit = [&](int s, size_t j) {
    const int sendK = mod(firstSend - s, n), recvK = mod(firstSend - s - 1, n);
    for (int c = 0; c < a.channels; ++c) {
      Range out = slice(range(c, sendK), se, j);
      if (out.size() > 0) {
        Step st = linkStep(Step::Kind::kSend, next, c, source(s, out), nullptr, out.size() * es, last.at(c, sendK, j));
        // The next rank takes it with the step its incoming(s) makes, as this rank does.
        st.viaFifo = takesThroughFifo(incoming(s, out));
        plan.add(st);
      }
      Range in = slice(range(c, recvK), se, j);
      if (in.size() > 0) {
        Step st = incoming(s, in);
        st.peer = prev;
        st.channel = c;
        st.bytes = in.size() * es;
        last.at(c, recvK, j) = plan.add(st);
      }
    }
  };
  if (sliceBySlice) {
    for (size_t j = 0; j < slices; ++j)
      for (int s = 0; s < steps; ++s) emit(s, j);
  } else {
    for (int s = 0; s < steps; ++s)
      for (size_t j = 0; j < slices; ++j) emit(s, j);
  }
}

}  // namespace loom
